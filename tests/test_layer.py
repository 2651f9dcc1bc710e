"""decode_inplace, the one call per layer and token: without a scope it is step_inplace then
flush_inplace (CPU, bit for bit); with an Overlap scope on CUDA (the flush on a side stream,
the last layer's deferred to the next token) the pools and outputs are the serial ones, bit for
bit, eagerly and replayed from a CUDA graph; the scope refuses misuse."""

import contextlib
import os

import pytest
import torch

import step_checks
from leapquant.eval import step_inputs
from leapquant.kda import H, L, R, V, Pool, flush_inplace, step_inplace
from leapquant.layer import FLUSH_GROUP, Overlap, decode_inplace, flush_group

requires_cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")


def _layers(device, n_layers=3, B=5, seed=1, stacked=False):
    """``n_layers`` pools of B sequences at staggered fill counts (sequence i at i * 3 mod L), and a
    token's inputs; ``stacked``: the pools as one ``Pool.layers`` stack."""
    pools = Pool.layers(n_layers, B + 1, device) if stacked else [Pool(B + 1, device) for _ in range(n_layers)]
    for layer, pool in enumerate(pools):
        x = step_inputs.make("random", B, device, seed + layer)
        for name in step_checks.CKPT + step_checks.WIN:
            getattr(pool, name)[1:] = x[name]
        pool.hcnt[1:] = ((torch.arange(B, device=device) * 3 + layer) % L).to(torch.int32)[:, None]
    tok = step_inputs.tokens(B, device, seed + 7)
    params = step_inputs.model_params(device)
    idx = torch.arange(1, B + 1, dtype=torch.int32, device=device)
    q0 = torch.randn(V, R, generator=torch.Generator(device=device).manual_seed(seed), device=device)
    return pools, (idx, step_checks.mixed_rows(tok), tok["a"], tok["b"], params["A_log"], params["dt_bias"]), q0


def _same(pools_a, pools_b):
    return all(step_checks.same_bits(getattr(a, n), getattr(b, n))
               for a, b in zip(pools_a, pools_b) for n in step_checks.POOL_TENSORS)


def test_without_a_scope_it_is_the_step_then_the_flush():
    pools, args, q0 = _layers("cpu", 1)
    ref, _, _ = _layers("cpu", 1)
    idx, mixed, a, b, A_log, dt_bias = args
    o, o_ref = (torch.empty(idx.numel(), H, V, dtype=torch.bfloat16) for _ in range(2))
    for _ in range(L + 2):  # every window fills and is flushed once
        decode_inplace(pools[0], idx, mixed, a, b, A_log, dt_bias, o, q0)
        step_inplace(ref[0], idx, mixed, a, b, A_log, dt_bias, o_ref)
        flush_inplace(ref[0], idx, q0)
        assert step_checks.same_bits(o, o_ref)
    assert _same(pools, ref) and int(pools[0].errors.sum()) == 0
    with pytest.raises(ValueError, match="q0"):  # checked before the step runs
        decode_inplace(pools[0], idx, mixed, a, b, A_log, dt_bias, o, q0[:64])
    with pytest.raises(ValueError, match="streams"):
        Overlap("cpu", streams=0)
    # a CPU scope: each call in turn, the same bits
    scope = Overlap("cpu")
    for _ in range(L):
        with scope:
            decode_inplace(pools[0], idx, mixed, a, b, A_log, dt_bias, o, q0, overlap=scope)
        step_inplace(ref[0], idx, mixed, a, b, A_log, dt_bias, o_ref)
        flush_inplace(ref[0], idx, q0)
        assert step_checks.same_bits(o, o_ref)
    assert _same(pools, ref)


