"""The decode step's fp32 reference and CPU path against the fp64 formula, through the element-wise
criterion; the factor formulation; the criterion's power to fail; the engine's argument checks."""

import pytest
import torch

from leapquant.eval import step_criterion, step_inputs
from leapquant.geometry import H, K, L, V
from leapquant.pool import Pool
from leapquant.step import naive
from leapquant.kda import step, step_inplace
from leapquant.format import MIXED_WIDTH

B = 4
STATE_ARGS = ("codes", "s_k", "s_v", "u", "q", "kbuf", "ubuf", "w")


@pytest.fixture(scope="module", params=step_inputs.FAMILIES)
def case(request):
    return request.param, step_inputs.make(request.param, B, "cpu", seed=3)


@pytest.mark.parametrize("fn", [naive.step_reference, naive.step_cpu, step], ids=["reference", "cpu_products", "engine"])
def test_step_meets_criterion(case, fn):
    fam, x = case
    out = fn(**x)
    ok, worst = step_criterion.judge(out, x)
    assert ok and worst <= 1.0, (fam, step_criterion.worst_by_output(out, x))


def test_outputs_have_the_format(case):
    _, x = case
    o, k_row, u_row, g_row, w_new, pcum_new = naive.step_reference(**x)
    assert o.dtype == u_row.dtype == k_row.dtype == torch.bfloat16 and g_row.dtype == torch.float16
    assert w_new.dtype == pcum_new.dtype == torch.float32
    assert o.shape == u_row.shape == (B, H, V) and k_row.shape == g_row.shape == pcum_new.shape == (B, H, K)
    assert w_new.shape == (B, H, L)
    hot = torch.arange(L) == x["h"].unsqueeze(-1)
    assert bool((w_new[hot] == 1).all()) and torch.equal(w_new[~hot], x["w"][~hot])


def _fp64_phases(x):
    f64 = torch.float64
    qn, kn = naive.normalize_qk(x["qx"], x["kx"], f64)
    g, en, _ = naive.gate(x["a"], x["b"], x["A_log"], x["dt_bias"], f64)
    pc = torch.exp(x["pcum"].double() + g)
    D = naive.entry_decay(x["gbuf"], en, x["h"], f64)
    return qn, kn, pc, D


def test_step_products_match_the_state_in_fp64(case):
    _, x = case
    qn, kn, pc, D = _fp64_phases(x)
    S = naive.state_before_update(*(x[n] for n in STATE_ARGS), pc, D, torch.float64)
    want = torch.einsum("...vk,...pk->...pv", S, torch.stack((kn, qn), -2))
    got = naive.step_products(*(x[n] for n in STATE_ARGS), pc, D, torch.stack((kn, qn), -2), torch.float64)
    # scale: the same products on absolute values; fp64 rounding is ~1e-16 of it
    Sa = naive.state_before_update(*(x[n].abs() for n in STATE_ARGS), pc, D, torch.float64)
    mag = torch.einsum("...vk,...pk->...pv", Sa, torch.stack((kn, qn), -2).abs())
    assert bool(((got - want).abs() <= 1e-12 * mag).all())


def test_entry_decay_follows_its_definition():
    g = torch.Generator().manual_seed(0)
    gbuf = (0.5 + 0.5 * torch.rand(3, L, K, generator=g)).half()
    en = torch.rand(3, K, generator=g, dtype=torch.float64)
    h = torch.tensor([0, 5, L - 1])
    D = naive.entry_decay(gbuf, en, h, torch.float64)
    for b in range(3):
        for j in range(L):
            want = en[b].clone() if j < h[b] else torch.zeros(K, dtype=torch.float64)
            for i in range(j + 1, int(h[b])):
                want = want * gbuf[b, i].double()
            assert torch.allclose(D[b, j], want, rtol=1e-14, atol=0), (b, j)


