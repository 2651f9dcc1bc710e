"""What serving engines call: the functional ``run`` and the in-place ``flush_inplace``.

CUDA tensors go through the flush kernel that ``kernel.choose`` picks (Gluon on Hopper, the
portable Triton kernel elsewhere); CPU tensors through the fp32
PyTorch flush (``naive.flush_cpu``) with the same semantics. Source: LeapQuant (arXiv 2609.38166);
NVlabs/kda request conless-leapquant-kda-flush (SPEC section 7).
"""

from __future__ import annotations

import torch

from .format import CHECKPOINT_FIELDS, WINDOW_FIELDS, check_batch, check_q0
from .geometry import L
from .flush.naive import flush_cpu
from .pool import Pool


def run(codes, s_k, s_v, u, q, kbuf, ubuf, gbuf, w, pcum, q0):
    """Flush a batch of checkpoints: rebuild each state from its checkpoint and its full window,
    then compress it into a new checkpoint (SPEC section 4). Inputs are never modified.

    Args (``B`` sequences, ``H = 32`` heads, one device):
        codes: int8 ``[B, H, V, K]``; s_k: fp32 ``[B, H, K]``; s_v: fp32 ``[B, H, V]``;
        u: fp16 ``[B, H, R, K]``; q: fp16 ``[B, H, R, V]`` -- the old checkpoint.
        kbuf: bf16 ``[B, H, L, K]`` keys; ubuf: bf16 ``[B, H, L, V]`` value-side updates;
        gbuf: fp16 ``[B, H, L, K]`` per-channel decay of the step that appended entry j;
        w: fp32 ``[B, H, L]`` entry weights; pcum: fp32 ``[B, H, K]`` log-gate summed over
        the window (<= 0) -- the window.
        q0: fp32 ``[V, R]``, contiguous: start basis of the subspace iteration; its columns
            should be independent (a Gaussian draw or orthonormal columns).

    Returns:
        ``(codes, s_k, s_v, u, q)``: five new tensors, dtypes and shapes as the inputs'.

    Raises:
        TypeError: an argument is not a tensor or has the wrong dtype.
        ValueError: wrong shape or head count, batch sizes or devices that disagree,
            non-contiguous ``q0``.

    Example:
        >>> from leapquant.kda import run
        >>> from leapquant.eval import flush_inputs
        >>> x = flush_inputs.make("random", B=2)
        >>> codes, s_k, s_v, u, q = run(**x)

    Source: LeapQuant (arXiv 2609.38166); NVlabs/kda request conless-leapquant-kda-flush.
    """
    fields = dict(codes=codes, s_k=s_k, s_v=s_v, u=u, q=q, kbuf=kbuf, ubuf=ubuf, gbuf=gbuf, w=w, pcum=pcum)
    batch, device = check_batch(fields)
    check_q0(q0, device)
    # dense copies where needed: the result must not depend on the inputs' memory layout
    fields = {n: t.contiguous() for n, t in fields.items()}
    if device.type != "cuda":
        return flush_cpu(**fields, q0=q0)
    from .kernel import launch_flush

    ckpt_in = tuple(fields[n] for n in CHECKPOINT_FIELDS)
    window = tuple(fields[n] for n in WINDOW_FIELDS)
    ckpt_out = tuple(torch.empty_like(t) for t in ckpt_in)
    launch_flush(ckpt_in, ckpt_out, window, q0)
    return ckpt_out


def _check_index(pool: Pool, idx) -> None:
    if not isinstance(idx, torch.Tensor):
        raise TypeError(f"idx must be a torch.Tensor, got {type(idx).__name__}")
    if idx.dtype != torch.int32:
        raise TypeError(f"idx must have dtype torch.int32, got {idx.dtype}")
    if idx.dim() != 1:
        raise ValueError(f"idx must be 1-D, got shape {list(idx.shape)}")
    if idx.device != pool.device:
        raise ValueError(f"idx is on {idx.device}, but the pool is on {pool.device}")
    if not idx.is_contiguous():
        raise ValueError("idx must be contiguous")


def flush_inplace(pool: Pool, idx: torch.Tensor, q0: torch.Tensor) -> None:
    """Flush, in place, every program ``(slot, head)`` with ``slot`` in ``idx`` whose window is
    full (``pool.hcnt[slot, head] == L``).

    A flushed program gets its new checkpoint in ``pool.raw`` and its window reset (``w = 0``,
    ``gbuf = 1``, ``pcum = 0``); ``hcnt`` stays ``L`` (read by the decode step as "flushed,
    empty"). Every other program and slot is left bit-identical. Entries ``<= 0`` of ``idx``
    are skipped (0 = no sequence, -1 = a CUDA-graph pad slot).

    On CUDA: one kernel launch on the current stream, no host synchronisation, no compilation
    (the Pool compiled the kernel), capturable in a CUDA graph. ``idx`` values are trusted: an
    id >= ``pool.num_slots`` or a slot given twice is undefined behaviour; ``Pool.check_index``
    checks them on the host. Calls on one pool must be serial; use one pool per stream.
    On CPU: the same semantics through the fp32 PyTorch flush (``naive.flush_cpu``).
    A second call before the decode step appends an entry re-quantizes the flushed programs
    again (their ``hcnt`` is still ``L``): harmless once, lossy if repeated.

    Args:
        pool: the ``Pool``.
        idx: int32 ``[N]``, contiguous, on the pool's device: slot ids.
        q0: fp32 ``[V, R]``, contiguous, on the pool's device.

    Raises:
        TypeError: ``pool`` is not a Pool, ``idx`` is not an int32 tensor, ``q0`` not fp32.
        ValueError: ``idx`` not 1-D, not contiguous or on another device; ``q0`` of the
            wrong shape, not contiguous or on another device.

    Source: LeapQuant (arXiv 2609.38166); NVlabs/kda request conless-leapquant-kda-flush.
    """
    if not isinstance(pool, Pool):
        raise TypeError(f"pool must be a {Pool.__module__}.Pool, got {type(pool).__module__}.{type(pool).__qualname__}"
                        " (a Pool of another copy of the package?)")
    _check_index(pool, idx)
    check_q0(q0, pool.device)
    if pool.device.type == "cuda":
        from .kernel import launch_flush

        launch_flush(pool.checkpoint, pool.checkpoint, pool.window, q0, idx=idx, hcnt=pool.hcnt, picks=pool.picks,
                     kernel=pool.kernel)
        return
    _flush_cpu(pool, idx, q0)


def _flush_cpu(pool: Pool, idx: torch.Tensor, q0: torch.Tensor) -> None:
    slots = idx[idx > 0].long()
    due = pool.hcnt[slots] == L  # [N, H]
    sel = due.nonzero()
    if sel.numel() == 0:
        return
    slot, head = slots[sel[:, 0]], sel[:, 1]
    new = flush_cpu(*(t[slot, head] for t in pool.checkpoint), *(t[slot, head] for t in pool.window), q0)
    for view, value in zip(pool.checkpoint, new):
        view[slot, head] = value
    pool.w[slot, head] = 0
    pool.gbuf[slot, head] = 1
    pool.pcum[slot, head] = 0
