"""Plain-PyTorch emulation of the flush kernels' arithmetic on the checkpoint's factors ("flush
v3"; the portable kernel's, or with ``kernel="gluon"`` the Gluon kernel's low-rank choices): the
subspace products and the residual run on the int8 codes (exact in bf16) and the low-rank
factors, never on a rebuilt fp32 state.

    S    = diag(s_v) C diag(f) + A^T KU
    S^T x = f * (C^T (s_v * x)) + KU^T (A x)        x = q0 or qv      [K, R]
    S y   = s_v * (C (f * y))   + A^T (KU y)        y = qk            [V, R]
    E    = C * (s_v f^T) + A^T KU - q_new^T u_new   (formed once, SPEC step 4)

with ``f = s_k exp(pcum) / 127``, and the kernel's 32-row low-rank tile: ``A`` = [ubuf (16 rows);
q_hi (4); q_lo (4); 0 (8)] ``[32, V]`` (exact in bf16: ubuf is bf16, fp16 q is hi + lo exactly) and
``KU`` = [w_j kbuf_j * D_j (16); U' (4); U' (4); 0 (8)] ``[32, K]`` fp32, ``U' = u diag(exp(pcum))``.

What is emulated, as the kernel does it:
* the thin operand (``s_v * x`` or ``f * y``, fp32) is split into ``parts`` bf16 parts side by side
  (one tensor-core product with N = 16, 4 * parts columns used); products with the int8 codes are
  exact, the accumulation is fp32 (here: an fp32 matmul of exact values);
* the low-rank corrections ``KU^T (A x)`` and ``A^T (KU y)`` at fp32 class: their fp32 operands
  (x or y, KU, the intermediate A x or KU y) as three bf16 parts, exact products, fp32 sums
  (``kernel="gluon"``: the Gluon kernel's, the inner products A x and KU y in fp32, then three
  parts against KU^T with its window keys in two, or against the exact A^T; the token rows at
  fp32);
* the kernels' subspace iteration: qk = S^T q0 with each column scaled by its own power of two
  (``_unit_columns``), not orthonormalised (the reference's qk is S^T q0 R^-1 with R upper
  triangular, and S qk R^-1 has the same Q as S qk, so qv is the reference's in exact
  arithmetic); where a column of the qv basis keeps less than ``ILL_COLUMN`` of its squared
  norm (S S^T q0 conditioned beyond ~1e4), the reference's path (qk orthonormalised first, then
  qv);
* Gram-Schmidt as the portable kernel's (classical, projections and |v|^2 from one reduction, a
  second pass only after cancellation (Kahan's criterion), dependent columns -> e_r), each column
  first scaled by its own power of two (scale-free; no max|S| needed);
* the fp16 overflow guard on u (always: without max|S| there is no cheap bound to skip it);
* the residual as one fp32 accumulation of exact products onto the dequantised codes: KU in three
  bf16 parts against A (``kernel="gluon"``: the window keys in two, the old tokens at fp32), and
  the fp16 new tokens (exact in two bf16 parts each);
* the kernel's scales and codes (reciprocal-multiply, round half to even).

Source: LeapQuant (arXiv 2609.38166); NVlabs/kda request conless-leapquant-kda-flush.
"""

from __future__ import annotations

import torch

from ..geometry import DEPENDENT_COLUMN, EPS, ILL_COLUMN, L, NORM_FLOOR, QMAX, R, TOKEN_LIMIT

LOW_RANK_ROWS = 32  # the kernel's low-rank tile: window (L), q_hi (R), q_lo (R), zero rows
F32 = torch.float32


def split_bf16(x: torch.Tensor, parts: int) -> list[torch.Tensor]:
    """``x`` (fp32) as ``parts`` bf16 values (returned upcast to fp32, exactly) whose sum is ``x``
    to ~2^-8 (1), ~2^-16 (2) or ~2^-24 (3) relative: hi = bf16(x), mid = bf16(x - hi), ..."""
    out, rest = [], x
    for _ in range(parts):
        p = rest.to(torch.bfloat16).to(F32)
        out.append(p)
        rest = rest - p
    return out


