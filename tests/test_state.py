"""The state backend on CPU pools: the packed and request layouts, head counts, a pool on the
caller's tensors, the state in and out (write_state, read_state, copy_slots), the error counter
and misuse (a full window stepped again, out-of-domain states)."""

import pytest
import torch

import step_checks
from leapquant.eval import flush_criterion, step_inputs
from leapquant.kda import (ERROR_KINDS, H, K, L, R, V, Pool, copy_slots, decode, flush_inplace, read_state, state_specs,
                           step_inplace, write_state)
from leapquant.flush.naive import quantize, rebuild

FULL, OUT = ERROR_KINDS.index("full_window"), ERROR_KINDS.index("out_of_domain")


def _states(N, heads=H, seed=0, scale=1.0):
    g = torch.Generator().manual_seed(seed)
    # fla layout [N, H, K, V]: a low-rank part plus noise, as a prefill leaves it
    lo = torch.randn(N, heads, K, 3, generator=g) @ torch.randn(N, heads, 3, V, generator=g) * 0.1
    return (lo + 0.02 * torch.randn(N, heads, K, V, generator=g)) * scale


def _filled(layout="packed", heads=H, slots=6, seed=21):
    """A pool whose slots 1.. hold random-family checkpoints and windows at random fill counts."""
    pool = Pool(slots, "cpu", heads=heads, layout=layout)
    x = step_inputs.make("random", slots - 1, "cpu", seed)
    for name in step_checks.CKPT + step_checks.WIN:
        getattr(pool, name)[1:] = x[name][:, :heads]
    pool.hcnt[1:] = x["h"][:, :heads]
    return pool, x


def _token(n, heads, seed):
    tok = step_inputs.tokens(n, "cpu", seed)
    tok = {k: t[:, :heads].contiguous() for k, t in tok.items()}
    return step_checks.mixed_rows(tok), tok["a"], tok["b"]


def _same_pool(a: Pool, b: Pool, heads=slice(None)) -> bool:
    views = [(x[:, heads], y) for x, y in zip(a.checkpoint + a.window + (a.hcnt,), b.checkpoint + b.window + (b.hcnt,))]
    return all(step_checks.same_bits(x, y) for x, y in views)


def test_layouts_and_head_counts_hold_the_same_state():
    # the same calls on a packed pool, a request-layout pool and pools holding the first 16, 8, 4
    # heads of the same sequences leave the same bits (the CPU path; the kernels: GPU tests)
    pools = {("packed", H): _filled("packed")[0], ("request", H): _filled("request")[0]}
    for heads in (16, 8, 4):
        pools[("packed", heads)] = _filled("packed", heads)[0]
    x = step_inputs.make("random", 5, "cpu", 21)
    idx = torch.tensor([3, 0, 1, 5, -1], dtype=torch.int32)
    q0 = torch.randn(V, R, generator=torch.Generator().manual_seed(3))
    for t in range(3):
        for (layout, heads), pool in pools.items():
            mixed, a, b = _token(idx.numel(), heads, seed=40 + t)
            o = torch.empty(idx.numel(), heads, V, dtype=torch.bfloat16)
            step_inplace(pool, idx, mixed, a, b, x["A_log"][:heads], x["dt_bias"][:heads].contiguous(), o)
            pool.hcnt[3] = L  # slot 3 due every token
            flush_inplace(pool, idx, q0)
    ref = pools[("packed", H)]
    assert _same_pool(ref, pools[("request", H)])
    for heads in (16, 8, 4):
        assert _same_pool(ref, pools[("packed", heads)], slice(0, heads)), heads


