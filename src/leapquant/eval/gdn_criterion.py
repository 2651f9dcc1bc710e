"""The GDN criteria (NVlabs/kda requests conless-leapquant-gdn-step and conless-leapquant-gdn-flush).

Step (``judge_step``): a candidate's outputs ``(o, k_row, u_row, w_new, p_new)`` against the
reference's (``leapquant.gdn.step_reference``, the fp32 definition), per (sequence, head):

- ``o``, ``k_row``, ``u_row`` (bf16, one ``[V]`` or ``[K]`` row a head): pass where the relative L2
  error ``||x - r|| / ||r|| <= REL_L2`` (3e-3) and the largest error ``max|x - r| <= REL_MAX max|r|``
  (1%), or where every element is within one bf16 step of the reference (``|x - r| <= bf16_step(r)``,
  the spacing of bf16 values at ``|r|``: the head differs by output rounding only); a head whose
  reference is all zero must come out all zero;
- ``w_new`` (``[L]`` a head), ``p_new`` (one a head): every element's relative error ``|x - r| /
  |r| <= REL_SCALAR`` (1e-5); where ``r == 0``, ``x`` must be 0;
- every output finite.

Flush (``evaluate_flush``): ``flush_criterion.evaluate`` with the state rebuilt by
``flush.naive.rebuild_scalar`` in fp64: per head ``err = mean|decode(checkpoint) - S|``, at most
1.01 times the fp32 reference's where that is ``>= 1e-4 mean|S|``, else at most ``1e-3 mean|S|``;
outputs finite, codes in [-127, 127], scales positive.

Everything here is element-wise or a reduction in fp64 (the flush's rebuild an fp64 einsum): no
verdict depends on how a BLAS rounds fp32 products.
Sources: NVlabs/kda requests conless-leapquant-gdn-step and conless-leapquant-gdn-flush.
"""

from __future__ import annotations

import torch

from . import flush_criterion
from ..flush.naive import rebuild_scalar
from ..step.naive import SCALAR_OUTPUTS

REL_L2 = 3e-3  # o, k_row, u_row: relative L2 error a head
REL_MAX = 1e-2  # ... and largest error against the head's largest reference value
REL_SCALAR = 1e-5  # w_new, p_new: relative error an element
ROW_OUTPUTS = SCALAR_OUTPUTS[:3]  # o, k_row, u_row
F64 = torch.float64
_BF16_BITS, _BF16_EMIN = 8, -126  # significant bits and smallest normal exponent of bf16


def bf16_step(r: torch.Tensor) -> torch.Tensor:
    """The spacing of bf16 values at magnitude ``|r|`` (fp64): ``2^(e - 7)`` for ``2^e <= |r| <
    2^(e+1)``, the subnormal spacing ``2^-133`` below bf16's smallest normal and at 0."""
    r = r.abs().to(F64)
    _, E = torch.frexp(r)  # |r| = m 2^E, m in [0.5, 1): e = E - 1
    e = torch.where(r > 0, torch.clamp(E - 1, min=_BF16_EMIN), _BF16_EMIN).to(F64)
    return torch.exp2(e - (_BF16_BITS - 1))


def row_figures(x: torch.Tensor, r: torch.Tensor) -> torch.Tensor:
    """Per head figure of one bf16 row output: fp64 ``[B, H]`` of ``x``, ``r`` ``[B, H, N]``.

    ``max(rel_l2 / REL_L2, rel_max / REL_MAX)`` with ``rel_l2 = ||x - r|| / ||r||`` and ``rel_max =
    max|x - r| / max|r||``; capped at 1 where every element is within ``bf16_step(r)`` of ``r``; 0
    for a zero reference head that came out zero and inf for one that did not; inf where ``x`` is
    not finite. ``<= 1`` passes."""
    x, r = x.to(F64), r.to(F64)
    d = x - r
    r_norm = torch.linalg.vector_norm(r, dim=-1)
    r_max = r.abs().amax(-1)
    zero = r_max == 0
    safe = lambda t: torch.where(zero, torch.ones_like(t), t)  # noqa: E731 (zero heads judged apart)
    fig = torch.maximum(torch.linalg.vector_norm(d, dim=-1) / safe(r_norm) / REL_L2,
                        d.abs().amax(-1) / safe(r_max) / REL_MAX)
    within_step = (d.abs() <= bf16_step(r)).all(-1)
    fig = torch.where(within_step, fig.clamp_max(1.0), fig)
    inf = torch.full_like(fig, float("inf"))
    fig = torch.where(zero, torch.where((x == 0).all(-1), torch.zeros_like(fig), inf), fig)
    return torch.where(torch.isfinite(x).all(-1), fig, inf)


