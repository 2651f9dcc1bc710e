"""Input families of the GDN (Gated DeltaNet) criteria: the decode step's and the flush's
(NVlabs/kda requests conless-leapquant-gdn-step and conless-leapquant-gdn-flush).

Each family is derived from the KDA family of the same name (``step_inputs``, ``flush_inputs``), so
that the KDA edge-case heads carry over with their indices. From a KDA input dict:

- kept as they are: the checkpoint ``codes, s_k, s_v, u, q``, the window's ``kbuf, ubuf, w`` and
  ``h``, this token's ``vx`` and ``b``, ``A_log``, and the flush's ``q0``;
- ``p`` fp32 ``[B, H]`` (the scalar gate's product since the checkpoint) ``= exp(mean_k pcum /
  P_SOFTEN)`` clamped to ``[P_FLOOR, 1]``, and ``P_FLOOR`` where that mean is below -100 (the
  KDA log-gate of -200, head ``DECAYED``: a checkpoint decayed to nothing); the log-gates are
  softened so that ``p`` spans the requests' range instead of ending near e^-10;
- ``qx, kx`` bf16 ``[B, H / 2, K]``: the KDA rows of the even heads (key head ``i`` serves value
  heads ``2i`` and ``2i + 1``, as GDN's ``key_group`` 2);
- ``a`` bf16 ``[B, H]``: KDA's ``a`` (``[B, H, K]``) at channel 0; ``dt_bias`` fp32 ``[H]``: KDA's
  ``dt_bias`` (``[H, K]``) at channel 0;
- ``gbuf`` and ``pcum`` dropped.

Step families (``STEP_FAMILIES``; the 17 arguments of ``leapquant.gdn.step``, ``STEP_ARGS``):

- ``structured``: KDA's structured step -- a hot-row checkpoint, windows filled to a random ``h``
  with ``w = 1`` on live entries, and the edge-case heads ``step_inputs.EDGE_HEADS``: 1 empty window
  and zero codes, 2 all-zero state and empty window, 3 a full window (``h = L - 1``), 4 tiny and
  5 huge residual, tokens and window, 6 a checkpoint decayed to nothing (``p = P_FLOOR``);
- ``next_step``: ``structured`` with the fp32 reference's outputs (``leapquant.gdn.step_reference``)
  appended at entry ``h`` (``kbuf, ubuf`` row ``h``, ``w = w_new``, ``p = p_new``, ``h + 1``; heads at
  ``L - 1`` keep ``h`` and overwrite their last entry) and a fresh token;
- ``random``: KDA's random step (uniform codes, log-normal scales, N(0, 1) tokens and window).
  Its KDA log-gates are ``-U(0, 20)`` a channel, so ``p = exp(mean / P_SOFTEN)`` lies near
  ``e^-2.5`` (about 0.05 to 0.1).

Flush families (``FLUSH_FAMILIES``; the 10 arguments of ``leapquant.gdn.run``, ``FLUSH_ARGS``):

- ``structured``: KDA's structured flush -- a hot-row checkpoint, a full window (``w = 1``) and the
  edge-case heads ``flush_inputs`` names: 1 rank 1, 2 all zero (empty window, zero checkpoint),
  3 rank 2, 4 tiny, 5 huge, 6 rank 1 plus a noise floor, 7 a checkpoint decayed to nothing
  (``p = P_FLOOR``), 8 (KDA's undecayed channels: here a milder ``p``);
- ``second_window``: the fp32 GDN reference's checkpoint (``leapquant.gdn.reference``) of
  ``structured`` plus a fresh full window (KDA's structured window, ``p`` from its log-gates);
- ``random``: KDA's random flush (``w ~ U(0, 1)``; ``p`` near ``e^-2.5`` as the random step's).
- ``fast_decay``: ``random`` with the window a fast scalar decay leaves, as the GDN step builds
  it: a per-token gate ``g`` log-uniform in ``FAST_DECAY_GATES`` a (sequence, head), ``w_j =
  g^(L-1-j)`` and ``p = g^L`` (4e-9 to 0.19): states of numerically low rank, on both sides of
  the flush's ``geometry.ORTHONORMAL_QK_BELOW`` (not one of the requests' families).

``heads`` (even, 2 to 32) keeps the first ``heads`` value heads and the first ``heads / 2`` key
heads of the 32-head inputs (the edge-case heads 1..6 or 1..8 among them where ``heads`` allows).
Sources: NVlabs/kda requests conless-leapquant-gdn-step and conless-leapquant-gdn-flush (the
families they define) and this package's KDA families.
"""

