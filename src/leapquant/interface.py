"""What serving engines call on the kernels: the flush (functional ``run``, in-place
``flush_inplace``) and the decode step (functional ``step``, in-place ``step_inplace``), on one
caller-owned ``Pool``; the state in and out of a pool is ``state.py``'s.

CUDA tensors go through the kernels that ``kernel.decide`` picks (for both operations: Gluon on
Hopper, the portable Triton kernels elsewhere); CPU tensors through the fp32 PyTorch paths
(``flush.naive.flush_cpu``, ``step.naive.step_cpu``) with the same semantics. The serving loop::

    write_state(pool, idx, final_state, q0)                       # once per sequence, after its prefill
    for each token:
        step_inplace(pool, idx, mixed, a, b, A_log, dt_bias, o)   # appends entry hcnt, hcnt += 1
        flush_inplace(pool, idx, q0)                              # re-quantizes the full windows

Sources: LeapQuant (arXiv 2609.38166); NVlabs/kda requests conless-leapquant-kda-flush (SPEC
section 7) and conless-leapquant-kda-step.
"""

from __future__ import annotations

import torch

from .family import KDA, Family
from .format import CHECKPOINT_FIELDS, TOKEN_FIELDS, check_batch, check_q0, check_tensor
from .geometry import K, L, V
from .ops import CPU_FLUSH, CPU_STEP, FAMILY_OPS, call
from .pool import Pool, check_call, check_on_pool


def run(codes, s_k, s_v, u, q, kbuf, ubuf, gbuf, w, pcum, q0):
    """Flush a batch of checkpoints: rebuild each state from its checkpoint and its full window,
    then compress it into a new checkpoint (SPEC section 4). Inputs are never modified.

    Args (``B`` sequences, ``H`` heads (1, 2, 4, 8, 16 or 32), one device):
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
    return run_family(KDA, fields, q0)


def run_family(family: Family, fields: dict, q0: torch.Tensor):
    """``run`` of ``family`` on ``fields`` (the checkpoint and ``family.window`` by name):
    checked, made dense, then the family's CPU flush or the kernel. Raises as ``run``."""
    _, _, device = check_batch(fields, {**CHECKPOINT_FIELDS, **family.window_fields()})
    check_q0(q0, device)
    # dense copies where needed: the result must not depend on the inputs' memory layout
    fields = {n: t.contiguous() for n, t in fields.items()}
    if device.type != "cuda":
        return CPU_FLUSH[family.name](**fields, q0=q0)
    from .kernel import launch_flush

    ckpt_in = tuple(fields[n] for n in CHECKPOINT_FIELDS)
    ckpt_out = tuple(torch.empty_like(t) for t in ckpt_in)
    launch_flush(ckpt_in, ckpt_out, family.kernel_window(fields), q0)
    return ckpt_out


def flush_inplace(pool: Pool, idx: torch.Tensor, q0: torch.Tensor) -> None:
    """Flush, in place, every program ``(slot, head)`` with ``slot`` in ``idx`` whose window is
    full (``pool.hcnt[slot, head] == L``).

    A flushed program gets its new checkpoint in ``pool.raw`` and its window reset (``w = 0``,
    ``gbuf = 1``, ``pcum = 0``; a GDN pool's ``w = 0``, ``p = 1``); ``hcnt`` stays ``L`` (read by the decode step as "flushed,
    empty": clearing it would race with the kernel's other CTAs still reading the flags). Every
    other program and slot is left bit-identical. Entries ``<= 0`` of ``idx`` are skipped (0 = no
    sequence, -1 = a CUDA-graph pad slot).

    On CUDA: one kernel launch on the current stream, no host synchronisation, no allocation, no
    compilation (the Pool compiled the kernel), capturable in a CUDA graph; under
    ``torch.compile`` one custom op (``torch.ops.leapquant.flush_inplace``). ``idx`` values are
    trusted: an id >= ``pool.num_slots`` or a slot given twice is undefined behaviour;
    ``Pool.check_index`` checks them on the host. Calls on one pool must be serial; use one pool
    per stream. On CPU: the same semantics through the fp32 PyTorch flush
    (``naive.flush_cpu``). A second call before the decode step appends an entry re-quantizes
    the flushed programs again (their ``hcnt`` is still ``L``): harmless once, lossy if repeated.

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
    flush_checked(pool, idx, q0)


def flush_checked(pool: Pool, idx: torch.Tensor, q0: torch.Tensor) -> None:
    """``flush_inplace`` on arguments already checked (the pool's family's op)."""
    op, body, _, _ = FAMILY_OPS[pool.family.name]
    call(op, body, pool.raw, *pool.window, pool.hcnt, pool.picks, idx, q0, pool.layout, pool.kernel or "",
         pool.flush_ctas_per_sm or 0)


def _check_params(A_log, dt_bias, heads: int, device, family: Family = KDA) -> None:
    check_tensor("A_log", A_log, torch.float32, (heads,))
    check_tensor("dt_bias", dt_bias, torch.float32, (heads, *family.gate_inputs["dt_bias"]))
    for name, t in (("A_log", A_log), ("dt_bias", dt_bias)):
        if t.device != device:
            raise ValueError(f"devices disagree: {name} is on {t.device}, expected {device}")


def step(codes, s_k, s_v, u, q, kbuf, ubuf, gbuf, w, pcum, h, qx, kx, vx, a, b, A_log, dt_bias):
    """One decode step for a batch of programs: decay each state by this token's gate, apply the
    delta rule, read the output, and return the window entry to append. Inputs are never modified.

    Args (``B`` sequences, ``H`` heads (1 to 32, a power of two), ``V = K = 128``, ``L = 16``,
    ``R = 4``, one device):
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
    return step_family(KDA, fields, A_log, dt_bias)


