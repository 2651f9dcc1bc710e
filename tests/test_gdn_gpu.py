"""GDN (Gated DeltaNet) on a CUDA device: each runnable kernel (Gluon on Hopper, the portable one)
in functional form on every family at B = 1 and 64, the pool forms against the CPU pool path, the
full-window guard, a CUDA-graph capture of the step and the flush, and the hot path without a host
synchronisation. Skipped without CUDA. Sources: NVlabs/kda requests conless-leapquant-gdn-step and
conless-leapquant-gdn-flush."""

import pytest
import torch

import gdn_checks
import step_checks
from gdn_checks import POOL_TENSORS, same_bits
from leapquant import gdn
from leapquant import kernel as kernel_mod
from leapquant.eval import gdn_inputs
from leapquant.geometry import H, K, L, R, V

pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")]


def _skip_unless_runnable(kernel: str, op: str) -> None:
    if kernel not in kernel_mod.runnable("cuda", op):
        pytest.skip(f"the {kernel} {op} kernel does not run here")


@pytest.mark.parametrize("kernel", ["gluon", "triton"])
@pytest.mark.parametrize("family", gdn_inputs.STEP_FAMILIES)
@pytest.mark.parametrize("B", [1, 64])
def test_kernel_step_meets_the_criterion(family, B, kernel):
    _skip_unless_runnable(kernel, "step")
    v = gdn_checks.functional_step(family, B, "cuda", lambda x: gdn_checks.kernel_step(x, kernel))
    assert v["ok"] and v["worst"] <= 1.0 and v["inputs_unchanged"], v


@pytest.mark.parametrize("kernel", ["gluon", "triton"])
@pytest.mark.parametrize("family", gdn_inputs.FLUSH_FAMILIES)
@pytest.mark.parametrize("B", [1, 64])
def test_kernel_flush_meets_the_criterion(family, B, kernel):
    _skip_unless_runnable(kernel, "flush")
    v = gdn_checks.functional_flush(family, B, "cuda", lambda x: gdn_checks.kernel_flush(x, kernel))
    assert v["ok"] and v["batch_head"] <= 1.01 and v["well_formed"] and v["inputs_unchanged"], v


@pytest.mark.parametrize("kernel", ["gluon", "triton"])
def test_kernel_step_dead_window_rows_do_not_reach_the_outputs(kernel):
    _skip_unless_runnable(kernel, "step")
    v = gdn_checks.dead_rows_unused("cuda", lambda x: gdn_checks.kernel_step(x, kernel))
    assert v["same"] and v["finite"], v


@pytest.mark.parametrize("heads", [H, 4])
def test_engine_calls_on_cuda(heads):
    # gdn.step and gdn.run through the kernel kernel.decide picks, at 32 and 4 heads
    for family in gdn_inputs.STEP_FAMILIES:
        v = gdn_checks.functional_step(family, 16, "cuda", lambda x: gdn.step(**x), heads=heads)
        assert v["ok"] and v["inputs_unchanged"], (family, v)
    for family in gdn_inputs.FLUSH_FAMILIES:
        v = gdn_checks.functional_flush(family, 16, "cuda", lambda x: gdn.run(**x), heads=heads)
        assert v["ok"] and v["inputs_unchanged"], (family, v)


@pytest.mark.parametrize("kernel", ["gluon", "triton"])
@pytest.mark.parametrize("heads", [H, 4])
def test_pool_forms_match_the_cpu_pool(kernel, heads, monkeypatch):
    _skip_unless_runnable(kernel, "step")
    monkeypatch.setenv(kernel_mod.FORCE_VARIABLE, kernel)  # the pools built below run it
    for family in ("random", "structured"):
        v = gdn_checks.pool_step_form("cuda", gdn.step_inplace, heads=heads, family=family)
        assert v["ok"] and v["worst"] <= 1.0 and v["ok_vs_cpu"] and v["worst_vs_cpu"] <= 1.0, (family, v)
        assert v["zero_rows"] and v["advanced"] and v["flushed_read_as_empty"] and v["untouched"], (family, v)
    v = gdn_checks.pool_flush_form("cuda", gdn.flush_inplace, heads=heads)
    assert v["ok"] and v["batch_head"] <= 1.01 and v["ok_vs_cpu"] and v["batch_head_vs_cpu"] <= 1.01, v
    assert v["reset"] and v["untouched"], v