def test_a_stack_flushes_several_layers_in_one_call_as_each_its_own():
    stacked, args, q0 = _layers("cpu", stacked=True)
    apart, _, _ = _layers("cpu")
    idx = args[0].clone()
    idx[1] = 0  # padding, both kinds
    idx[3] = -1
    stack = stacked[0].stack
    assert stack.num_slots == 3 * 6 and all(p.stack is stack and p.stack_layer == i for i, p in enumerate(stacked))
    assert stacked[1].raw.data_ptr() == stack.raw.data_ptr() + stacked[0].raw.nbytes  # views, in order
    ids = stacked[1].stack_ids(idx, 2)
    assert ids.dtype == torch.int32
    assert ids.tolist() == [6 + 1, 0, 6 + 3, 0, 6 + 5, 12 + 1, 0, 12 + 3, 0, 12 + 5]  # padding: 0, skipped
    for pool in stacked + apart:  # every window full, so that every live id's program is due
        pool.hcnt[1:] = L
    before = [p.w.clone() for p in stacked]
    flush_inplace(stack, stacked[0].stack_ids(idx, 2), q0)  # layers 0 and 1 in one call
    flush_inplace(stacked[2], idx, q0)
    for pool in apart:
        flush_inplace(pool, idx, q0)
    assert _same(stacked, apart)
    # slot 1 flushed (its window emptied), slot 2 (replaced by padding) not, in every layer
    assert all(b[1].any() and not p.w[1].any() and torch.equal(p.w[2], b[2]) for p, b in zip(stacked, before))
    with pytest.raises(ValueError, match="stack"):
        stacked[2].stack_ids(idx, 2)
    with pytest.raises(ValueError, match="stack"):
        apart[0].stack_ids(idx, 1)
    with pytest.raises(TypeError, match="int32"):
        stacked[0].stack_ids(idx.long(), 2)
    with pytest.raises(ValueError, match="num_layers"):
        Pool.layers(0, 6, "cpu")
    with pytest.raises(ValueError, match="group"):
        Overlap("cpu", group=0)


def test_the_scope_groups_where_a_group_fits_beside_the_steps_or_one_layer_fills_the_grid():
    # 132 SMs off CUDA, 32 heads: due programs a layer = N * 32 / 16
    assert [flush_group(n, 32, "cpu") for n in (1, 16, 17, 64, 128, 132, 256, 512)] == \
        [FLUSH_GROUP, FLUSH_GROUP, 1, 1, 1, FLUSH_GROUP, FLUSH_GROUP, FLUSH_GROUP]
    assert flush_group(64, 4, "cpu") == FLUSH_GROUP  # 16 due a layer at 4 heads


def test_the_scope_groups_consecutive_layers_of_one_stack_up_to_half_of_it():
    idx = torch.arange(1, 17, dtype=torch.int32)
    q0 = torch.zeros(V, R)
    scope = Overlap("cpu")  # (its choice of group is the same on any device: the calls decide)

    def joins(pending, pool, ids=idx):
        scope._pending = [(p, idx, q0) for p in pending]
        return scope._joins(pool, ids, q0)

    eight = Pool.layers(8, 17, "cpu", heads=4)
    assert joins(eight[:1], eight[1]) and joins(eight[:3], eight[3])
    assert not joins(eight[:4], eight[4])  # full: FLUSH_GROUP
    assert not joins(eight[:1], eight[2]) and not joins(eight[1:2], eight[1])  # not the next layer
    assert not joins(eight[:1], eight[1], idx.clone())  # other ids
    two = Pool.layers(2, 17, "cpu", heads=4)
    assert not joins(two[:1], two[1])  # at most half the stack: the deferred group never holds layer 0
    apart = [Pool(17, "cpu", heads=4) for _ in range(2)]
    assert not joins(apart[:1], apart[1])
    scope = Overlap("cpu", group=2)  # a group given is the caller's: kept even over the whole stack
    assert joins(two[:1], two[1])


