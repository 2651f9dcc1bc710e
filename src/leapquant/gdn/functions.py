"""What engines call for Gated DeltaNet layers (Qwen3.5: a scalar gate, 16 key heads serving 32
value heads): the GDN pool and the functional and in-place calls, on the machinery KDA's calls
use (``leapquant.family.GDN`` is the one choice). In-place calls, ``write_state``, ``read_state``,
``copy_slots``, ``decode_inplace`` and ``Overlap`` take a GDN ``Pool`` as they take a KDA one.

Sources: LeapQuant (arXiv 2609.38166); NVlabs/kda requests conless-leapquant-gdn-flush and
conless-leapquant-gdn-step.
"""

from __future__ import annotations

import torch

from .. import interface, layer, pool as pool_module
from ..family import GDN


class Pool(pool_module.Pool):
    """A pool of GDN states: ``leapquant.kda.Pool``'s checkpoint regions, layouts, head counts
    (2 to 32: whole key groups) and attributes, with GDN's window: ``kbuf`` bf16 ``[NS, NH, L,
    K]``, ``ubuf`` bf16 ``[NS, NH, L, V]``, ``w`` fp32 ``[NS, NH, L]`` (the live weights, decayed
    by each step), ``p`` fp32 ``[NS, NH]`` (the gate product since the checkpoint, 1 when empty),
    ``hcnt`` int32 ``[NS, NH]``. 887,168 bytes a slot at 32 heads, packed
    (``slot_nbytes(family=GDN)``). ``Pool.from_tensors(raw, kbuf, ubuf, w, p, hcnt)`` builds one
    on an engine's tensors. Raises as ``leapquant.kda.Pool``.
    Source: NVlabs/kda requests conless-leapquant-gdn-flush and conless-leapquant-gdn-step."""

    family = GDN


def run(codes, s_k, s_v, u, q, kbuf, ubuf, w, p, q0):
    """Flush a batch of GDN checkpoints: rebuild each state ``S = p decode(checkpoint) + sum_j
    w_j ubuf_j kbuf_j^T`` and compress it into a new checkpoint (one round of subspace iteration
    from ``q0``, int8 residual, scales). Inputs are never modified.

    Args (``B`` sequences, ``H`` heads, one device): codes int8 ``[B, H, V, K]``, s_k fp32 ``[B,
    H, K]``, s_v fp32 ``[B, H, V]``, u fp16 ``[B, H, R, K]``, q fp16 ``[B, H, R, V]`` (the old
    checkpoint); kbuf bf16 ``[B, H, L, K]``, ubuf bf16 ``[B, H, L, V]``, w fp32 ``[B, H, L]`` in
    [0, 1], p fp32 ``[B, H]`` in (0, 1] (the window); q0 fp32 ``[V, R]``, contiguous.

    Returns ``(codes, s_k, s_v, u, q)``, new tensors of the inputs' dtypes and shapes.
    Raises TypeError / ValueError as ``leapquant.kda.run``.
    Source: LeapQuant (arXiv 2609.38166); NVlabs/kda request conless-leapquant-gdn-flush.
    """
    fields = dict(codes=codes, s_k=s_k, s_v=s_v, u=u, q=q, kbuf=kbuf, ubuf=ubuf, w=w, p=p)
    return interface.run_family(GDN, fields, q0)


def step(codes, s_k, s_v, u, q, kbuf, ubuf, w, p, h, qx, kx, vx, a, b, A_log, dt_bias):
    """One GDN decode step for a batch of programs: decay the state by this token's scalar gate
    ``at = exp(-exp(A_log) softplus(a + dt_bias))``, apply the gated delta rule, read the output
    and return the window entry to append. Inputs are never modified.

    Args (``B`` sequences, ``H`` value heads, ``HK = H / 2`` key heads): the checkpoint as
    ``run``; kbuf, ubuf, w, p as ``run`` (entries ``>= h`` unread); h int32 ``[B, H]`` in ``[0,
    L)``; qx, kx bf16 ``[B, HK, K]`` (head ``hd`` reads key head ``hd // 2``); vx bf16 ``[B, H,
    V]``; a, b bf16 ``[B, H]``; A_log, dt_bias fp32 ``[H]``.

    Returns ``(o, k_row, u_row, w_new, p_new)``: o bf16 ``[B, H, V]``; k_row bf16 ``[B, H, K]``
    (the normalised key); u_row bf16 ``[B, H, V]`` (``beta (v - S kn)``); w_new fp32 ``[B, H,
    L]`` (the live weights times at, entry ``h`` = 1); p_new fp32 ``[B, H]`` (``p at``).
    Raises TypeError / ValueError as ``leapquant.kda.step``.
    Source: LeapQuant (arXiv 2609.38166); NVlabs/kda request conless-leapquant-gdn-step.
    """
    fields = dict(codes=codes, s_k=s_k, s_v=s_v, u=u, q=q, kbuf=kbuf, ubuf=ubuf, w=w, p=p, h=h, qx=qx, kx=kx, vx=vx,
                  a=a, b=b)
    return interface.step_family(GDN, fields, A_log, dt_bias)


def _per_head(t: torch.Tensor) -> torch.Tensor:
    # a [N, H, 1] gate pre-activation or an [H, 1] dt_bias (the request harness's shapes) as a view
    return t.squeeze(-1) if isinstance(t, torch.Tensor) and t.dim() >= 2 and t.shape[-1] == 1 else t


def step_inplace(pool: Pool, idx: torch.Tensor, mixed: torch.Tensor, a: torch.Tensor, b: torch.Tensor,
                 A_log: torch.Tensor, dt_bias: torch.Tensor, o: torch.Tensor) -> None:
    """``leapquant.kda.step_inplace`` on a GDN pool: each program appends ``kbuf``/``ubuf`` entry
    ``h``, its live weights decay by at (``w[h] = 1``), ``p *= at`` and ``hcnt = h + 1``.

    Args (``N = len(idx)``, ``NH = pool.heads``): idx int32 ``[N]``; mixed bf16 ``[N, 2 (NH / 2)
    K + NH V]`` rows ``(q | k | v)`` (q, k of the key heads; 8,192 at 32 heads), unit inner
    stride; a bf16 ``[N, NH]`` (or ``[N, NH, 1]``); b bf16 ``[N, NH]``; A_log fp32 ``[NH]``;
    dt_bias fp32 ``[NH]`` (or ``[NH, 1]``); o bf16 ``[N, NH, V]``, written. Semantics, errors and
    the full-window guard as KDA's. Source: NVlabs/kda request conless-leapquant-gdn-step."""
    interface.step_inplace(pool, idx, mixed, _per_head(a), b, A_log, _per_head(dt_bias), o)


def decode_inplace(pool: Pool, idx: torch.Tensor, mixed: torch.Tensor, a: torch.Tensor, b: torch.Tensor,
                   A_log: torch.Tensor, dt_bias: torch.Tensor, o: torch.Tensor, q0: torch.Tensor,
                   overlap: layer.Overlap | None = None) -> None:
    """``leapquant.kda.decode_inplace`` on a GDN pool (arguments as ``step_inplace`` here):
    the step now, the flush of the windows it fills on the ``overlap`` scope's side stream or
    after it. Source: NVlabs/kda requests conless-leapquant-gdn-step and -flush."""
    layer.decode_inplace(pool, idx, mixed, _per_head(a), b, A_log, _per_head(dt_bias), o, q0, overlap=overlap)