FIXED_DIGITS = 6  # "fixed": 7-bit digits of each thin column below its power-of-two scale


def fixed_point_product(C: torch.Tensor, t: torch.Tensor) -> torch.Tensor:
    """``C t`` for the int8 codes ``C`` (as fp32, ``[..., M, N]``) and a thin fp32 ``t`` ``[..., N, R]``
    as the integer tensor cores would take it (the decode step's Gluon kernel, branch step-imma):
    each column scaled by ``2^(5 - E)``, ``E = floor(log2 max |column|)``, then ``FIXED_DIGITS``
    digits (``|d| <= 64``, the top one of unit ``2^(E - 5)``, each next one 128 times finer; every
    step exact in fp32), exact integer sums, recombined in fp32. Error: under ``2^(E - 41)`` times
    ``sum |c|``, plus fp32 rounding."""
    top = t.abs().amax(-2, keepdim=True).contiguous().view(torch.int32) >> 23
    inv = (torch.clamp(259 - top, max=254) << 23).view(F32)  # 2^(5 - E), E = exponent of max |t|
    rest = t * inv
    digits = []
    for _ in range(FIXED_DIGITS):
        d = torch.round(rest)  # half to even, as the kernel's magic-number rounding
        digits.append(d)
        rest = (rest - d) * 128.0
    acc = (C.double() @ torch.cat(digits, -1).double()).to(F32)  # exact: |sums| < 2^21
    out = acc[..., (FIXED_DIGITS - 1) * t.shape[-1]:]
    for p in range(FIXED_DIGITS - 2, -1, -1):  # Horner from the smallest digit
        out = acc[..., p * t.shape[-1]:(p + 1) * t.shape[-1]] + out * (1.0 / 128.0)
    return out * (1.0 / inv)


def _three(x: torch.Tensor) -> torch.Tensor:
    """``x`` as the sum of its three bf16 parts (what the tensor cores see of it)."""
    hi, mid, lo = split_bf16(x, 3)
    return (hi + mid) + lo


# --- phase helpers (same names in naive.py and triton_kernel.py) ---------------------------------


def decay(gbuf: torch.Tensor) -> torch.Tensor:
    """SPEC step 1: ``D_j = prod_{i > j} gbuf[i]`` ``[..., L, K]`` fp32 (a reverse running product
    of the later gates, as the kernel's ``tl.cumprod(reverse=True)``)."""
    g = gbuf.to(F32)
    after = torch.ones_like(g)
    after[..., :-1, :] = g[..., 1:, :]
    return after.flip(-2).cumprod(-2).flip(-2)


def rebuild_factors(s_k, u, q, kbuf, ubuf, gbuf, w, pcum):
    """SPEC step 2 on the factors: ``f`` ``[..., K]`` and the low-rank tile ``(A [..., 32, V],
    KU [..., 32, K])``, fp32, with ``S = diag(s_v) C diag(f) + A^T KU`` (module docstring)."""
    p = torch.exp(pcum.to(F32))
    f = s_k * p * (1.0 / QMAX)
    keys = kbuf.to(F32) * decay(gbuf) * w.to(F32).unsqueeze(-1)  # [..., L, K]
    u_decayed = u.to(F32) * p.unsqueeze(-2)  # U' [..., R, K]
    q_hi = q.to(torch.bfloat16).to(F32)
    q_lo = (q.to(F32) - q_hi).to(torch.bfloat16).to(F32)  # exact: fp16 = bf16 + bf16
    lead = q.shape[:-2]
    pad = LOW_RANK_ROWS - L - 2 * R
    zv = torch.zeros(*lead, pad, q.shape[-1], dtype=F32, device=q.device)
    zk = torch.zeros(*lead, pad, u.shape[-1], dtype=F32, device=u.device)
    A = torch.cat([ubuf.to(F32), q_hi, q_lo, zv], -2)
    KU = torch.cat([keys, u_decayed, u_decayed, zk], -2)
    return f, A, KU


