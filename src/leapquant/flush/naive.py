"""Plain PyTorch definition of the LeapQuant KDA flush (SPEC section 4), written to be read.

Source: the LeapQuant paper (arXiv 2609.38166) and the NVlabs/kda request
`requests/conless-leapquant-kda-flush`. Every function is batched over any leading
dims (usually ``[B, H]``) and runs on CPU or GPU tensors.
"""

from __future__ import annotations

import torch

from ..format import decode, full_fp32_matmul as _full_fp32_matmul
from ..geometry import DEPENDENT_COLUMN, EPS, NORM_FLOOR, QMAX, TOKEN_LIMIT


# Phase helpers. ``emulation.py`` and ``triton_kernel.py`` define helpers of the same names for
# the same SPEC phases (there on the checkpoint's factors); here each is the plain fp32 definition:
#   decay            step 1: D_j
#   rebuild_factors  step 2 in factor form: f, U', the window's key-side factor
#   thin_products    step 3's products S^T x and S y (here on S itself)
#   basis            step 3's orthonormal columns (MGS)
#   residual         step 4: E = S - q_new^T u_new
#   scales_and_codes steps 5-6


def decay(gbuf: torch.Tensor, dtype: torch.dtype = torch.float32) -> torch.Tensor:
    """SPEC step 1: ``D[..., j, k] = prod_{i > j} gbuf[..., i, k]`` (so ``D[..., L-1, :] = 1``), in ``dtype``."""
    g = gbuf.to(dtype)
    later = torch.ones_like(g)
    # reverse inclusive product of the entries after j, shifted by one
    later[..., :-1, :] = g[..., 1:, :].flip(-2).cumprod(-2).flip(-2)
    return later


decay_since_append = decay  # the name other modules import


def rebuild_factors(s_k, u, kbuf, gbuf, w, pcum, dtype: torch.dtype = torch.float32):
    """SPEC step 2 written on the checkpoint's factors instead of the state:

    ``S = diag(s_v) C diag(f) + q^T U' + ubuf^T Kw`` with ``f = s_k exp(pcum) / 127`` ``[..., K]``,
    ``U' = u diag(exp(pcum))`` ``[..., R, K]`` and the window's key-side factor
    ``Kw[j] = w[j] kbuf[j] D_j`` ``[..., L, K]`` (C = codes ``[V, K]``, q ``[R, V]``, ubuf ``[L, V]``
    enter as they are). Returns ``(f, U', Kw)`` in ``dtype``; ``rebuild`` is the same sum formed."""
    p = torch.exp(pcum.to(dtype))
    f = s_k.to(dtype) * p / QMAX
    u_decayed = u.to(dtype) * p.unsqueeze(-2)
    keys = w.to(dtype).unsqueeze(-1) * kbuf.to(dtype) * decay(gbuf, dtype)
    return f, u_decayed, keys


def rebuild(codes, s_k, s_v, u, q, kbuf, ubuf, gbuf, w, pcum, dtype: torch.dtype = torch.float32):
    """State at the end of the window: the decayed old checkpoint plus the decayed window.

    ``S = decode(checkpoint) * exp(pcum)[None, :] + sum_j w[j] ubuf[j][:, None] (kbuf[j] D_j)[None, :]``,
    every intermediate in ``dtype``. Returns ``[..., V, K]``.
    """
    old = decode(codes, s_k, s_v, u, q, dtype) * torch.exp(pcum.to(dtype)).unsqueeze(-2)
    keys = kbuf.to(dtype) * decay(gbuf, dtype)
    values = w.to(dtype).unsqueeze(-1) * ubuf.to(dtype)
    return old + torch.einsum("...jv,...jk->...vk", values, keys)


def mgs(a: torch.Tensor, drop_dependent: bool = False) -> torch.Tensor:
    """Modified Gram-Schmidt over the columns of ``a`` ``[..., N, R]``, projections applied
    twice per column, each column divided by ``max(norm, NORM_FLOOR)``.

    ``drop_dependent`` (the product path): a column left with at most ``DEPENDENT_COLUMN`` of its
    squared norm is replaced by the unit vector e_r made orthogonal to the earlier columns, instead
    of normalised rounding noise, which comes out nearly parallel to an earlier column when
    columns are exactly parallel (a q0 with repeated columns)."""
    cols = []
    for r in range(a.shape[-1]):
        v = a[..., r]
        for _ in range(2):
            for qj in cols:
                v = v - (qj * v).sum(-1, keepdim=True) * qj
        norm = torch.linalg.vector_norm(v, dim=-1, keepdim=True)
        if drop_dependent and r > 0:
            start = torch.linalg.vector_norm(a[..., r], dim=-1, keepdim=True)
            e_r = torch.zeros_like(v)
            e_r[..., r] = 1
            for _ in range(2):
                for qj in cols:
                    e_r = e_r - (qj * e_r).sum(-1, keepdim=True) * qj
            dependent = norm.square() <= DEPENDENT_COLUMN * start.square()
            v = torch.where(dependent, e_r, v)
            norm = torch.linalg.vector_norm(v, dim=-1, keepdim=True)
        cols.append(v / norm.clamp_min(NORM_FLOOR))
    return torch.stack(cols, dim=-1)


