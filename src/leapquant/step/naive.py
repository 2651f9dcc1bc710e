"""Plain PyTorch definition of the per-token KDA decode step on a LeapQuant checkpoint.

One program = one (sequence, head). The state the program stands for is its checkpoint decayed by
the window's summed log-gate plus the window's rank-1 updates, each decayed since it was appended;
the step decays that state by this token's gate, applies the delta rule and reads the output:

    kn = kx / sqrt(|kx|^2 + 1e-6)             qn = qx / sqrt(|qx|^2 + 1e-6) * K^-0.5
    g  = -exp(A_log) * softplus(a + dt_bias)  (softplus(x) = x above 20)
    en = exp(g)      pcum_new = pcum + g      pc = exp(pcum_new)
    beta = bf16(sigmoid(b))
    D_j = en * prod_{j < i < h} gbuf_i  (j < h),  0  (j >= h)
    S  = decode(checkpoint) * pc[None, :] + sum_j w_j ubuf_j (kbuf_j * D_j)^T          [V, K]
    u_new = beta (v - S kn)      o = S qn + (kn . qn) u_new

and appends ``(kn, u_new, en)`` as window entry ``h`` with weight 1. Each phase is one helper,
batched over any leading dims (usually ``[B, H]``), with a ``dtype`` argument so the criterion can
evaluate the same formula in fp64. ``step_products`` computes ``S kn`` and ``S qn`` factor by
factor without forming ``S`` (the kernels' formulation); ``step_reference`` forms ``S`` and is the
readable definition; ``step_cpu`` is the product path the engine runs on CPU tensors.

Source: the LeapQuant paper (arXiv 2609.38166) and the NVlabs/kda request
``requests/conless-leapquant-kda-step``.
"""

from __future__ import annotations

import torch

from ..format import decode, full_fp32_matmul as _full_fp32_matmul
from ..geometry import K, L, QMAX

QK_NORM_EPS = 1e-6  # added to |x|^2 before the reciprocal square root
SOFTPLUS_THRESHOLD = 20.0  # softplus(x) = x above this (torch's and fla's convention)
QK_SCALE = K**-0.5  # the attention scale folded into qn

OUTPUTS = ("o", "k_row", "u_row", "g_row", "w_new", "pcum_new")  # step_reference's results, in order


def normalize_qk(qx: torch.Tensor, kx: torch.Tensor, dtype: torch.dtype = torch.float32):
    """``(qn, kn)``: L2-normalised query (times ``K^-0.5``) and key, ``[..., K]`` in ``dtype``."""
    q = qx.to(dtype)
    k = kx.to(dtype)
    kn = k * torch.rsqrt(k.square().sum(-1, keepdim=True) + QK_NORM_EPS)
    qn = q * torch.rsqrt(q.square().sum(-1, keepdim=True) + QK_NORM_EPS) * QK_SCALE
    return qn, kn


def gate(a: torch.Tensor, b: torch.Tensor, A_log: torch.Tensor, dt_bias: torch.Tensor,
         dtype: torch.dtype = torch.float32):
    """``(g, en, beta)`` of this token.

    ``a`` ``[..., H, K]`` and ``b`` ``[..., H]`` (bf16 in the step), ``A_log`` ``[H]``, ``dt_bias``
    ``[H, K]``. ``g = -exp(A_log) * softplus(a + dt_bias)`` (the log-space per-channel decay,
    ``<= 0``), ``en = exp(g)``, both ``[..., H, K]``, every intermediate in ``dtype``; ``beta =
    sigmoid(b)`` correctly rounded to bf16 (``beta_bf16``), returned in ``dtype``, ``[..., H]``.
    """
    x = a.to(dtype) + dt_bias.to(dtype)
    softplus = torch.where(x <= SOFTPLUS_THRESHOLD, torch.log1p(torch.exp(x.clamp_max(SOFTPLUS_THRESHOLD))), x)
    g = -torch.exp(A_log.to(dtype)).unsqueeze(-1) * softplus
    return g, torch.exp(g), beta_bf16(b).to(dtype)


