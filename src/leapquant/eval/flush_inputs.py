"""Input families of the accuracy criterion (SPEC section 6).

Each builder returns a dict with the eleven flush inputs ``codes, s_k, s_v, u, q, kbuf, ubuf,
gbuf, w, pcum, q0`` for a batch of ``B`` sequences x ``H`` heads, drawn from a seeded generator
on ``device``. Source: the NVlabs/kda request conless-leapquant-kda-flush.
"""

from __future__ import annotations

import torch

from .draw import HOT_ROW, Draw, random_state, scale_edge_heads, structured_checkpoint  # noqa: F401 (HOT_ROW: the family's hot row, read by tests)
from ..format import CHECKPOINT_FIELDS, WINDOW_FIELDS
from ..geometry import H, K, L, QMAX, R, V

CHECKPOINT_ARGS = tuple(CHECKPOINT_FIELDS)  # codes, s_k, s_v, u, q
WINDOW_ARGS = tuple(WINDOW_FIELDS)  # kbuf, ubuf, gbuf, w, pcum
FLUSH_ARGS = CHECKPOINT_ARGS + WINDOW_ARGS + ("q0",)  # run()'s argument order
FAMILIES = ("structured", "second_window", "random")  # SPEC section 6
STRESS_FAMILIES = ("coherent_huge", "tiny_state", "deep_decay", "small_state", "blind_q0")  # edges of the domain

# edge-case heads of the structured family
RANK1, ZERO, RANK2, TINY, HUGE, RANK1_NOISE, DECAYED, NO_DECAY = range(1, 9)
NO_DECAY_CHANNELS = 32
# small_state: head h at 10^(SMALL_STATE_DECADES[0] + h/(H-1) * span), |S| ~ 1e-4 .. 1e-12; blind_q0:
# the tokens' overlap with q0 at 10^(BLIND_OVERLAP_DECADES[0] + ...), 1e-6 .. 1e-1
SMALL_STATE_DECADES = (-4.0, -12.0)
BLIND_OVERLAP_DECADES = (-6.0, -1.0)
QUIET_WINDOW = 0.01  # small_state: window values against the tokens (a token-dominated state)
BLIND_RESIDUAL = 0.03  # blind_q0: s_k and window values against the tokens
BLIND_LOG_GATE = 0.5  # blind_q0: pcum in [-0.5, 0], so the decay leaves the old tokens dominant


def _structured_window(d: Draw, B: int) -> dict:
    gbuf = d.uniform(0.6, 1.0, B, H, L, K).half()
    pcum = gbuf.float().log().sum(-2) - d.uniform(0.0, 0.5, B, H, K)
    return {
        "kbuf": (d.normal(B, H, L, K) * 0.3).bfloat16(),
        "ubuf": (d.normal(B, H, L, V) * 0.3).bfloat16(),
        "gbuf": gbuf,
        "w": torch.ones(B, H, L, device=d.device),
        "pcum": pcum,
    }


def structured(B: int, device="cpu", seed: int = 0) -> dict:
    """Hot-row checkpoint, full window, and the eight edge-case heads of SPEC section 6."""
    d = Draw(device, seed)
    x = {
        **structured_checkpoint(d, B),
        **_structured_window(d, B),
        "q0": d.normal(V, R),
    }
    for head in (RANK1, ZERO, RANK2, RANK1_NOISE):  # checkpoint zero
        x["codes"][:, head] = 0
        x["u"][:, head] = 0
        x["q"][:, head] = 0
    x["w"][:, RANK1, 1:] = 0
    x["w"][:, ZERO] = 0
    x["w"][:, RANK2, 2:] = 0
    scale_edge_heads(x, TINY, HUGE, DECAYED)
    x["codes"][:, RANK1_NOISE] = (d.normal(B, V, K) * 40).round().clamp(-QMAX, QMAX).to(torch.int8)
    x["s_k"][:, RANK1_NOISE] *= 1e-6
    x["w"][:, RANK1_NOISE, 1:] = 0
    x["gbuf"][:, NO_DECAY, :, :NO_DECAY_CHANNELS] = 1
    x["pcum"][:, NO_DECAY, :NO_DECAY_CHANNELS] = 0
    return x


