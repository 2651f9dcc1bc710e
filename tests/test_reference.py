"""The fp32 reference against the fp64 rebuild, through the criterion (SPEC section 5)."""

import pytest
import torch

from leapquant.eval import flush_inputs as inputs
from leapquant.kda import decode, reference
from leapquant.eval.flush_criterion import evaluate
from leapquant.flush.naive import decay_since_append, mgs, quantize, rebuild

B = 2


@pytest.fixture(scope="module", params=inputs.FAMILIES)
def case(request):
    x = inputs.make(request.param, B, "cpu", seed=3)
    return request.param, x, reference(**x)


def test_reference_outputs_have_the_format(case):
    _, x, (codes, s_k, s_v, u, q) = case
    for new, name in zip((codes, s_k, s_v, u, q), inputs.CHECKPOINT_ARGS):
        assert new.dtype == x[name].dtype and new.shape == x[name].shape
    assert int(codes.abs().max()) <= 127
    assert bool((s_k > 0).all()) and bool((s_v > 0).all())


def test_reference_decodes_close_to_fp64_state(case):
    fam, x, ckpt = case
    names = inputs.FLUSH_ARGS[:-1]
    S = rebuild(*(x[n] for n in names), dtype=torch.float64)
    err = (decode(*ckpt, dtype=torch.float64) - S).abs().mean((-2, -1))
    mag = S.abs().mean((-2, -1))
    live = mag > 0
    # int8 residual after a rank-4 fit: about 1% of mean|S| on the random family, less elsewhere
    assert float((err[live] / mag[live]).max()) < 0.02
    assert float(err[~live].sum()) == 0.0


def test_fp64_pipeline_passes_against_fp32_reference(case):
    fam, x, ref = case
    S = rebuild(*(x[n] for n in inputs.FLUSH_ARGS[:-1]), dtype=torch.float64)
    exact = quantize(S, x["q0"].double())
    res = evaluate(x, exact, ref)
    assert res["ok"], (res["head"].worst_ratio, res["batch_head"].worst_ratio)
    assert res["batch_head"].worst_ratio < 1.01


@pytest.mark.parametrize("damage", ["state_bf16", "codes_toward_zero"])
def test_criterion_rejects_known_failures(damage):
    # SPEC section 5: both are known to fail (1.03+ and 2.0)
    x = inputs.make("random", B, "cpu", seed=5)
    ref = reference(**x)
    S = rebuild(*(x[n] for n in inputs.FLUSH_ARGS[:-1]))
    if damage == "state_bf16":
        bad = quantize(S.bfloat16().float(), x["q0"])
    else:
        codes, s_k, s_v, u, q = ref
        E = S - q.float().transpose(-1, -2) @ u.float()
        codes = torch.trunc(127 * E / (s_k[..., None, :] * s_v[..., :, None])).clamp(-127, 127).to(torch.int8)
        bad = (codes, s_k, s_v, u, q)
    res = evaluate(x, bad, ref)
    assert not res["ok"]
    assert res["batch_head"].worst_ratio > 1.02


def test_decay_since_append_is_the_product_of_later_gates():
    g = torch.rand(3, 16, 8, dtype=torch.float64) * 0.5 + 0.5
    D = decay_since_append(g, torch.float64)
    for j in range(16):
        assert torch.allclose(D[:, j], g[:, j + 1 :].prod(1))


def test_mgs_orthonormal_and_rank_deficient():
    a = torch.randn(2, 128, 4)
    x, y, q0 = torch.randn(128, 1), torch.randn(128, 1), torch.randn(128, 4)
    a[1] = (x @ y.T).T @ q0  # a rank-1 state's start block, with fp32 rounding
    qm = mgs(a)
    gram = qm.transpose(-1, -2) @ qm
    assert float((gram - torch.eye(4)).abs().max()) < 1e-5
    zero = mgs(torch.zeros(1, 128, 4))
    assert float(zero.abs().max()) == 0.0


def test_structured_edge_heads_are_as_specified():
    x = inputs.make("structured", 1, "cpu", seed=0)
    assert int(x["codes"][0, inputs.ZERO].abs().max()) == 0 and float(x["w"][0, inputs.ZERO].sum()) == 0
    assert float(x["w"][0, inputs.RANK1].sum()) == 1 and float(x["w"][0, inputs.RANK2].sum()) == 2
    assert float((x["gbuf"][0, inputs.NO_DECAY, :, :32] == 1).float().mean()) == 1
    assert float(x["pcum"][0, inputs.DECAYED].max()) < -199
    hot = x["s_v"][0, 0, inputs.HOT_ROW] / x["s_v"][0, 0].median()
    assert float(hot) > 10


def test_guard_overflow_keeps_the_product_and_only_acts_on_overflow():
    from leapquant.flush.naive import guard_overflow

    uk = torch.randn(3, 128, 4) * torch.tensor([1e5, 1.0, 1e-9, 0.0])
    qv = torch.randn(3, 128, 4) * 0.1
    u2, q2 = guard_overflow(uk, qv)
    assert torch.equal(q2 @ u2.transpose(-1, -2), qv @ uk.transpose(-1, -2))  # powers of two: exact
    assert float(u2[..., 0].abs().max()) <= 2**15 and bool(torch.isfinite(u2.half()).all())
    assert torch.equal(u2[..., 1:], uk[..., 1:]) and torch.equal(q2[..., 1:], qv[..., 1:])