def _gluon_tile(KU: torch.Tensor) -> torch.Tensor:
    """KU as the Gluon kernel's products see it: the window rows (w kbuf D) as two bf16 parts
    (~2^-16), the token rows at fp32 (the kernel keeps u exact and applies exp(pcum) in fp32)."""
    hi, lo = split_bf16(KU[..., :L, :], 2)
    return torch.cat([hi + lo, KU[..., L:, :]], -2)


def thin_products(C, s_v, f, A, KU, x, transpose: bool, parts: int | str = 3, kernel: str = "triton") -> torch.Tensor:
    """``S^T x`` (``transpose``; x ``[..., V, R]`` -> ``[..., K, R]``) or ``S x`` (x ``[..., K, R]`` ->
    ``[..., V, R]``) on the factors: the codes ``C`` (fp32, exact) against the thin operand split into
    ``parts`` bf16 parts (exact products, fp32 sums), or in fixed point (``parts="fixed"``,
    ``fixed_point_product``), the low-rank tile in fp32. ``kernel``: whose corrections are emulated,
    ``"triton"`` (every fp32 operand as three bf16 parts on the tensor cores, ~2^-24) or ``"gluon"``
    (the inner products A x / KU y in fp32 on the CUDA cores, then three parts against KU^T with
    its window keys in two bf16 parts (S^T x), or against the exact A^T (S y))."""
    if kernel == "gluon":
        x3, KU3 = x, _gluon_tile(KU)
    else:
        # both sides as three bf16 parts (exact part products, fp32 sums), ~2^-24
        x3, KU3 = _three(x), _three(KU)
    if transpose:
        big = C.transpose(-1, -2)
        t, outer = s_v.unsqueeze(-1) * x, f
        corr = KU3.transpose(-1, -2) @ _three(A @ x3)
    else:
        big = C
        t, outer = f.unsqueeze(-1) * x, s_v
        corr = A.transpose(-1, -2) @ _three(KU3 @ x3)
    if parts == "fixed":
        return outer.unsqueeze(-1) * fixed_point_product(big, t) + corr
    # the parts side by side: one product of N = 4 * parts columns, then each column group scaled
    # by the outer scale; the correction joins the first group before the group sum
    groups = big @ torch.cat(split_bf16(t, parts), -1)  # [..., N, 4 * parts]
    groups = outer.unsqueeze(-1) * groups
    acc = groups[..., :R] + corr
    for g in range(1, parts):
        acc = acc + groups[..., g * R : (g + 1) * R]
    return acc


def _project_out(v, cols):
    # v minus its components along the orthonormal cols (classical: all coefficients from v);
    # the same reduction gives |v|^2 and the coefficients' squares
    c = [(b * v).sum(-1, keepdim=True) for b in cols]
    vv = (v * v).sum(-1, keepdim=True)
    out = v
    for cj, b in zip(c, cols):
        out = out - cj * b
    return out, vv, sum(cj * cj for cj in c)


def _unit_direction(v, cols, r: int, twice: bool, flag_below: float):
    # column r of Gram-Schmidt, unit length, and whether it kept less than flag_below of its
    # squared norm against the earlier columns (at most DEPENDENT_COLUMN of it: dependent,
    # replaced by e_r made orthogonal to them)
    if r == 0:
        norm = torch.sqrt((v * v).sum(-1, keepdim=True))
        return v / norm.clamp_min(NORM_FLOOR), torch.zeros_like(norm, dtype=torch.bool)
    v, v0, cc = _project_out(v, cols)
    norm2 = v0 - cc  # the b_j are orthonormal
    if twice:  # Kahan: a pass keeping under half of |v|^2 is repeated; after a second one, measured
        v2, vv2, cc2 = _project_out(v, cols)
        n2 = vv2 - cc2
        n2 = torch.where(n2 < 0.5 * vv2, (v2 * v2).sum(-1, keepdim=True), n2)
        again = norm2 < 0.5 * v0
        v, norm2 = torch.where(again, v2, v), torch.where(again, n2, norm2)
    dependent = norm2 <= DEPENDENT_COLUMN * v0
    flagged = (norm2 < flag_below * v0) | dependent  # a zero column (0 <= 0) is dependent too
    e_r = torch.zeros_like(v)
    e_r[..., r] = 1
    e_r = _project_out(_project_out(e_r, cols)[0], cols)[0]
    v = torch.where(dependent, e_r, v)
    norm2 = torch.where(dependent, (e_r * e_r).sum(-1, keepdim=True), norm2)
    return v / torch.sqrt(norm2.clamp_min(0.0)).clamp_min(NORM_FLOOR), flagged