def guard_overflow(uk: torch.Tensor, qv: torch.Tensor):
    """Where fp16 ``u_r`` would overflow (``max|u_r| > TOKEN_LIMIT``), move a power of two from
    ``u_r`` to ``q_r``: ``u_r / 2^e``, ``q_r * 2^e``, so ``q^T u`` is unchanged (exact).

    ``uk`` ``[..., K, R]``, ``qv`` ``[..., V, R]``. The checkpoint stores only ``q^T u``; the
    reference's fp16 ``u`` overflows on coherent states above |S| ~ 6e3. A departure from SPEC
    section 4 (which stores ``u = (S^T qv)^T`` as it is) that the kernel makes too.
    """
    mu = uk.abs().amax(-2, keepdim=True)
    e = torch.where(mu > TOKEN_LIMIT, torch.floor(torch.log2(mu / TOKEN_LIMIT)) + 1, torch.zeros_like(mu))
    return uk * torch.exp2(-e), qv * torch.exp2(e)


def quantize(S: torch.Tensor, q0: torch.Tensor, robust: bool = False):
    """Compress a state ``S`` ``[..., V, K]`` to a checkpoint (SPEC section 4, steps 3-6).

    ``robust`` (the product path, as the kernel): the subspace iteration runs on ``S`` scaled by a
    power of two to max|S| in [1, 2) (it is scale-free; fp32 Gram-Schmidt norms of states below
    ~1e-19 underflow otherwise), drops dependent columns (``mgs``) and guards fp16 ``u`` against
    overflow (``guard_overflow``).

    Returns ``(codes int8 [..., V, K], s_k fp32 [..., K], s_v fp32 [..., V],
    u fp16 [..., R, K], q fp16 [..., R, V])``.
    """
    scale = torch.ones_like(S[..., :1, :1])
    if robust:
        smax = S.abs().amax((-2, -1), keepdim=True)
        scale = torch.exp2(torch.floor(torch.log2(smax.clamp_min(torch.finfo(S.dtype).tiny))).clamp(-126, 126))
    Su = S / scale
    qk = basis(thin_products(Su, q0.to(S.dtype), transpose=True), robust)  # [..., K, R]
    qv = basis(thin_products(Su, qk), robust)  # [..., V, R]
    uk = thin_products(Su, qv, transpose=True) * scale  # [..., K, R]
    if robust:
        uk, qv = guard_overflow(uk, qv)
    u = uk.transpose(-1, -2).to(torch.float16).contiguous()
    q = qv.transpose(-1, -2).to(torch.float16).contiguous()
    codes, s_k, s_v = scales_and_codes(residual(S, q, u))
    return codes, s_k, s_v, u, q


def thin_products(S: torch.Tensor, x: torch.Tensor, transpose: bool = False) -> torch.Tensor:
    """SPEC step 3's products: ``S^T x`` (``transpose``, x ``[..., V, R]`` -> ``[..., K, R]``) or
    ``S x`` (x ``[..., K, R]`` -> ``[..., V, R]``), on the state ``S`` ``[..., V, K]`` itself."""
    return (S.transpose(-1, -2) if transpose else S) @ x


def basis(a: torch.Tensor, drop_dependent: bool = False) -> torch.Tensor:
    """SPEC step 3's orthonormal columns of ``a`` ``[..., N, R]``: ``mgs``."""
    return mgs(a, drop_dependent)


def residual(S: torch.Tensor, q: torch.Tensor, u: torch.Tensor) -> torch.Tensor:
    """SPEC step 4: ``E = S - q^T u`` with the fp16 tokens ``q`` ``[..., R, V]``, ``u`` ``[..., R, K]``
    upcast to ``S``'s dtype."""
    return S - q.transpose(-1, -2).to(S.dtype) @ u.to(S.dtype)


def scales_and_codes(E: torch.Tensor):
    """SPEC steps 5-6: ``s_k = max(sqrt(mean_v |E|), EPS)``, ``s_v = max(max_k |E| / s_k, EPS)``,
    ``codes = round_half_even(127 E / (s_k s_v))`` clamped to ``[-127, 127]``.
    Returns ``(codes int8 [..., V, K], s_k fp32 [..., K], s_v fp32 [..., V])``."""
    s_k = E.abs().mean(-2).sqrt().clamp_min(EPS)
    s_v = (E.abs() / s_k.unsqueeze(-2)).amax(-1).clamp_min(EPS)
    codes = torch.round(QMAX * E / (s_k.unsqueeze(-2) * s_v.unsqueeze(-1)))  # round half to even
    codes = codes.clamp(-QMAX, QMAX).to(torch.int8)
    return codes, s_k.float(), s_v.float()


