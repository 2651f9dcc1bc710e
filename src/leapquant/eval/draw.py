"""Seeded draws shared by the input families of the flush and the step (``flush_inputs``,
``step_inputs``): a generator on a device, and the structured checkpoint both requests define
(full-range codes, a hot value row, Compensator Tokens) with its scaled edge heads, and the
random family's state.

Sources: NVlabs/kda requests conless-leapquant-kda-flush and conless-leapquant-kda-step.
"""

from __future__ import annotations

import torch

from ..geometry import H, K, L, QMAX, R, V

HOT_ROW = 5  # the value row whose scale is 30x the others in the structured checkpoint


class Draw:
    """Seeded draws on ``device``: ``normal``, ``uniform(lo, hi)``, ``fill`` (int32 in [0, L))."""

    def __init__(self, device, seed: int):
        self.device = torch.device(device)
        self.gen = torch.Generator(device=self.device).manual_seed(seed)

    def normal(self, *shape):
        return torch.randn(shape, generator=self.gen, device=self.device)

    def uniform(self, lo, hi, *shape):
        return lo + (hi - lo) * torch.rand(shape, generator=self.gen, device=self.device)

    def fill(self, *shape):
        return torch.randint(0, L, shape, generator=self.gen, device=self.device, dtype=torch.int32)


def structured_checkpoint(d: Draw, B: int) -> dict:
    """codes ``round(40 N)`` clamped, ``s_k ~ U(0.05, 0.25)``, ``s_v ~ U(0.1, 0.6)`` with row
    ``HOT_ROW`` x30, ``u, q ~ 0.5 N`` fp16, for ``[B, H]`` programs (drawn in that order after s_v)."""
    s_v = d.uniform(0.1, 0.6, B, H, V)
    s_v[..., HOT_ROW] *= 30
    return {
        "codes": (d.normal(B, H, V, K) * 40).round().clamp(-QMAX, QMAX).to(torch.int8),
        "s_k": d.uniform(0.05, 0.25, B, H, K),
        "s_v": s_v,
        "u": (d.normal(B, H, R, K) * 0.5).half(),
        "q": (d.normal(B, H, R, V) * 0.5).half(),
    }


def scale_edge_heads(x: dict, tiny: int, huge: int, decayed: int) -> None:
    """The structured families' scaled heads, as both requests define them, in place: head
    ``tiny``'s s_k x1e-4, u x1e-2, ubuf x1e-4; head ``huge``'s s_k x300, u x17, ubuf x300; head
    ``decayed``'s pcum - 200."""
    x["s_k"][:, tiny] *= 1e-4
    x["u"][:, tiny] *= 1e-2
    x["ubuf"][:, tiny] *= 1e-4
    x["s_k"][:, huge] *= 300
    x["u"][:, huge] *= 17
    x["ubuf"][:, huge] *= 300
    x["pcum"][:, decayed] -= 200


def random_state(d: Draw, B: int) -> dict:
    """The random family's checkpoint and window values, as both requests define them: codes
    uniform in [-127, 127], ``s_k = 0.05 exp(0.7 N)``, ``s_v = 0.3 exp(0.7 N)``, ``u, q`` N(0, 1)
    fp16, ``kbuf, ubuf`` N(0, 1) bf16, for ``[B, H]`` programs (drawn in that order)."""
    return {
        "codes": torch.randint(-QMAX, QMAX + 1, (B, H, V, K), generator=d.gen, device=d.device).to(torch.int8),
        "s_k": 0.05 * torch.exp(0.7 * d.normal(B, H, K)),
        "s_v": 0.3 * torch.exp(0.7 * d.normal(B, H, V)),
        "u": d.normal(B, H, R, K).half(),
        "q": d.normal(B, H, R, V).half(),
        "kbuf": d.normal(B, H, L, K).bfloat16(),
        "ubuf": d.normal(B, H, L, V).bfloat16(),
    }