def round_bf16_exact(x: torch.Tensor) -> torch.Tensor:
    """fp64 ``x`` rounded once to the nearest bf16 value, ties to even, returned in fp64 (torch's
    fp64 -> bf16 cast rounds twice, through fp32: wrong at a few values)."""
    _, e = torch.frexp(x)  # x = m 2^e, 0.5 <= |m| < 1: 8 significant bits are 2^(e - 8) apart
    e = torch.clamp(e, min=-125).to(torch.float64)  # below bf16's smallest normal: its subnormal grid
    return torch.round(x * torch.exp2(8 - e)) * torch.exp2(e - 8)


def beta_bf16(b: torch.Tensor) -> torch.Tensor:
    """``sigmoid(b)`` correctly rounded to bf16 (returned as fp64). fp64 is needed: for small bf16
    ``b``, ``sigmoid(b) ~ 0.5 + b/4`` falls within a fraction of an fp32 ulp of a bf16 rounding
    midpoint (``b = -2^-8``: 0.04 ulp), so fp32 ``sigmoid`` then bf16 rounds some inputs the other
    way; fp64's error (~1e-16) is far below every such distance."""
    return round_bf16_exact(torch.sigmoid(b.to(torch.float64)))


def entry_decay(gbuf: torch.Tensor, en: torch.Tensor, h: torch.Tensor, dtype: torch.dtype = torch.float32):
    """``D[..., j, :] = en * prod_{j < i < h} gbuf[..., i, :]`` for ``j < h``, ``0`` for ``j >= h``.

    ``gbuf`` ``[..., L, K]``, ``en`` ``[..., K]``, ``h`` integer ``[...]`` (the fill count, ``0 <= h
    < L``). Entries ``i >= h`` of ``gbuf`` are not read (they count as 1). Returns ``[..., L, K]``.
    """
    i = torch.arange(L, device=gbuf.device)
    live = i < h.unsqueeze(-1)  # [..., L]
    g = torch.where(live.unsqueeze(-1), gbuf.to(dtype), torch.ones((), dtype=dtype, device=gbuf.device))
    after = torch.ones_like(g)  # prod over the live entries after j
    after[..., :-1, :] = g[..., 1:, :].flip(-2).cumprod(-2).flip(-2)
    return torch.where(live.unsqueeze(-1), after * en.to(dtype).unsqueeze(-2), torch.zeros((), dtype=dtype, device=gbuf.device))


def state_before_update(codes, s_k, s_v, u, q, kbuf, ubuf, w, pc, D, dtype: torch.dtype = torch.float32):
    """The state after this token's decay and before its delta-rule update, ``[..., V, K]``:
    ``S = decode(checkpoint) * pc[None, :] + sum_j w_j ubuf_j (kbuf_j * D_j)^T``, in ``dtype``.

    For the reference only (the kernels never form ``S``). ``pc = exp(pcum_new)`` ``[..., K]``,
    ``D`` from ``entry_decay``; the checkpoint and window tensors as in ``step_reference``.
    """
    old = decode(codes, s_k, s_v, u, q, dtype) * pc.to(dtype).unsqueeze(-2)
    keys = kbuf.to(dtype) * D.to(dtype)
    values = w.to(dtype).unsqueeze(-1) * ubuf.to(dtype)
    return old + torch.einsum("...jv,...jk->...vk", values, keys)


