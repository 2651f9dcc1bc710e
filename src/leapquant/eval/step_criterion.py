"""The decode step's element-wise criterion (NVlabs/kda request conless-leapquant-kda-step).

Every output is compared with the same formula evaluated in fp64 (``exact``). With ``M`` that
formula evaluated on the absolute values of every term (``exact(inp, absval=True)``):

- ``o``, ``k_row``, ``u_row`` (bf16): ``|x - exact| <= half a bf16 step at max(|x|, |exact|) +
  1e-5 M``, and where ``M == 0`` the output must be 0;
- ``g_row`` (fp16): ``|x - exact| <= half an fp16 step at max(|x|, |exact|) + 1e-5 |exact|``;
- ``w_new``: exact; ``pcum_new``: ``|x - exact| <= 1e-5 (|exact| + 1)``;
- every output finite.

``judge`` reports the worst error / tolerance over all elements (``<= 1`` passes).
Source: NVlabs/kda request conless-leapquant-kda-step; LeapQuant (arXiv 2609.38166).
"""

from __future__ import annotations

import torch

from ..step.naive import OUTPUTS, entry_decay, gate, normalize_qk, state_before_update, update_and_output

REL_SLACK = 1e-5  # the 1e-5 M (and 1e-5 |exact|, 1e-5 (|exact| + 1)) terms
F64 = torch.float64
# significant bits and smallest normal exponent of the two 16-bit formats
_BITS = {torch.bfloat16: (8, -126), torch.float16: (11, -14)}


def exact(inp: dict, absval: bool = False) -> dict:
    """The step's outputs in fp64 from the inputs ``inp`` (``step_inputs.STEP_ARGS``), before any
    rounding to the output dtypes: ``{"o", "k_row", "u_row", "g_row", "w_new", "pcum_new"}``
    (``g_row = en``, ``k_row = kn``, ``u_row = u_new``).

    ``absval``: the magnitudes ``M`` instead, ``{"o", "k_row", "u_row"}``: the same expressions on
    the absolute values of every term -- ``|S| = (|q|^T |u| + |codes| s_k/127 s_v) pc + sum_j |w_j|
    |ubuf_j| (|kbuf_j| D_j)^T``, ``M_k = |kn|``, ``M_u = beta (|v| + |S| |kn|)``, ``M_o = |S| |qn| +
    (|kn| . |qn|) M_u``.
    """
    x = {n: t for n, t in inp.items()}
    qn, kn = normalize_qk(x["qx"], x["kx"], F64)
    g, en, beta = gate(x["a"], x["b"], x["A_log"], x["dt_bias"], F64)
    pcum_new = x["pcum"].to(F64) + g
    pc = torch.exp(pcum_new)
    D = entry_decay(x["gbuf"], en, x["h"], F64)
    v = x["vx"].to(F64)
    if absval:
        terms = [x[n].abs() for n in ("codes", "s_k", "s_v", "u", "q", "kbuf", "ubuf", "w")]
        S = state_before_update(*terms, pc, D, F64)
        qn, kn, v = qn.abs(), kn.abs(), v.abs()
        M_u = beta.unsqueeze(-1) * (v + torch.einsum("...vk,...k->...v", S, kn))
        M_o = torch.einsum("...vk,...k->...v", S, qn) + (kn * qn).sum(-1, keepdim=True) * M_u
        return {"o": M_o, "k_row": kn, "u_row": M_u}
    S = state_before_update(*(x[n] for n in ("codes", "s_k", "s_v", "u", "q", "kbuf", "ubuf", "w")), pc, D, F64)
    Skn = torch.einsum("...vk,...k->...v", S, kn)
    Sqn = torch.einsum("...vk,...k->...v", S, qn)
    u_new, o = update_and_output(Skn, Sqn, kn, qn, v, beta)
    j = torch.arange(x["w"].shape[-1], device=x["w"].device)
    w_new = torch.where(j == x["h"].unsqueeze(-1), torch.ones((), dtype=F64, device=j.device), x["w"].to(F64))
    return {"o": o, "k_row": kn, "u_row": u_new, "g_row": en, "w_new": w_new, "pcum_new": pcum_new}


