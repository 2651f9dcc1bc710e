"""Input families of the decode step's criterion (NVlabs/kda request conless-leapquant-kda-step).

Each builder returns a dict with the eighteen arguments of ``step`` (``STEP_ARGS``) for ``B``
sequences x ``H`` heads, drawn from a seeded generator on ``device``:

- ``structured``: a hot-row checkpoint (value row 5 scaled x30), a window filled to a random
  ``h``, and six edge-case heads (``EDGE_HEADS``);
- ``next_step``: ``structured``'s inputs with the fp32 reference's outputs appended at entry ``h``
  (``h + 1``; heads at ``L - 1`` keep ``h``) and a fresh token (``next_step``);
- ``random``: uniform codes, log-normal scales, N(0, 1) tokens and window, gates down to 0.001,
  summed log-gates down to -20.

The gate's parameters ``A_log`` ``[H]`` and ``dt_bias`` ``[H, K]`` come from a fixed generator
(``model_params``), the same in every family, as a model's weights would be.
"""

from __future__ import annotations

import torch

from .draw import Draw, random_state, scale_edge_heads, structured_checkpoint
from ..geometry import H, K, L, V

STEP_ARGS = ("codes", "s_k", "s_v", "u", "q", "kbuf", "ubuf", "gbuf", "w", "pcum", "h",
             "qx", "kx", "vx", "a", "b", "A_log", "dt_bias")  # step()'s argument order
TOKEN_ARGS = ("qx", "kx", "vx", "a", "b")
FAMILIES = ("structured", "next_step", "random")
# edge-case heads of the structured family
EMPTY_ZERO_CODES, ZERO_STATE, FULL_WINDOW, TINY, HUGE, DECAYED = range(1, 7)
EDGE_HEADS = {EMPTY_ZERO_CODES: "empty window, zero codes", ZERO_STATE: "all-zero state, empty window",
              FULL_WINDOW: "h = L - 1", TINY: "tiny residual, tokens and window", HUGE: "huge residual, tokens and window",
              DECAYED: "pcum - 200"}
MODEL_SEED = 20240917  # the fixed generator of A_log and dt_bias


def model_params(device="cpu") -> dict:
    """``{"A_log": fp32 [H], "dt_bias": fp32 [H, K]}``: ``A_log = log(U(0,1) * 1.5 + 0.5)``,
    ``dt_bias = N(0,1) * 0.5 - 1``, from the fixed generator ``MODEL_SEED``."""
    d = Draw(device, MODEL_SEED)
    return {"A_log": torch.log(d.uniform(0.0, 1.0, H) * 1.5 + 0.5), "dt_bias": d.normal(H, K) * 0.5 - 1.0}


def tokens(B: int, device="cpu", seed: int = 0) -> dict:
    """A fresh token per program: ``qx, kx, a`` bf16 ``[B, H, K]`` and ``vx`` bf16 ``[B, H, V]``,
    all N(0, 1); ``b`` bf16 ``[B, H]``, 2 N(0, 1)."""
    d = Draw(device, seed)
    return {"qx": d.normal(B, H, K).bfloat16(), "kx": d.normal(B, H, K).bfloat16(),
            "vx": d.normal(B, H, V).bfloat16(), "a": d.normal(B, H, K).bfloat16(),
            "b": (2 * d.normal(B, H)).bfloat16()}


def _live(h: torch.Tensor) -> torch.Tensor:
    return torch.arange(L, device=h.device) < h.unsqueeze(-1)  # [B, H, L]


def _window_gates(d: Draw, h: torch.Tensor, lo: float) -> tuple[torch.Tensor, torch.Tensor]:
    # gbuf U(lo, 1) on live entries, 1 past the fill count; w = 1 on live entries, 0 elsewhere
    B = h.shape[0]
    live = _live(h)
    gbuf = torch.where(live.unsqueeze(-1), d.uniform(lo, 1.0, B, H, L, K), torch.ones((), device=d.device)).half()
    return gbuf, live.float()


