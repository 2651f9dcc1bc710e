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

from .family import GDN, KDA, Family
from .flush.naive import flush_cpu, scalar_flush_cpu
from .geometry import K, L
from .pool import pool_checkpoint, split_mixed
from .step.naive import scalar_step_cpu, step_cpu

# the ops' namespace: the package's own name, so that a copy of the package loaded under another
# name (Hugging Face kernels' build variants) registers ops of its own
LIBRARY = __name__.split(".")[0]
CPU_FLUSH = {"kda": flush_cpu, "gdn": scalar_flush_cpu}  # each family's fp32 PyTorch flush and step
CPU_STEP = {"kda": step_cpu, "gdn": scalar_step_cpu}


def flush_window(family: Family, raw, window: tuple, hcnt, picks, idx, q0, layout: str, kernel: str,
                 ctas_per_sm: int) -> None:
    """``interface.flush_inplace`` on a pool's tensors (``window`` in ``family.window``'s order):
    the kernel ``kernel`` (the pool's; any device where it runs, the CPU under Triton's
    interpreter) at ``ctas_per_sm`` resident CTAs an SM (0: the kernel's default) or, for
    ``kernel == ""``, the family's fp32 PyTorch flush (a CPU pool's)."""
    ckpt = pool_checkpoint(raw, hcnt, layout)
    if kernel:
        from .kernel import launch_flush

        launch_flush(ckpt, ckpt, family.kernel_window(window), q0, idx=idx, hcnt=hcnt, picks=picks, kernel=kernel,
                     ctas_per_sm=ctas_per_sm)
        return
    slots = idx[idx > 0].long()
    due = hcnt[slots] == L  # [N, NH]
    sel = due.nonzero()
    if sel.numel() == 0:
        return
    slot, head = slots[sel[:, 0]], sel[:, 1]
    new = CPU_FLUSH[family.name](*(t[slot, head] for t in ckpt), *(t[slot, head] for t in window), q0)
    for view, value in zip(ckpt, new):
        view[slot, head] = value
    for t, (name, (_, _, empty)) in zip(window, family.window.items()):
        if name not in ("kbuf", "ubuf"):  # the weights and the gate start empty; stale rows are never read
            t[slot, head] = empty


def step_window(family: Family, raw, window: tuple, hcnt, errors, idx, mixed, a, b, A_log, dt_bias, o, layout: str,
                kernel: str) -> None:
    """``interface.step_inplace`` on a pool's tensors (``window`` in ``family.window``'s order):
    the kernel ``kernel`` (the pool's) or, for ``kernel == ""``, the family's fp32 PyTorch step
    (a CPU pool's). The packed layout guards a full window that was never flushed (see
    ``step_inplace``)."""
    ckpt = pool_checkpoint(raw, hcnt, layout)
    heads = hcnt.shape[1]
    qx, kx, vx = split_mixed(mixed, heads, family)
    guard_full = layout == "packed"
    if kernel:
        from .kernel import launch_step

        launch_step(ckpt, family.kernel_window(window), hcnt, (qx, kx, vx, a, b), A_log, dt_bias, o, idx=idx,
                    errors=errors, guard_full=guard_full, key_group=family.key_group, kernel=kernel)
        return
    win = dict(zip(family.window, window))
    live = idx > 0
    o[~live] = 0
    rows = live.nonzero().squeeze(1)
    if rows.numel() == 0:
        return
    slots = idx[rows].long()
    h = hcnt[slots]
    w = win["w"]
    full = (h >= L) & (w[slots, :, L - 1] != 0) if guard_full else torch.zeros_like(h, dtype=torch.bool)
    h = torch.where(full, L, torch.where(h >= L, 0, h))
    n, hk = rows.numel(), family.key_heads(heads)
    outs = CPU_STEP[family.name](*(t[slots] for t in ckpt), *(t[slots] for t in window), h,
                                 qx[rows].reshape(n, hk, K), kx[rows].reshape(n, hk, K), vx[rows].reshape(n, heads, -1),
                                 a[rows], b[rows], A_log, dt_bias)
    o[rows] = outs[0]
    errors[0] += int(full.sum())
    keep = ~full  # programs that append their entry
    s = slots[:, None].expand(n, heads)[keep]
    hd = torch.arange(heads, device=slots.device)[None, :].expand(n, heads)[keep]
    e = h[keep].long()
    win["kbuf"][s, hd, e] = outs[1][keep]
    win["ubuf"][s, hd, e] = outs[2][keep]
    if family.scalar_gate:  # the weights decayed, the gate product
        w[s, hd] = outs[3][keep]
        win["p"][s, hd] = outs[4][keep]
    else:
        win["gbuf"][s, hd, e] = outs[3][keep]
        w[s, hd, e] = 1.0
        win["pcum"][s, hd] = outs[5][keep]
    hcnt[s, hd] = h[keep] + 1


