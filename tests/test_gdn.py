"""GDN (Gated DeltaNet: a scalar gate, 16 key heads serving 32 value heads) on the CPU: the input
families, the criteria (and their power to fail), the fp32 references against straightforward fp64
formulas, the functional calls on every family, a CPU ``gdn.Pool`` (state in and out, steps and
flushes across a window boundary against the functional calls stepped by hand, a full window
stepped again, copies, misuse), and the portable kernels under Triton's interpreter (a subprocess,
``interpreted_gdn.py``). Sources: NVlabs/kda requests conless-leapquant-gdn-step and
conless-leapquant-gdn-flush."""

import math

import pytest
import torch

import gdn_checks
from conftest import interpreted_verdicts
from gdn_checks import CKPT, POOL_TENSORS, WIN, same_bits
from leapquant import gdn, kda
from leapquant.eval import flush_criterion, flush_inputs, gdn_criterion, gdn_inputs, step_inputs
from leapquant.format import decode
from leapquant.flush.naive import quantize, rebuild_scalar
from leapquant.geometry import ERROR_KINDS, H, K, L, ORTHONORMAL_QK_BELOW, QMAX, R, V

F64 = torch.float64
FULL, OUT = ERROR_KINDS.index("full_window"), ERROR_KINDS.index("out_of_domain")
B = 2


# --- straightforward fp64 formulas (element-wise products and sums: no BLAS) ----------------------


def _decode64(x):
    # q^T u + codes s_k / 127 s_v, [..., V, K]
    tokens = sum(x["q"][..., r, :].to(F64)[..., :, None] * x["u"][..., r, :].to(F64)[..., None, :] for r in range(R))
    return x["codes"].to(F64) * x["s_k"].to(F64)[..., None, :] / QMAX * x["s_v"].to(F64)[..., :, None] + tokens


def _window64(x, weights):
    # sum_j weights_j ubuf_j kbuf_j^T, [..., V, K]
    return sum(weights[..., j, None, None] * x["ubuf"][..., j, :].to(F64)[..., :, None]
               * x["kbuf"][..., j, :].to(F64)[..., None, :] for j in range(L))


def state64(x) -> torch.Tensor:
    """The GDN flush's state ``p decode(checkpoint) + sum_j w_j ubuf_j kbuf_j^T`` in fp64."""
    return x["p"].to(F64)[..., None, None] * _decode64(x) + _window64(x, x["w"].to(F64))


def _bf16_round64(y):
    # fp64 y (a normal bf16 magnitude) to the nearest bf16 value, ties to even, in fp64
    m, e = torch.frexp(y)
    return torch.round(m * 256) * torch.exp2((e - 8).to(F64))


def gate64(x):
    """``at = exp(-exp(A_log) softplus(a + dt_bias))`` in fp64, ``[B, H]``."""
    z = x["a"].to(F64) + x["dt_bias"].to(F64)
    return torch.exp(-torch.exp(x["A_log"].to(F64)) * torch.nn.functional.softplus(z, beta=1.0, threshold=20.0))


def step64(x) -> dict:
    """The GDN step of the request's definition in fp64: ``{"o", "k_row", "u_row", "w_new", "p_new"}``."""
    heads = x["h"].shape[1]
    key = torch.arange(heads) // (heads // x["qx"].shape[1])  # head hd reads key head hd // 2
    q, k = x["qx"].to(F64)[:, key], x["kx"].to(F64)[:, key]
    kn = k / torch.sqrt((k * k).sum(-1, keepdim=True) + 1e-6)
    qn = q / torch.sqrt((q * q).sum(-1, keepdim=True) + 1e-6) / math.sqrt(K)
    at = gate64(x)
    beta = _bf16_round64(torch.sigmoid(x["b"].to(F64)))
    live = torch.arange(L) < x["h"][..., None]
    wd = torch.where(live, x["w"].to(F64) * at[..., None], torch.zeros((), dtype=F64))
    S = (x["p"].to(F64) * at)[..., None, None] * _decode64(x) + _window64(x, wd)
    Skn, Sqn = (S * kn[..., None, :]).sum(-1), (S * qn[..., None, :]).sum(-1)
    u_new = beta[..., None] * (x["vx"].to(F64) - Skn)
    o = Sqn + (kn * qn).sum(-1, keepdim=True) * u_new
    w_new = torch.where(torch.arange(L) == x["h"][..., None], torch.ones((), dtype=F64),
                        torch.where(live, x["w"].to(F64) * at[..., None], x["w"].to(F64)))
    return {"o": o, "k_row": kn, "u_row": u_new, "w_new": w_new, "p_new": x["p"].to(F64) * at}


def as_outputs(ex: dict) -> tuple:
    """fp64 step outputs in the step's dtypes (bf16 rows, fp32 w_new and p_new)."""
    return (ex["o"].bfloat16(), ex["k_row"].bfloat16(), ex["u_row"].bfloat16(), ex["w_new"].float(),
            ex["p_new"].float())


# --- the input families ------------------------------------------------------------------------