def second_window(B: int, device="cpu", seed: int = 0) -> dict:
    """The fp32 reference's checkpoint from ``structured`` plus a fresh full window."""
    from ..flush.naive import reference

    first = structured(B, device, seed)
    ckpt = chunked(reference, first)
    x = dict(zip(CHECKPOINT_ARGS, ckpt))
    x.update(_structured_window(Draw(device, seed + 7919), B))
    x["q0"] = first["q0"]
    return x


def random(B: int, device="cpu", seed: int = 0) -> dict:
    """Uniform codes, log-normal scales, N(0,1) tokens and window, gates down to 0.001."""
    d = Draw(device, seed)
    return {
        **random_state(d, B),
        "gbuf": d.uniform(0.001, 1.0, B, H, L, K).half(),
        "w": d.uniform(0.0, 1.0, B, H, L),
        "pcum": -d.uniform(0.0, 20.0, B, H, K),
        "q0": d.normal(V, R),
    }


def coherent_huge(B: int, device="cpu", seed: int = 0) -> dict:
    """A coherent state near the domain's edge (|S| ~ 8e3): a structured checkpoint under a
    window of large same-sign keys and values that never decays. ``u = S^T q`` of such a state
    exceeds fp16's range (65504) unless magnitude moves from u to q."""
    x = structured(B, device, seed)
    d = Draw(device, seed + 1)
    x["ubuf"] = (100 + 5 * d.normal(B, H, L, V)).bfloat16()
    x["kbuf"] = (5 + 0.3 * d.normal(B, H, L, K)).bfloat16()
    x["gbuf"] = torch.ones(B, H, L, K, dtype=torch.float16, device=d.device)
    x["w"] = torch.ones(B, H, L, device=d.device)
    x["pcum"] = torch.zeros(B, H, K, device=d.device)
    return x


def tiny_state(B: int, device="cpu", seed: int = 0) -> dict:
    """The random family scaled per head by 10^-(2 (h mod 10)): states from |S| ~ 1 down to
    ~1e-18, through and far below fp16's normal range (6e-5). The fp32 tokens of such states
    are fp16 subnormals or zero; the int8 residual with fp32 scales carries the state."""
    x = random(B, device, seed)
    scale = 10.0 ** (-2.0 * (torch.arange(H, device=x["s_k"].device) % 10))
    x["s_k"] = x["s_k"] * scale[None, :, None]
    x["u"] = (x["u"].float() * scale[None, :, None, None]).half()
    x["ubuf"] = (x["ubuf"].float() * scale[None, :, None, None]).bfloat16()
    return x


def deep_decay(B: int, device="cpu", seed: int = 0) -> dict:
    """The random family with log-gates down to -2000 and gates down to 1e-4: whole key
    channels of the old state and of early window entries underflow to zero."""
    x = random(B, device, seed)
    d = Draw(device, seed + 2)
    x["pcum"] = -d.uniform(0.0, 2000.0, B, H, K)
    x["gbuf"] = d.uniform(1e-4, 1.0, B, H, L, K).half()
    return x


def _per_head_decades(lo_hi: tuple[float, float], device) -> torch.Tensor:
    lo, hi = lo_hi
    return 10.0 ** torch.linspace(lo, hi, H, dtype=torch.float64, device=device).float()


def small_state(B: int, device="cpu", seed: int = 0) -> dict:
    """A token-dominated state (random checkpoint, window values x0.01) scaled per head from
    |S| ~ 1e-4 (head 0) to ~1e-12 (head 31), log-spaced. Its Compensator Tokens fall through
    fp16's subnormal range (below 6.1e-5) to zero, and its residual is small against S: both
    make the per-head ratio sensitive to the precision of the token basis (issue 10)."""
    x = random(B, device, seed)
    scale = _per_head_decades(SMALL_STATE_DECADES, x["s_k"].device)
    x["s_k"] = x["s_k"] * scale[None, :, None]
    x["u"] = (x["u"].float() * scale[None, :, None, None]).half()
    x["ubuf"] = (x["ubuf"].float() * (QUIET_WINDOW * scale)[None, :, None, None]).bfloat16()
    return x