def test_state_specs_and_a_pool_on_the_callers_tensors():
    specs = state_specs(4, heads=8)
    assert specs["raw"] == (torch.float32, (4, 8, 19456 // 4), 0) and specs["gbuf"][2] == 1
    owned = {n: torch.full(shape, float(init), dtype=dt) for n, (dt, shape, init) in specs.items()}
    pool = Pool.from_tensors(**owned)
    assert (pool.num_slots, pool.heads, pool.layout) == (4, 8, "packed")
    # the views are the caller's memory
    pool.codes[2, 7, 5, 9] = 77
    assert owned["raw"].view(torch.int8)[2, 7, 5 * K + 9] == 77
    assert pool.kbuf.data_ptr() == owned["kbuf"].data_ptr() and pool.hcnt.data_ptr() == owned["hcnt"].data_ptr()
    # checked once, with the argument's name
    with pytest.raises(TypeError, match="kbuf"):
        Pool.from_tensors(**{**owned, "kbuf": owned["kbuf"].half()})
    with pytest.raises(ValueError, match="ubuf"):
        Pool.from_tensors(**{**owned, "ubuf": owned["ubuf"][:, :, :8]})
    with pytest.raises(ValueError, match="contiguous"):
        Pool.from_tensors(**{**owned, "w": owned["w"].transpose(0, 1).contiguous().transpose(0, 1)})
    with pytest.raises(ValueError, match="aligned"):
        Pool.from_tensors(**{**owned, "raw": torch.zeros(4 * 8 * 4864 + 1)[1:].view(4, 8, 4864)})
    with pytest.raises(ValueError, match="heads"):
        Pool.from_tensors(**{n: torch.full((4, 6, *shape[2:]), 0, dtype=dt) for n, (dt, shape, _) in specs.items()})
    with pytest.raises(TypeError, match="hcnt"):
        Pool.from_tensors(**{**owned, "hcnt": [0]})


def test_pool_rejects_unknown_layouts_and_head_counts():
    with pytest.raises(ValueError, match="layout"):
        Pool(2, "cpu", layout="dense")
    with pytest.raises(ValueError, match="heads"):
        Pool(2, "cpu", heads=12)
    with pytest.raises(TypeError, match="heads"):
        Pool(2, "cpu", heads=4.0)


@pytest.mark.parametrize("layout,heads", [("packed", H), ("request", H), ("packed", 4)])
def test_read_state_of_a_written_state_is_within_the_format_error(layout, heads):
    # the flush criterion on the decoded state: read_state(write_state(S)) against S, judged against
    # the fp32 reference compression (SPEC section 5: <= 1.01x its error, or <= 1e-3 mean|S|)
    N = 3
    pool = Pool(N + 2, "cpu", heads=heads, layout=layout)
    idx = torch.tensor([4, 0, 2, 1], dtype=torch.int32)
    state = torch.cat([_states(N, heads, seed=5)[:1], torch.full((1, heads, K, V), float("nan")), _states(2, heads, 6)])
    q0 = torch.randn(V, R, generator=torch.Generator().manual_seed(1))
    write_state(pool, idx, state, q0)
    got = read_state(pool, idx)
    assert got.shape == (4, heads, K, V) and got.dtype == torch.float32
    assert bool((got[1] == 0).all())  # padding reads as zeros
    live = torch.tensor([0, 2, 3])
    S = state[live].transpose(-1, -2).double()
    ref = decode(*quantize(state[live].transpose(-1, -2), q0), dtype=torch.float64)  # the fp32 reference
    err_c = (got[live].transpose(-1, -2).double() - S).abs().mean((-2, -1))
    err_r = (ref - S).abs().mean((-2, -1))
    assert flush_criterion.judge_form(err_c, err_r, S.abs().mean((-2, -1))).ok
    assert int(pool.errors.sum()) == 0  # the NaN state was padding: not stored, not counted


def test_read_state_is_the_live_windows_state():
    # after steps, read_state equals the rebuild over the entries below each fill count (fp64)
    pool, _ = _filled()
    pool.hcnt[2, ::3] = L  # flushed, empty windows ...
    pool.w[2, ::3] = 0
    pool.gbuf[2, ::3] = 1
    pool.pcum[2, ::3] = 0
    pool.kbuf[2, ::3] = float("nan")  # ... whose stale rows must not leak
    pool.ubuf[4, :, L - 1] = float("nan")  # and a dead row past a fill count below L
    pool.hcnt[4] = L - 1
    idx = torch.tensor([2, 4, 0, 5], dtype=torch.int32)
    got = read_state(pool, idx)
    slots = idx.clamp_min(0).long()
    h = pool.hcnt[slots].clamp_max(L)
    kb, ub, gb, w, pc = (t[slots] for t in pool.window)
    below = torch.arange(L) < h[..., None]
    on = below & (w != 0)  # a zero weight adds nothing (a flushed window's stale rows)
    S = rebuild(*(t[slots] for t in pool.checkpoint), torch.where(on[..., None], kb, 0), torch.where(on[..., None], ub, 0),
                torch.where(below[..., None], gb, 1), torch.where(on, w, 0), pc, torch.float64)
    S[2] = 0
    assert torch.isfinite(got).all()
    err = (got.transpose(-1, -2).double() - S).abs().max() / S.abs().max()
    assert float(err) < 1e-5, float(err)


@pytest.mark.parametrize("layout", ["packed", "request"])
def test_copy_slots_copies_each_program_bit_for_bit(layout):
    pool, _ = _filled(layout)
    before = step_checks.snapshot(pool)
    src = torch.tensor([1, 3, 0, 2], dtype=torch.int32)
    dst = torch.tensor([4, 1, 5, -1], dtype=torch.int32)  # (3 -> 1) reads 1 before (1 -> 4) writes it... and skips
    copy_slots(pool, src, dst)
    old = Pool(pool.num_slots, "cpu", layout=layout)
    for n in step_checks.POOL_TENSORS:
        getattr(old, n).copy_(before[n])
    for s, d in ((1, 4), (3, 1)):
        for a, b in zip(pool.checkpoint + pool.window + (pool.hcnt,), old.checkpoint + old.window + (old.hcnt,)):
            assert step_checks.same_bits(a[d], b[s]), (s, d)
    for slot in (0, 2, 3, 5):  # skipped pairs and sources: unchanged
        for a, b in zip(pool.checkpoint + pool.window + (pool.hcnt,), old.checkpoint + old.window + (old.hcnt,)):
            assert step_checks.same_bits(a[slot], b[slot]), slot
    with pytest.raises(ValueError, match="same length"):
        copy_slots(pool, src, dst[:2].contiguous())
    with pytest.raises(TypeError, match="dst"):
        copy_slots(pool, src, dst.long())


def test_a_full_window_stepped_again_is_kept_and_counted():
    # a step on a full window never flushed (packed layout): the window as it was, the program
    # counted, the output the step of the whole window
    v = step_checks.full_window_kept("cpu", step_inplace)
    assert v["kept"] and v["counted"] and v["zero_row"] and v["o_worst"] <= 1.0, v
    v = step_checks.full_window_kept("cpu", step_inplace, heads=4)
    assert v["kept"] and v["counted"] and v["o_worst"] <= 1.0, v


def test_seventeen_steps_without_a_flush():
    # the engine's misuse: 17 steps and no flush; the 17th leaves every window intact and counts
    # each program once; a flush then takes the full windows and the next step appends again
    pool = Pool(4, "cpu")
    N = 3
    idx = torch.tensor([1, 2, 3], dtype=torch.int32)
    q0 = torch.randn(V, R, generator=torch.Generator().manual_seed(2))
    write_state(pool, idx, _states(N, seed=9), q0)
    params = step_inputs.model_params("cpu")
    o = torch.empty(N, H, V, dtype=torch.bfloat16)
    for t in range(L):
        step_inplace(pool, idx, *_token(N, H, seed=60 + t), params["A_log"], params["dt_bias"], o)
    assert bool((pool.hcnt[1:] == L).all()) and int(pool.errors.sum()) == 0
    before = step_checks.snapshot(pool)
    step_inplace(pool, idx, *_token(N, H, seed=99), params["A_log"], params["dt_bias"], o)
    for n in step_checks.POOL_TENSORS:
        assert step_checks.same_bits(getattr(pool, n), before[n]), n
    assert pool.error_counts() == {"full_window": N * H, "out_of_domain": 0}
    flush_inplace(pool, idx, q0)
    step_inplace(pool, idx, *_token(N, H, seed=98), params["A_log"], params["dt_bias"], o)
    assert bool((pool.hcnt[1:] == 1).all()) and int(pool.errors[FULL]) == N * H


def test_request_layout_reads_a_full_window_as_empty():
    # the request's semantics: a fill count of L is "just flushed, empty", whatever w holds
    pool, _ = _filled("request")
    pool.hcnt[1] = L
    params = step_inputs.model_params("cpu")
    idx = torch.tensor([1], dtype=torch.int32)
    step_inplace(pool, idx, *_token(1, H, seed=3), params["A_log"], params["dt_bias"],
                 torch.empty(1, H, V, dtype=torch.bfloat16))
    assert bool((pool.hcnt[1] == 1).all()) and int(pool.errors.sum()) == 0


def test_out_of_domain_states_are_counted():
    pool = Pool(5, "cpu")
    state = _states(4, seed=3)
    state[0, 3, 5, 7] = float("inf")
    state[2, 0:2] *= 1e6  # two programs at |S| ~ 1e5
    state[3] = float("nan")  # padding below: not counted
    q0 = torch.randn(V, R, generator=torch.Generator().manual_seed(4))
    write_state(pool, torch.tensor([1, 2, 3, 0], dtype=torch.int32), state, q0)
    assert pool.error_counts() == {"full_window": 0, "out_of_domain": 3}


@pytest.mark.parametrize("chunks", [2, 4])
def test_chunked_prefill_through_read_state_tracks_fla(chunks):
    # an engine's chunked prefill (chunk -> write_state; the next chunk from read_state through
    # fla's recurrence with initial_state), then the decode loop: within the decode loop's band
    # (tests/test_step_pool.py: 5e-3 a window, 8e-3 the worst head) against fla's fp32 recurrence
    # over the whole prompt at once
    pytest.importorskip("fla.ops.kda.naive")
    from leapquant.eval.step_loop import decode_loop

    res = decode_loop(N=2, T=2 * L, prefill=64, device="cpu", seed=0, prefill_chunks=chunks)
    assert res["prefill_chunks"] == chunks
    assert max(res["window_rel"]) <= 5e-3 and max(res["window_worst_head"]) <= 8e-3, res