def test_step_families_have_the_requests_shapes_and_the_kda_edge_heads():
    x = gdn_inputs.make_step("structured", B)
    assert tuple(x) == gdn_inputs.STEP_ARGS
    HK = H // 2
    expect = {"codes": (torch.int8, (B, H, V, K)), "s_k": (torch.float32, (B, H, K)), "s_v": (torch.float32, (B, H, V)),
              "u": (torch.float16, (B, H, R, K)), "q": (torch.float16, (B, H, R, V)),
              "kbuf": (torch.bfloat16, (B, H, L, K)), "ubuf": (torch.bfloat16, (B, H, L, V)),
              "w": (torch.float32, (B, H, L)), "p": (torch.float32, (B, H)), "h": (torch.int32, (B, H)),
              "qx": (torch.bfloat16, (B, HK, K)), "kx": (torch.bfloat16, (B, HK, K)), "vx": (torch.bfloat16, (B, H, V)),
              "a": (torch.bfloat16, (B, H)), "b": (torch.bfloat16, (B, H)), "A_log": (torch.float32, (H,)),
              "dt_bias": (torch.float32, (H,))}
    for n, (dt, shape) in expect.items():
        assert x[n].dtype == dt and tuple(x[n].shape) == shape and x[n].is_contiguous(), n
    # derived from KDA's structured step: the state as it is, key head i = KDA head 2i, channel 0
    k = step_inputs.make("structured", B)
    for n in ("codes", "s_k", "s_v", "u", "q", "kbuf", "ubuf", "w", "h", "vx", "b", "A_log"):
        assert torch.equal(x[n], k[n]), n
    assert torch.equal(x["qx"], k["qx"][:, ::2]) and torch.equal(x["kx"], k["kx"][:, ::2])
    assert torch.equal(x["a"], k["a"][..., 0]) and torch.equal(x["dt_bias"], k["dt_bias"][:, 0])
    mean = k["pcum"].mean(-1)
    assert torch.equal(x["p"], torch.where(mean < -100, 1e-30, torch.exp(mean / 4).clamp(1e-30, 1)))
    # the edge-case heads: empty windows, an all-zero state, a full window, tiny and huge scales,
    # a checkpoint decayed to nothing
    assert bool((x["h"][:, step_inputs.EMPTY_ZERO_CODES] == 0).all() and (x["codes"][:, 1] == 0).all())
    zero = step_inputs.ZERO_STATE
    assert bool((x["h"][:, zero] == 0).all() and (x["codes"][:, zero] == 0).all() and (x["u"][:, zero] == 0).all())
    assert bool((x["h"][:, step_inputs.FULL_WINDOW] == L - 1).all())
    assert float(x["s_k"][:, step_inputs.TINY].max()) < 1e-4 < float(x["s_k"][:, step_inputs.HUGE].min())
    assert bool((x["p"][:, step_inputs.DECAYED] == gdn_inputs.P_FLOOR).all())
    assert bool(((x["p"] >= gdn_inputs.P_FLOOR) & (x["p"] <= 1)).all())
    assert bool((x["w"][torch.arange(L) >= x["h"][..., None]] == 0).all())  # nothing weighted past h
    # fewer heads: the first ones, whole key groups; odd counts refused
    y = gdn_inputs.make_step("structured", B, heads=4)
    assert torch.equal(y["codes"], x["codes"][:, :4]) and torch.equal(y["qx"], x["qx"][:, :2])
    assert torch.equal(y["dt_bias"], x["dt_bias"][:4]) and torch.equal(y["a"], x["a"][:, :4])
    for bad in (3, 1, 6):
        with pytest.raises(ValueError, match="heads"):
            gdn_inputs.make_step("random", 1, heads=bad)
    with pytest.raises(ValueError, match="family"):
        gdn_inputs.make_step("second_window", 1)


def test_next_step_appends_the_references_outputs():
    first = gdn_inputs.make_step("structured", B, seed=4)
    x = gdn_inputs.make_step("next_step", B, seed=4)
    _, k_row, u_row, w_new, p_new = gdn.step_reference(**first)
    bi, hi = torch.arange(B)[:, None], torch.arange(H)[None, :]
    h = first["h"].long()
    assert torch.equal(x["kbuf"][bi, hi, h], k_row) and torch.equal(x["ubuf"][bi, hi, h], u_row)
    assert torch.equal(x["w"], w_new) and torch.equal(x["p"], p_new)
    assert torch.equal(x["h"], torch.where(first["h"] < L - 1, first["h"] + 1, first["h"]))
    assert torch.equal(x["codes"], first["codes"]) and not torch.equal(x["qx"], first["qx"])  # a fresh token
    # the appended weights are the decayed live ones (at < 1) and a 1 at the old h
    assert bool((x["w"][bi, hi, h] == 1).all())
    live = torch.arange(L) < first["h"][..., None]
    assert bool((x["w"][live] < first["w"][live]).all())