def _unit_columns(a: torch.Tensor) -> torch.Tensor:
    """``a`` ``[..., N, R]`` with each column scaled by its own power of two (max |column| in
    [1, 2); zero columns stay zero), exactly: a change of basis by a positive diagonal, which the
    Q of a QR factorisation does not see."""
    m = a.abs().amax(-2, keepdim=True)
    e = torch.where(m > 0, torch.frexp(m).exponent - 1, -126).clamp(-126, 126)
    return torch.ldexp(a, -e)


def basis(a: torch.Tensor, twice: bool = True,
          flag_below: float = DEPENDENT_COLUMN) -> tuple[torch.Tensor, torch.Tensor]:
    """Orthonormal columns of ``a`` ``[..., N, R]`` as the kernel builds them: each column scaled by
    its own power of two (``_unit_columns``; Gram-Schmidt does not see it, fp32 norms of tiny
    columns do not underflow), then classical Gram-Schmidt (``twice``: a second pass where the
    first cancelled), dependent columns replaced by e_r. Returns ``(q [..., N, R], flagged
    [...])``: whether a column of ``a`` kept less than ``flag_below`` of its squared norm against
    the earlier ones, or was dependent (a zero column keeps 0 of 0; bool, per leading index; by
    default: whether one was dependent)."""
    a = _unit_columns(a)
    cols, flagged = [], torch.zeros(a.shape[:-2], dtype=torch.bool, device=a.device)
    for r in range(a.shape[-1]):
        col, flag = _unit_direction(a[..., r], cols, r, twice, flag_below)
        cols.append(col)
        flagged = flagged | flag[..., 0]
    return torch.stack(cols, -1), flagged


def guard_overflow(uk: torch.Tensor, qv: torch.Tensor):
    """Where fp16 u_r would overflow (``max|u_r| > TOKEN_LIMIT``) a power of two moves to q_r
    (exact for q^T u), as ``naive.guard_overflow``."""
    mu = uk.abs().amax(-2, keepdim=True)
    e = torch.where(mu > TOKEN_LIMIT, torch.floor(torch.log2(mu / TOKEN_LIMIT)) + 1, torch.zeros_like(mu))
    return uk * torch.exp2(-e), qv * torch.exp2(e)


def residual(C, s_v, f, A, KU, q_new, u_new, kernel: str = "triton") -> torch.Tensor:
    """SPEC step 4 formed once on the factors: ``E = C * (s_v f^T) + A^T KU - q_new^T u_new``, one
    fp32 accumulation of exact products (KU in three bf16 parts against the exact A; the fp16
    tokens exact in two parts each) onto the dequantised codes. ``kernel="gluon"``: the window
    keys in two bf16 parts, the old tokens at fp32 (the Gluon kernel's exact q^T u, scaled by
    exp(pcum) in fp32). Returns ``[..., V, K]`` fp32."""
    base = C * s_v.unsqueeze(-1) * f.unsqueeze(-2)
    if kernel == "gluon":
        return base + A.transpose(-1, -2) @ _gluon_tile(KU) - q_new.to(F32).transpose(-1, -2) @ u_new.to(F32)
    left = torch.cat([A.transpose(-1, -2)] * 3 + [q_new.to(F32).transpose(-1, -2)], -1)  # [..., V, 100]
    right = torch.cat(split_bf16(KU, 3) + [-u_new.to(F32)], -2)  # [..., 100, K]
    return base + left @ right


