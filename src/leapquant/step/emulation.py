"""Plain-PyTorch emulation of the Gluon decode-step kernel's codes products on the integer tensor
cores (``gluon_kernel.py``), so that their arithmetic is tested on the CPU.

The step needs ``C (f x)`` for x = kn and qn (``naive.step_products``), C the int8 codes [V, K].
The kernel feeds the codes to mma.sync m16n8k32 s8 as they are stored, and each thin vector
``y = f x`` [K] as ``DIGITS`` signed ``DIGIT_BITS``-bit digits under one power of two:

    e = exponent of max_k |y_k|  (clamped to [-121, 127])     z = y 2^(5 - e),  |z| < 64
    z = sum_d digit_d 2^(-7 d) + rest,   |digit_d| <= 64,   |rest| <= 2^(-7 DIGITS + 6)

each digit rounded to nearest from the remainder so far (every step exact in fp32). The kernel
takes max|y| from ``token_side``'s one reduction as ``rk max|f kt|`` (within a few ulps of the
maximum of the rounded products; every digit stays within 64); this emulation takes the exact
maximum. The products
``C digit_d`` are exact int32 sums (|sum| <= 64 * 127 * 128 < 2^21); the kernel weighs them back in
fp32: ``C y = 2^(e - 5) sum_d 2^(-7 d) (C digit_d)``. Two departures from exact products: the
fp32 sum of the weighed digit sums (about 2^-23 of ``sum_k |c_k y_k|``, below the fp32 FFMA
path's own rounding), and ``rest``: at most ``2^(e + 1 - 7 DIGITS)`` per element in y's units,
55 bits below the vector's largest element with the kernel's eight digits (41 with six). So
every element within 2^31 of the largest keeps fp32's 24 bits; an element further below keeps
fewer, and a row whose codes are zero on every channel near the largest (an empty window, negligible tokens and beta v) can then
miss the criterion where the fp32 path meets it (``tests/test_step_emulation.py``,
``one_dominant_channel``: fails from a 2^24 spread with six digits, 2^38 with eight).

Source: LeapQuant (arXiv 2609.38166); NVlabs/kda request conless-leapquant-kda-step.
"""

from __future__ import annotations

import torch

from ..geometry import QMAX, STEP_DIGIT_BITS, STEP_DIGITS, STEP_EXPONENT_RANGE
from ..launch import ROUND_MAGIC  # t + ROUND_MAGIC rounds t (|t| <= 2^22) half to even in fp32
from . import naive

LOWEST_EXPONENT, HIGHEST_EXPONENT = STEP_EXPONENT_RANGE


def _exponent(x: torch.Tensor) -> torch.Tensor:
    # e with 2^e <= x < 2^(e+1) for fp32 x >= 0, from the exponent bits (-127 for 0 and subnormals)
    return ((x.to(torch.float32).view(torch.int32) >> 23) & 0xFF) - 127


def vector_exponent(y: torch.Tensor) -> torch.Tensor:
    """The exponent e of ``max |y|`` over the last dim (fp32 bits; ``max |y|`` in [2^e, 2^(e+1))),
    clamped to [``LOWEST_EXPONENT``, ``HIGHEST_EXPONENT``]; int32 ``y.shape[:-1]``."""
    return _exponent(y.abs().amax(-1)).clamp(LOWEST_EXPONENT, HIGHEST_EXPONENT)


def _pow2(e: torch.Tensor) -> torch.Tensor:
    return torch.ldexp(torch.ones_like(e, dtype=torch.float32), e.to(torch.int32))


def _digit_pass(z: torch.Tensor, count: int) -> tuple[torch.Tensor, torch.Tensor]:
    # z (|z| <= 64, fp32) -> count int8 digits [..., count, K] and the remainder (z units, exact):
    # z = sum_d digit_d 2^(-7 d) + rest, |rest| <= 2^(6 - 7 count)
    out = []
    for d in range(count):
        t = z * 2.0 ** (STEP_DIGIT_BITS * d) + ROUND_MAGIC
        digit = t - ROUND_MAGIC
        z = z - digit * 2.0 ** (-STEP_DIGIT_BITS * d)
        out.append(digit.to(torch.int8))
    return torch.stack(out, -2), z


def digits(y: torch.Tensor, count: int = STEP_DIGITS) -> tuple[torch.Tensor, torch.Tensor]:
    """``y`` fp32 ``[..., K]`` as ``count`` digits: int8 ``[..., count, K]`` (digit d of element k in
    ``[..., d, k]``) and the vector exponent ``e`` (``vector_exponent``), with
    ``y ~ 2^(e - 5) sum_d digit_d 2^(-7 d)`` (the kernel's steps, each exact in fp32)."""
    y = y.to(torch.float32)
    e = vector_exponent(y)
    d, _ = _digit_pass(y * _pow2(5 - e).unsqueeze(-1), count)
    return d, e


