"""The Gluon decode step's codes products on the integer tensor cores (``step/emulation.py``): the
digit expansion's exactness and bound, the products against fp64, and the whole step with them
through the request's criterion (CPU; the kernel itself runs in tests/test_step_gpu.py)."""

import pytest
import torch

from leapquant.eval import step_criterion, step_inputs
from leapquant.geometry import STEP_DIGIT_BITS, STEP_DIGITS
from leapquant.step import emulation as emu
from leapquant.step import naive

B = 4


def spread_vectors(seed: int = 0) -> torch.Tensor:
    """fp32 [6, 128] vectors whose elements span from 2^-60 to 1 of their largest, with signs, a
    zero vector and a vector near the fp32 floor among them."""
    g = torch.Generator().manual_seed(seed)
    y = torch.randn(6, 128, generator=g) * torch.exp2(-60 * torch.rand(6, 128, generator=g))
    y[3] = 0.0
    y[4] *= 2.0**-100
    y[5, 7] = -3.0  # one dominant element
    return y


def test_digits_reconstruct_each_element_to_the_bound():
    y = spread_vectors()
    d, e = emu.digits(y)
    assert d.shape == (6, STEP_DIGITS, 128) and d.dtype == torch.int8
    assert int(d.abs().max()) <= 2 ** (STEP_DIGIT_BITS - 1)
    y64 = y.double()
    w = torch.exp2(-STEP_DIGIT_BITS * torch.arange(STEP_DIGITS, dtype=torch.float64))
    back = (d.double() * w[:, None]).sum(-2) * torch.exp2(e.double() - 5).unsqueeze(-1)
    bound = torch.exp2(e.double() + 1 - STEP_DIGIT_BITS * STEP_DIGITS).unsqueeze(-1)
    assert bool(((back - y64).abs() <= bound).all())
    # elements within 2^-(7 STEP_DIGITS - 25) of their vector's largest keep all 24 bits: exact
    big = y.abs() >= y.abs().amax(-1, keepdim=True) * 2.0 ** -(STEP_DIGIT_BITS * STEP_DIGITS - 25)
    assert torch.equal(back[big], y64[big])
    assert bool((back[3] == 0).all())


def test_codes_products_match_fp64_to_fp32_class():
    g = torch.Generator().manual_seed(1)
    codes = torch.randint(-127, 128, (3, 128, 128), generator=g, dtype=torch.int8)
    y = spread_vectors(2)[:4].reshape(2, 2, 128).repeat(2, 1, 1)[:3]  # [3, 2, 128]
    got = emu.codes_products(codes, y).double()
    exact = torch.einsum("bvk,bpk->bpv", codes.double(), y.double())
    scale = torch.einsum("bvk,bpk->bpv", codes.double().abs(), y.double().abs())
    assert bool(((got - exact).abs() <= 2.0**-21 * scale + 1e-300).all())
    # fewer digits lose precision where the elements spread: the bound above sees it
    few = emu.codes_products(codes, y, count=2, passes=1).double()
    assert not bool(((few - exact).abs() <= 2.0**-21 * scale + 1e-300).all())


@pytest.mark.parametrize("family", step_inputs.FAMILIES)
def test_emulated_step_meets_criterion(family):
    x = step_inputs.make(family, B, "cpu", seed=3)
    out = emu.step_emulated(**x)
    ok, worst = step_criterion.judge(out, x)
    assert ok, (family, step_criterion.worst_by_output(out, x))
    # as close to the fp64 formula as the fp32 factor path
    cpu = step_criterion.worst_by_output(naive.step_cpu(**x), x)
    emulated = step_criterion.worst_by_output(out, x)
    assert emulated["o"] <= cpu["o"] + 0.05 and emulated["u_row"] <= cpu["u_row"] + 0.05, (emulated, cpu)


def test_one_digit_fails_the_criterion():
    # the criterion sees the codes product's precision: one digit (7 bits) is far too coarse
    x = step_inputs.make("random", B, "cpu", seed=3)
    ok, worst = step_criterion.judge(emu.step_emulated(**x, count=1, passes=1), x)
    assert not ok and worst > 1.0