@pytest.mark.parametrize("kernel", ["gluon", "triton"])
@pytest.mark.parametrize("heads", [H, 4])
def test_a_full_window_stepped_again_is_kept_and_counted(kernel, heads):
    _skip_unless_runnable(kernel, "step")
    v = gdn_checks.full_window_kept("cuda", gdn_checks.kernel_step_inplace(kernel), heads=heads)
    assert v["kept"] and v["counted"] and v["zero_row"] and v["o_worst"] <= 1.0, v


def _cuda_case():
    cpu_pool, idx, mixed, a, b, A_log, dt_bias = gdn_checks.stepped_pool()
    pool = gdn_checks.copy_pool(cpu_pool, "cuda")
    q0 = gdn_inputs.make_flush("random", 1)["q0"].cuda()
    return pool, tuple(t.cuda() for t in (idx, mixed, a, b, A_log, dt_bias)), q0


def test_graph_capture_of_step_and_flush_replays_the_eager_bits():
    # step_inplace then flush_inplace (slot 3's heads reach L and are flushed) captured in a CUDA
    # graph and replayed: the same bits as the same calls made eagerly on a copy of the pool
    pool, (idx, mixed, a, b, A_log, dt_bias), q0 = _cuda_case()
    eager = gdn_checks.copy_pool(pool, "cuda")
    o_eager = torch.empty(idx.numel(), H, V, dtype=torch.bfloat16, device="cuda")
    gdn.step_inplace(eager, idx, mixed, a[..., None], b, A_log, dt_bias[:, None], o_eager)
    gdn.flush_inplace(eager, idx, q0)
    o = torch.empty_like(o_eager)
    graph = torch.cuda.CUDAGraph()
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side), torch.cuda.graph(graph, stream=side):
        gdn.step_inplace(pool, idx, mixed, a[..., None], b, A_log, dt_bias[:, None], o)
        gdn.flush_inplace(pool, idx, q0)
    graph.replay()
    torch.cuda.synchronize()
    assert same_bits(o, o_eager) and bool(torch.isfinite(o.float()).all())
    for name in POOL_TENSORS:
        assert same_bits(getattr(pool, name), getattr(eager, name)), name
    assert bool((pool.hcnt[3] == L).all()) and bool((pool.w[3] == 0).all() and (pool.p[3] == 1).all())  # flushed


def test_the_hot_path_never_synchronises():
    pool, (idx, mixed, a, b, A_log, dt_bias), q0 = _cuda_case()
    o = torch.empty(idx.numel(), H, V, dtype=torch.bfloat16, device="cuda")
    g = torch.Generator(device="cuda").manual_seed(0)
    state = 0.1 * torch.randn(idx.numel(), H, K, V, generator=g, device="cuda")
    src = torch.tensor([1, 2, 0], dtype=torch.int32, device="cuda")
    dst = torch.tensor([4, 3, 5], dtype=torch.int32, device="cuda")
    calls = (lambda: gdn.step_inplace(pool, idx, mixed, a, b, A_log, dt_bias, o),
             lambda: gdn.step_inplace(pool, idx, mixed, a[..., None], b, A_log, dt_bias[:, None], o),
             lambda: gdn.flush_inplace(pool, idx, q0), lambda: gdn.write_state(pool, idx, state, q0),
             lambda: gdn.read_state(pool, idx), lambda: gdn.copy_slots(pool, src, dst))
    step_checks.run_without_sync(calls)
    torch.cuda.synchronize()
    assert q0.shape == (V, R) and bool(torch.isfinite(gdn.read_state(pool, idx)).all())
