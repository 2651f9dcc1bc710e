"""What serving engines call: the flush (functional ``run``, in-place ``flush_inplace``), the
decode step (functional ``step``, in-place ``step_inplace``) and ``write_state`` (a prefill's
fp32 state into a pool slot), all on one caller-owned ``Pool``.

CUDA tensors go through the kernels that ``kernel.choose`` picks (for both operations: Gluon on
Hopper, the portable Triton kernels elsewhere); CPU tensors through the
fp32 PyTorch paths (``flush.naive.flush_cpu``, ``step.naive.step_cpu``) with the same semantics.
The serving loop::

    write_state(pool, idx, final_state, q0)                       # once per sequence, after its prefill
    for each token:
        step_inplace(pool, idx, mixed, a, b, A_log, dt_bias, o)   # appends entry hcnt, hcnt += 1
        flush_inplace(pool, idx, q0)                              # re-quantizes the full windows

Sources: LeapQuant (arXiv 2609.38166); NVlabs/kda requests conless-leapquant-kda-flush (SPEC
section 7) and conless-leapquant-kda-step.
"""

from __future__ import annotations

import torch

from .flush.naive import flush_cpu, quantize
from .format import (CHECKPOINT_FIELDS, MIXED_WIDTH, TOKEN_FIELDS, WINDOW_FIELDS, check_batch, check_q0, check_tensor,
                     full_fp32_matmul)
from .geometry import H, K, L, R, V
from .pool import Pool, check_call, check_on_pool
from .step.naive import step_cpu

WRITE_CHUNK = 64  # sequences write_state compresses at once (bounds its fp32 temporaries)


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
    check_call(pool, idx)
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


def _check_params(A_log, dt_bias, device) -> None:
    check_tensor("A_log", A_log, torch.float32, (H,))
    check_tensor("dt_bias", dt_bias, torch.float32, (H, K))
    for name, t in (("A_log", A_log), ("dt_bias", dt_bias)):
        if t.device != device:
            raise ValueError(f"devices disagree: {name} is on {t.device}, expected {device}")


def step(codes, s_k, s_v, u, q, kbuf, ubuf, gbuf, w, pcum, h, qx, kx, vx, a, b, A_log, dt_bias):
    """One decode step for a batch of programs: decay each state by this token's gate, apply the
    delta rule, read the output, and return the window entry to append. Inputs are never modified.

    Args (``B`` sequences, ``H = 32`` heads, ``V = K = 128``, ``L = 16``, ``R = 4``, one device):
        codes: int8 ``[B, H, V, K]``; s_k: fp32 ``[B, H, K]`` key (column) scales; s_v: fp32
            ``[B, H, V]`` value (row) scales; u: fp16 ``[B, H, R, K]``; q: fp16 ``[B, H, R, V]``
            -- the checkpoint, decoding to ``q^T u + codes * s_k / 127 * s_v``.
        kbuf: bf16 ``[B, H, L, K]`` keys; ubuf: bf16 ``[B, H, L, V]`` value-side updates; gbuf:
            fp16 ``[B, H, L, K]`` per-channel decay (a factor in (0, 1]) of the step that appended
            entry j; w: fp32 ``[B, H, L]`` entry weights; pcum: fp32 ``[B, H, K]`` log-gate summed
            since the checkpoint (natural log, <= 0) -- the window. Entries ``>= h`` are not read.
        h: int32 ``[B, H]``: entries in use, ``0 <= h < L``.
        qx, kx: bf16 ``[B, H, K]`` query and key (normalised here); vx: bf16 ``[B, H, V]`` value;
            a: bf16 ``[B, H, K]`` gate pre-activation; b: bf16 ``[B, H]`` beta pre-activation.
        A_log: fp32 ``[H]``; dt_bias: fp32 ``[H, K]`` -- the gate ``g = -exp(A_log) *
            softplus(a + dt_bias)`` (natural-log decay per key channel).

    Returns:
        ``(o, k_row, u_row, g_row, w_new, pcum_new)``: o bf16 ``[B, H, V]`` the output;
        k_row bf16 ``[B, H, K]`` the normalised key; u_row bf16 ``[B, H, V]`` the update
        ``beta (v - S kn)``; g_row fp16 ``[B, H, K]`` this token's decay ``exp(g)``; w_new fp32
        ``[B, H, L]`` (``w`` with entry ``h`` = 1); pcum_new fp32 ``[B, H, K]`` (``pcum + g``).
        Appending ``k_row, u_row, g_row`` at entry ``h`` with ``w_new``, ``pcum_new`` and
        ``h + 1`` gives the next step's window.

    Raises:
        TypeError: an argument is not a tensor or has the wrong dtype.
        ValueError: a wrong shape or head count, batch sizes or devices that disagree; on CPU,
            an ``h`` outside ``[0, L)`` (on CUDA ``h`` is trusted: checking it would synchronise;
            the kernel reads ``h >= L`` as 0).

    Non-contiguous inputs are copied (the result does not depend on memory layout).
    Source: LeapQuant (arXiv 2609.38166); NVlabs/kda request conless-leapquant-kda-step.
    """
    fields = dict(codes=codes, s_k=s_k, s_v=s_v, u=u, q=q, kbuf=kbuf, ubuf=ubuf, gbuf=gbuf, w=w, pcum=pcum,
                  h=h, qx=qx, kx=kx, vx=vx, a=a, b=b)
    _, device = check_batch(fields, {**CHECKPOINT_FIELDS, **WINDOW_FIELDS, **TOKEN_FIELDS})
    _check_params(A_log, dt_bias, device)
    fields = {n: t.contiguous() for n, t in fields.items()}
    A_log, dt_bias = A_log.contiguous(), dt_bias.contiguous()
    if device.type != "cuda":
        if fields["h"].numel() and not bool(((fields["h"] >= 0) & (fields["h"] < L)).all()):
            raise ValueError(f"h must lie in [0, {L}), got values in [{int(h.min())}, {int(h.max())}]")
        return step_cpu(**fields, A_log=A_log, dt_bias=dt_bias)
    from .kernel import launch_step

    f = fields
    o = torch.empty_like(f["vx"])
    new = (torch.empty_like(f["kx"]), torch.empty_like(f["vx"]), torch.empty_like(f["kx"], dtype=torch.float16),
           torch.empty_like(f["w"]), torch.empty_like(f["pcum"]))
    launch_step(tuple(f[n] for n in CHECKPOINT_FIELDS), tuple(f[n] for n in WINDOW_FIELDS), f["h"],
                (f["qx"], f["kx"], f["vx"], f["a"], f["b"]), A_log, dt_bias, o, new=new)
    return (o, *new)