def step_products(codes, s_k, s_v, u, q, kbuf, ubuf, w, pc, D, x, dtype: torch.dtype = torch.float32):
    """``S x`` for the state of ``state_before_update`` without forming ``S``, factor by factor:

        S x = s_v * (C (f * x)) + Q^T (U' x) + sum_j ubuf_j w_j ((kbuf_j * D_j) . x)

    with ``C`` the int8 codes, ``f = s_k * pc / 127``, ``U' = U diag(pc)``. ``x`` is ``[..., P, K]``
    (``P`` vectors at once, e.g. ``kn`` and ``qn`` stacked); returns ``[..., P, V]`` in ``dtype``.
    """
    x = x.to(dtype)
    pc = pc.to(dtype).unsqueeze(-2)  # [..., 1, K]
    f = s_k.to(dtype).unsqueeze(-2) * pc / QMAX
    residual = torch.einsum("...vk,...pk->...pv", codes.to(dtype), f * x) * s_v.to(dtype).unsqueeze(-2)
    tokens = torch.einsum("...rv,...rk,...pk->...pv", q.to(dtype), u.to(dtype) * pc, x)
    along = torch.einsum("...jk,...pk->...pj", kbuf.to(dtype) * D.to(dtype), x) * w.to(dtype).unsqueeze(-2)
    window = torch.einsum("...jv,...pj->...pv", ubuf.to(dtype), along)
    return residual + tokens + window


def update_and_output(Skn: torch.Tensor, Sqn: torch.Tensor, kn: torch.Tensor, qn: torch.Tensor,
                      v: torch.Tensor, beta: torch.Tensor):
    """The delta rule and the readout: ``u_new = beta (v - S kn)``, ``o = S qn + (kn . qn) u_new``.

    ``Skn``, ``Sqn``, ``v`` ``[..., V]``; ``kn``, ``qn`` ``[..., K]``; ``beta`` ``[...]``; one dtype.
    Returns ``(u_new, o)``, ``[..., V]`` each.
    """
    u_new = beta.unsqueeze(-1) * (v - Skn)
    o = Sqn + (kn * qn).sum(-1, keepdim=True) * u_new
    return u_new, o


def _appended(w: torch.Tensor, h: torch.Tensor) -> torch.Tensor:
    j = torch.arange(L, device=w.device)
    return torch.where(j == h.unsqueeze(-1), torch.ones((), dtype=w.dtype, device=w.device), w)


def _step(codes, s_k, s_v, u, q, kbuf, ubuf, gbuf, w, pcum, h, qx, kx, vx, a, b, A_log, dt_bias, products):
    # products: None (S formed, the definition) or a function with step_products's arguments
    f32 = torch.float32
    qn, kn = normalize_qk(qx, kx, f32)
    g, en, beta = gate(a, b, A_log, dt_bias, f32)
    pcum_new = pcum.to(f32) + g
    pc = torch.exp(pcum_new)
    D = entry_decay(gbuf, en, h, f32)
    # rows at or past the fill count are not read, as in the kernel (a pool's stale rows)
    live = (torch.arange(L, device=h.device) < h.unsqueeze(-1)).unsqueeze(-1)
    kbuf, ubuf = (torch.where(live, t, torch.zeros((), dtype=t.dtype, device=t.device)) for t in (kbuf, ubuf))
    w_live = torch.where(live.squeeze(-1), w, torch.zeros((), dtype=w.dtype, device=w.device))
    ckpt_window = (codes, s_k, s_v, u, q, kbuf, ubuf, w_live, pc, D)
    if products is not None:
        Skn, Sqn = products(*ckpt_window, torch.stack((kn, qn), -2), f32).unbind(-2)
    else:
        S = state_before_update(*ckpt_window, f32)
        Skn = torch.einsum("...vk,...k->...v", S, kn)
        Sqn = torch.einsum("...vk,...k->...v", S, qn)
    u_new, o = update_and_output(Skn, Sqn, kn, qn, vx.to(f32), beta)
    return (o.to(torch.bfloat16), kn.to(torch.bfloat16), u_new.to(torch.bfloat16), en.to(torch.float16),
            _appended(w, h), pcum_new)