from __future__ import annotations

import math

import torch

from . import flush_inputs, step_inputs
from .draw import Draw
from ..family import GDN
from ..geometry import H, L

STEP_ARGS = ("codes", "s_k", "s_v", "u", "q", "kbuf", "ubuf", "w", "p", "h",
             "qx", "kx", "vx", "a", "b", "A_log", "dt_bias")  # leapquant.gdn.step's argument order
FLUSH_ARGS = ("codes", "s_k", "s_v", "u", "q", "kbuf", "ubuf", "w", "p", "q0")  # leapquant.gdn.run's
CHECKPOINT_ARGS = FLUSH_ARGS[:5]
WINDOW_ARGS = tuple(GDN.window)  # kbuf, ubuf, w, p
TOKEN_ARGS = ("qx", "kx", "vx", "a", "b")
STEP_FAMILIES = ("structured", "next_step", "random")
FLUSH_FAMILIES = ("structured", "second_window", "random", "fast_decay")
P_FLOOR = 1e-30  # smallest gate product p (a checkpoint decayed to nothing)
P_SOFTEN = 4.0  # p = exp(mean_k pcum / P_SOFTEN): KDA's summed log-gates softened into GDN's range
FAST_DECAY_GATES = (0.3, 0.9)  # fast_decay's per-token gates g, log-uniform: p = g^L from 4e-9 to 0.19
NEXT_STEP_SEED = 7919  # seed offset of next_step's fresh token, second_window's fresh window and fast_decay's gates


def gate_product(pcum: torch.Tensor) -> torch.Tensor:
    """``p = exp(mean over K of pcum / P_SOFTEN)`` clamped to ``[P_FLOOR, 1]`` (``P_FLOOR`` below a
    mean of -100): fp32 ``[...]`` of a KDA log-gate sum ``pcum`` fp32 ``[..., K]``."""
    mean = pcum.float().mean(-1)
    return torch.where(mean < -100.0, P_FLOOR, torch.exp(mean / P_SOFTEN).clamp(P_FLOOR, 1.0))


def from_kda_token(x: dict) -> dict:
    """GDN's ``qx, kx, vx, a, b`` of a KDA token dict (``qx, kx, a`` ``[..., 32, K]``, any leading
    dims): q and k of the even heads ``[..., 16, K]``, ``a`` at channel 0 ``[..., 32]``, ``vx`` and
    ``b`` as they are."""
    return {"qx": x["qx"][..., :: GDN.key_group, :].contiguous(), "kx": x["kx"][..., :: GDN.key_group, :].contiguous(),
            "vx": x["vx"], "a": x["a"][..., 0].contiguous(), "b": x["b"]}


def from_kda_params(params: dict) -> dict:
    """GDN's ``A_log`` ``[H]`` and ``dt_bias`` ``[H]`` of KDA's (``dt_bias`` ``[H, K]``: channel 0)."""
    return {"A_log": params["A_log"], "dt_bias": params["dt_bias"][:, 0].contiguous()}


def from_kda_step(x: dict) -> dict:
    """GDN step inputs (``STEP_ARGS``) of KDA step inputs ``x`` (``step_inputs.STEP_ARGS``), 32
    heads, as the module docstring says."""
    y = {n: x[n] for n in ("codes", "s_k", "s_v", "u", "q", "kbuf", "ubuf", "w")}
    y["p"] = gate_product(x["pcum"])
    y["h"] = x["h"]
    y.update(from_kda_token(x))
    y.update(from_kda_params(x))
    return {n: y[n] for n in STEP_ARGS}


