"""The in-place calls as torch custom ops: a torch.compile'd module that calls step_inplace and
flush_inplace compiles to one graph (fullgraph: a graph break raises) and leaves the pool as the
eager calls do, bit for bit. On the CPU path (the ops are the same on CUDA)."""

import pytest
import torch

import step_checks
from leapquant.kda import H, L, R, V, Pool, flush_inplace, step_inplace


class DecodeLayer(torch.nn.Module):
    """A stand-in for an engine's KDA layer: a projection makes the (q | k | v) row, then the
    state's step and flush."""

    def __init__(self, pool: Pool, q0: torch.Tensor, params: dict):
        super().__init__()
        self.pool, self.q0 = pool, q0
        self.A_log, self.dt_bias = params["A_log"], params["dt_bias"]

    def forward(self, x, idx, a, b, o):
        mixed = (x * 2 - x).to(torch.bfloat16)  # some arithmetic of the model around the ops
        step_inplace(self.pool, idx, mixed, a, b, self.A_log, self.dt_bias, o)
        flush_inplace(self.pool, idx, self.q0)
        return o.float() * 2  # model arithmetic after them


def test_ops_are_registered_with_their_mutations():
    schema = str(torch.ops.leapquant.step_inplace.default._schema)
    for name in ("kbuf", "ubuf", "gbuf", "w", "pcum", "hcnt", "errors", "o"):
        assert f"!) {name}" in schema, name
    schema = str(torch.ops.leapquant.flush_inplace.default._schema)
    for name in ("raw", "gbuf", "w", "pcum"):
        assert f"!) {name}" in schema, name
    assert "!) kbuf" not in schema and "!) hcnt" not in schema  # read only


def test_compiled_module_calls_the_ops_without_a_graph_break():
    pools = [step_checks.stepped_pool("cpu")[0] for _ in range(2)]
    _, idx, mixed, a, b, A_log, dt_bias = step_checks.stepped_pool("cpu")
    for pool in pools:
        pool.hcnt[5] = L - 1  # slot 5's windows fill on the first token and are flushed by the second
    q0 = torch.randn(V, R, generator=torch.Generator().manual_seed(5))
    params = {"A_log": A_log, "dt_bias": dt_bias}
    eager, compiled = DecodeLayer(pools[0], q0, params), DecodeLayer(pools[1], q0, params)
    run = torch.compile(compiled, fullgraph=True, backend="inductor")
    x = mixed.float()
    for t in range(2):
        o_e = torch.empty(idx.numel(), H, V, dtype=torch.bfloat16)
        o_c = torch.empty_like(o_e)
        y_e = eager(x, idx, a, b, o_e)
        y_c = run(x, idx, a, b, o_c)
        assert step_checks.same_bits(o_e, o_c) and step_checks.same_bits(y_e, y_c)
    for name in step_checks.POOL_TENSORS:
        assert step_checks.same_bits(getattr(pools[0], name), getattr(pools[1], name)), name
    assert bool((pools[1].hcnt[5] == 1).all())  # filled, flushed, appended again
    with pytest.raises(Exception):  # the compiled graph calls the op: a wrong dtype still raises
        run(x, idx, a.float(), b, o_c)