def test_window_rows_past_the_fill_count_are_not_read():
    x = step_inputs.make("random", 2, "cpu", seed=4)
    y = {n: t.clone() for n, t in x.items()}
    dead = torch.arange(L) >= x["h"].unsqueeze(-1)  # [B, H, L]
    for name in ("kbuf", "ubuf", "gbuf"):
        y[name][dead] = float("nan")
    y["w"][dead] = float("inf")
    for fn in (naive.step_reference, naive.step_cpu):
        a, b = fn(**x), fn(**y)
        for i, (ta, tb) in enumerate(zip(a, b)):
            if i == 4:  # w_new keeps the dead entries as they were
                ta, tb = ta[~dead], tb[~dead]
            assert torch.equal(ta, tb), (fn.__name__, naive.OUTPUTS[i])


def _degraded(x, damage):
    # the step with one departure from its definition
    qn, kn = naive.normalize_qk(x["qx"], x["kx"])
    g, en, beta = naive.gate(x["a"], x["b"], x["A_log"], x["dt_bias"])
    pcum_new = x["pcum"] + g
    D = naive.entry_decay(x["gbuf"], en, x["h"])
    S = naive.state_before_update(*(x[n] for n in STATE_ARGS), torch.exp(pcum_new), D)
    if damage == "state_bf16":
        S = S.bfloat16().float()
    elif damage == "beta_unrounded":
        beta = torch.sigmoid(x["b"].float())
    Skn, Sqn = torch.einsum("...vk,...k->...v", S, kn), torch.einsum("...vk,...k->...v", S, qn)
    u_new, o = naive.update_and_output(Skn, Sqn, kn, qn, x["vx"].float(), beta)
    ref = naive.step_reference(**x)
    return (o.bfloat16(), ref[1], u_new.bfloat16(), *ref[3:])


@pytest.mark.parametrize("damage", ["state_bf16", "beta_unrounded"])
@pytest.mark.parametrize("family", step_inputs.FAMILIES)
def test_criterion_rejects_a_degraded_step(family, damage):
    # measured worst error / tolerance: 15-36 (bf16 state), 2.3-20 (beta not rounded)
    x = step_inputs.make(family, 2, "cpu", seed=5)
    ok, worst = step_criterion.judge(_degraded(x, damage), x)
    assert not ok and worst > 1.5, worst


def test_criterion_rejects_nonfinite_and_wrong_weights():
    x = step_inputs.make("random", 1, "cpu", seed=6)
    out = list(naive.step_reference(**x))
    bad = [t.clone() for t in out]
    bad[5][0, 0, 0] = float("nan")
    assert not step_criterion.judge(bad, x)[0]
    bad = [t.clone() for t in out]
    bad[4][0, 0] = 0.5
    assert not step_criterion.judge(bad, x)[0]
    assert step_criterion.judge(out, x)[0]


def test_half_step():
    y = torch.tensor([1.0, 1.5, 2.0, 0.0, 2.0**-130], dtype=torch.float64)
    assert step_criterion.half_step(y, torch.bfloat16).tolist() == [2.0**-8, 2.0**-8, 2.0**-7, 0.0, 2.0**-134]
    assert step_criterion.half_step(torch.tensor([1.0, 2.0**-20], dtype=torch.float64), torch.float16).tolist() == [
        2.0**-11, 2.0**-25]


def test_beta_is_sigmoid_rounded_once_to_bf16():
    import step_checks

    b = step_checks.all_bf16()
    s = torch.sigmoid(b.double())
    beta = naive.beta_bf16(b)
    # beta is a bf16 value, and no bf16 value is nearer to sigmoid(b) (a tie goes to the even one)
    assert torch.equal(beta.bfloat16().double(), beta)
    bits = beta.float().view(torch.int32)
    up = ((bits >> 16) + 1 << 16).view(torch.float32).double()
    down = ((bits >> 16) - 1 << 16).view(torch.float32).double()
    err = (beta - s).abs()
    assert bool((err <= (up - s).abs()).all() and (err <= (down - s).abs()).all())
    tie = (err == (up - s).abs()) | (err == (down - s).abs())
    assert bool(((bits[tie] >> 16) % 2 == 0).all())
    # the subnormal grid below bf16's smallest normal
    tiny = torch.tensor([3 * 2.0**-134, 2.0**-140], dtype=torch.float64)
    assert naive.round_bf16_exact(tiny).tolist() == [2 * 2.0**-133, 0.0]