def structured(B: int, device="cpu", seed: int = 0) -> dict:
    """Hot-row checkpoint, windows filled to a random ``h``, and the edge-case heads ``EDGE_HEADS``."""
    d = Draw(device, seed)
    x = {
        **structured_checkpoint(d, B),
        "kbuf": (d.normal(B, H, L, K) * 0.1).bfloat16(),
        "ubuf": (d.normal(B, H, L, V) * 0.3).bfloat16(),
    }
    h = d.fill(B, H)
    h[:, EMPTY_ZERO_CODES] = 0
    h[:, ZERO_STATE] = 0
    h[:, FULL_WINDOW] = L - 1
    x["gbuf"], x["w"] = _window_gates(d, h, 0.5)
    x["pcum"] = x["gbuf"].float().log().sum(-2) - d.uniform(0.0, 1.0, B, H, K)
    x["h"] = h
    x["codes"][:, EMPTY_ZERO_CODES] = 0
    for name in ("codes", "u", "q"):
        x[name][:, ZERO_STATE] = 0
    scale_edge_heads(x, TINY, HUGE, DECAYED)
    x.update(tokens(B, device, seed + 1))
    x.update(model_params(device))
    return x


def random(B: int, device="cpu", seed: int = 0) -> dict:
    """Uniform codes in [-127, 127], log-normal scales, N(0, 1) tokens and window, gates
    U(0.001, 1) on live entries, ``pcum = -U(0, 20)``, ``h`` uniform in [0, L)."""
    d = Draw(device, seed)
    x = {
        **random_state(d, B),
    }
    h = d.fill(B, H)
    x["gbuf"], x["w"] = _window_gates(d, h, 0.001)
    x["pcum"] = -d.uniform(0.0, 20.0, B, H, K)
    x["h"] = h
    x.update(tokens(B, device, seed + 1))
    x.update(model_params(device))
    return x


def next_step(x: dict, out, seed: int = 0) -> dict:
    """The inputs of the step after ``x``: its outputs ``out = (o, k_row, u_row, g_row, w_new,
    pcum_new)`` appended at entry ``h`` (``kbuf``, ``ubuf``, ``gbuf`` row ``h``, ``w = w_new``,
    ``pcum = pcum_new``), ``h + 1`` (heads at ``L - 1`` keep ``h``), the checkpoint and the gate's
    parameters as they were, and a fresh token drawn with ``seed``. ``x`` is not modified."""
    _, k_row, u_row, g_row, w_new, pcum_new = out
    y = {n: t.clone() for n, t in x.items()}
    B = x["h"].shape[0]
    bi = torch.arange(B, device=x["h"].device)[:, None]
    hi = torch.arange(H, device=x["h"].device)[None, :]
    h = x["h"].long()
    y["kbuf"][bi, hi, h] = k_row
    y["ubuf"][bi, hi, h] = u_row
    y["gbuf"][bi, hi, h] = g_row
    y["w"] = w_new.clone()
    y["pcum"] = pcum_new.clone()
    y["h"] = torch.where(x["h"] < L - 1, x["h"] + 1, x["h"])
    y.update(tokens(B, x["h"].device, seed))
    return y


def _next_step_family(B: int, device="cpu", seed: int = 0) -> dict:
    from ..step.naive import step_reference

    first = structured(B, device, seed)
    return next_step(first, step_reference(**first), seed + 7919)


BUILDERS = {"structured": structured, "next_step": _next_step_family, "random": random}


def make(family: str, B: int, device="cpu", seed: int = 0) -> dict:
    """Inputs of ``family`` (one of ``FAMILIES``) for ``B`` sequences on ``device``, drawn with
    ``seed``: a dict with ``STEP_ARGS`` -- codes int8 ``[B, H, V, K]``, s_k fp32 ``[B, H, K]``,
    s_v fp32 ``[B, H, V]``, u fp16 ``[B, H, R, K]``, q fp16 ``[B, H, R, V]``, kbuf bf16
    ``[B, H, L, K]``, ubuf bf16 ``[B, H, L, V]``, gbuf fp16 ``[B, H, L, K]``, w fp32 ``[B, H, L]``,
    pcum fp32 ``[B, H, K]``, h int32 ``[B, H]``, qx/kx/a bf16 ``[B, H, K]``, vx bf16 ``[B, H, V]``,
    b bf16 ``[B, H]``, A_log fp32 ``[H]``, dt_bias fp32 ``[H, K]``. Raises ValueError for an
    unknown family. Source: NVlabs/kda request conless-leapquant-kda-step."""
    if family not in BUILDERS:
        raise ValueError(f"family must be one of {FAMILIES}, got {family!r}")
    return BUILDERS[family](B, device, seed)