def test_flush_families():
    x = gdn_inputs.make_flush("structured", B)
    assert tuple(x) == gdn_inputs.FLUSH_ARGS
    k = flush_inputs.make("structured", B)
    for n in ("codes", "s_k", "s_v", "u", "q", "kbuf", "ubuf", "w", "q0"):
        assert torch.equal(x[n], k[n]), n
    assert x["p"].shape == (B, H) and x["p"].dtype == torch.float32
    assert bool((x["p"][:, flush_inputs.DECAYED] == gdn_inputs.P_FLOOR).all())
    assert bool((x["w"][:, flush_inputs.ZERO] == 0).all() and (x["codes"][:, flush_inputs.ZERO] == 0).all())
    second = gdn_inputs.make_flush("second_window", B)
    ref = flush_inputs.chunked(gdn.reference, x)
    assert all(torch.equal(a, second[n]) for a, n in zip(ref, CKPT))  # the GDN reference's checkpoint
    assert not torch.equal(second["kbuf"], x["kbuf"]) and torch.equal(second["q0"], x["q0"])
    r = gdn_inputs.make_flush("random", B, heads=8)
    assert r["codes"].shape == (B, 8, V, K) and r["q0"].shape == (V, R)
    # fast_decay: random's checkpoint under the window a per-token gate g leaves, w_j = g^(L-1-j),
    # p = g^L, with windows on both sides of the flush's ORTHONORMAL_QK_BELOW
    f = gdn_inputs.make_flush("fast_decay", 4)
    assert all(torch.equal(f[n], x) for n, x in gdn_inputs.make_flush("random", 4).items() if n not in ("w", "p"))
    g = f["w"][..., L - 2]
    lo, hi = gdn_inputs.FAST_DECAY_GATES
    assert bool(((g >= lo) & (g <= hi)).all()) and bool((f["w"][..., L - 1] == 1).all())
    assert torch.allclose(f["w"], g[..., None] ** torch.arange(L - 1, -1, -1.0), rtol=1e-5, atol=0)
    assert torch.allclose(f["p"], g**L, rtol=1e-5, atol=0)
    assert bool((f["p"] < ORTHONORMAL_QK_BELOW).any()) and bool((f["p"] >= ORTHONORMAL_QK_BELOW).any())


# --- the criteria: what they pass and what they fail ---------------------------------------------


def test_step_criterion_figures():
    # one head of 128 bf16 ones against a candidate off by two bf16 steps (2^-6) in one element:
    # rel_l2 = 2^-6 / sqrt(128) (0.46 of 3e-3), rel_max = 2^-6 (1.5625 of 1e-2): 1.5625, fails
    r = torch.ones(1, 1, 128, dtype=torch.bfloat16)
    x = r.clone()
    x[0, 0, 0] = 1 + 2.0**-6
    assert float(gdn_criterion.row_figures(x, r)) == pytest.approx(1.5625)
    # one step (2^-7) in one element: 0.78125, within one step anyway
    x[0, 0, 0] = 1 + 2.0**-7
    assert float(gdn_criterion.row_figures(x, r)) == pytest.approx(0.78125)
    # one step in every element: rel_l2 2.6 of its bound, but the head differs by rounding only
    x = torch.full_like(r, 1 + 2.0**-7)
    assert float(gdn_criterion.row_figures(x, r)) == 1.0
    # an all-zero reference head: zero passes with 0, anything else is inf; NaN is inf
    z = torch.zeros_like(r)
    assert float(gdn_criterion.row_figures(z, z)) == 0.0
    assert float(gdn_criterion.row_figures(z + 2.0**-133, z)) == math.inf
    assert float(gdn_criterion.row_figures(x.masked_fill(x > 0, float("nan")), r)) == math.inf
    assert gdn_criterion.bf16_step(torch.tensor([1.0, 1.5, 2.0**-130, 0.0])).tolist() == [2.0**-7, 2.0**-7, 2.0**-133,
                                                                                           2.0**-133]
    # w_new, p_new: relative error / 1e-5 an element; 0 must stay 0
    w = torch.tensor([0.5, 0.0, 1.0])
    figs = gdn_criterion.scalar_figures(torch.tensor([0.5 + 2.0**-19, 0.0, 1.0]), w)  # 2^-18 relative
    assert figs.tolist() == [2.0**-18 / 1e-5, 0.0, 0.0]
    assert float(gdn_criterion.scalar_figures(torch.tensor([0.5, 1e-30, 1.0]), w)[1]) == math.inf


@pytest.mark.parametrize("family", gdn_inputs.STEP_FAMILIES)
def test_step_criterion_fails_wrong_outputs(family):
    x = gdn_inputs.make_step(family, B, seed=2)
    ref = gdn.step_reference(**x)
    assert gdn_criterion.judge_step(ref, ref) == (True, 0.0)

    def judged(i, fn):
        out = list(ref)
        out[i] = fn(out[i].clone())
        return gdn_criterion.judge_step(tuple(out), ref)

    big = int(x["vx"].float().abs().amax(-1)[0].argmax())  # a head of the first sequence
    for i in range(3):  # o, k_row, u_row: one head 2% off (several bf16 steps)
        def scaled(t):
            t[0, big] = (t[0, big].float() * 1.02).bfloat16()
            return t
        ok, worst = judged(i, scaled)
        assert not ok and worst > 1, (i, worst)
    ok, worst = judged(0, lambda t: t.index_fill_(2, torch.tensor([7]), float("nan")))
    assert not ok and worst == math.inf
    ok, _ = judged(3, lambda t: t * (1 + 2e-5))  # w_new 2e-5 off
    assert not ok
    ok, worst = judged(4, lambda t: t * (1 + 4e-6))  # p_new 4e-6 off: passes
    assert ok and 0.3 < worst < 0.5
    ok, _ = judged(4, lambda t: t * (1 + 2e-5))
    assert not ok
    with pytest.raises(ValueError, match="o"):
        gdn_criterion.judge_step((ref[0].float(), *ref[1:]), ref)