def test_next_step_family_appends_the_outputs():
    first = step_inputs.structured(2, "cpu", 3)
    out = naive.step_reference(**first)
    nxt = step_inputs.next_step(first, out, seed=9)
    h0 = first["h"]
    assert torch.equal(nxt["h"], torch.where(h0 < L - 1, h0 + 1, h0))
    bi, hi = torch.arange(2)[:, None], torch.arange(H)[None, :]
    assert torch.equal(nxt["kbuf"][bi, hi, h0.long()], out[1]) and torch.equal(nxt["ubuf"][bi, hi, h0.long()], out[2])
    assert torch.equal(nxt["gbuf"][bi, hi, h0.long()], out[3])
    assert torch.equal(nxt["w"], out[4]) and torch.equal(nxt["pcum"], out[5])
    assert torch.equal(nxt["codes"], first["codes"]) and not torch.equal(nxt["qx"], first["qx"])


# ------------------------------------------------------------------ argument checks


def test_step_rejects_bad_inputs():
    x = step_inputs.make("random", 1, "cpu", seed=7)

    def call(**over):
        return step(**{**x, **over})

    with pytest.raises(TypeError, match="codes"):
        call(codes=x["codes"].float())
    with pytest.raises(TypeError, match="qx"):
        call(qx=x["qx"].float())
    with pytest.raises(TypeError, match="h"):
        call(h=x["h"].long())
    with pytest.raises(TypeError, match="b must be a torch.Tensor"):
        call(b=0.5)
    with pytest.raises(ValueError, match="vx"):
        call(vx=x["vx"][..., :64])
    with pytest.raises(ValueError, match="A_log"):  # 16 heads take 16 heads' parameters
        call(**{n: x[n][:, :16] for n in step_inputs.STEP_ARGS if n not in ("A_log", "dt_bias")})
    with pytest.raises(ValueError, match="head counts disagree"):
        call(vx=x["vx"][:, :16])
    with pytest.raises(ValueError, match="heads"):  # 12 is no head count a pool holds
        call(**{n: x[n][:, :12] for n in step_inputs.STEP_ARGS if n not in ("A_log", "dt_bias")},
             A_log=x["A_log"][:12], dt_bias=x["dt_bias"][:12])
    with pytest.raises(ValueError, match="batch sizes"):
        call(a=torch.cat([x["a"], x["a"]]))
    with pytest.raises(ValueError, match="A_log"):
        call(A_log=x["A_log"][:16])
    with pytest.raises(TypeError, match="dt_bias"):
        call(dt_bias=x["dt_bias"].half())
    with pytest.raises(ValueError, match="h must lie"):
        call(h=torch.full_like(x["h"], L))
    with pytest.raises(ValueError, match="h must lie"):
        call(h=torch.full_like(x["h"], -1))


def test_step_does_not_depend_on_memory_layout():
    x = step_inputs.make("random", 2, "cpu", seed=8)
    y = dict(x)
    y["qx"] = x["qx"].transpose(0, 1).contiguous().transpose(0, 1)  # same values, other strides
    y["codes"] = x["codes"].transpose(-1, -2).contiguous().transpose(-1, -2)
    assert not y["qx"].is_contiguous() and not y["codes"].is_contiguous()
    for a, b in zip(step(**x), step(**y)):
        assert torch.equal(a, b)