SCALED_REACH = 131  # bits below 2^e that y 2^(5 - e) keeps as normal fp32 (2^-126 = 2^(e-131) 2^(5-e))


def passes_needed(y: torch.Tensor, count: int = STEP_DIGITS) -> torch.Tensor:
    """Digit passes that hold the elements of ``y`` [..., K] to fp32's 24 bits, int ``[...]``: one
    pass carries ``7 count - 1`` bits below the vector's largest element (exact for elements
    within ``2^(7 count - 25)`` of it), each further pass, on the remainders, ``7 count - 1``
    more; the least nonzero |y| decides (a margin of one bit for the kernel's estimates). The
    passes work on y scaled once by ``2^(5 - e)``, so elements more than ``SCALED_REACH`` bits
    below the largest are already subnormal there and lose bits whatever the count: the count is
    capped at the passes that reach that far (three with eight digits, four with six)."""
    y = y.to(torch.float32)
    e = vector_exponent(y)
    least = torch.where(y != 0, y.abs(), torch.full_like(y, float("inf"))).amin(-1)
    e_least = torch.where(torch.isinf(least), e, _exponent(least) - 1)
    bits = STEP_DIGIT_BITS * count
    short = (e + 25 - bits - e_least).clamp(min=0, max=SCALED_REACH + 25 - bits)  # bits one pass leaves out
    return 1 + (short + bits - 2) // (bits - 1)


def codes_products(codes: torch.Tensor, y: torch.Tensor, count: int = STEP_DIGITS,
                   passes: int | None = 1) -> torch.Tensor:
    """``C y`` for int8 codes ``[..., V, K]`` and fp32 vectors ``y`` ``[..., P, K]`` as the Gluon
    kernel computes it: ``y`` in ``count`` digits, exact integer products, the digit sums weighed
    back in fp32; ``passes`` digit passes (the Gluon kernel: one; None: as many as
    ``passes_needed`` asks for the batch's widest vector, every element within ``SCALED_REACH``
    bits of its vector's largest then held to fp32's 24 bits), each on the previous pass's
    remainders scaled up by ``2^(7 count - 1)``. Returns fp32
    ``[..., P, V]``."""
    y = y.to(torch.float32)
    e = vector_exponent(y)
    if passes is None:
        passes = int(passes_needed(y, count).max())
    weight = 2.0 ** (-STEP_DIGIT_BITS * torch.arange(count, dtype=torch.float32, device=y.device))
    z = y * _pow2(5 - e).unsqueeze(-1)
    total = torch.zeros(y.shape[:-1] + codes.shape[-2:-1], dtype=torch.float32, device=y.device)
    for p in range(passes):
        d, z = _digit_pass(z, count)
        exact = torch.einsum("...vk,...pdk->...pdv", codes.to(torch.int64), d.to(torch.int64))  # |.| < 2^21
        sums = (exact.to(torch.float32) * weight[:, None]).sum(-2)  # [..., P, V]
        total = total + sums * _pow2(e - 5 - p * (STEP_DIGIT_BITS * count - 1)).unsqueeze(-1)
        z = z * 2.0 ** (STEP_DIGIT_BITS * count - 1)
    return total


def step_products(codes, s_k, s_v, u, q, kbuf, ubuf, w, pc, D, x, dtype: torch.dtype = torch.float32,
                  count: int = STEP_DIGITS, passes: int | None = 1):
    """``naive.step_products`` (same arguments, fp32 only) with the codes' term from
    ``codes_products``: ``S x = s_v * (C (f * x)) + Q^T (U' x) + sum_j ubuf_j w_j ((kbuf_j * D_j) . x)``."""
    assert dtype == torch.float32
    tokens_and_window = naive.step_products(torch.zeros_like(codes), s_k, s_v, u, q, kbuf, ubuf, w, pc, D, x, dtype)
    f = s_k.to(dtype).unsqueeze(-2) * pc.to(dtype).unsqueeze(-2) / QMAX
    return codes_products(codes, f * x.to(dtype), count, passes) * s_v.to(dtype).unsqueeze(-2) + tokens_and_window


def step_emulated(codes, s_k, s_v, u, q, kbuf, ubuf, gbuf, w, pcum, h, qx, kx, vx, a, b, A_log, dt_bias,
                  count: int = STEP_DIGITS, passes: int | None = 1):
    """The decode step with the Gluon kernel's codes products (``step_products`` here); the other
    phases as ``naive.step_cpu``. Arguments and results: ``naive.step_reference``'s; ``count``: the
    digits a vector (the kernel's ``STEP_DIGITS``; fewer to see the criterion fail); ``passes`` as
    in ``codes_products`` (one, as the kernel; None: as many as the vectors' spread needs)."""
    def products(*args):
        return step_products(*args, count=count, passes=passes)

    return naive.step_with_products(products, codes, s_k, s_v, u, q, kbuf, ubuf, gbuf, w, pcum, h, qx, kx, vx, a,
                                    b, A_log, dt_bias)