def from_kda_flush(x: dict) -> dict:
    """GDN flush inputs (``FLUSH_ARGS``) of KDA flush inputs ``x`` (``flush_inputs.FLUSH_ARGS``)."""
    y = {n: x[n] for n in ("codes", "s_k", "s_v", "u", "q", "kbuf", "ubuf", "w", "q0")}
    y["p"] = gate_product(x["pcum"])
    return {n: y[n] for n in FLUSH_ARGS}


def take_heads(x: dict, heads: int) -> dict:
    """The first ``heads`` value heads (and ``heads / 2`` key heads) of 32-head GDN inputs, as
    contiguous tensors; ``q0`` as it is. Raises ValueError unless ``heads`` is an even count a GDN
    pool holds (``GDN.head_counts()``)."""
    if heads not in GDN.head_counts():
        raise ValueError(f"heads must be one of {GDN.head_counts()}, got {heads!r}")
    if heads == H:
        return x
    hk = GDN.key_heads(heads)
    out = {}
    for n, t in x.items():
        if n == "q0":
            out[n] = t
        elif n in ("A_log", "dt_bias"):
            out[n] = t[:heads].contiguous()
        elif n in ("qx", "kx"):
            out[n] = t[:, :hk].contiguous()
        else:
            out[n] = t[:, :heads].contiguous()
    return out


def next_step(x: dict, out, seed: int) -> dict:
    """The inputs of the step after ``x`` (32-head GDN step inputs): its outputs ``out = (o, k_row,
    u_row, w_new, p_new)`` appended at entry ``h`` (``kbuf``, ``ubuf`` row ``h``, ``w = w_new``,
    ``p = p_new``), ``h + 1`` (heads at ``L - 1`` keep ``h``), the checkpoint and the gate's
    parameters as they were, and a fresh token (KDA's ``step_inputs.tokens`` drawn with ``seed``,
    made GDN's). ``x`` is not modified."""
    _, k_row, u_row, w_new, p_new = out
    y = {n: t.clone() for n, t in x.items()}
    B = x["h"].shape[0]
    bi = torch.arange(B, device=x["h"].device)[:, None]
    hi = torch.arange(x["h"].shape[1], device=x["h"].device)[None, :]
    h = x["h"].long()
    y["kbuf"][bi, hi, h] = k_row
    y["ubuf"][bi, hi, h] = u_row
    y["w"] = w_new.clone()
    y["p"] = p_new.clone()
    y["h"] = torch.where(x["h"] < L - 1, x["h"] + 1, x["h"])
    y.update(from_kda_token(step_inputs.tokens(B, x["h"].device, seed)))
    return y


def _step_structured(B, device, seed):
    return from_kda_step(step_inputs.make("structured", B, device, seed))


def _step_next(B, device, seed):
    from ..step.naive import scalar_step_reference

    first = _step_structured(B, device, seed)
    return next_step(first, scalar_step_reference(**first), seed + NEXT_STEP_SEED)


def _step_random(B, device, seed):
    return from_kda_step(step_inputs.make("random", B, device, seed))


def _flush_structured(B, device, seed):
    return from_kda_flush(flush_inputs.make("structured", B, device, seed))


def _flush_second_window(B, device, seed):
    from ..flush.naive import scalar_reference

    first = _flush_structured(B, device, seed)
    x = dict(zip(CHECKPOINT_ARGS, flush_inputs.chunked(scalar_reference, first)))
    window = flush_inputs._structured_window(Draw(device, seed + NEXT_STEP_SEED), B)
    x.update(kbuf=window["kbuf"], ubuf=window["ubuf"], w=window["w"], p=gate_product(window["pcum"]), q0=first["q0"])
    return {n: x[n] for n in FLUSH_ARGS}


