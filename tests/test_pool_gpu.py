"""The state backend and the kernel choice on a CUDA device: both layouts and every head count
through both kernels, the state in and out without host synchronisation and under CUDA-graph
capture, the full-window guard, the chunked prefill against fla's chunk_kda, and the Gluon
kernels' self-check (forced to run, and forced to fail). Skipped without CUDA."""

import pytest
import torch

import step_checks
from leapquant.eval import flush_inputs, step_criterion, step_inputs
from leapquant.kda import (H, L, R, V, Pool, copy_slots, flush_inplace, read_state, reference, run, step, step_inplace,
                           write_state)
from leapquant import kernel as kernel_mod
from leapquant.eval.flush_criterion import evaluate

pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")]


def _runnable():
    return list(kernel_mod.runnable("cuda")) if torch.cuda.is_available() else ["triton"]


@pytest.fixture
def fresh_choice():
    """The kernel choice made again (its verdict is cached a process), before and after."""
    kernel_mod._gluon_verdict.cache_clear()
    kernel_mod._WARNED.clear()
    yield
    kernel_mod._gluon_verdict.cache_clear()


def test_self_check_forced_passes_and_the_gluon_kernels_run(monkeypatch, fresh_choice):
    if "gluon" not in _runnable():
        pytest.skip("the Gluon kernels do not run here")
    monkeypatch.setenv(kernel_mod.SELF_CHECK_VARIABLE, "1")
    pool = Pool(3, "cuda")
    assert (pool.kernel, pool.step_kernel) == ("gluon", "gluon"), pool.kernel_reason
    assert "passed their self-check" in pool.kernel_reason


def test_self_check_forced_to_fail_runs_the_portable_kernels_with_a_warning(monkeypatch, fresh_choice):
    if "gluon" not in _runnable():
        pytest.skip("the Gluon kernels do not run here")
    monkeypatch.setenv(kernel_mod.SELF_CHECK_VARIABLE, "fail")
    with pytest.warns(RuntimeWarning, match="portable Triton kernels run .* failed their self-check"):
        pool = Pool(3, "cuda", heads=4)
    assert (pool.kernel, pool.step_kernel) == ("triton", "triton")
    assert kernel_mod.choose("cuda", heads=4) == "triton"


def _stepped_pools(device):
    # the same sequences in a packed and a request-layout pool of 32 heads and packed pools of 16
    # and 4 (their first heads), at random fill counts with some windows full
    x = step_inputs.make("random", 5, device, 21)
    pools = {("packed", H): Pool(6, device), ("request", H): Pool(6, device, layout="request"),
             ("packed", 16): Pool(6, device, heads=16), ("packed", 4): Pool(6, device, heads=4)}
    for (_, heads), pool in pools.items():
        for name in step_checks.CKPT + step_checks.WIN:
            getattr(pool, name)[1:] = x[name][:, :heads]
        pool.hcnt[1:] = x["h"][:, :heads]
        pool.hcnt[2, ::2] = L
    return pools, x


@pytest.mark.parametrize("kernel", ["gluon", "triton"])
def test_layouts_and_head_counts_give_the_same_bits(kernel, monkeypatch):
    if kernel not in _runnable():
        pytest.skip(f"the {kernel} kernels do not run here")
    monkeypatch.setenv(kernel_mod.FORCE_VARIABLE, kernel)
    pools, x = _stepped_pools("cuda")
    idx = torch.tensor([3, 0, 2, 5, -1, 1], dtype=torch.int32, device="cuda")
    q0 = torch.randn(V, R, generator=torch.Generator(device="cuda").manual_seed(3), device="cuda")
    tok = step_inputs.tokens(idx.numel(), "cuda", 7)
    for _ in range(3):
        for (_, heads), pool in pools.items():
            t = {n: v[:, :heads].contiguous() for n, v in tok.items()}
            o = torch.empty(idx.numel(), heads, V, dtype=torch.bfloat16, device="cuda")
            flush_inplace(pool, idx, q0)
            step_inplace(pool, idx, step_checks.mixed_rows(t), t["a"], t["b"], x["A_log"][:heads].contiguous(),
                         x["dt_bias"][:heads].contiguous(), o)
    ref = pools[("packed", H)]
    tensors = lambda p: p.checkpoint + p.window + (p.hcnt,)  # noqa: E731
    for (layout, heads), pool in pools.items():
        for a, b in zip(tensors(ref), tensors(pool)):
            assert step_checks.same_bits(a[:, :heads], b), (layout, heads)


