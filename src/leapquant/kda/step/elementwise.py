"""Element-wise device helpers of the decode step that both step kernels (the portable Triton
kernel and the Gluon kernel, which calls ``@triton.jit`` element-wise functions) use: neutral
ground, so that neither kernel module imports the other's private helpers.

Rounding: fp32 -> bf16 by round-to-nearest-even on the bits (``round_bf16``), because Triton's CPU
interpreter truncates in ``.to(tl.bfloat16)``; the compiled kernels run the same code, so the
interpreted tests check the bits the GPU produces (up to fp32 ``exp``/``log``/``rsqrt`` ulps).

Source: LeapQuant (arXiv 2609.38166); NVlabs/kda request conless-leapquant-kda-step.
"""

import triton
import triton.language as tl

BETA_SERIES_BELOW = 0.5  # |b| below this: beta from a series (see beta_bf16)


@triton.jit
def round_bf16(x):
    # fp32 -> bf16, round to nearest even, on the bits (finite x); the final cast is exact
    bits = x.to(tl.int32, bitcast=True)
    bits = bits + 0x7FFF + ((bits >> 16) & 1)
    return (bits & -65536).to(tl.float32, bitcast=True).to(tl.bfloat16)


@triton.jit
def round_bf16_split(s, err):
    # bf16 of the exact s + err for s > 0 and |err| <= half an fp32 ulp of s: rounding s alone is
    # right except where s is a bf16 midpoint, where the sign of err breaks the tie
    bits = s.to(tl.int32, bitcast=True)
    near = (bits + 0x7FFF + ((bits >> 16) & 1)) & -65536
    tie = (bits & 0xFFFF) == 0x8000
    down = bits & -65536
    bits = tl.where(tie & (err > 0), down + 65536, tl.where(tie & (err < 0), down, near))
    return bits.to(tl.float32, bitcast=True)


@triton.jit
def beta_bf16(b, SMALL: tl.constexpr):
    # sigmoid(b) correctly rounded to bf16 for a bf16 b (as fp32). For |b| < SMALL, sigmoid(b) =
    # 0.5 + t with t = -e1 / (2 (2 + e1)), e1 = expm1(-b) by its Taylor series (degree 9, no exp:
    # the same bits on every backend), accurate to a few ulps of t; 0.5 + t is then split exactly
    # (Fast2Sum) so the bf16 rounding sees t's low bits. sigmoid(b) ~ 0.5 + b/4 puts small bf16 b
    # as close as 0.04 fp32 ulps of sigmoid to a bf16 midpoint, but never closer than 6.6 ulps of
    # t (b = 0.2275). For |b| >= SMALL the plain sigmoid (fast exp on GPUs: a few ulps) is at least
    # 47.9 ulps from every midpoint. Both margins: over every bf16 b with |b| < 80 (STEP_NOTES.md);
    # beyond -80 sigmoid(b) is a bf16 subnormal that fp32 exp loses (outside the domain).
    y = -b
    e1 = 1.0 + y * (1.0 / 9.0)
    e1 = 1.0 + y * (1.0 / 8.0) * e1
    e1 = 1.0 + y * (1.0 / 7.0) * e1
    e1 = 1.0 + y * (1.0 / 6.0) * e1
    e1 = 1.0 + y * (1.0 / 5.0) * e1
    e1 = 1.0 + y * (1.0 / 4.0) * e1
    e1 = 1.0 + y * (1.0 / 3.0) * e1
    e1 = 1.0 + y * 0.5 * e1
    e1 = y * e1
    t = tl.math.div_rn(-e1, 2.0 * (2.0 + e1))
    s_small = 0.5 + t
    err = t - (s_small - 0.5)  # exact: |t| < 0.5 (Fast2Sum)
    small = tl.abs(b) < SMALL
    s = tl.where(small, s_small, tl.sigmoid(b))
    return round_bf16_split(s, tl.where(small, err, 0.0))


@triton.jit
def softplus(x, THRESHOLD: tl.constexpr):
    # log1p(exp(x)) for x <= THRESHOLD, else x; log1p(e) = log(1 + e) * e / ((1 + e) - 1), exact
    # to a few ulps where 1 + e rounds (Goldberg), e itself where 1 + e == 1
    e = tl.exp(tl.minimum(x, THRESHOLD))
    one_e = 1.0 + e
    lp = tl.where(one_e == 1.0, e, tl.log(one_e) * (e / (one_e - 1.0)))
    return tl.where(x <= THRESHOLD, lp, x)


@triton.jit
def codes_fp32(c, MAGIC: tl.constexpr, MAGIC_BITS: tl.constexpr):
    # int8 -> fp32 through the fp32 mantissa: an integer add and a float subtract, exact (I2F runs
    # at a quarter of the FMA rate)
    return (c.to(tl.int32) + MAGIC_BITS).to(tl.float32, bitcast=True) - MAGIC


@triton.jit
def mul(a, b):
    # the combine function of a running product (entry decays)
    return a * b