def test_flush_criterion_fails_a_wrong_state_and_bad_codes():
    x = gdn_inputs.make_flush("structured", B, seed=3)
    ref = gdn.reference(**x)
    res = gdn_criterion.evaluate_flush(x, ref, ref)
    assert res["ok"] and res["batch_head"].worst_ratio == 1.0
    # the checkpoint of the state with the checkpoint undecayed (p = 1): far off
    wrong = gdn.reference(**{**x, "p": torch.ones_like(x["p"])})
    res = gdn_criterion.evaluate_flush(x, wrong, ref)
    assert not res["ok"] and res["batch_head"].worst_ratio > 2
    # the KDA criterion's rebuild is not GDN's: the inputs have no gbuf / pcum
    with pytest.raises(KeyError):
        flush_criterion.evaluate(x, ref, ref)
    bad = (ref[0].clone().fill_(-128), *ref[1:])
    assert not gdn_criterion.evaluate_flush(x, bad, ref)["well_formed"]
    nan = (*ref[:3], ref[3].clone().fill_(float("nan")), ref[4])
    assert not gdn_criterion.evaluate_flush(x, nan, ref)["ok"]


# --- the references against the fp64 formulas -------------------------------------------------


@pytest.mark.parametrize("heads", [H, 4])
@pytest.mark.parametrize("family", gdn_inputs.STEP_FAMILIES)
def test_step_reference_and_cpu_step_against_fp64(family, heads):
    x = gdn_inputs.make_step(family, B, seed=3, heads=heads)
    ex = step64(x)
    for name, fn in (("reference", gdn.step_reference), ("cpu step", gdn.step)):
        out = fn(**x)
        ok, worst = gdn_criterion.judge_step(out, as_outputs(ex))
        # the fp32 definition: bf16 rounding flips at most (a one-step head is capped at 1)
        assert ok and worst <= 0.1, (name, gdn_criterion.worst_by_output(out, as_outputs(ex)))
        # the decayed weights and the gate product to fp32 rounding
        assert float(gdn_criterion.scalar_figures(out[3], ex["w_new"].float()).max()) <= 0.05
        assert float(gdn_criterion.scalar_figures(out[4], ex["p_new"].float()).max()) <= 0.05


@pytest.mark.parametrize("family", gdn_inputs.FLUSH_FAMILIES)
def test_flush_reference_state_and_error_against_fp64(family):
    x = gdn_inputs.make_flush(family, B, seed=3)
    S = state64(x)
    # the fp32 rebuild and the criterion's fp64 one against the formula
    scale = S.abs().amax((-2, -1)).clamp_min(1e-300)
    fp32 = rebuild_scalar(*(x[n] for n in gdn_inputs.FLUSH_ARGS[:-1]))
    assert float(((fp32 - S).abs().amax((-2, -1)) / scale).max()) < 1e-6
    assert float(((gdn_criterion.state(x) - S).abs().amax((-2, -1)) / scale).max()) < 1e-13
    # the reference's checkpoint decodes to S within the format's error: the int8 residual after a
    # rank-4 fit, ~1% of mean|S| or better; an all-zero state to exact zeros
    D = decode(*gdn.reference(**x), dtype=F64)
    mag = S.abs().mean((-2, -1))
    rel = (D - S).abs().mean((-2, -1)) / mag.clamp_min(1e-300)
    assert float(rel[mag > 0].max()) < 0.01, float(rel[mag > 0].max())
    assert bool((D[mag == 0] == 0).all())
    # the GDN flush is KDA's with no per-entry decay and one gate for every key channel
    k = {**{n: x[n] for n in CKPT + ("kbuf", "ubuf", "w", "q0")},
         "gbuf": torch.ones(*x["kbuf"].shape, dtype=torch.float16),
         "pcum": torch.log(x["p"])[..., None].expand(*x["s_k"].shape).contiguous()}
    res = flush_criterion.evaluate(k, kda.reference(**k), gdn.reference(**x))
    assert res["ok"], res["batch_head"].worst_ratio


@pytest.mark.parametrize("heads", [H, 4])
@pytest.mark.parametrize("family", gdn_inputs.STEP_FAMILIES)
def test_cpu_step_meets_the_criterion(family, heads):
    v = gdn_checks.functional_step(family, B, "cpu", lambda x: gdn.step(**x), heads=heads)
    assert v["ok"] and v["worst"] <= 1.0 and v["inputs_unchanged"], v


@pytest.mark.parametrize("heads", [H, 4])
@pytest.mark.parametrize("family", gdn_inputs.FLUSH_FAMILIES)
def test_cpu_run_meets_the_criterion(family, heads):
    v = gdn_checks.functional_flush(family, B, "cpu", lambda x: gdn.run(**x), heads=heads)
    assert v["ok"] and v["batch_head"] <= 1.01 and v["inputs_unchanged"], v