def test_mgs_replaces_exactly_dependent_columns():
    a = torch.randn(2, 128, 4)
    a[..., 2] = a[..., 0]  # a repeated start column (a q0 with two equal columns)
    qm = mgs(a, drop_dependent=True)
    assert float((qm.transpose(-1, -2) @ qm - torch.eye(4)).abs().max()) < 1e-5
    assert float(qm[..., 2].abs().argmax(-1).ne(2).sum()) == 0  # the e_2 stand-in


def test_repeated_q0_columns_keep_four_tokens():
    # With a repeated q0 column the reference's 4th token is normalised rounding noise, an
    # arbitrary direction that moves with the BLAS's summation order (README: q0 needs independent
    # columns), so the reference is no yardstick here. What is well-posed: the product path keeps
    # four real tokens, so it stays close to its own flush from an independent q0 and clearly
    # better than a flush with three tokens. Both yardsticks are our own well-conditioned flush:
    # their errors agree to ~1e-6 relative across MKL's code paths (1.081 and 1.164 here).
    from flush_checks import REPEATED_Q0_BOUND, repeated_q0_errors
    from leapquant.eval.flush_criterion import well_formed
    from leapquant.flush.naive import flush_cpu

    repeated, independent, three_tokens, _, got = repeated_q0_errors(flush_cpu, B)
    assert well_formed(got)
    assert repeated <= REPEATED_Q0_BOUND * independent < three_tokens, (repeated, independent, three_tokens)
    assert float(got[4][..., 2, :].float().abs().amax()) > 0  # a real 4th token, not a zero one


def test_zero_q0_column_keeps_four_tokens():
    # q0[:, 2] = 0: the product path replaces the zero column by a real direction (e_2, as for a
    # repeated column), so it beats the fp32 reference, whose third token is exactly zero
    from flush_checks import assert_zero_q0_column_kept, zero_q0_column
    from leapquant.flush.naive import flush_cpu

    v = zero_q0_column(flush_cpu, "cpu")
    assert_zero_q0_column_kept(v)


def test_vanishing_state_stays_finite_and_close():
    # |S| ~ 1e-21 (old state decayed by exp(-50), no new entries): fp32 Gram-Schmidt norms of
    # such states underflow unless scaled; the product path stays finite within int8 error.
    # (Below ~1e-22 the format's own EPS floor on both scales limits any implementation.)
    from leapquant.eval.flush_criterion import head_errors, well_formed
    from leapquant.flush.naive import flush_cpu

    x = inputs.make("random", 1, "cpu", seed=8)
    x["w"].zero_()
    x["pcum"].fill_(-50.0)
    got = flush_cpu(**x)
    assert well_formed(got)
    err, mag = head_errors(x, got)
    assert float(mag.min()) > 0 and float((err / mag).max()) < 1e-2


@pytest.mark.parametrize("family", inputs.STRESS_FAMILIES)
def test_cpu_flush_covers_the_domain(family):
    from leapquant.flush.naive import flush_cpu

    x = inputs.make(family, B, "cpu", seed=6)
    ref = reference(**x)
    res = evaluate(x, flush_cpu(**x), ref)
    assert res["well_formed"] and res["ok"], (res["batch_head"].worst_ratio, res["batch_head"].worst_cap_ratio)
    rel = float(res["err"].sum() / res["mag"].sum())
    assert rel < 5e-3
    if family == "coherent_huge":
        # the trap: the reference's fp16 u overflows on a coherent |S| ~ 8e3 state
        assert not bool(torch.isfinite(ref[3].float()).all())


def test_small_state_tokens_reach_fp16_subnormals():
    # issue 10: the state scaled from 1e-4 (head 0) to 1e-12 (head 31), mean|S| ~1e-5 .. 1e-14; the reference's tokens go through
    # fp16's subnormal range (below 2^-14) to zero, while the state stays well inside fp32
    x = inputs.make("small_state", 1, "cpu", seed=2)
    S = rebuild(*(x[n] for n in inputs.FLUSH_ARGS[:-1]), dtype=torch.float64)
    mag = S.abs().mean((-2, -1))[0]
    assert 1e-6 < float(mag[0]) < 1e-4 and 1e-15 < float(mag[-1]) < 1e-13
    u = reference(**x)[3].float().abs().amax((-2, -1))[0]
    assert float(u[0]) > 2.0**-14 and float(u[12]) < 2.0**-14 and float(u[-1]) == 0.0


def test_blind_q0_overlaps_span_the_range():
    # the old tokens' overlap with q0's span, per head: 1e-6 (head 0) .. 1e-1 (head 31)
    x = inputs.make("blind_q0", 1, "cpu", seed=2)
    basis = torch.linalg.qr(x["q0"].double())[0]  # [V, R]
    overlap = torch.linalg.matrix_norm(x["q"][0].double() @ basis, ord=2)  # [H]
    assert 1e-7 < float(overlap[0]) < 5e-6 and 0.02 < float(overlap[-1]) < 0.2
    S = rebuild(*(x[n] for n in inputs.FLUSH_ARGS[:-1]), dtype=torch.float64)
    tokens = torch.einsum("...rv,...rk->...vk", x["q"].double(), x["u"].double() * x["pcum"].double().exp()[..., None, :])
    # the decayed old tokens are the larger part (pcum down to -20 leaves the window comparable)
    assert float((S - tokens).abs().mean() / tokens.abs().mean()) < 1