def step_family(family: Family, fields: dict, A_log, dt_bias):
    """``step`` of ``family`` on ``fields`` (the checkpoint, ``family.window`` and the token by
    name): checked, made dense, then the family's CPU step or the kernel. KDA returns ``(o, k_row,
    u_row, g_row, w_new, pcum_new)``, GDN ``(o, k_row, u_row, w_new, p_new)``. Raises as ``step``."""
    tokens = dict(TOKEN_FIELDS)
    tokens["a"] = (torch.bfloat16, family.gate_inputs["a"])
    qk = {n: tokens.pop(n) for n in ("qx", "kx")}
    _, heads, device = check_batch(fields, {**CHECKPOINT_FIELDS, **family.window_fields(), **tokens})
    if heads not in family.head_counts():  # whole key groups only (GDN: an even head count)
        raise ValueError(f"a {family.name.upper()} step takes one of {family.head_counts()} heads (whole key groups "
                         f"of {family.key_group}), got {heads}")
    n, hk = fields["codes"].shape[0], family.key_heads(heads)
    for name, (dtype, trailing) in qk.items():  # q and k of each key head
        check_tensor(name, fields[name], dtype, (n, hk, *trailing))
        if fields[name].device != device:
            raise ValueError(f"devices disagree: codes is on {device}, {name} is on {fields[name].device}")
    _check_params(A_log, dt_bias, heads, device, family)
    fields = {n: t.contiguous() for n, t in fields.items()}
    A_log, dt_bias = A_log.contiguous(), dt_bias.contiguous()
    if device.type != "cuda":
        h = fields["h"]
        if h.numel() and not bool(((h >= 0) & (h < L)).all()):
            raise ValueError(f"h must lie in [0, {L}), got values in [{int(h.min())}, {int(h.max())}]")
        return CPU_STEP[family.name](**fields, A_log=A_log, dt_bias=dt_bias)
    from .kernel import launch_step

    f = fields
    o = torch.empty_like(f["vx"])
    k_row = torch.empty(n, heads, K, dtype=torch.bfloat16, device=device)
    if family.scalar_gate:
        returned = (k_row, torch.empty_like(f["vx"]), torch.empty_like(f["w"]), torch.empty_like(f["p"]))
        new = (*returned[:2], None, *returned[2:])
    else:
        returned = new = (k_row, torch.empty_like(f["vx"]), torch.empty_like(k_row, dtype=torch.float16),
                          torch.empty_like(f["w"]), torch.empty_like(f["pcum"]))
    launch_step(tuple(f[n] for n in CHECKPOINT_FIELDS), family.kernel_window(f), f["h"],
                (f["qx"], f["kx"], f["vx"], f["a"], f["b"]), A_log, dt_bias, o, new=new, key_group=family.key_group)
    return (o, *returned)