def test_step_inplace_rejects_bad_inputs():
    pool = Pool(3, "cpu")
    n = 2
    idx = torch.tensor([1, 2], dtype=torch.int32)
    p = step_inputs.model_params()
    args = dict(pool=pool, idx=idx, mixed=torch.zeros(n, MIXED_WIDTH, dtype=torch.bfloat16),
                a=torch.zeros(n, H, K, dtype=torch.bfloat16), b=torch.zeros(n, H, dtype=torch.bfloat16),
                A_log=p["A_log"], dt_bias=p["dt_bias"], o=torch.empty(n, H, V, dtype=torch.bfloat16))

    def call(**over):
        return step_inplace(**{**args, **over})

    call()  # the arguments as they are are fine
    with pytest.raises(TypeError, match="pool"):
        call(pool=object())
    with pytest.raises(TypeError, match="idx"):
        call(idx=idx.long())
    with pytest.raises(ValueError, match="1-D"):
        call(idx=idx[:, None])
    with pytest.raises(ValueError, match="contiguous"):
        call(idx=torch.tensor([1, 0, 2, 0], dtype=torch.int32)[::2])
    with pytest.raises(ValueError, match="mixed"):
        call(mixed=torch.zeros(n, MIXED_WIDTH - 1, dtype=torch.bfloat16))
    with pytest.raises(ValueError, match="mixed"):
        call(mixed=torch.zeros(n + 1, MIXED_WIDTH, dtype=torch.bfloat16))
    with pytest.raises(ValueError, match="unit inner stride"):
        call(mixed=torch.zeros(MIXED_WIDTH, n, dtype=torch.bfloat16).t())
    with pytest.raises(TypeError, match="mixed"):
        call(mixed=torch.zeros(n, MIXED_WIDTH))
    with pytest.raises(TypeError, match="a must have dtype"):
        call(a=torch.zeros(n, H, K))
    with pytest.raises(ValueError, match="b must have shape"):
        call(b=torch.zeros(n, H + 1, dtype=torch.bfloat16))
    with pytest.raises(TypeError, match="o must have dtype"):
        call(o=torch.empty(n, H, V))
    with pytest.raises(ValueError, match="o must be contiguous"):
        call(o=torch.empty(n, V, H, dtype=torch.bfloat16).transpose(1, 2))
    with pytest.raises(ValueError, match="dt_bias"):
        call(dt_bias=p["dt_bias"].t())
    with pytest.raises(TypeError, match="pool must be"):
        call(pool="not a pool")
    mixed_wide = torch.zeros(n, MIXED_WIDTH + 64, dtype=torch.bfloat16)[:, :MIXED_WIDTH]  # a row stride > width
    call(mixed=mixed_wide)


def test_step_inplace_equals_the_functional_step():
    # the pool form on CPU is the functional step on the slots' contents, bit for bit
    x = step_inputs.make("structured", 2, "cpu", seed=10)
    pool = Pool(3, "cpu")
    for name in ("codes", "s_k", "s_v", "u", "q", "kbuf", "ubuf", "gbuf", "w", "pcum"):
        getattr(pool, name)[1:] = x[name]
    pool.hcnt[1:] = x["h"]
    idx = torch.tensor([2, 1], dtype=torch.int32)
    perm = idx.long() - 1
    mixed = torch.cat([x[n][perm].reshape(2, -1) for n in ("qx", "kx", "vx")], -1)
    o = torch.empty(2, H, V, dtype=torch.bfloat16)
    step_inplace(pool, idx, mixed, x["a"][perm], x["b"][perm], x["A_log"], x["dt_bias"], o)
    want = step(**{n: (t[perm] if n not in ("A_log", "dt_bias") else t) for n, t in x.items()})
    assert torch.equal(o, want[0])
    h = x["h"][perm].long()
    bi, hi = (idx.long())[:, None], torch.arange(H)[None, :]
    assert torch.equal(pool.kbuf[bi, hi, h], want[1]) and torch.equal(pool.ubuf[bi, hi, h], want[2])
    assert torch.equal(pool.gbuf[bi, hi, h], want[3]) and torch.equal(pool.w[idx.long()], want[4])
    assert torch.equal(pool.pcum[idx.long()], want[5]) and torch.equal(pool.hcnt[idx.long()], x["h"][perm] + 1)