def step_reference(codes, s_k, s_v, u, q, kbuf, ubuf, gbuf, w, pcum, h, qx, kx, vx, a, b, A_log, dt_bias):
    """The decode step in fp32 PyTorch, forming the state ``S`` (the readable definition).

    Args (leading dims ``[...]``, usually ``[B, H]``; ``H = 32``, ``V = K = 128``, ``L = 16``, ``R = 4``):
        codes int8 ``[..., V, K]``; s_k fp32 ``[..., K]``; s_v fp32 ``[..., V]``; u fp16
        ``[..., R, K]``; q fp16 ``[..., R, V]`` -- the checkpoint.
        kbuf bf16 ``[..., L, K]``; ubuf bf16 ``[..., L, V]``; gbuf fp16 ``[..., L, K]`` (entries
        ``>= h`` unread); w fp32 ``[..., L]``; pcum fp32 ``[..., K]`` -- the window.
        h int32 ``[...]``: window entries in use, ``0 <= h < L``.
        qx, kx bf16 ``[..., K]``; vx bf16 ``[..., V]``; a bf16 ``[..., K]`` (gate pre-activation);
        b bf16 ``[...]`` (beta pre-activation) -- this token.
        A_log fp32 ``[H]``; dt_bias fp32 ``[H, K]`` -- the gate's parameters (``[..., H, K]``
        inputs broadcast against them).

    Returns ``(o, k_row, u_row, g_row, w_new, pcum_new)``: o bf16 ``[..., V]``, k_row = kn bf16
    ``[..., K]``, u_row = u_new bf16 ``[..., V]``, g_row = en fp16 ``[..., K]``, w_new fp32
    ``[..., L]`` (``w`` with entry ``h`` set to 1), pcum_new fp32 ``[..., K]``.

    Raises: nothing of its own; inputs are not validated (``interface.step`` does).
    Source: LeapQuant (arXiv 2609.38166); NVlabs/kda request conless-leapquant-kda-step.
    """
    with _full_fp32_matmul(), torch.no_grad():
        return _step(codes, s_k, s_v, u, q, kbuf, ubuf, gbuf, w, pcum, h, qx, kx, vx, a, b, A_log, dt_bias,
                     products=None)


def step_cpu(codes, s_k, s_v, u, q, kbuf, ubuf, gbuf, w, pcum, h, qx, kx, vx, a, b, A_log, dt_bias):
    """The decode step in fp32 PyTorch on the factor formulation (``step_products``), as the
    kernel computes it: no ``[V, K]`` state is formed. Same arguments and results as
    ``step_reference``; the engine's path for CPU tensors."""
    return step_with_products(step_products, codes, s_k, s_v, u, q, kbuf, ubuf, gbuf, w, pcum, h, qx, kx, vx, a, b,
                              A_log, dt_bias)


def step_with_products(products, codes, s_k, s_v, u, q, kbuf, ubuf, gbuf, w, pcum, h, qx, kx, vx, a, b, A_log,
                       dt_bias):
    """``step_cpu`` with ``S kn`` and ``S qn`` from ``products`` (a function with ``step_products``'s
    arguments and result), e.g. an emulation of a kernel's arithmetic (``emulation.py``). The other
    arguments and the results are ``step_reference``'s."""
    with _full_fp32_matmul(), torch.no_grad():
        return _step(codes, s_k, s_v, u, q, kbuf, ubuf, gbuf, w, pcum, h, qx, kx, vx, a, b, A_log, dt_bias,
                     products=products)


# --- the scalar gate (Gated DeltaNet, NVlabs/kda request conless-leapquant-gdn-step) -------------
#   at = exp(-exp(A_log) softplus(a + dt_bias))   one decay a head and token
#   pn = p at      wd_j = w_j at (j < h)      S = pn decode(checkpoint) + sum_j wd_j ubuf_j kbuf_j^T
#   u_new, o as above; w_new = wd with w_new[h] = 1, p_new = pn
# q and k come from key head head // group (GQA: 16 key heads serve 32 value heads).

SCALAR_OUTPUTS = ("o", "k_row", "u_row", "w_new", "p_new")  # scalar_step_reference's results, in order


