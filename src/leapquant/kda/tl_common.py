"""Triton device helpers both portable kernels (the flush and the step) use: neutral ground, so
that neither kernel module imports the other's private helpers.

Source: LeapQuant (arXiv 2609.38166); NVlabs/kda requests conless-leapquant-kda-flush and
conless-leapquant-kda-step.
"""

import triton
import triton.language as tl


@triton.jit
def mma(a, b, acc, UPCAST: tl.constexpr):
    # bf16 (exact) operands on the tensor cores, fp32 accumulation. UPCAST: Triton's CPU
    # interpreter multiplies bf16 as raw bits; give it fp32 operands
    if UPCAST:
        return tl.dot(a.to(tl.float32), b.to(tl.float32), acc, input_precision="ieee")
    return tl.dot(a, b, acc)
