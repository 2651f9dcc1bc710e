"""The in-place calls on a pool as torch custom ops (``torch.ops.leapquant.*``), so that a
``torch.compile``d model calls them without a graph break, as engines wrap their kernels.

Each op takes the pool's tensors (``raw`` and the window, ``hcnt``, its scratch), declares the
ones it writes (``mutates_args``) and rebuilds the checkpoint views from ``raw`` and the layout.
Its body launches the pool's kernel on CUDA tensors, or runs the fp32 PyTorch path on CPU tensors
with the same semantics. ``interface.py`` calls the body directly in eager mode and the op while
``torch.compile`` traces. Source: LeapQuant (arXiv 2609.38166); NVlabs/kda requests
conless-leapquant-kda-flush and conless-leapquant-kda-step.
"""

# no `from __future__ import annotations`: torch.library reads the signatures' annotations
from typing import Optional

import torch

from .flush.naive import flush_cpu
from .geometry import K, L
from .pool import checkpoint_views, split_mixed
from .step.naive import step_cpu

# the ops' namespace: the package's own name, so that a copy of the package loaded under another
# name (Hugging Face kernels' build variants) registers ops of its own
LIBRARY = __name__.split(".")[0]


def pool_views(raw: torch.Tensor, kbuf, ubuf, gbuf, w, pcum, hcnt: torch.Tensor, layout: str) -> tuple:
    """``(checkpoint, window)`` of a pool's tensors: ``(codes, s_k, s_v, u, q)`` views of ``raw``
    and ``(kbuf, ubuf, gbuf, w, pcum)``."""
    codes, s_k, s_v, uq = checkpoint_views(raw, hcnt.shape[0], hcnt.shape[1], layout)
    return (codes, s_k, s_v, uq[..., :K], uq[..., K:]), (kbuf, ubuf, gbuf, w, pcum)


def flush_pool(raw: torch.Tensor, kbuf: torch.Tensor, ubuf: torch.Tensor, gbuf: torch.Tensor, w: torch.Tensor,
               pcum: torch.Tensor, hcnt: torch.Tensor, picks: Optional[torch.Tensor], idx: torch.Tensor,
               q0: torch.Tensor, layout: str, kernel: str, ctas_per_sm: int) -> None:
    """``interface.flush_inplace`` on a pool's tensors: the kernel ``kernel`` (the pool's; any
    device where it runs, the CPU under Triton's interpreter) at ``ctas_per_sm`` resident CTAs an
    SM (0: the kernel's default) or, for ``kernel == ""``, the fp32 PyTorch flush (a CPU pool's)."""
    ckpt, window = pool_views(raw, kbuf, ubuf, gbuf, w, pcum, hcnt, layout)
    if kernel:
        from .kernel import launch_flush

        launch_flush(ckpt, ckpt, window, q0, idx=idx, hcnt=hcnt, picks=picks, kernel=kernel, ctas_per_sm=ctas_per_sm)
        return
    slots = idx[idx > 0].long()
    due = hcnt[slots] == L  # [N, NH]
    sel = due.nonzero()
    if sel.numel() == 0:
        return
    slot, head = slots[sel[:, 0]], sel[:, 1]
    new = flush_cpu(*(t[slot, head] for t in ckpt), *(t[slot, head] for t in window), q0)
    for view, value in zip(ckpt, new):
        view[slot, head] = value
    w[slot, head] = 0
    gbuf[slot, head] = 1
    pcum[slot, head] = 0


def step_pool(raw: torch.Tensor, kbuf: torch.Tensor, ubuf: torch.Tensor, gbuf: torch.Tensor, w: torch.Tensor,
              pcum: torch.Tensor, hcnt: torch.Tensor, errors: torch.Tensor, idx: torch.Tensor, mixed: torch.Tensor,
              a: torch.Tensor, b: torch.Tensor, A_log: torch.Tensor, dt_bias: torch.Tensor, o: torch.Tensor,
              layout: str, kernel: str) -> None:
    """``interface.step_inplace`` on a pool's tensors: the kernel ``kernel`` (the pool's) or, for
    ``kernel == ""``, the fp32 PyTorch step (a CPU pool's). The packed layout guards a full
    window that was never flushed (see ``step_inplace``)."""
    ckpt, window = pool_views(raw, kbuf, ubuf, gbuf, w, pcum, hcnt, layout)
    heads = hcnt.shape[1]
    qx, kx, vx = split_mixed(mixed, heads)
    guard_full = layout == "packed"
    if kernel:
        from .kernel import launch_step

        launch_step(ckpt, window, hcnt, (qx, kx, vx, a, b), A_log, dt_bias, o, idx=idx, errors=errors,
                    guard_full=guard_full, kernel=kernel)
        return
    live = idx > 0
    o[~live] = 0
    rows = live.nonzero().squeeze(1)
    if rows.numel() == 0:
        return
    slots = idx[rows].long()
    h = hcnt[slots]
    full = (h >= L) & (w[slots, :, L - 1] != 0) if guard_full else torch.zeros_like(h, dtype=torch.bool)
    h = torch.where(full, L, torch.where(h >= L, 0, h))
    n = rows.numel()
    outs = step_cpu(*(t[slots] for t in ckpt), *(t[slots] for t in window), h,
                    qx[rows].reshape(n, heads, K), kx[rows].reshape(n, heads, K), vx[rows].reshape(n, heads, -1),
                    a[rows], b[rows], A_log, dt_bias)
    o_new, k_row, u_row, g_row, _, pcum_new = outs
    o[rows] = o_new
    errors[0] += int(full.sum())
    keep = ~full  # programs that append their entry
    s = slots[:, None].expand(n, heads)[keep]
    hd = torch.arange(heads, device=slots.device)[None, :].expand(n, heads)[keep]
    e = h[keep].long()
    kbuf[s, hd, e] = k_row[keep]
    ubuf[s, hd, e] = u_row[keep]
    gbuf[s, hd, e] = g_row[keep]
    w[s, hd, e] = 1.0
    pcum[s, hd] = pcum_new[keep]
    hcnt[s, hd] = h[keep] + 1


flush_op = torch.library.custom_op(f"{LIBRARY}::flush_inplace", flush_pool,
                                   mutates_args=("raw", "gbuf", "w", "pcum", "picks"))
step_op = torch.library.custom_op(f"{LIBRARY}::step_inplace", step_pool,
                                  mutates_args=("kbuf", "ubuf", "gbuf", "w", "pcum", "hcnt", "errors", "o"))


@flush_op.register_fake
def _(raw, kbuf, ubuf, gbuf, w, pcum, hcnt, picks, idx, q0, layout, kernel, ctas_per_sm):
    return None


@step_op.register_fake
def _(raw, kbuf, ubuf, gbuf, w, pcum, hcnt, errors, idx, mixed, a, b, A_log, dt_bias, o, layout, kernel):
    return None


def call(op, body, *args) -> None:
    """``op(*args)`` while ``torch.compile`` traces (one node, no graph break), ``body(*args)``
    otherwise (no dispatcher on the eager path)."""
    (op if torch.compiler.is_compiling() else body)(*args)