def test_functional_calls_refuse_misuse():
    x = gdn_inputs.make_step("random", 1)
    with pytest.raises(ValueError, match="qx must have shape"):  # q and k of every value head (KDA's shape)
        gdn.step(**{**x, "qx": x["qx"].repeat_interleave(2, 1)})
    with pytest.raises(ValueError, match=r"\ba must have shape"):  # KDA's per-channel gate
        gdn.step(**{**x, "a": x["a"][..., None].expand(1, H, K).contiguous()})
    with pytest.raises(ValueError, match="dt_bias must have shape"):
        gdn.step(**{**x, "dt_bias": x["dt_bias"][:, None].expand(H, K).contiguous()})
    with pytest.raises(ValueError, match="heads"):  # one head: no whole key group
        one = {n: t[:, :1].contiguous() for n, t in x.items() if n not in ("qx", "kx", "A_log", "dt_bias")}
        gdn.step(**one, qx=x["qx"][:, :0], kx=x["kx"][:, :0], A_log=x["A_log"][:1], dt_bias=x["dt_bias"][:1])
    with pytest.raises(ValueError, match="h must lie"):
        gdn.step(**{**x, "h": torch.full_like(x["h"], L)})
    f = gdn_inputs.make_flush("random", 1)
    with pytest.raises(ValueError, match=r"\bp must have shape"):
        gdn.run(**{**f, "p": f["p"][..., None]})


# --- a CPU pool --------------------------------------------------------------------------------


def _states(N, heads=H, seed=0):
    g = torch.Generator().manual_seed(seed)
    # fla layout [N, H, K, V]: a low-rank part plus noise, as a prefill leaves it
    lo = torch.randn(N, heads, K, 3, generator=g) @ torch.randn(N, heads, 3, V, generator=g) * 0.1
    return lo + 0.02 * torch.randn(N, heads, K, V, generator=g)


@pytest.mark.parametrize("heads", [H, 4])
def test_write_state_then_read_state_within_the_format_error(heads):
    pool = gdn.Pool(5, "cpu", heads=heads)
    pool.w.fill_(0.5)
    pool.p.fill_(0.25)
    pool.hcnt.fill_(3)
    idx = torch.tensor([4, 0, 2, 1], dtype=torch.int32)
    state = torch.cat([_states(1, heads, 5), torch.full((1, heads, K, V), float("nan")), _states(2, heads, 6)])
    q0 = torch.randn(V, R, generator=torch.Generator().manual_seed(1))
    write_state_before = gdn_checks.snapshot(pool)
    gdn.write_state(pool, idx, state, q0)
    got = gdn.read_state(pool, idx)
    assert got.shape == (4, heads, K, V) and got.dtype == torch.float32
    assert bool((got[1] == 0).all())  # padding reads as zeros
    live = torch.tensor([0, 2, 3])
    slots = idx[live].long()
    # the windows emptied (w = 0, p = 1, no entries), slot 3 and slot 0 left as they were
    assert bool((pool.w[slots] == 0).all() and (pool.p[slots] == 1).all() and (pool.hcnt[slots] == 0).all())
    assert bool((pool.kbuf[slots] == 0).all() and (pool.ubuf[slots] == 0).all())
    for n in POOL_TENSORS[1:]:
        assert same_bits(getattr(pool, n)[3], write_state_before[n][3]), n
    # the flush criterion on the decoded state against the fp32 reference compression
    S = state[live].transpose(-1, -2).double()
    ref = decode(*quantize(state[live].transpose(-1, -2), q0), dtype=F64)
    err_c = (got[live].transpose(-1, -2).double() - S).abs().mean((-2, -1))
    err_r = (ref - S).abs().mean((-2, -1))
    assert flush_criterion.judge_form(err_c, err_r, S.abs().mean((-2, -1))).ok
    assert int(pool.errors.sum()) == 0


def _filled(heads=H, slots=6, family="random", seed=21):
    pool = gdn.Pool(slots, "cpu", heads=heads)
    x = gdn_inputs.make_step(family, slots - 1, "cpu", seed, heads)
    for name in CKPT + WIN:
        getattr(pool, name)[1:] = x[name]
    pool.hcnt[1:] = x["h"]
    return pool, x


def test_read_state_is_the_live_windows_state():
    # read_state: p decode(checkpoint) + sum_{j < hcnt} w_j ubuf_j kbuf_j^T (the weights already
    # decayed); a flushed window (hcnt == L, w = 0) adds nothing, its stale rows may hold NaN
    pool, _ = _filled(family="next_step")
    pool.hcnt[2, ::3] = L
    pool.w[2, ::3] = 0
    pool.p[2, ::3] = 1
    pool.kbuf[2, ::3] = float("nan")
    pool.ubuf[4, :, L - 1] = float("nan")  # a dead row past a fill count below L
    pool.hcnt[4] = L - 1
    idx = torch.tensor([2, 4, 0, 5], dtype=torch.int32)
    got = gdn.read_state(pool, idx)
    assert bool(torch.isfinite(got).all()) and bool((got[2] == 0).all())
    slots = idx.long()[[0, 1, 3]]
    x = {n: v[slots] for n, v in zip(CKPT + WIN, pool.checkpoint + pool.window)}
    on = (torch.arange(L) < pool.hcnt[slots][..., None]) & (x["w"] != 0)
    x["kbuf"] = torch.where(on[..., None], x["kbuf"], 0)
    x["ubuf"] = torch.where(on[..., None], x["ubuf"], 0)
    S = state64(x)
    err = (got[[0, 1, 3]].transpose(-1, -2).double() - S).abs().amax((-2, -1)) / S.abs().amax((-2, -1))
    assert float(err.max()) < 1e-5, float(err.max())


