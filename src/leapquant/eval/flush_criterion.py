"""The accuracy criterion of SPEC section 5: judge decoded checkpoints, never codes.

Per head, ``err = mean |decode(checkpoint) - S|`` with ``S`` rebuilt exactly in fp64. Where the
fp32 reference's error is at least ``1e-4 * mean|S|`` (and > 0) the candidate may be at most
``1.01`` times worse; elsewhere it must stay under ``1e-3 * mean|S|``. The request's judge
averages each head index over the batch ("head" form); the strict form applies the bound to
every (batch item, head) ("batch_head" form). Source: NVlabs/kda request
conless-leapquant-kda-flush; LeapQuant (arXiv 2609.38166).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from ..format import decode
from ..geometry import QMAX
from ..flush.naive import rebuild as _kda_rebuild

KDA_STATE_ARGS = ("codes", "s_k", "s_v", "u", "q", "kbuf", "ubuf", "gbuf", "w", "pcum")

RATIO_BOUND = 1.01
CAPTURED_BELOW = 1e-4  # err_reference / mean|S| under this: the format captures the head
CAP = 1e-3  # allowed err / mean|S| on captured heads
FORMS = ("head", "batch_head")


def kda_state(x: dict, dtype: torch.dtype = torch.float64) -> torch.Tensor:
    """The KDA state of flush inputs ``x`` (``KDA_STATE_ARGS``, batched), ``[..., V, K]`` in
    ``dtype``: ``flush.naive.rebuild``. ``head_errors``' default rebuild."""
    return _kda_rebuild(*(x[n] for n in KDA_STATE_ARGS), dtype=dtype)


def head_errors(x: dict, ckpt, chunk: int = 16, rebuild=None) -> tuple[torch.Tensor, torch.Tensor]:
    """``(err, mag)``, fp64 ``[B, H]``: mean |decode(ckpt) - S| and mean |S| per program, with
    ``S`` rebuilt from the inputs ``x`` in fp64 (chunked over the batch to bound memory).

    ``rebuild``: ``rebuild(x_chunk) -> S`` fp64 ``[b, H, V, K]`` from a dict of ``x``'s batched
    tensors sliced to ``b`` sequences (every entry but ``q0``); default ``kda_state`` (the KDA
    rebuild; ``gdn_criterion.state`` is GDN's)."""
    rebuild = kda_state if rebuild is None else rebuild
    B = x["codes"].shape[0]
    errs, mags = [], []
    for b0 in range(0, B, chunk):
        sl = slice(b0, b0 + chunk)
        S = rebuild({n: t[sl] for n, t in x.items() if n != "q0"})
        D = decode(*(t[sl] for t in ckpt), dtype=torch.float64)
        errs.append((D - S).abs().mean((-2, -1)))
        mags.append(S.abs().mean((-2, -1)))
        del S, D
    return torch.cat(errs), torch.cat(mags)


@dataclass
class FormResult:
    """Outcome of one form of the criterion. ``ratio`` holds err_c / err_ref on the judged-by-ratio
    heads (NaN elsewhere); ``cap_ratio`` holds err_c / (CAP * mean|S|) on captured heads."""

    ok: bool
    worst_ratio: float
    median_ratio: float
    worst_cap_ratio: float
    heads: int
    heads_under_cap: int
    ratio: torch.Tensor
    cap_ratio: torch.Tensor


def judge_form(err_c: torch.Tensor, err_r: torch.Tensor, mag: torch.Tensor) -> FormResult:
    """Apply the criterion (SPEC section 5) to matching fp64 tensors of per-head errors:
    ``err_c`` the candidate's and ``err_r`` the fp32 reference's mean |decode - S|, ``mag``
    mean |S|, any shape (``[H]`` for the head form, ``[B, H]`` for every (batch, head)).
    Ratio bound 1.01 where the reference error is >= 1e-4 * mag, else err_c <= 1e-3 * mag.
    Source: NVlabs/kda request conless-leapquant-kda-flush; LeapQuant (arXiv 2609.38166)."""
    by_ratio = (err_r >= CAPTURED_BELOW * mag) & (err_r > 0)
    ok = torch.where(by_ratio, err_c <= RATIO_BOUND * err_r, err_c <= CAP * mag)
    nan = torch.full_like(err_c, float("nan"))
    ratio = torch.where(by_ratio, err_c / err_r, nan)
    cap_ratio = torch.where(~by_ratio & (mag > 0), err_c / (CAP * mag), nan)
    r = ratio[by_ratio]
    c = cap_ratio[~torch.isnan(cap_ratio)]
    return FormResult(
        ok=bool(ok.all()),
        worst_ratio=float(r.max()) if r.numel() else float("nan"),
        median_ratio=float(r.median()) if r.numel() else float("nan"),
        worst_cap_ratio=float(c.max()) if c.numel() else float("nan"),
        heads=ok.numel(),
        heads_under_cap=int((~by_ratio).sum()),
        ratio=ratio,
        cap_ratio=cap_ratio,
    )


def well_formed(ckpt) -> bool:
    """All outputs finite, codes within [-QMAX, QMAX], scales positive."""
    codes, s_k, s_v, u, q = ckpt
    finite = all(bool(torch.isfinite(t).all()) for t in (s_k, s_v, u, q))
    in_range = int(codes.min()) >= -QMAX and int(codes.max()) <= QMAX
    return finite and in_range and bool((s_k > 0).all()) and bool((s_v > 0).all())


def evaluate(x: dict, candidate, reference_ckpt, rebuild=None) -> dict:
    """Judge ``candidate`` against ``reference_ckpt`` (both ``(codes, s_k, s_v, u, q)`` from the
    same inputs ``x``), the state rebuilt by ``rebuild`` (``head_errors``; default KDA's). Returns
    ``{"head": FormResult, "batch_head": FormResult, "well_formed": bool, "ok": bool, "err": fp64
    [B, H], "err_ref": ..., "mag": ...}``."""
    err_c, mag = head_errors(x, candidate, rebuild=rebuild)
    err_r, _ = head_errors(x, reference_ckpt, rebuild=rebuild)
    out = {
        "head": judge_form(err_c.mean(0), err_r.mean(0), mag.mean(0)),
        "batch_head": judge_form(err_c, err_r, mag),
        "well_formed": well_formed(candidate),
        "err": err_c,
        "err_ref": err_r,
        "mag": mag,
    }
    out["ok"] = out["well_formed"] and all(out[f].ok for f in FORMS)
    return out