def reference(codes, s_k, s_v, u, q, kbuf, ubuf, gbuf, w, pcum, q0):
    """The flush in fp32 PyTorch: rebuild the state, then re-quantize it (SPEC section 4).

    Args (leading dims ``[...]``, usually ``[B, H]``):
        codes int8 ``[..., V, K]``; s_k fp32 ``[..., K]``; s_v fp32 ``[..., V]``;
        u fp16 ``[..., R, K]``; q fp16 ``[..., R, V]`` -- the old checkpoint.
        kbuf bf16 ``[..., L, K]``; ubuf bf16 ``[..., L, V]``; gbuf fp16 ``[..., L, K]``;
        w fp32 ``[..., L]``; pcum fp32 ``[..., K]`` -- the window.
        q0 fp32 ``[V, R]``: the start basis of the subspace iteration, shared by all heads.

    Returns:
        ``(codes, s_k, s_v, u, q)``, new tensors with the input dtypes and shapes.

    Raises: nothing of its own; it does not validate its inputs (``run`` does).

    Source: LeapQuant (arXiv 2609.38166); NVlabs/kda request conless-leapquant-kda-flush.
    """
    return _flush(codes, s_k, s_v, u, q, kbuf, ubuf, gbuf, w, pcum, q0, robust=False)


def flush_cpu(codes, s_k, s_v, u, q, kbuf, ubuf, gbuf, w, pcum, q0):
    """The product's flush on CPU tensors: ``reference`` with the departures the Triton kernel
    makes too (``quantize(robust=True)``: scale-free subspace iteration, dependent columns
    dropped, fp16 overflow guard). Same arguments and results as ``reference``."""
    return _flush(codes, s_k, s_v, u, q, kbuf, ubuf, gbuf, w, pcum, q0, robust=True)


def _flush(codes, s_k, s_v, u, q, kbuf, ubuf, gbuf, w, pcum, q0, robust: bool):
    # matmul on GPUs must not drop to TF32 here: this is the accuracy yardstick
    with _full_fp32_matmul(), torch.no_grad():
        S = rebuild(codes, s_k, s_v, u, q, kbuf, ubuf, gbuf, w, pcum, torch.float32)
        return quantize(S, q0, robust)


# --- the scalar gate (Gated DeltaNet): the same flush after its own rebuild ----------------------


def rebuild_scalar(codes, s_k, s_v, u, q, kbuf, ubuf, w, p, dtype: torch.dtype = torch.float32):
    """State at the end of a scalar-gate (GDN) window: ``S = p decode(checkpoint) + sum_j w[j]
    ubuf[j][:, None] kbuf[j][None, :]`` (the step has already decayed the weights ``w``; ``p``
    ``[...]`` is the gate product since the checkpoint), every intermediate in ``dtype``. Returns
    ``[..., V, K]``. Source: NVlabs/kda request conless-leapquant-gdn-flush."""
    old = decode(codes, s_k, s_v, u, q, dtype) * p.to(dtype)[..., None, None]
    values = w.to(dtype).unsqueeze(-1) * ubuf.to(dtype)
    return old + torch.einsum("...jv,...jk->...vk", values, kbuf.to(dtype))


def scalar_reference(codes, s_k, s_v, u, q, kbuf, ubuf, w, p, q0):
    """The GDN flush in fp32 PyTorch: ``rebuild_scalar``, then the same re-quantization as KDA's
    (``quantize``). Arguments as ``reference`` with the scalar gate's window: kbuf bf16 ``[..., L,
    K]``, ubuf bf16 ``[..., L, V]``, w fp32 ``[..., L]`` (already decayed), p fp32 ``[...]`` in
    (0, 1]. Returns ``(codes, s_k, s_v, u, q)``, new tensors. Raises nothing of its own.
    Source: LeapQuant (arXiv 2609.38166); NVlabs/kda request conless-leapquant-gdn-flush."""
    with _full_fp32_matmul(), torch.no_grad():
        return quantize(rebuild_scalar(codes, s_k, s_v, u, q, kbuf, ubuf, w, p, torch.float32), q0, robust=False)


def scalar_flush_cpu(codes, s_k, s_v, u, q, kbuf, ubuf, w, p, q0):
    """``scalar_reference`` with the kernels' departures (``quantize(robust=True)``, as
    ``flush_cpu``): the GDN flush on CPU tensors."""
    with _full_fp32_matmul(), torch.no_grad():
        return quantize(rebuild_scalar(codes, s_k, s_v, u, q, kbuf, ubuf, w, p, torch.float32), q0, robust=True)