@requires_cuda
@pytest.mark.gpu
@pytest.mark.parametrize("group,n_layers", [(1, 3), (2, 3), (3, 3), (2, 8)])
def test_overlap_gives_the_serial_bits_eagerly_and_from_a_graph(group, n_layers):
    # group > 1: the layers' pools as one stack, flushed `group` layers a launch; with 8 layers in
    # groups of 2, two group launches on the stack run at once on the two side streams
    serial, args, q0 = _layers("cuda", n_layers)
    eager, _, _ = _layers("cuda", n_layers, stacked=group > 1)
    graphed, _, _ = _layers("cuda", n_layers, stacked=group > 1)
    idx, mixed, a, b, A_log, dt_bias = args
    outs = {k: [torch.empty(idx.numel(), H, V, dtype=torch.bfloat16, device="cuda") for _ in serial]
            for k in ("serial", "eager", "graphed")}
    scope, scope_g = Overlap("cuda", group=group), Overlap("cuda", group=group)

    def token(pools, o, overlap):
        with overlap or contextlib.nullcontext():
            for pool, out in zip(pools, o):
                decode_inplace(pool, idx, mixed, a, b, A_log, dt_bias, out, q0, overlap=overlap)

    for _ in range(2):  # the graph is captured after eager tokens, as engines warm up
        token(serial, outs["serial"], None)
        token(eager, outs["eager"], scope)
        token(graphed, outs["graphed"], scope_g)
    graph = torch.cuda.CUDAGraph()
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side), torch.cuda.graph(graph, stream=side):
        token(graphed, outs["graphed"], scope_g)
    torch.cuda.current_stream().wait_stream(side)
    for t in range(2 * L):
        token(serial, outs["serial"], None)
        token(eager, outs["eager"], scope)
        graph.replay()
        torch.cuda.synchronize()
        for k in ("eager", "graphed"):
            assert all(step_checks.same_bits(x, y) for x, y in zip(outs["serial"], outs[k])), (k, t)
    scope.close()  # the last layer's deferred flush, now
    scope_g.close()
    torch.cuda.synchronize()
    assert _same(serial, eager) and _same(serial, graphed)
    assert all(int(p.errors.sum()) == 0 for p in eager + graphed)  # no step met a full window
    with pytest.raises(RuntimeError, match="outside"):
        decode_inplace(serial[0], idx, mixed, a, b, A_log, dt_bias, outs["serial"][0], q0, overlap=scope)
    with scope, pytest.raises(RuntimeError, match="already open"):
        scope.__enter__()



def _dropped_ids_keep_the_serial_bits() -> bool:
    # an eager engine may make a fresh idx every token and drop it after the calls; the last
    # layer's flush, deferred to the next scope, reads it then. The side stream is held back by a
    # sleep so that the flush runs after the next token's work on the current stream; the ids
    # live in an allocation of a size of their own, and every other block of that size is kept,
    # so that the next token's allocation of that size (zeros: no sequence) takes the dropped
    # block if the allocator lets it, and the deferred flush then skips its slots
    serial, args, q0 = _layers("cuda", 2)
    eager, _, _ = _layers("cuda", 2)
    idx, mixed, a, b, A_log, dt_bias = args
    o = [torch.empty(idx.numel(), H, V, dtype=torch.bfloat16, device="cuda") for _ in serial]
    scope = Overlap("cuda", streams=1, group=1)
    words = 300_007  # an odd size (1.2 MB)
    kept = []
    for _ in range(L + 1):  # every sequence's window fills in every layer, the last deferred
        for pool, out in zip(serial, o):
            decode_inplace(pool, idx, mixed, a, b, A_log, dt_bias, out, q0)
        with torch.cuda.stream(scope.sides[0]):
            torch.cuda._sleep(20_000_000)  # ~10 ms: queued before the deferred flush
        with scope:
            kept.append(torch.zeros(words, dtype=torch.int32, device="cuda"))  # the dropped ids' block, if free
            token_idx = torch.empty(words, dtype=torch.int32, device="cuda")[: idx.numel()]
            token_idx.copy_(idx)
            for pool, out in zip(eager, o):
                decode_inplace(pool, token_idx, mixed, a, b, A_log, dt_bias, out, q0, overlap=scope)
            del token_idx
    scope.close()
    torch.cuda.synchronize()
    return _same(serial, eager)


@requires_cuda
@pytest.mark.gpu
def test_ids_dropped_after_a_token_are_not_reused_before_its_deferred_flush_reads_them():
    assert _dropped_ids_keep_the_serial_bits()


@requires_cuda
@pytest.mark.gpu
@pytest.mark.skipif(os.environ.get("PYTORCH_NO_CUDA_MEMORY_CACHING", "0") != "0"
                    or "cudaMallocAsync" in os.environ.get("PYTORCH_CUDA_ALLOC_CONF", ""),
                    reason="needs the caching allocator's own reuse of a freed block")
def test_the_dropped_ids_check_sees_a_scope_that_does_not_hold_them(monkeypatch):
    # the check above can fail: without the side stream's hold on idx, its block is reused
    monkeypatch.setattr(torch.Tensor, "record_stream", lambda *args: None)
    assert not _dropped_ids_keep_the_serial_bits()