def flush_pool(raw: torch.Tensor, kbuf: torch.Tensor, ubuf: torch.Tensor, gbuf: torch.Tensor, w: torch.Tensor,
               pcum: torch.Tensor, hcnt: torch.Tensor, picks: Optional[torch.Tensor], idx: torch.Tensor,
               q0: torch.Tensor, layout: str, kernel: str, ctas_per_sm: int) -> None:
    """``flush_window`` of a KDA pool."""
    flush_window(KDA, raw, (kbuf, ubuf, gbuf, w, pcum), hcnt, picks, idx, q0, layout, kernel, ctas_per_sm)


def step_pool(raw: torch.Tensor, kbuf: torch.Tensor, ubuf: torch.Tensor, gbuf: torch.Tensor, w: torch.Tensor,
              pcum: torch.Tensor, hcnt: torch.Tensor, errors: torch.Tensor, idx: torch.Tensor, mixed: torch.Tensor,
              a: torch.Tensor, b: torch.Tensor, A_log: torch.Tensor, dt_bias: torch.Tensor, o: torch.Tensor,
              layout: str, kernel: str) -> None:
    """``step_window`` of a KDA pool."""
    step_window(KDA, raw, (kbuf, ubuf, gbuf, w, pcum), hcnt, errors, idx, mixed, a, b, A_log, dt_bias, o, layout,
                kernel)


def gdn_flush_pool(raw: torch.Tensor, kbuf: torch.Tensor, ubuf: torch.Tensor, w: torch.Tensor, p: torch.Tensor,
                   hcnt: torch.Tensor, picks: Optional[torch.Tensor], idx: torch.Tensor, q0: torch.Tensor,
                   layout: str, kernel: str, ctas_per_sm: int) -> None:
    """``flush_window`` of a GDN pool."""
    flush_window(GDN, raw, (kbuf, ubuf, w, p), hcnt, picks, idx, q0, layout, kernel, ctas_per_sm)


def gdn_step_pool(raw: torch.Tensor, kbuf: torch.Tensor, ubuf: torch.Tensor, w: torch.Tensor, p: torch.Tensor,
                  hcnt: torch.Tensor, errors: torch.Tensor, idx: torch.Tensor, mixed: torch.Tensor, a: torch.Tensor,
                  b: torch.Tensor, A_log: torch.Tensor, dt_bias: torch.Tensor, o: torch.Tensor, layout: str,
                  kernel: str) -> None:
    """``step_window`` of a GDN pool."""
    step_window(GDN, raw, (kbuf, ubuf, w, p), hcnt, errors, idx, mixed, a, b, A_log, dt_bias, o, layout, kernel)


flush_op = torch.library.custom_op(f"{LIBRARY}::flush_inplace", flush_pool,
                                   mutates_args=("raw", "gbuf", "w", "pcum", "picks"))
step_op = torch.library.custom_op(f"{LIBRARY}::step_inplace", step_pool,
                                  mutates_args=("kbuf", "ubuf", "gbuf", "w", "pcum", "hcnt", "errors", "o"))
gdn_flush_op = torch.library.custom_op(f"{LIBRARY}::gdn_flush_inplace", gdn_flush_pool,
                                       mutates_args=("raw", "w", "p", "picks"))
gdn_step_op = torch.library.custom_op(f"{LIBRARY}::gdn_step_inplace", gdn_step_pool,
                                      mutates_args=("kbuf", "ubuf", "w", "p", "hcnt", "errors", "o"))


@flush_op.register_fake
def _(raw, kbuf, ubuf, gbuf, w, pcum, hcnt, picks, idx, q0, layout, kernel, ctas_per_sm):
    return None


@step_op.register_fake
def _(raw, kbuf, ubuf, gbuf, w, pcum, hcnt, errors, idx, mixed, a, b, A_log, dt_bias, o, layout, kernel):
    return None


@gdn_flush_op.register_fake
def _(raw, kbuf, ubuf, w, p, hcnt, picks, idx, q0, layout, kernel, ctas_per_sm):
    return None


@gdn_step_op.register_fake
def _(raw, kbuf, ubuf, w, p, hcnt, errors, idx, mixed, a, b, A_log, dt_bias, o, layout, kernel):
    return None


# each family's ops and their eager bodies: (flush op, flush body, step op, step body)
FAMILY_OPS = {"kda": (flush_op, flush_pool, step_op, step_pool),
              "gdn": (gdn_flush_op, gdn_flush_pool, gdn_step_op, gdn_step_pool)}


def call(op, body, *args) -> None:
    """``op(*args)`` while ``torch.compile`` traces (one node, no graph break), ``body(*args)``
    otherwise (no dispatcher on the eager path)."""
    (op if torch.compiler.is_compiling() else body)(*args)