def step_inplace(pool: Pool, idx: torch.Tensor, mixed: torch.Tensor, a: torch.Tensor, b: torch.Tensor,
                 A_log: torch.Tensor, dt_bias: torch.Tensor, o: torch.Tensor) -> None:
    """One decode step for the sequences ``idx`` of ``pool``, in place: read each program's
    checkpoint and window from the pool, write its output to ``o`` and append its entry.

    For ``i`` with ``idx[i] > 0`` and every head ``hd``, with ``h = pool.hcnt[idx[i], hd]``:
    ``o[i, hd]`` gets the output, and the window gets entry ``h`` -- ``kbuf[.., h] = kn``,
    ``ubuf[.., h] = u_new``, ``gbuf[.., h] = exp(g)``, ``w[.., h] = 1`` -- with ``pcum += g`` and
    ``hcnt = h + 1``. ``h == L`` means "just flushed, empty" and is read as 0. A window that
    reaches ``hcnt == L`` must be flushed (``flush_inplace``) before the next step; in the packed
    layout a step that meets a full window never flushed (``hcnt == L`` with ``w[L - 1] != 0``)
    computes its output from the whole window, appends nothing (the window stays as it is) and
    adds the program to ``pool.errors[0]`` (the request layout keeps the request's reading: a
    fill count of L is an empty window). For ``idx[i] <= 0`` (0: no sequence, -1: a CUDA-graph
    pad) row ``i`` of ``o`` is zeroed and nothing else is written. Every other byte of the pool
    stays as it was.

    On CUDA: one kernel launch on the current stream, no host synchronisation, no allocation, no
    compilation (the ``Pool`` compiled the kernel); capturable in a CUDA graph; under
    ``torch.compile`` one custom op (``torch.ops.leapquant.step_inplace``). ``idx`` values are
    trusted (``Pool.check_index`` checks them on the host): an id >= ``pool.num_slots`` or a slot
    given twice is undefined behaviour. Calls on one pool must be serial. On CPU: the same
    semantics through the fp32 PyTorch product path (``naive.step_cpu``).

    Args (``N = len(idx)``, ``NH = pool.heads``):
        pool: the ``Pool``.
        idx: int32 ``[N]``, contiguous, on the pool's device: slot ids.
        mixed: bf16 ``[N, 2 NH K + NH V]``, unit inner stride (any row stride): per sequence one
            row ``(q | k | v)``, q for all heads ``[NH * K]``, then k ``[NH * K]``, then v ``[NH * V]``.
        a: bf16 ``[N, NH, K]`` gate pre-activation; b: bf16 ``[N, NH]`` beta pre-activation.
        A_log: fp32 ``[NH]``; dt_bias: fp32 ``[NH, K]`` (see ``step``).
        o: bf16 ``[N, NH, V]``, written.

    Raises:
        TypeError: ``pool`` is not a Pool, or an argument is not a tensor or has the wrong dtype.
        ValueError: a wrong shape, a tensor on another device than the pool, a non-contiguous
            tensor (``mixed``: an inner stride other than 1).

    Source: LeapQuant (arXiv 2609.38166); NVlabs/kda request conless-leapquant-kda-step.
    """
    check_step_call(pool, idx, mixed, a, b, A_log, dt_bias, o)
    step_checked(pool, idx, mixed, a, b, A_log, dt_bias, o)


def step_checked(pool: Pool, idx, mixed, a, b, A_log, dt_bias, o) -> None:
    """``step_inplace`` on arguments already checked (the pool's family's op)."""
    _, _, op, body = FAMILY_OPS[pool.family.name]
    call(op, body, pool.raw, *pool.window, pool.hcnt, pool.errors, idx, mixed, a, b, A_log, dt_bias, o, pool.layout,
         pool.step_kernel or "")


def check_step_call(pool: Pool, idx, mixed, a, b, A_log, dt_bias, o) -> None:
    """The checks of ``step_inplace``'s arguments (no host sync); raises as it documents."""
    check_call(pool, idx)
    n, heads, fam = idx.shape[0], pool.heads, pool.family
    check_on_pool(f"mixed (a pool of {heads} heads)", mixed, torch.bfloat16, (n, fam.mixed_width(heads)), pool,
                  dense=False)
    if mixed.stride(1) != 1:
        raise ValueError(f"mixed must have unit inner stride, got strides {list(mixed.stride())}")
    check_on_pool("a", a, torch.bfloat16, (n, heads, *fam.gate_inputs["a"]), pool)
    check_on_pool("b", b, torch.bfloat16, (n, heads), pool)
    check_on_pool("A_log", A_log, torch.float32, (heads,), pool)
    check_on_pool("dt_bias", dt_bias, torch.float32, (heads, *fam.gate_inputs["dt_bias"]), pool)
    check_on_pool("o", o, torch.bfloat16, (n, heads, V), pool)