def scalar_figures(x: torch.Tensor, r: torch.Tensor) -> torch.Tensor:
    """Per element figure of ``w_new`` or ``p_new`` (fp64, ``x``'s shape): ``|x - r| / (REL_SCALAR
    |r|)``; where ``r == 0``: 0 if ``x == 0`` else inf; inf where ``x`` is not finite. ``<= 1``
    passes."""
    x, r = x.to(F64), r.to(F64)
    d = (x - r).abs()
    fig = torch.where(r != 0, d / (REL_SCALAR * r.abs().clamp_min(torch.finfo(F64).tiny)),
                      torch.where(d == 0, 0.0, float("inf")).to(F64))
    return torch.where(torch.isfinite(x), fig, torch.full_like(fig, float("inf")))


def step_figures(out, ref) -> dict:
    """``{output name: fp64 figures}``: ``row_figures`` ``[B, H]`` for o, k_row, u_row and
    ``scalar_figures`` for w_new ``[B, H, L]`` and p_new ``[B, H]``. Raises ValueError where
    ``out`` and ``ref`` differ in length, shape or dtype."""
    if len(out) != len(SCALAR_OUTPUTS) or len(ref) != len(SCALAR_OUTPUTS):
        raise ValueError(f"expected the {len(SCALAR_OUTPUTS)} outputs {SCALAR_OUTPUTS}, got {len(out)} and {len(ref)}")
    res = {}
    for name, x, r in zip(SCALAR_OUTPUTS, out, ref):
        if x.shape != r.shape or x.dtype != r.dtype:
            raise ValueError(f"{name}: expected {r.dtype} {list(r.shape)}, got {x.dtype} {list(x.shape)}")
        res[name] = row_figures(x, r) if name in ROW_OUTPUTS else scalar_figures(x, r)
    return res


def worst_by_output(out, ref) -> dict:
    """``{output name: worst figure}`` (floats; ``step_figures``)."""
    return {n: float(f.max()) if f.numel() else 0.0 for n, f in step_figures(out, ref).items()}


def judge_step(out, ref) -> tuple[bool, float]:
    """``(ok, worst)`` of the step's outputs ``out = (o, k_row, u_row, w_new, p_new)`` against the
    reference's ``ref`` (same shapes and dtypes: o, u_row bf16 ``[B, H, V]``, k_row bf16 ``[B, H,
    K]``, w_new fp32 ``[B, H, L]``, p_new fp32 ``[B, H]``).

    ``worst`` is the largest figure over every (sequence, head) of o, k_row, u_row and every element
    of w_new and p_new, each normalised so that ``<= 1`` passes: ``max(rel_l2 / 3e-3, rel_max /
    1e-2)`` a row-output head (capped at 1 where the head is within one bf16 step of the reference
    everywhere; 0 or inf for an all-zero reference head, as the head came out zero or not) and
    ``rel_err / 1e-5`` a w_new or p_new element (0 or inf where the reference is 0); inf for a
    non-finite output. ``ok`` is ``worst <= 1``. Raises ValueError for outputs whose shapes or
    dtypes are not the reference's."""
    worst = max(worst_by_output(out, ref).values())
    return worst <= 1.0, worst


def state(x: dict, dtype: torch.dtype = F64) -> torch.Tensor:
    """The GDN state ``S = p decode(checkpoint) + sum_j w_j ubuf_j kbuf_j^T`` of flush inputs ``x``
    (``gdn_inputs.FLUSH_ARGS``, batched), ``[..., V, K]`` in ``dtype`` (``rebuild_scalar``)."""
    return rebuild_scalar(*(x[n] for n in ("codes", "s_k", "s_v", "u", "q", "kbuf", "ubuf", "w", "p")), dtype=dtype)


def evaluate_flush(x: dict, candidate, reference_ckpt) -> dict:
    """Judge the checkpoint ``candidate`` against ``reference_ckpt`` (both ``(codes, s_k, s_v, u,
    q)`` of the GDN flush inputs ``x``): ``flush_criterion.evaluate`` with ``S`` rebuilt by
    ``rebuild_scalar`` in fp64. Returns its dict: ``{"head", "batch_head": FormResult,
    "well_formed", "ok": bool, "err", "err_ref", "mag": fp64 [B, H]}``."""
    return flush_criterion.evaluate(x, candidate, reference_ckpt, rebuild=state)