def half_step(y: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """Half the spacing of ``dtype`` (bf16 or fp16) values at magnitude ``y >= 0`` (fp64):
    ``2^(e - p)`` for ``2^e <= y < 2^(e+1)`` and ``p`` significant bits, the subnormal spacing's
    half below the smallest normal; 0 at ``y == 0``."""
    bits, emin = _BITS[dtype]
    _, E = torch.frexp(y)  # y = m 2^E with m in [0.5, 1): e = E - 1
    e = torch.clamp(E - 1, min=emin).to(F64)
    return torch.where(y > 0, torch.exp2(e - bits), torch.zeros_like(y))


def ratios(out, inp: dict) -> dict:
    """Error / tolerance per element for each output (fp64 tensors of the outputs' shapes; inf
    where a non-finite output, a nonzero output where ``M == 0``, or a wrong ``w_new``)."""
    out = dict(zip(OUTPUTS, out))
    ex = exact(inp)
    mag = exact(inp, absval=True)
    res = {}
    for name in ("o", "k_row", "u_row"):
        x = out[name].to(F64)
        err = (x - ex[name]).abs()
        tol = half_step(torch.maximum(x.abs(), ex[name].abs()), torch.bfloat16) + REL_SLACK * mag[name]
        r = torch.where(err == 0, torch.zeros_like(err), err / tol)
        r = torch.where((mag[name] == 0) & (x != 0), torch.full_like(r, float("inf")), r)
        res[name] = r
    x = out["g_row"].to(F64)
    err = (x - ex["g_row"]).abs()
    tol = half_step(torch.maximum(x.abs(), ex["g_row"].abs()), torch.float16) + REL_SLACK * ex["g_row"].abs()
    res["g_row"] = torch.where(err == 0, torch.zeros_like(err), err / tol)
    res["w_new"] = torch.where(out["w_new"].to(F64) == ex["w_new"], 0.0, float("inf")).to(F64)
    x = out["pcum_new"].to(F64)
    res["pcum_new"] = (x - ex["pcum_new"]).abs() / (REL_SLACK * (ex["pcum_new"].abs() + 1))
    for name, r in res.items():
        res[name] = torch.where(torch.isfinite(out[name]), r, torch.full_like(r, float("inf")))
    return res


def worst_by_output(out, inp: dict) -> dict:
    """``{output name: worst error / tolerance}`` (floats)."""
    return {n: float(r.max()) for n, r in ratios(out, inp).items()}


def judge(out, inp: dict) -> tuple[bool, float]:
    """``(ok, worst)``: ``worst`` the largest error / tolerance over every element of the six
    outputs ``out = (o, k_row, u_row, g_row, w_new, pcum_new)`` of the inputs ``inp``; ``ok`` when
    ``worst <= 1`` (which also means every output is finite, ``w_new`` is exact and outputs are 0
    where ``M == 0``). Shapes and dtypes of ``out`` must be the step's (a ValueError otherwise)."""
    expect = {"o": torch.bfloat16, "k_row": torch.bfloat16, "u_row": torch.bfloat16, "g_row": torch.float16,
              "w_new": torch.float32, "pcum_new": torch.float32}
    ex_shapes = {"o": inp["vx"].shape, "k_row": inp["kx"].shape, "u_row": inp["vx"].shape,
                 "g_row": inp["kx"].shape, "w_new": inp["w"].shape, "pcum_new": inp["pcum"].shape}
    for (name, dtype), t in zip(expect.items(), out):
        if t.dtype != dtype or t.shape != ex_shapes[name]:
            raise ValueError(f"{name}: expected {dtype} {list(ex_shapes[name])}, got {t.dtype} {list(t.shape)}")
    worst = max(worst_by_output(out, inp).values())
    return worst <= 1.0, worst