def _flush_random(B, device, seed):
    return from_kda_flush(flush_inputs.make("random", B, device, seed))


def _flush_fast_decay(B, device, seed):
    x = _flush_random(B, device, seed)
    lo, hi = FAST_DECAY_GATES
    u = Draw(device, seed + NEXT_STEP_SEED).uniform(0.0, 1.0, B, x["p"].shape[1])
    g = torch.exp(math.log(lo) + (math.log(hi) - math.log(lo)) * u)  # [B, H]
    age = torch.arange(L - 1, -1, -1, device=device, dtype=torch.float32)  # entry j was appended L-1-j steps ago
    x["w"] = g[..., None] ** age
    x["p"] = g**L
    return x


STEP_BUILDERS = {"structured": _step_structured, "next_step": _step_next, "random": _step_random}
FLUSH_BUILDERS = {"structured": _flush_structured, "second_window": _flush_second_window, "random": _flush_random,
                  "fast_decay": _flush_fast_decay}


def make_step(family: str, B: int, device="cpu", seed: int = 0, heads: int = H) -> dict:
    """Inputs of the GDN step family ``family`` (one of ``STEP_FAMILIES``) for ``B`` sequences of
    ``heads`` value heads (``HK = heads / 2`` key heads) on ``device``, drawn with ``seed``: a dict
    with ``STEP_ARGS`` -- codes int8 ``[B, heads, V, K]``, s_k fp32 ``[B, heads, K]``, s_v fp32
    ``[B, heads, V]``, u fp16 ``[B, heads, R, K]``, q fp16 ``[B, heads, R, V]``, kbuf bf16 ``[B,
    heads, L, K]``, ubuf bf16 ``[B, heads, L, V]``, w fp32 ``[B, heads, L]`` (0 past ``h``), p fp32
    ``[B, heads]`` in ``[P_FLOOR, 1]``, h int32 ``[B, heads]`` in ``[0, L)``, qx/kx bf16 ``[B, HK,
    K]``, vx bf16 ``[B, heads, V]``, a/b bf16 ``[B, heads]``, A_log fp32 ``[heads]``, dt_bias fp32
    ``[heads]``. Raises ValueError for an unknown family or a head count GDN does not hold.
    Source: NVlabs/kda request conless-leapquant-gdn-step; derived from ``step_inputs.make``."""
    return _build(STEP_BUILDERS, family, B, device, seed, heads)


def make_flush(family: str, B: int, device="cpu", seed: int = 0, heads: int = H) -> dict:
    """Inputs of the GDN flush family ``family`` (one of ``FLUSH_FAMILIES``) for ``B`` sequences of
    ``heads`` heads on ``device``, drawn with ``seed``: a dict with ``FLUSH_ARGS`` -- the checkpoint
    as ``make_step``'s, kbuf bf16 ``[B, heads, L, K]``, ubuf bf16 ``[B, heads, L, V]``, w fp32 ``[B,
    heads, L]`` in [0, 1], p fp32 ``[B, heads]`` in ``[P_FLOOR, 1]``, q0 fp32 ``[V, R]``. Raises
    ValueError for an unknown family or a head count GDN does not hold.
    Source: NVlabs/kda request conless-leapquant-gdn-flush; derived from ``flush_inputs.make``."""
    return _build(FLUSH_BUILDERS, family, B, device, seed, heads)


def _build(builders: dict, family: str, B: int, device, seed: int, heads: int) -> dict:
    # one family of ``builders`` at 32 heads, then ``heads`` of them (the checks of both makers)
    if family not in builders:
        raise ValueError(f"family must be one of {tuple(builders)}, got {family!r}")
    if heads not in GDN.head_counts():
        raise ValueError(f"heads must be one of {GDN.head_counts()}, got {heads!r}")
    return take_heads(builders[family](B, device, seed), heads)