@pytest.mark.parametrize("family", ["random", "structured"])
def test_step_inplace_on_a_cpu_pool(family):
    v = gdn_checks.pool_step_form("cpu", gdn.step_inplace, family=family)
    assert v["ok"] and v["worst"] <= 1.0 and v["ok_vs_cpu"], v
    assert v["zero_rows"] and v["advanced"] and v["flushed_read_as_empty"] and v["untouched"], v


def test_flush_inplace_on_a_cpu_pool():
    v = gdn_checks.pool_flush_form("cpu", gdn.flush_inplace)
    assert v["ok"] and v["batch_head"] <= 1.01 and v["reset"] and v["untouched"], v


@pytest.mark.parametrize("heads", [H, 4])
def test_a_full_window_stepped_again_is_kept_and_counted(heads):
    v = gdn_checks.full_window_kept("cpu", gdn.step_inplace, heads=heads)
    assert v["kept"] and v["counted"] and v["zero_row"] and v["o_worst"] <= 1.0, v


def test_seventeen_steps_without_a_flush():
    # 17 steps and no flush: the 17th leaves every window intact and counts each program once; a
    # flush then takes the full windows and the next step appends again
    N = 3
    pool = gdn.Pool(4, "cpu")
    idx = torch.tensor([1, 2, 3], dtype=torch.int32)
    q0 = torch.randn(V, R, generator=torch.Generator().manual_seed(2))
    gdn.write_state(pool, idx, _states(N, seed=9), q0)
    x = gdn_inputs.make_step("random", 1)
    o = torch.empty(N, H, V, dtype=torch.bfloat16)

    def step(seed):
        t = gdn_checks.tokens(N, "cpu", seed)
        gdn.step_inplace(pool, idx, gdn_checks.mixed_rows(t), t["a"], t["b"], x["A_log"], x["dt_bias"], o)

    for t in range(L):
        step(60 + t)
    assert bool((pool.hcnt[1:] == L).all()) and int(pool.errors.sum()) == 0
    assert bool((pool.w[1:, :, L - 1] == 1).all()) and bool((pool.w[1:, :, 0] < 1).all())  # decayed
    before = gdn_checks.snapshot(pool)
    o.fill_(float("nan"))
    step(99)
    for n in POOL_TENSORS:
        assert same_bits(getattr(pool, n), before[n]), n
    assert bool(torch.isfinite(o.float()).all())  # the output of the whole window
    assert pool.error_counts() == {"full_window": N * H, "out_of_domain": 0}
    gdn.flush_inplace(pool, idx, q0)
    assert bool((pool.w[1:] == 0).all() and (pool.p[1:] == 1).all())
    step(98)
    assert bool((pool.hcnt[1:] == 1).all()) and int(pool.errors[FULL]) == N * H