def step_inplace(pool: Pool, idx: torch.Tensor, mixed: torch.Tensor, a: torch.Tensor, b: torch.Tensor,
                 A_log: torch.Tensor, dt_bias: torch.Tensor, o: torch.Tensor) -> None:
    """One decode step for the sequences ``idx`` of ``pool``, in place: read each program's
    checkpoint and window from the pool, write its output to ``o`` and append its entry.

    For ``i`` with ``idx[i] > 0`` and every head ``hd``, with ``h = pool.hcnt[idx[i], hd]`` (``h ==
    L`` means "just flushed, empty" and is read as 0): ``o[i, hd]`` gets the output, and the
    window gets entry ``h`` -- ``kbuf[.., h] = kn``, ``ubuf[.., h] = u_new``, ``gbuf[.., h] =
    exp(g)``, ``w[.., h] = 1`` -- with ``pcum += g`` and ``hcnt = h + 1``. A window that reaches
    ``hcnt == L`` must be flushed (``leapquant.kda.flush_inplace``) before the next step. For
    ``idx[i] <= 0`` (0: no sequence, -1: a CUDA-graph pad) row ``i`` of ``o`` is zeroed and
    nothing else is written. Every other byte of the pool stays as it was.

    On CUDA: one kernel launch on the current stream, no host synchronisation, no allocation, no
    compilation (the ``Pool`` compiled the kernel); capturable in a CUDA graph. ``idx`` values are
    trusted (``Pool.check_index`` checks them on the host): an id >= ``pool.num_slots`` or a slot
    given twice is undefined behaviour, and so is a step on a window with ``hcnt == L`` that was
    not flushed (its pcum is then not the empty window's). Calls on one pool must be serial.
    On CPU: the same semantics through the fp32 PyTorch product path (``naive.step_cpu``).

    Args (``N = len(idx)``):
        pool: the ``Pool``.
        idx: int32 ``[N]``, contiguous, on the pool's device: slot ids.
        mixed: bf16 ``[N, 2 H K + H V]``, unit inner stride (any row stride): per sequence one
            row ``(q | k | v)``, q for all heads ``[H * K]``, then k ``[H * K]``, then v ``[H * V]``.
        a: bf16 ``[N, H, K]`` gate pre-activation; b: bf16 ``[N, H]`` beta pre-activation.
        A_log: fp32 ``[H]``; dt_bias: fp32 ``[H, K]`` (see ``step``).
        o: bf16 ``[N, H, V]``, written.

    Raises:
        TypeError: ``pool`` is not a Pool, or an argument is not a tensor or has the wrong dtype.
        ValueError: a wrong shape, a tensor on another device than the pool, a non-contiguous
            tensor (``mixed``: an inner stride other than 1).

    Source: LeapQuant (arXiv 2609.38166); NVlabs/kda request conless-leapquant-kda-step.
    """
    check_call(pool, idx)
    n = idx.shape[0]
    check_on_pool("mixed", mixed, torch.bfloat16, (n, MIXED_WIDTH), pool, dense=False)
    if mixed.stride(1) != 1:
        raise ValueError(f"mixed must have unit inner stride, got strides {list(mixed.stride())}")
    check_on_pool("a", a, torch.bfloat16, (n, H, K), pool)
    check_on_pool("b", b, torch.bfloat16, (n, H), pool)
    check_on_pool("A_log", A_log, torch.float32, (H,), pool)
    check_on_pool("dt_bias", dt_bias, torch.float32, (H, K), pool)
    check_on_pool("o", o, torch.bfloat16, (n, H, V), pool)
    hk = H * K
    qx, kx, vx = mixed[:, :hk], mixed[:, hk : 2 * hk], mixed[:, 2 * hk :]
    if pool.device.type == "cuda":
        from .kernel import launch_step

        launch_step(pool.checkpoint, pool.window, pool.hcnt, (qx, kx, vx, a, b), A_log, dt_bias, o, idx=idx,
                    kernel=pool.step_kernel)
        return
    _step_inplace_cpu(pool, idx, qx, kx, vx, a, b, A_log, dt_bias, o)


