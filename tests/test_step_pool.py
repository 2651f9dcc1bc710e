"""The decode step's engine functions on a CPU Pool: step_inplace's semantics, write_state, and
the whole loop (write_state, then step_inplace + flush_inplace per token) against
flash-linear-attention's fp32-state recurrence (fla.ops.kda.naive.naive_recurrent_kda)."""

import pytest
import torch

import step_checks
from leapquant.format import decode
from leapquant.geometry import H, K, L, R, V
from leapquant.pool import Pool
from leapquant.kda import step_inplace, write_state

pytest.importorskip("fla.ops.kda.naive")
from leapquant.eval.step_loop import decode_loop  # noqa: E402


@pytest.mark.parametrize("family", ["random", "structured"])
def test_step_inplace_on_cpu_pool(family):
    v = step_checks.pool_form("cpu", step_inplace, family=family)
    assert v["ok"] and v["worst"] <= 1.0, v
    assert v["zero_rows"] and v["advanced"] and v["flushed_read_as_empty"] and v["untouched"], v


def _states(N, seed=0):
    g = torch.Generator().manual_seed(seed)
    # fla layout [N, H, K, V]: a low-rank part plus noise, as a prefill leaves it
    lo = torch.randn(N, H, K, 3, generator=g) @ torch.randn(N, H, 3, V, generator=g) * 0.1
    return lo + 0.02 * torch.randn(N, H, K, V, generator=g)


def test_write_state_compresses_and_empties_the_windows():
    pool, *_ = step_checks.stepped_pool("cpu")  # 6 slots with live windows everywhere
    before = step_checks.snapshot(pool)
    idx = torch.tensor([2, 0, 5], dtype=torch.int32)
    state = _states(3)
    state[1] = float("nan")  # idx 0: not read
    q0 = torch.randn(V, R, generator=torch.Generator().manual_seed(1))
    write_state(pool, idx, state, q0)
    for row, slot in ((0, 2), (2, 5)):
        S = state[row].transpose(-1, -2).double()
        D = decode(*(t[slot] for t in pool.checkpoint), dtype=torch.float64)
        # the flush's format: an int8 residual after a rank-4 fit, ~1% of mean|S| or better
        rel = ((D - S).abs().mean((-2, -1)) / S.abs().mean((-2, -1)))
        assert float(rel.max()) < 0.02, rel
        assert bool((pool.w[slot] == 0).all() and (pool.gbuf[slot] == 1).all() and (pool.pcum[slot] == 0).all())
        assert bool((pool.kbuf[slot] == 0).all() and (pool.ubuf[slot] == 0).all() and (pool.hcnt[slot] == 0).all())
    for slot in (0, 1, 3, 4):  # slots not written: every tensor as it was
        for name in ("kbuf", "ubuf", "gbuf", "w", "pcum", "hcnt"):
            assert step_checks.same_bits(getattr(pool, name)[slot], before[name][slot]), (slot, name)
        for view, old in zip(pool.checkpoint, step_checks._views(pool, before["raw"])):
            assert step_checks.same_bits(view[slot], old[slot]), slot


def test_write_state_rejects_bad_arguments():
    pool = Pool(3, "cpu")
    idx = torch.tensor([1, 2], dtype=torch.int32)
    q0 = torch.randn(V, R)
    state = torch.zeros(2, H, K, V)
    with pytest.raises(TypeError, match="state"):
        write_state(pool, idx, state.double(), q0)
    with pytest.raises(ValueError, match="state"):
        write_state(pool, idx, torch.zeros(2, H, V + 1, K), q0)
    with pytest.raises(TypeError, match="idx"):
        write_state(pool, idx.long(), state, q0)
    with pytest.raises(ValueError, match="q0"):
        write_state(pool, idx, state, q0.t())
    # the values of idx and state only where asked (check=True: a host synchronisation)
    with pytest.raises(ValueError, match="slot"):
        write_state(pool, torch.tensor([1, 3], dtype=torch.int32), state, q0, check=True)  # slot 3 of 3
    with pytest.raises(ValueError, match="more than once"):
        write_state(pool, torch.tensor([1, 1], dtype=torch.int32), state, q0, check=True)
    for bad in (float("nan"), 1e4):
        with pytest.raises(ValueError, match="outside the domain"):
            write_state(pool, idx, state.index_fill(0, torch.tensor([1]), bad), q0, check=True)
    # padding rows are not checked
    write_state(pool, torch.tensor([1, 0], dtype=torch.int32), state.index_fill(0, torch.tensor([1]), 1e30), q0,
                check=True)


# Measured on CPU (docs/benchmarks.md): per-window ||o - o_fla|| / ||o_fla|| 2.37e-3, 2.44e-3 (the
# bf16 output alone: 1.66e-3), worst (sequence, head) 2.9e-3, 3.0e-3; with slow gates 5.2e-3, 6.6e-3
# (worst head 5.6e-3, 7.5e-3), levelling off near 9e-3 after 8 windows. The bounds leave ~2x.
@pytest.mark.parametrize("bias_shift, rel_bound, head_bound, growth", [(0.0, 5e-3, 8e-3, 1.5), (-4.0, 1.5e-2, 2e-2, 2.0)],
                         ids=["model_gates", "slow_gates"])
def test_decode_loop_tracks_fla_recurrence(bias_shift, rel_bound, head_bound, growth):
    res = decode_loop(N=2, T=2 * L, prefill=64, device="cpu", seed=0, bias_shift=bias_shift)
    rel = res["window_rel"]
    assert res["prefill"] == "naive"  # chunk_kda needs a GPU (tests/test_step_gpu.py runs it)
    assert len(rel) == 2
    assert all(r == r for r in rel)  # finite
    assert max(rel) <= rel_bound, res
    assert max(res["window_worst_head"]) <= head_bound, res
    assert rel[-1] <= growth * rel[0], res  # no growth beyond the re-quantisation's
    # the compression's share is visible above the bf16 output's rounding, not swamped by it
    assert all(r >= f for r, f in zip(rel, res["rounding_rel"])), res


def test_prefill_methods():
    # the CPU prefill is naive_recurrent_kda's (o [T, N, H, V], state [N, H, K, V], fp32); an
    # unknown method is refused (chunk_kda's path: tests/test_step_gpu.py)
    from leapquant.eval import step_inputs
    from leapquant.eval.step_loop import fla_prefill, fla_recurrence, token_stream

    params = step_inputs.model_params("cpu")
    tok = token_stream(2, 8, "cpu", seed=4)
    o, S = fla_prefill(tok, params, "naive")
    o_ref, S_ref = fla_recurrence(tok, params, None)
    assert o.shape == (8, 2, H, V) and S.shape == (2, H, K, V) and S.dtype == torch.float32
    assert torch.equal(o, o_ref) and torch.equal(S, S_ref)
    with pytest.raises(ValueError, match="prefill method"):
        fla_prefill(tok, params, "fused")


def test_pool_names_the_kernels_it_runs():
    # a CPU pool runs the PyTorch paths; the step's kernel is chosen where the flush's is
    from leapquant.kernel import choose

    pool = Pool(2, "cpu")
    assert pool.kernel is None and pool.step_kernel is None
    assert choose("cpu", "step") == "triton" and choose("cpu") == "triton"