def scales_and_codes(E: torch.Tensor):
    """SPEC steps 5-6 as the kernel computes them (reciprocal of s_k, one division for s_v).
    Returns ``(codes int8, s_k fp32, s_v fp32)``."""
    ae = E.abs()
    s_k = torch.sqrt(ae.sum(-2) * (1.0 / E.shape[-2])).clamp_min(EPS)
    inv_k = 1.0 / s_k
    s_v = (ae * inv_k.unsqueeze(-2)).amax(-1).clamp_min(EPS)
    x = E * inv_k.unsqueeze(-2) * (QMAX / s_v).unsqueeze(-1)
    codes = torch.round(x.clamp(-QMAX, QMAX)).to(torch.int8)  # round half to even
    return codes, s_k, s_v


def flush_emulated(codes, s_k, s_v, u, q, kbuf, ubuf, gbuf, w, pcum, q0, parts: int | str = 3,
                   kernel: str = "triton", orthonormal_qk: bool = False):
    """The flush (SPEC section 4) in a kernel's arithmetic on the factors, batched over any
    leading dims (``[B, H]``); same arguments and results as ``naive.reference``. ``parts``: bf16
    parts of the thin operand in the three subspace products (3: fp32 class, both kernels; 2:
    ~2^-16; 1: a single bf16 operand; "fixed": the integer tensor cores' fixed-point digits).
    ``kernel``: whose low-rank arithmetic (``"triton"``, the portable kernel's, or ``"gluon"``;
    ``thin_products``, ``residual``); the Gluon kernel's Cholesky QR is emulated by Gram-Schmidt,
    the same Q up to rounding. The state S is never formed before E.

    As both kernels: qk = S^T q0 with unit-scaled columns (``_unit_columns``), and where the qv
    basis finds a column keeping less than ``ILL_COLUMN`` of its squared norm, or none of it (S
    S^T q0 conditioned beyond ~1e4: rank-deficient or very coherent states, q0 with repeated or
    zero columns) the reference's path for that (batch, head): qk orthonormalised first
    (dependent columns -> e_r), then qv. ``orthonormal_qk``: the reference's path
    everywhere (what the kernels' path equals in exact arithmetic)."""
    with torch.no_grad():
        C = codes.to(F32)
        f, A, KU = rebuild_factors(s_k, u, q, kbuf, ubuf, gbuf, w, pcum)
        s_v = s_v.to(F32)
        a = thin_products(C, s_v, f, A, KU, q0.to(F32), True, parts, kernel)  # S^T q0 [..., K, R]
        # qk = S^T q0 with unit-scaled columns: the reference's orthonormal qk times an upper
        # triangular matrix with a positive diagonal, so S qk has the reference's Q (qv)
        qk = _unit_columns(a)
        qv, ill = basis(thin_products(C, s_v, f, A, KU, qk, False, parts, kernel), twice=True,
                        flag_below=ILL_COLUMN)  # [..., V, R]
        # where the qv basis found S qk ill-conditioned, the reference's path: qk orthonormal (a
        # second pass where the first cancelled, so that a repeated column is found dependent and
        # replaced by e_r, not kept as rounding noise), then qv
        if orthonormal_qk or bool(ill.any()):
            ref_qk, _ = basis(a, twice=True)
            ref_qv, _ = basis(thin_products(C, s_v, f, A, KU, ref_qk, False, parts, kernel), twice=True)
            qv = torch.where((ill | orthonormal_qk)[..., None, None], ref_qv, qv)
        uk = thin_products(C, s_v, f, A, KU, qv, True, parts, kernel)  # [..., K, R]
        uk, qv = guard_overflow(uk, qv)
        u_new = uk.transpose(-1, -2).to(torch.float16).contiguous()
        q_new = qv.transpose(-1, -2).to(torch.float16).contiguous()
        codes_new, s_k_new, s_v_new = scales_and_codes(residual(C, s_v, f, A, KU, q_new, u_new, kernel))
        return codes_new, s_k_new, s_v_new, u_new, q_new