@pytest.mark.parametrize("heads", [16, 4])
@pytest.mark.parametrize("kernel", ["gluon", "triton"])
def test_every_accuracy_case_at_fewer_heads(heads, kernel, monkeypatch):
    # the flush's and the step's input families on their first `heads` heads (the edge-case heads
    # 1..8 of the structured families among them), through each kernel
    if kernel not in _runnable():
        pytest.skip(f"the {kernel} kernels do not run here")
    monkeypatch.setenv(kernel_mod.FORCE_VARIABLE, kernel)
    for family in flush_inputs.FAMILIES:
        x = {n: t if n == "q0" else t[:, :heads].contiguous() for n, t in flush_inputs.make(family, 4, "cuda", 11).items()}
        res = evaluate(x, run(**x), flush_inputs.chunked(reference, x))
        assert res["ok"], (family, res["batch_head"].worst_ratio)
    for family in step_inputs.FAMILIES:
        x = step_inputs.make(family, 8, "cuda", 11)
        x = {n: t[:heads].contiguous() if n in ("A_log", "dt_bias") else t[:, :heads].contiguous() for n, t in x.items()}
        ok, worst = step_criterion.judge(step(**x), x)
        assert ok, (family, worst)


@pytest.mark.parametrize("kernel", ["gluon", "triton"])
@pytest.mark.parametrize("heads", [H, 4])
def test_a_full_window_stepped_again_is_kept_and_counted(kernel, heads):
    if kernel not in _runnable():
        pytest.skip(f"the {kernel} kernels do not run here")
    v = step_checks.full_window_kept("cuda", lambda *a: step_checks.kernel_inplace(*a, kernel=kernel), heads=heads)
    assert v["kept"] and v["counted"] and v["zero_row"] and v["o_worst"] <= 1.0, v


def _states(N, device, seed=0):
    g = torch.Generator(device=device).manual_seed(seed)
    lo = torch.randn(N, H, 128, 3, generator=g, device=device) @ torch.randn(N, H, 3, V, generator=g, device=device)
    return lo * 0.1 + 0.02 * torch.randn(N, H, 128, V, generator=g, device=device)


def test_the_hot_path_never_synchronises_and_captures():
    pool, idx, mixed, a, b, A_log, dt_bias = step_checks.stepped_pool("cuda")
    q0 = torch.randn(V, R, device="cuda")
    o = torch.empty(idx.numel(), H, V, dtype=torch.bfloat16, device="cuda")
    state = _states(idx.numel(), "cuda")
    src = torch.tensor([1, 2, 0], dtype=torch.int32, device="cuda")
    dst = torch.tensor([4, 3, 5], dtype=torch.int32, device="cuda")
    calls = (lambda: step_inplace(pool, idx, mixed, a, b, A_log, dt_bias, o), lambda: flush_inplace(pool, idx, q0),
             lambda: write_state(pool, idx, state, q0), lambda: read_state(pool, idx),
             lambda: copy_slots(pool, src, dst))
    step_checks.run_without_sync(calls)
    # write_state, read_state and copy_slots captured in a CUDA graph: the eager bits on replay
    eager = Pool(pool.num_slots, "cuda")
    for name in step_checks.POOL_TENSORS:
        getattr(eager, name).copy_(getattr(pool, name))
    read_eager = read_state(eager, idx)
    write_state(eager, idx, state * 2, q0)
    copy_slots(eager, src, dst)
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    graph = torch.cuda.CUDAGraph()
    state2 = state * 2
    with torch.cuda.stream(side), torch.cuda.graph(graph, stream=side):
        read_graph = read_state(pool, idx)
        write_state(pool, idx, state2, q0)
        copy_slots(pool, src, dst)
    graph.replay()
    torch.cuda.synchronize()
    assert step_checks.same_bits(read_graph, read_eager)
    for name in step_checks.POOL_TENSORS:
        assert step_checks.same_bits(getattr(pool, name), getattr(eager, name)), name


@pytest.mark.parametrize("chunks", [2, 4])
def test_chunked_prefill_with_chunk_kda_tracks_fla(chunks):
    pytest.importorskip("fla.ops.kda")
    from leapquant.eval.step_loop import decode_loop

    res = decode_loop(N=4, T=2 * L, prefill=128, device="cuda", seed=0, prefill_chunks=chunks)
    assert res["prefill"] == "chunk" and res["prefill_chunks"] == chunks
    assert max(res["window_rel"]) <= 5e-3 and max(res["window_worst_head"]) <= 8e-3, res


def test_pool_memory_is_half_an_fp32_state():
    pool = Pool(9, "cuda")
    per_slot = pool.nbytes / pool.num_slots
    assert per_slot <= 1.04e6 and per_slot <= 0.5 * H * 128 * V * 4, per_slot