def test_steps_and_flushes_across_a_window_boundary_match_the_functional_calls():
    # step_inplace + flush_inplace for L + 2 tokens on a pool whose programs start at fill counts
    # 1 .. L - 1 (each crosses a window boundary at its own token), against gdn.step_reference and
    # gdn.run on the same states stepped by hand: the outputs, the appended rows, the decayed
    # weights (w_j at for live j, 1 at h) and the gate product (p at) each token; the checkpoint
    # of each flush against the flush by hand (the hand's state then takes the pool's checkpoint)
    heads, N = 8, 3
    x = gdn_inputs.make_step("next_step", N, "cpu", seed=5, heads=heads)
    pool = gdn.Pool(N + 3, "cpu", heads=heads)
    idx = torch.tensor([2, 5, 1], dtype=torch.int32)
    slots = idx.long()
    for name in CKPT + WIN:
        getattr(pool, name)[slots] = x[name]
    pool.hcnt[slots] = x["h"]
    hand = {n: x[n].clone() for n in CKPT + WIN + ("h",)}
    params = {"A_log": x["A_log"], "dt_bias": x["dt_bias"]}
    q0 = flush_inputs.make("random", 1)["q0"]
    bi, hi = torch.arange(N)[:, None], torch.arange(heads)[None, :]
    flushed = torch.zeros(N, heads, dtype=torch.int32)
    for t in range(L + 2):
        tok = gdn_checks.tokens(N, "cpu", 200 + t, heads)
        o = torch.full((N, heads, V), float("nan"), dtype=torch.bfloat16)
        gdn.step_inplace(pool, idx, gdn_checks.mixed_rows(tok), tok["a"], tok["b"], x["A_log"], x["dt_bias"], o)
        ref = gdn.step_reference(**hand, **tok, **params)
        h = hand["h"].long()
        got = (o, pool.kbuf[slots][bi, hi, h], pool.ubuf[slots][bi, hi, h], pool.w[slots], pool.p[slots])
        ok, worst = gdn_criterion.judge_step(got, ref)
        assert ok and worst <= 0.05, (t, gdn_criterion.worst_by_output(got, ref))
        # the decay: live weights and p times at, an fp64 at of the token's gate
        at = gate64({**tok, **params})
        live = torch.arange(L) < hand["h"][..., None]
        decayed = (hand["w"].double() * at[..., None])[live]
        assert torch.allclose(pool.w[slots][live].double(), decayed, rtol=1e-6, atol=0)
        assert bool((pool.w[slots][bi, hi, h] == 1).all())
        assert torch.allclose(pool.p[slots].double(), hand["p"].double() * at, rtol=1e-6, atol=0)
        assert torch.equal(pool.hcnt[slots], hand["h"] + 1)
        # the hand's window: append, then flush the full ones
        _, k_row, u_row, w_new, p_new = ref
        hand["kbuf"][bi, hi, h] = k_row
        hand["ubuf"][bi, hi, h] = u_row
        hand["w"], hand["p"], hand["h"] = w_new, p_new, hand["h"] + 1
        gdn.flush_inplace(pool, idx, q0)
        due = hand["h"] == L
        if bool(due.any()):
            new = gdn.run(**{n: hand[n] for n in CKPT + WIN}, q0=q0)
            sel = {n: hand[n][due].unsqueeze(0) for n in CKPT + WIN}
            got = tuple(t[slots][due].unsqueeze(0) for t in pool.checkpoint)
            res = gdn_criterion.evaluate_flush({**sel, "q0": q0}, got, tuple(t[due].unsqueeze(0) for t in new))
            assert res["ok"] and res["batch_head"].worst_ratio <= 1.0 + 1e-6, res["batch_head"].worst_ratio
            for n, view in zip(CKPT, pool.checkpoint):
                hand[n][due] = view[slots][due]
            hand["w"][due] = 0
            hand["p"][due] = 1
            hand["h"][due] = 0
            flushed += due.int()
        assert bool((pool.w[slots][due] == 0).all() and (pool.p[slots][due] == 1).all())
        assert bool((pool.hcnt[slots][due] == L).all())  # flushed: read as empty by the next step
    assert bool((flushed >= 1).all()) and bool((flushed == 2).any())  # every program crossed a boundary, some two


def test_copy_slots_copies_each_program_bit_for_bit():
    pool, _ = _filled()
    pool.p[1:] = torch.rand(5, H)
    before = gdn_checks.snapshot(pool)
    src = torch.tensor([1, 3, 0, 2], dtype=torch.int32)
    dst = torch.tensor([4, 1, 5, -1], dtype=torch.int32)  # (3 -> 1) reads 1 before (1 -> 4) writes it; skips
    gdn.copy_slots(pool, src, dst)
    old = gdn_checks.copy_pool(pool, "cpu")
    for n in POOL_TENSORS:
        getattr(old, n).copy_(before[n])

    def tensors(p):
        return p.checkpoint + p.window + (p.hcnt,)

    for s, d in ((1, 4), (3, 1)):
        for a, b in zip(tensors(pool), tensors(old)):
            assert same_bits(a[d], b[s]), (s, d)
    for slot in (0, 2, 3, 5):
        for a, b in zip(tensors(pool), tensors(old)):
            assert same_bits(a[slot], b[slot]), slot
    assert not torch.equal(pool.p[4], pool.p[3])  # the copies are of different programs


def test_pool_refuses_misuse():
    for bad in (1, 3, 6):  # not whole key groups (or not a head count at all)
        with pytest.raises(ValueError, match="heads"):
            gdn.Pool(2, "cpu", heads=bad)
    assert gdn.slot_nbytes() == 887_168 and gdn.Pool(3, "cpu", heads=2).p.shape == (3, 2)
    pool, x = _filled(heads=4)
    idx = torch.tensor([1, 2], dtype=torch.int32)
    t = gdn_checks.tokens(2, "cpu", 7, heads=4)
    mixed = gdn_checks.mixed_rows(t)
    assert mixed.shape[1] == 2 * 2 * K + 4 * V
    o = torch.empty(2, 4, V, dtype=torch.bfloat16)
    args = (t["a"], t["b"], x["A_log"], x["dt_bias"], o)
    with pytest.raises(ValueError, match="mixed"):  # KDA's width: q and k of every head
        gdn.step_inplace(pool, idx, torch.zeros(2, kda.Pool.family.mixed_width(4), dtype=torch.bfloat16), *args)
    big = gdn.Pool(2, "cpu")
    with pytest.raises(ValueError, match="mixed"):  # 12288: KDA's row at 32 heads
        gdn.step_inplace(big, torch.ones(1, dtype=torch.int32), torch.zeros(1, 12288, dtype=torch.bfloat16),
                         torch.zeros(1, H, dtype=torch.bfloat16), torch.zeros(1, H, dtype=torch.bfloat16),
                         torch.zeros(H), torch.zeros(H), torch.empty(1, H, V, dtype=torch.bfloat16))
    with pytest.raises(ValueError, match=r"\ba must have shape"):  # KDA's per-channel gate
        gdn.step_inplace(pool, idx, mixed, t["a"][..., None].expand(2, 4, K).contiguous(), *args[1:])
    with pytest.raises(ValueError, match="dt_bias must have shape"):
        per_channel = x["dt_bias"][:, None].expand(4, K).contiguous()
        gdn.step_inplace(pool, idx, mixed, t["a"], t["b"], x["A_log"], per_channel, o)
    with pytest.raises(TypeError, match="idx"):
        gdn.flush_inplace(pool, idx.long(), flush_inputs.make("random", 1)["q0"])
    with pytest.raises(ValueError, match="state"):
        gdn.write_state(pool, idx, torch.zeros(2, H, K, V), flush_inputs.make("random", 1)["q0"])


