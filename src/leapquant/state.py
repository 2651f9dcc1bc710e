"""The state in and out of a pool: ``write_state`` (an fp32 state into a slot: the hand-over from
a prefill), ``read_state`` (a slot's state as of now: prefix caching, a prompt prefilled in
chunks, preemption) and ``copy_slots`` (forking a sequence). All three run as PyTorch operations
on the pool's device with no host synchronisation (capturable in a CUDA graph) unless asked to
check values.

Source: LeapQuant (arXiv 2609.38166); NVlabs/kda requests conless-leapquant-kda-step and
conless-leapquant-kda-flush.
"""

from __future__ import annotations

import torch

from .flush.naive import quantize, rebuild, rebuild_scalar
from .format import check_q0, full_fp32_matmul
from .geometry import DOMAIN_LIMIT, ERROR_KINDS, K, L, V
from .pool import Pool, check_call, check_index_tensor, check_on_pool

WRITE_CHUNK = 64  # sequences write_state and read_state take at once (bounds their fp32 temporaries)
OUT_OF_DOMAIN = ERROR_KINDS.index("out_of_domain")


def _slots(idx: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    # (live [N] bool, slot ids [N] int64 with padding sent to slot 0, which nothing reads)
    live = idx > 0
    return live, torch.where(live, idx, 0).long()


def write_state(pool: Pool, idx: torch.Tensor, state: torch.Tensor, q0: torch.Tensor, check: bool = False) -> None:
    """Store fp32 recurrent states into the checkpoints of the slots ``idx`` and empty their
    windows: the hand-over from a prefill to the decode loop.

    ``state[i]`` is sequence ``i``'s state in flash-linear-attention's layout ``[NH, K, V]`` (the
    ``final_state`` of ``fla.ops.kda.chunk_kda``: key rows, value columns); this package's
    ``S[v, k]`` is its transpose. Each state is compressed as the flush compresses a rebuilt one
    (one round of subspace iteration from ``q0`` for the R = 4 Compensator Tokens, then the int8
    residual with its key and value scales), with the product path's departures
    (``flush.naive.quantize(S, q0, robust=True)``), on the pool's device. The windows of those
    slots are emptied: ``w = 0``, ``kbuf = ubuf = 0``, ``hcnt = 0``, and the gate (KDA: ``gbuf = 1``,
    ``pcum = 0``; GDN: ``p = 1``). The state of a GDN pool: ``fla.ops.gated_delta_rule``'s layout.
    Entries ``idx[i] <= 0`` are padding: nothing of theirs is stored, and no other slot changes.

    No host synchronisation and no allocation that depends on values: capturable in a CUDA graph.
    The domain is ``|S| < 1e4`` and finite: a state outside it is stored as it compresses and
    counted in ``pool.errors`` (``"out_of_domain"``, one count a program). ``check=True`` instead
    checks on the host first (synchronises) and raises.

    Args (``N = len(idx)``, ``NH = pool.heads``):
        pool: the ``Pool``.
        idx: int32 ``[N]``, contiguous, on the pool's device: slot ids.
        state: fp32 ``[N, NH, K, V]`` on the pool's device (any strides).
        q0: fp32 ``[V, R]``, contiguous, on the pool's device: the subspace iteration's start basis
            (independent columns: a Gaussian draw or orthonormal columns).
        check: check ``idx`` (``Pool.check_index``) and the live states' values on the host.

    Raises:
        TypeError: ``pool`` is not a Pool; ``idx`` not an int32 tensor; ``state`` or ``q0`` not
            an fp32 tensor.
        ValueError: wrong shapes, tensors on another device than the pool, a non-contiguous
            ``idx`` or ``q0``; with ``check``, a slot >= ``pool.num_slots`` or given twice, or a
            live state non-finite or with ``|S| >= 1e4``.

    Source: LeapQuant (arXiv 2609.38166); NVlabs/kda requests conless-leapquant-kda-step and
    conless-leapquant-kda-flush.
    """
    check_call(pool, idx)
    check_on_pool("state", state, torch.float32, (idx.shape[0], pool.heads, K, V), pool, dense=False)
    check_q0(q0, pool.device)
    live, slots = _slots(idx)
    if check:
        pool.check_index(idx)
        bad = int((~_in_domain(state[live])).sum())
        if bad:
            raise ValueError(f"{bad} (sequence, head) states are outside the domain (finite, |S| < {DOMAIN_LIMIT:g})")
    with full_fp32_matmul(), torch.no_grad():  # the compression's products in full fp32
        for start in range(0, idx.shape[0], WRITE_CHUNK):
            part = slice(start, start + WRITE_CHUNK)
            on = live[part][:, None]  # [n, 1]
            S = state[part].transpose(-1, -2)  # [n, NH, V, K]
            pool.errors[OUT_OF_DOMAIN : OUT_OF_DOMAIN + 1] += (~_in_domain(S) & on).sum(dtype=torch.int32)
            S = torch.where(on[..., None, None], S, 0.0)
            to = slots[part]
            for view, value in zip(pool.checkpoint, quantize(S, q0, robust=True)):
                _store(view, to, on, value)
            empty = [init for _, _, init in pool.family.window.values()]
            for view, value in zip((*pool.window, pool.hcnt), (*empty, 0)):
                _store(view, to, on, value)


def _store(t: torch.Tensor, to: torch.Tensor, on: torch.Tensor, value) -> None:
    # t[to] = value on the live rows; padding rows (sent to slot 0) write back what slot 0 holds
    old = t[to]
    t[to] = torch.where(on.view(-1, *[1] * (old.dim() - 1)), value, old)


def _in_domain(S: torch.Tensor) -> torch.Tensor:
    # [..., NH] whether each program's [.., a, b] state is finite with |S| < DOMAIN_LIMIT
    return (S.abs() < DOMAIN_LIMIT).flatten(-2).all(-1)  # NaN compares False


def read_state(pool: Pool, idx: torch.Tensor) -> torch.Tensor:
    """The states of the slots ``idx`` as of now, in flash-linear-attention's layout: the inverse
    of ``write_state``, for prefix caching, a prompt prefilled in several chunks (feed it to
    ``fla.ops.kda.chunk_kda(initial_state=...)``) or preemption.

    Each program's state is its checkpoint decayed by the window's summed log-gate plus the
    window's live entries, each decayed since it was appended:
    ``S = decode(checkpoint) * exp(pcum)[None, :] + sum_{j < h} w_j ubuf_j (kbuf_j * D_j)^T``,
    ``D_j = prod_{j < i < h} gbuf_i``, ``h = hcnt`` (a flushed window's weights are zero, so
    ``hcnt == L`` reads the same either way), in fp32, transposed to ``[K, V]``; a GDN pool's:
    ``S = p decode(checkpoint) + sum_{j < h} w_j ubuf_j kbuf_j^T`` (its weights already decayed). Rows of
    ``idx <= 0`` are zero. No host synchronisation: capturable in a CUDA graph.

    Args (``N = len(idx)``, ``NH = pool.heads``):
        pool: the ``Pool``.
        idx: int32 ``[N]``, contiguous, on the pool's device: slot ids (trusted, see
            ``Pool.check_index``).

    Returns: fp32 ``[N, NH, K, V]``, a new tensor on the pool's device.

    Raises:
        TypeError: ``pool`` is not a Pool; ``idx`` not an int32 tensor.
        ValueError: ``idx`` not 1-D, not contiguous or on another device.

    Source: LeapQuant (arXiv 2609.38166); NVlabs/kda request conless-leapquant-kda-flush (the
    rebuild of its section 4, step 2, over the live entries).
    """
    check_call(pool, idx)
    live, slots = _slots(idx)
    entries = torch.arange(L, device=pool.device)
    out = []
    with full_fp32_matmul(), torch.no_grad():
        for start in range(0, idx.shape[0], WRITE_CHUNK):
            part = slots[start : start + WRITE_CHUNK]
            win = {n: t[part] for n, t in zip(pool.family.window, pool.window)}
            below = entries < pool.hcnt[part][..., None]  # [n, NH, L]: the entries below the fill count
            on = below & (win["w"] != 0)  # those that add to the state (a flushed window's rows do not)
            kbuf = torch.where(on[..., None], win["kbuf"], 0)
            ubuf = torch.where(on[..., None], win["ubuf"], 0)
            w = torch.where(on, win["w"], 0)
            ckpt = (t[part] for t in pool.checkpoint)
            if pool.family.scalar_gate:  # the weights already decayed, the gate product p
                S = rebuild_scalar(*ckpt, kbuf, ubuf, w, win["p"], torch.float32)
            else:
                gbuf = torch.where(below[..., None], win["gbuf"], 1)
                S = rebuild(*ckpt, kbuf, ubuf, gbuf, w, win["pcum"], torch.float32)
            out.append(torch.where(live[start : start + WRITE_CHUNK, None, None, None], S, 0.0).transpose(-1, -2))
    if not out:
        return torch.zeros(0, pool.heads, K, V, device=pool.device)
    return torch.cat(out).contiguous()


def copy_slots(pool: Pool, src: torch.Tensor, dst: torch.Tensor) -> None:
    """Copy each source slot's whole state (every head's checkpoint, window and fill count) into
    the destination slot beside it, bit for bit: forking a sequence for parallel sampling or
    beam search. Pairs with ``src[i] <= 0`` or ``dst[i] <= 0`` are skipped. All sources are read
    before any destination is written. No host synchronisation: capturable in a CUDA graph.

    Args:
        pool: the ``Pool``.
        src, dst: int32 ``[N]``, contiguous, on the pool's device: slot ids (trusted: destinations
            must be distinct and below ``pool.num_slots``).

    Raises:
        TypeError: ``pool`` is not a Pool; ``src`` or ``dst`` not an int32 tensor.
        ValueError: ``src`` or ``dst`` not 1-D, not contiguous or on another device, or of
            different lengths.
    """
    check_call(pool, src, "src")
    check_index_tensor("dst", dst, pool)
    if src.shape != dst.shape:
        raise ValueError(f"src and dst must have the same length, got {src.shape[0]} and {dst.shape[0]}")
    pair = (src > 0) & (dst > 0)
    frm, to = torch.where(pair, src, 0).long(), torch.where(pair, dst, 0).long()
    regions = (pool.raw,) if pool.layout == "packed" else (pool.codes, pool.s_k, pool.s_v, pool.uq)
    for t in (*regions, *pool.window, pool.hcnt):
        t[to] = t[frm]