def scalar_gate(a: torch.Tensor, A_log: torch.Tensor, dt_bias: torch.Tensor, dtype: torch.dtype = torch.float32):
    """``(g, at)``: the scalar gate's log-decay ``g = -exp(A_log) softplus(a + dt_bias)`` and
    ``at = exp(g)``, ``[..., H]`` in ``dtype`` (``a`` ``[..., H]``, ``A_log``, ``dt_bias`` ``[H]``)."""
    x = a.to(dtype) + dt_bias.to(dtype)
    softplus = torch.where(x <= SOFTPLUS_THRESHOLD, torch.log1p(torch.exp(x.clamp_max(SOFTPLUS_THRESHOLD))), x)
    g = -torch.exp(A_log.to(dtype)) * softplus
    return g, torch.exp(g)


def scalar_step_reference(codes, s_k, s_v, u, q, kbuf, ubuf, w, p, h, qx, kx, vx, a, b, A_log, dt_bias):
    """The GDN decode step in fp32 PyTorch, forming the state (the readable definition).

    Args (``[B, H]`` leading dims unless said; ``HK`` key heads dividing ``H``):
        codes, s_k, s_v, u, q: the checkpoint, as ``step_reference``.
        kbuf bf16 ``[B, H, L, K]``; ubuf bf16 ``[B, H, L, V]``; w fp32 ``[B, H, L]``; p fp32
        ``[B, H]`` the gate product since the checkpoint -- the window (entries ``>= h`` unread).
        h int32 ``[B, H]``, ``0 <= h <= L`` (``L``: a full window, nothing appended by callers).
        qx, kx bf16 ``[B, HK, K]`` (key head ``head // (H // HK)``); vx bf16 ``[B, H, V]``; a, b
        bf16 ``[B, H]``; A_log, dt_bias fp32 ``[H]``.

    Returns ``(o, k_row, u_row, w_new, p_new)``: o, u_row bf16 ``[B, H, V]``, k_row bf16 ``[B, H,
    K]``, w_new fp32 ``[B, H, L]`` (the live weights times at, entry ``h`` = 1), p_new fp32 ``[B,
    H]`` (``p at``). Raises nothing of its own.
    Source: LeapQuant (arXiv 2609.38166); NVlabs/kda request conless-leapquant-gdn-step.
    """
    f32 = torch.float32
    with _full_fp32_matmul(), torch.no_grad():
        group = codes.shape[-3] // qx.shape[-2]
        qn, kn = normalize_qk(qx.repeat_interleave(group, -2), kx.repeat_interleave(group, -2), f32)
        _, at = scalar_gate(a, A_log, dt_bias, f32)
        beta = beta_bf16(b).to(f32)
        pn = p.to(f32) * at
        j = torch.arange(L, device=w.device)
        live = j < h.unsqueeze(-1)
        wd = torch.where(live, w.to(f32) * at.unsqueeze(-1), w.to(f32))
        zero = torch.zeros((), dtype=f32, device=w.device)
        # rows at or past the fill count are not read (a pool's stale rows)
        values = torch.where(live.unsqueeze(-1), ubuf.to(f32), zero) * torch.where(live, wd, zero).unsqueeze(-1)
        keys = torch.where(live.unsqueeze(-1), kbuf.to(f32), zero)
        S = decode(codes, s_k, s_v, u, q, f32) * pn[..., None, None] + torch.einsum("...jv,...jk->...vk", values, keys)
        Skn = torch.einsum("...vk,...k->...v", S, kn)
        Sqn = torch.einsum("...vk,...k->...v", S, qn)
        u_new, o = update_and_output(Skn, Sqn, kn, qn, vx.to(f32), beta)
        w_new = torch.where(j == h.unsqueeze(-1), torch.ones((), dtype=f32, device=w.device), wd)
        return o.to(torch.bfloat16), kn.to(torch.bfloat16), u_new.to(torch.bfloat16), w_new, pn


scalar_step_cpu = scalar_step_reference  # the engine's GDN path for CPU tensors (forms the state)