def test_per_head_gate_shapes_of_the_request_harness():
    # a [N, H, 1] and dt_bias [H, 1] (the request's timing harness) are the [N, H] and [H] ones
    pools = [_filled(heads=8)[0] for _ in range(2)]
    x = gdn_inputs.make_step("random", 1, heads=8)
    idx = torch.tensor([3, 0, 1], dtype=torch.int32)
    t = gdn_checks.tokens(3, "cpu", 8, heads=8)
    outs = [torch.empty(3, 8, V, dtype=torch.bfloat16) for _ in pools]
    gdn.step_inplace(pools[0], idx, gdn_checks.mixed_rows(t), t["a"], t["b"], x["A_log"], x["dt_bias"], outs[0])
    gdn.step_inplace(pools[1], idx, gdn_checks.mixed_rows(t), t["a"][..., None], t["b"], x["A_log"],
                     x["dt_bias"][:, None], outs[1])
    assert same_bits(outs[0], outs[1]) and bool(torch.isfinite(outs[0].float()).all())
    for n in POOL_TENSORS:
        assert same_bits(getattr(pools[0], n), getattr(pools[1], n)), n
    assert not same_bits(pools[0].hcnt, _filled(heads=8)[0].hcnt)  # the step did advance


# --- the portable kernels under Triton's interpreter (a subprocess) ---------------------------


@pytest.fixture(scope="module")
def verdicts():
    pytest.importorskip("triton")
    return interpreted_verdicts("interpreted_gdn.py", timeout=600)


@pytest.mark.interpreter
@pytest.mark.parametrize("case", [f"{f}_b{b}" for f in gdn_inputs.STEP_FAMILIES for b in (1, 2)])
def test_interpreted_step_meets_the_criterion(verdicts, case):
    v = verdicts["step"][case]
    assert verdicts["interpreted"]
    assert v["ok"] and v["worst"] <= 1.0 and v["inputs_unchanged"], v


@pytest.mark.interpreter
@pytest.mark.parametrize("case", [f"{f}_b{b}" for f in gdn_inputs.FLUSH_FAMILIES for b in (1, 2)])
def test_interpreted_flush_meets_the_criterion(verdicts, case):
    v = verdicts["flush"][case]
    assert v["ok"] and v["batch_head"] <= 1.01 and v["well_formed"] and v["inputs_unchanged"], v


@pytest.mark.interpreter
def test_interpreted_flush_routes_by_the_gate_product(verdicts):
    # below ORTHONORMAL_QK_BELOW straight to the reference's path, at or above it the unit-scaled
    # path alone (no program of these inputs is ill there)
    v = verdicts["routes"]
    assert v["calls"] == v["expected"], v


@pytest.mark.interpreter
def test_interpreted_step_dead_window_rows_do_not_reach_the_outputs(verdicts):
    # NaN in every kbuf / ubuf / w row at or past h: the same bits out (p_new included)
    v = verdicts["dead_rows"]
    assert v["same"] and v["finite"], v


@pytest.mark.interpreter
@pytest.mark.parametrize("family", ["random", "structured"])
def test_interpreted_step_pool_form_matches_the_cpu_pool(verdicts, family):
    v = verdicts[f"pool_step_{family}"]
    assert v["ok"] and v["worst"] <= 1.0 and v["ok_vs_cpu"] and v["worst_vs_cpu"] <= 1.0, v
    assert v["zero_rows"] and v["advanced"] and v["flushed_read_as_empty"] and v["untouched"], v


@pytest.mark.interpreter
def test_interpreted_flush_pool_form_matches_the_cpu_pool(verdicts):
    v = verdicts["pool_flush"]
    assert v["ok"] and v["batch_head"] <= 1.01 and v["ok_vs_cpu"] and v["batch_head_vs_cpu"] <= 1.01, v
    assert v["reset"] and v["untouched"], v


@pytest.mark.interpreter
@pytest.mark.parametrize("heads", [8, 2])
def test_interpreted_step_keeps_and_counts_a_full_window(verdicts, heads):
    v = verdicts[f"full_window_{heads}"]
    assert v["kept"] and v["counted"] and v["zero_row"] and v["o_worst"] <= 1.0, v
