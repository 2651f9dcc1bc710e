"""Triton device helpers on fp32 exponent bits that every kernel calls (the portable flush and the
Gluon flush and step, which call ``@triton.jit`` functions on tensors of their own layouts):
neutral ground, so that no kernel module imports another's private helpers. Exact powers of two
and exponents, no transcendental.
"""

import triton
import triton.language as tl


@triton.jit
def pow2(e):
    """2^e (fp32) for an integer e in [-126, 127], exact, from the exponent bits (e = -127 gives 0)."""
    return ((e + 127) << 23).to(tl.float32, bitcast=True)


@triton.jit
def exponent(x):
    """e with 2^e <= x < 2^(e+1) for fp32 x >= 0 (-127 for 0 and subnormals), from the exponent bits."""
    return ((x.to(tl.int32, bitcast=True) >> 23) & 0xFF) - 127


@triton.jit
def clamped_exponent(x, LOWEST: tl.constexpr, HIGHEST: tl.constexpr):
    """``exponent(x)`` clamped to [LOWEST, HIGHEST] (the range whose powers of two a caller takes)."""
    return tl.minimum(tl.maximum(exponent(x), LOWEST), HIGHEST)