def one_dominant_channel(spread_bits: int) -> dict:
    """The digits' hard case (found in review): key scales 1 on channel 0 and 2^-spread_bits on the
    rest, codes zero on channel 0 in about half the rows, an empty window, no Compensator Tokens and
    v = 0, so that those rows' outputs come from channels ~2^-spread_bits below the vector's largest
    element, which fixed-point digits under one scale carry only to 7 STEP_DIGITS - 1 - spread_bits
    bits (55 - spread_bits with eight digits)."""
    g = torch.Generator().manual_seed(5)
    x = step_inputs.make("random", B, "cpu", seed=3)
    x["s_k"][:] = 2.0**-spread_bits
    x["s_k"][..., 0] = 1.0
    zero = torch.rand(x["codes"][..., 0].shape, generator=g) < 0.5
    x["codes"][..., 0] = torch.where(zero, torch.zeros((), dtype=torch.int8), x["codes"][..., 0])
    for name in ("h", "u", "q", "vx"):
        x[name].zero_()
    return x


@pytest.mark.parametrize("spread_bits", [16, 28, 36])
def test_digits_hold_the_criterion_within_their_range(spread_bits):
    x = one_dominant_channel(spread_bits)
    ok, worst = step_criterion.judge(emu.step_emulated(**x, passes=1), x)
    assert ok, worst


def test_digits_lose_channels_far_below_the_largest():
    # the scheme's known limit (NOTES, "The digits' range"): at a 2^28 spread six digits (the
    # kernel's before 2026-12-03) fail where the fp32 path passes, eight pass; at 2^38 eight
    # fail too (2^36 passes: test above)
    x = one_dominant_channel(28)
    assert step_criterion.judge(naive.step_cpu(**x), x)[0]
    assert not step_criterion.judge(emu.step_emulated(**x, count=6, passes=1), x)[0]
    assert step_criterion.judge(emu.step_emulated(**x, count=8, passes=1), x)[0]
    x = one_dominant_channel(38)
    assert step_criterion.judge(naive.step_cpu(**x), x)[0]
    assert not step_criterion.judge(emu.step_emulated(**x, count=8, passes=1), x)[0]


def test_passes_cover_the_spread_of_a_vector():
    y = torch.tensor([[1.0, 2.0**-30, 2.0**-70, 0.0, -(2.0**-100)], [1.0, 2.0**-16, 0.0, 0.0, 0.0],
                      [0.0] * 5])
    assert emu.passes_needed(y, count=6).tolist() == [4, 1, 1]
    assert emu.passes_needed(torch.tensor([[2.0**120, 3 * 2.0**-120]]), count=6).tolist() == [4]  # capped
    assert emu.passes_needed(y, count=8).tolist() == [3, 1, 1]
    assert emu.passes_needed(torch.tensor([[2.0**120, 3 * 2.0**-120]]), count=8).tolist() == [3]  # capped
    # every element held exactly: the products equal the fp64 ones to the fp32 sums' rounding
    codes = torch.tensor([[[127, 1, 0, 0, 0], [0, 0, 1, 0, -1]]], dtype=torch.int8)
    got = emu.codes_products(codes, y[:1].unsqueeze(0), count=6, passes=None).double()
    exact = torch.einsum("bvk,bpk->bpv", codes.double(), y[:1].unsqueeze(0).double())
    assert torch.allclose(got, exact, rtol=2.0**-22, atol=0.0)
    one = emu.codes_products(codes, y[:1].unsqueeze(0), count=6, passes=1).double()
    assert not torch.allclose(one, exact, rtol=2.0**-22, atol=0.0)  # row 1 (2^-70 + 2^-100) is below one pass


@pytest.mark.parametrize("spread_bits", [40, 90])
def test_digit_passes_hold_the_criterion_where_fp32_does(spread_bits):
    x = one_dominant_channel(spread_bits)
    assert step_criterion.judge(naive.step_cpu(**x), x)[0]
    ok, worst = step_criterion.judge(emu.step_emulated(**x, passes=None), x)
    assert ok, worst


@pytest.mark.parametrize("largest", [2.0**127 * 1.99, 2.0**127, 2.0**127 * 1.5, torch.finfo(torch.float32).max])
def test_digits_stay_in_range_at_the_largest_fp32_values(largest):
    # the exponent clamp at 127 (geometry.STEP_EXPONENT_RANGE): the first digit stays within 64 up
    # to fp32's largest value (at 126 it reached 96 at 1.5 2^127, and wrapped to -128 at the top)
    y = torch.tensor([[largest, -largest / 3, 2.0**100, 1.0]], dtype=torch.float32)
    d, e = emu.digits(y)
    assert int(e) == 127 and int(d.abs().max()) <= 2 ** (STEP_DIGIT_BITS - 1)
    codes = torch.eye(4, dtype=torch.int8).unsqueeze(0)  # C y = y, element by element
    got = emu.codes_products(codes, y.unsqueeze(0), passes=1)
    assert torch.isfinite(got).all() and torch.equal(got[0, 0, :3], y[0, :3])
