"""A test kernel running the decode step's beta (``beta_bf16``) on a vector of bf16 inputs.
Imported only where Triton kernels may run (under TRITON_INTERPRET=1 on CPU, or on CUDA)."""

import triton
import triton.language as tl

from leapquant.step.tl_common import beta_bf16


@triton.jit
def betas_kernel(x, y, SMALL: tl.constexpr, N: tl.constexpr):
    i = tl.program_id(0) * N + tl.arange(0, N)
    tl.store(y + i, beta_bf16(tl.load(x + i).to(tl.float32), SMALL))