def _step_inplace_cpu(pool, idx, qx, kx, vx, a, b, A_log, dt_bias, o) -> None:
    live = idx > 0
    o[~live] = 0
    rows = live.nonzero().squeeze(1)
    if rows.numel() == 0:
        return
    slots = idx[rows].long()
    h = pool.hcnt[slots]
    h = torch.where(h >= L, torch.zeros_like(h), h)
    n = rows.numel()
    outs = step_cpu(*(t[slots] for t in pool.checkpoint), *(t[slots] for t in pool.window), h,
                    qx[rows].reshape(n, H, K), kx[rows].reshape(n, H, K), vx[rows].reshape(n, H, V),
                    a[rows], b[rows], A_log, dt_bias)
    o_new, k_row, u_row, g_row, _, pcum_new = outs
    o[rows] = o_new
    s = slots[:, None].expand(n, H)
    hd = torch.arange(H, device=slots.device)[None, :].expand(n, H)
    e = h.long()
    pool.kbuf[s, hd, e] = k_row
    pool.ubuf[s, hd, e] = u_row
    pool.gbuf[s, hd, e] = g_row
    pool.w[s, hd, e] = 1.0
    pool.pcum[slots] = pcum_new
    pool.hcnt[slots] = h + 1


def write_state(pool: Pool, idx: torch.Tensor, state: torch.Tensor, q0: torch.Tensor) -> None:
    """Store fp32 recurrent states into the checkpoints of the slots ``idx`` and empty their
    windows: the hand-over from a prefill to the decode loop.

    ``state[i]`` is sequence ``i``'s state in flash-linear-attention's layout ``[H, K, V]`` (the
    ``final_state`` of ``fla.ops.kda.chunk_kda`` or ``naive_recurrent_kda``: key rows, value
    columns); this package's ``S[v, k]`` is its transpose. Each state is compressed as the flush
    compresses a rebuilt one (SPEC steps 3-6: one round of subspace iteration from ``q0`` for the
    R = 4 Compensator Tokens, then the int8 residual with its key and value scales), with the
    product path's departures (``leapquant.kda.flush.naive.quantize(S, q0, robust=True)``), batched on
    the pool's device. The windows of those slots are emptied: ``w = 0``, ``gbuf = 1``, ``pcum =
    0``, ``kbuf = ubuf = 0``, ``hcnt = 0``. Entries ``idx[i] <= 0`` are skipped (``state[i]`` is
    not read). Synchronises with the host (it selects the live rows and checks ``idx``'s values);
    not for a captured graph.

    Args (``N = len(idx)``):
        pool: the ``Pool``.
        idx: int32 ``[N]``, contiguous, on the pool's device: slot ids.
        state: fp32 ``[N, H, K, V]`` on the pool's device (any strides).
        q0: fp32 ``[V, R]``, contiguous, on the pool's device: the subspace iteration's start basis
            (independent columns: a Gaussian draw or orthonormal columns).

    Raises:
        TypeError: ``pool`` is not a Pool; ``idx`` not an int32 tensor; ``state`` or ``q0`` not
            an fp32 tensor.
        ValueError: wrong shapes, tensors on another device than the pool, a non-contiguous
            ``idx`` or ``q0``; ``idx`` holding a slot >= ``pool.num_slots`` or a slot twice.

    Source: LeapQuant (arXiv 2609.38166); NVlabs/kda requests conless-leapquant-kda-step and
    conless-leapquant-kda-flush.
    """
    check_call(pool, idx)
    check_on_pool("state", state, torch.float32, (idx.shape[0], H, K, V), pool, dense=False)
    check_on_pool("q0", q0, torch.float32, (V, R), pool)
    pool.check_index(idx)
    rows = (idx > 0).nonzero().squeeze(1)
    with full_fp32_matmul(), torch.no_grad():  # the compression's products in full fp32
        for start in range(0, rows.numel(), WRITE_CHUNK):
            part = rows[start : start + WRITE_CHUNK]
            slots = idx[part].long()
            S = state[part].transpose(-1, -2)  # [n, H, V, K]
            for view, value in zip(pool.checkpoint, quantize(S, q0, robust=True)):
                view[slots] = value
            pool.kbuf[slots] = 0
            pool.ubuf[slots] = 0
            pool.gbuf[slots] = 1
            pool.w[slots] = 0
            pool.pcum[slots] = 0
            pool.hcnt[slots] = 0