def blind_q0(B: int, device="cpu", seed: int = 0) -> dict:
    """Old tokens that dominate the state (u x4, residual and window x0.03, mild gates) and that q0 nearly
    misses: q0 ~ N(0,1) on value rows 0..V/2-1 (zero below), each head's token rows orthonormal
    with a component of norm eps on those rows and the rest on rows V/2..V-1, eps log-spaced
    per head from 1e-6 (head 0) to 1e-1 (head 31). One round of subspace iteration from such a
    start finds the tokens only through S S^T q0, so the basis (and the residual) is sensitive
    to the precision of the products (issue 10)."""
    x = random(B, device, seed)
    d = Draw(device, seed + 3)
    half = V // 2
    eps = _per_head_decades(BLIND_OVERLAP_DECADES, d.device)[None, :, None, None]
    # orthonormal token rows inside each half (QR of Gaussian blocks), mixed by eps
    seen = torch.linalg.qr(d.normal(B, H, half, R))[0].transpose(-1, -2)  # [B, H, R, V/2]
    unseen = torch.linalg.qr(d.normal(B, H, V - half, R))[0].transpose(-1, -2)
    x["q"] = torch.cat([eps * seen, (1 - eps.square()).sqrt() * unseen], -1).half()
    x["u"] = (4 * x["u"].float()).half()
    # mild gates (log-gate down to -BLIND_LOG_GATE, not -20): the old tokens stay dominant
    x["pcum"] = x["pcum"] * (BLIND_LOG_GATE / 20.0)
    x["s_k"] = BLIND_RESIDUAL * x["s_k"]
    x["ubuf"] = (BLIND_RESIDUAL * x["ubuf"].float()).bfloat16()
    q0 = d.normal(V, R)
    q0[half:] = 0
    x["q0"] = q0
    return x


BUILDERS = {"structured": structured, "second_window": second_window, "random": random,
            "coherent_huge": coherent_huge, "tiny_state": tiny_state, "deep_decay": deep_decay,
            "small_state": small_state, "blind_q0": blind_q0}


def all_families() -> tuple[str, ...]:
    """The SPEC families then the stress families, read at call time (tests may add some)."""
    return tuple(FAMILIES) + tuple(STRESS_FAMILIES)


def make(family: str, B: int, device="cpu", seed: int = 0) -> dict:
    """Inputs of ``family`` (one of FAMILIES or STRESS_FAMILIES) for ``B`` sequences, drawn
    with ``seed`` on ``device``: a dict with the flush arguments of ``run`` (``FLUSH_ARGS``),
    codes int8 ``[B, H, V, K]``, s_k fp32 ``[B, H, K]``, s_v fp32 ``[B, H, V]``, u fp16
    ``[B, H, R, K]``, q fp16 ``[B, H, R, V]``, kbuf bf16 ``[B, H, L, K]``, ubuf bf16
    ``[B, H, L, V]``, gbuf fp16 ``[B, H, L, K]``, w fp32 ``[B, H, L]``, pcum fp32 ``[B, H, K]``
    and q0 fp32 ``[V, R]``. Raises ValueError for an unknown family.
    Source: SPEC section 6 (NVlabs/kda request conless-leapquant-kda-flush; LeapQuant, arXiv
    2609.38166); the stress families are this package's."""
    if family not in BUILDERS:
        raise ValueError(f"family must be one of {sorted(BUILDERS)}, got {family!r}")
    return BUILDERS[family](B, device, seed)


def chunked(fn, x: dict, chunk: int = 32):
    """Apply ``fn(**flush inputs)`` over the batch in chunks (bounded memory); the outputs,
    a tuple of ``[B, ...]`` tensors, are concatenated back."""
    B = x["codes"].shape[0]
    parts = []
    for b0 in range(0, B, chunk):
        args = {n: (t if n == "q0" else t[b0 : b0 + chunk]) for n, t in x.items()}
        parts.append(fn(**args))
    return tuple(torch.cat([p[i] for p in parts]) for i in range(len(parts[0])))
