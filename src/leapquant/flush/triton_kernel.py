"""Triton kernel of the LeapQuant KDA flush: one program = one (slot, head).

"Flush v3": the subspace products and the residual run on the old checkpoint's factors instead of
on a rebuilt fp32 state (SPEC section 4; the arithmetic is emulated in ``emulation.py``):

    S     = diag(s_v) C diag(f) + A^T KU,   f = s_k exp(pcum) / 127
    S^T x = f * (C^T (s_v * x)) + KU^T (A x)          x = q0 or qv   [K, R]
    S y   = s_v * (C (f * y))   + A^T (KU y)          y = qk         [V, R]
    E     = C * (s_v f^T) + A^T KU - q_new^T u_new    formed once, onto the dequantised codes

C (int8) is exact in bf16 and the only 128 x 128 operand: it is converted once and used in both
orientations (C and its transpose). The thin operand (``s_v * x`` or ``f * y``) is split into
``SUBSPACE_SPLIT`` bf16 parts laid side by side in the 16 columns of one product (column c holds
part c // 4 of column c % 4), so the products are exact and the accumulation fp32. The low-rank
tile is 32 rows: A = [ubuf (16); q_hi (4); q_lo (4); 0] [32, V], exact in bf16, and KU = [w_j
kbuf_j D_j (16); U' (4); U' (4); 0] [32, K] fp32 with U' = u exp(pcum). KU meets the tensor
cores as three bf16 parts, in the thin products' corrections (against x or y and the
intermediate A x or KU y, also three parts) and in the residual. Gram-Schmidt is scale-free by
a power of two per column (no max|S| is needed).
qk is S^T q0 with each column scaled by its own power of two, not orthonormalised: the reference's
qk is S^T q0 R^-1 (R upper triangular with a positive diagonal), and S qk R^-1 has the same QR
factor Q as S qk, so qv is the reference's in exact arithmetic. Where a column of the qv basis
keeps less than ILL_COLUMN (1e-8) of its squared norm, or none of it (S S^T q0 conditioned
beyond ~1e4: rank-deficient or very coherent states, q0 with repeated or zero columns) the program
stores nothing and runs again on the reference's path (``ORTHONORMAL_QK``: qk orthonormalised
first, then qv), so that no register copy of the first run's operands stays live
through it.
Source: LeapQuant (arXiv 2609.38166); NVlabs/kda request conless-leapquant-kda-flush.
"""

from __future__ import annotations

import contextlib

import torch
import triton
import triton.language as tl

from ..geometry import ILL_COLUMN, ORTHONORMAL_QK_BELOW
from ..fp32_bits import clamped_exponent, exponent, pow2
from ..launch import CTAS_PER_SM, FLAG_TILE, FLUSH_CONSTANTS, flush_arguments, interpreting, pool_picks, resident_ctas

RANK_PAD = 16  # tl.dot needs every dim >= 16: the thin operands ride in a 16-column block
LOW_RANK_ROWS = 32  # the low-rank tile: window (L), q_hi (R), q_lo (R), zero rows
# the scalar gate: a gate product p below this takes the reference's path at once
ORTHONORMAL_BELOW = tl.constexpr(ORTHONORMAL_QK_BELOW)
NUM_WARPS = 8
# bf16 parts of the thin operands (s_v * x, f * y) in the three subspace products: 3 (fp32
# class) or 2 (~2^-16). They sit side by side in one product of N = 16, so a third part costs
# nothing on the tensor cores; 1 (a single bf16 operand) fails the strict criterion on some
# inputs (tests/test_emulation.py)
SUBSPACE_SPLIT = 3
MAX_REGISTERS = None  # a cap trades spills for a second resident CTA (3d37b7c's sweep)
# Pool calls run on resident CTAs that rank the due programs and share them out: a call with
# nothing due costs one flag scan (4 us at B=512, 86 us with one CTA per candidate) and 1 in 16
# due runs 20-25% faster; all due runs ~5% slower than one CTA per candidate (70673f5).
PERSISTENT_POOL = True


@triton.jit
def _mma(a, b, acc, UPCAST: tl.constexpr):
    # bf16 (exact) operands on the tensor cores, fp32 accumulation. UPCAST: Triton's CPU
    # interpreter multiplies bf16 as raw bits; give it fp32 operands
    if UPCAST:
        return tl.dot(a.to(tl.float32), b.to(tl.float32), acc, input_precision="ieee")
    return tl.dot(a, b, acc)


@triton.jit
def _split_bf16(x):
    hi = x.to(tl.bfloat16)
    lo = (x - hi.to(tl.float32)).to(tl.bfloat16)
    return hi, lo


@triton.jit
def _split3_bf16(x):
    hi, mid = _split_bf16(x)
    lo = ((x - hi.to(tl.float32)) - mid.to(tl.float32)).to(tl.bfloat16)
    return hi, mid, lo


@triton.jit
def _join4(a0, a1, a2, a3):
    return tl.join(tl.join(a0, a1), tl.join(a2, a3))  # [N, 2, 2], in-thread


@triton.jit
def _split4(x):
    x01, x23 = tl.split(x)
    x0, x1 = tl.split(x01)
    x2, x3 = tl.split(x23)
    return x0, x1, x2, x3


@triton.jit
def _replicate(b0, b1, b2, b3, RP: tl.constexpr):
    # four column vectors [N] -> [N, RP] with column c = b_{c % 4} (the thin operands' layout)
    c = tl.arange(0, RP)[None, :] % 4
    return tl.where(c == 0, b0[:, None], tl.where(c == 1, b1[:, None], tl.where(c == 2, b2[:, None], b3[:, None])))


@triton.jit
def _group_sum(acc):
    # columns r, r + 4, r + 8, r + 12 of acc [N, 16] summed: the parts of column r
    c = tl.arange(0, acc.shape[1])[None, :] % 4
    return (tl.sum(tl.where(c == 0, acc, 0.0), axis=1), tl.sum(tl.where(c == 1, acc, 0.0), axis=1),
            tl.sum(tl.where(c == 2, acc, 0.0), axis=1), tl.sum(tl.where(c == 3, acc, 0.0), axis=1))


# --- phase helpers (same names in naive.py and emulation.py) -------------------------------------


@triton.jit
def decay(gbase, m, k, NL: tl.constexpr, NK: tl.constexpr):
    """SPEC step 1 on the 32-row tile: D_j = prod_{i > j} gbuf[i] for rows j < L (1 below)."""
    g_after = tl.load(gbase + (m[:, None] + 1) * NK + k[None, :], mask=m[:, None] + 1 < NL, other=1.0)
    return tl.cumprod(g_after.to(tl.float32), axis=0, reverse=True)


@triton.jit
def rebuild_factors(s_k, p, u_rows, q_rows_t, ubuf_t, keys, wj, D, m, NL: tl.constexpr,
                    NR: tl.constexpr, QM: tl.constexpr):
    """SPEC step 2 on the factors: f [K], A^T [V, 32] (bf16, exact) and KU [32, K] (fp32).
    ``p`` [K]: the checkpoint's decay over the window (exp(pcum), or the scalar gate's product);
    ``u_rows`` [32, K] / ``q_rows_t`` [V, 32] hold token row (m - L) % R on rows L .. L + 2R - 1
    (zero elsewhere), ``keys`` [32, K] / ``ubuf_t`` [V, 32] the window on rows < L."""
    f = s_k * p * (1.0 / QM)
    KU = tl.where((m < NL)[:, None], keys.to(tl.float32) * D * wj[:, None], u_rows.to(tl.float32) * p[None, :])
    q_hi, q_lo = _split_bf16(q_rows_t.to(tl.float32))  # fp16 = bf16 + bf16, exactly
    At = tl.where((m < NL)[None, :], ubuf_t, tl.where((m < NL + NR)[None, :], q_hi, q_lo))
    return f, At, KU


@triton.jit
def _parts(t, PARTS: tl.constexpr):
    # t [N, 16] with replicated columns (column c = column c % 4) -> the thin operands' layout:
    # column c holds bf16 part c // 4 of column c % 4 (zero from part PARTS on)
    c = tl.arange(0, t.shape[1])[None, :]
    hi, mid, lo = _split3_bf16(t)
    out = tl.where(c < 4, hi, tl.where(c < 8, mid, lo))
    return tl.where(c < 4 * PARTS, out, 0.0)


@triton.jit
def _regroup(y, RP: tl.constexpr):
    # y [M, 16] in the parts layout -> its parts summed, replicated over the column groups, and
    # split again into three bf16 parts (the operand of the next product)
    y0, y1, y2, y3 = _group_sum(y)
    return _parts(_replicate(y0, y1, y2, y3, RP), 3)


@triton.jit
def thin_products(cb, x_rep, inner, outer, At, k_hi, k_mid, k_lo, TRANSPOSE: tl.constexpr,
                  PARTS: tl.constexpr, RP: tl.constexpr, UPCAST: tl.constexpr):
    """S^T x (TRANSPOSE; x_rep [V, 16] -> [K, 16]) or S y (y_rep [K, 16] -> [V, 16]) on the factors,
    in the thin operands' layout (column c: column c % 4, part c // 4; sum the parts with
    ``_group_sum``). ``inner``/``outer``: s_v/f (TRANSPOSE) or f/s_v. ``At`` [V, 32]: the exact
    low-rank tile A^T; ``k_hi/k_mid/k_lo`` [32, K]: KU in three bf16 parts. Every product has
    exact bf16 operands and fp32 accumulation; the corrections' fp32 x fp32 products are taken
    as the part products, ~2^-24."""
    big = _parts(inner[:, None] * x_rep, PARTS)
    xp = _parts(x_rep, 3)
    if TRANSPOSE:
        acc = outer[:, None] * _mma(tl.trans(cb), big, None, UPCAST)  # f * C^T (s_v x) [K, 16]
        y = _regroup(_mma(tl.trans(At), xp, None, UPCAST), RP)  # A x [32, 16]
        acc = _mma(tl.trans(k_hi), y, acc, UPCAST)  # + KU^T (A x)
        acc = _mma(tl.trans(k_mid), y, acc, UPCAST)
        acc = _mma(tl.trans(k_lo), y, acc, UPCAST)
    else:
        acc = outer[:, None] * _mma(cb, big, None, UPCAST)  # s_v * C (f y) [V, 16]
        y = _mma(k_hi, xp, None, UPCAST)  # KU y [32, 16]
        y = _mma(k_mid, xp, y, UPCAST)
        y = _mma(k_lo, xp, y, UPCAST)
        acc = _mma(At, _regroup(y, RP), acc, UPCAST)  # + A^T (KU y)
    return acc


@triton.jit
def _project_out(v, b0, b1, b2):
    # v minus its components along the orthonormal b0..b2 (zero where not built yet); the same
    # reduction gives |v|^2, so a pass costs one exchange between warps
    c01, c2v = tl.split(tl.sum(_join4(b0 * v, b1 * v, b2 * v, v * v), axis=0))
    c0, c1 = tl.split(c01)
    c2, vv = tl.split(c2v)
    return v - c0 * b0 - c1 * b1 - c2 * b2, vv, c0 * c0 + c1 * c1 + c2 * c2


@triton.jit
def _unit_direction(v, b0, b1, b2, r: tl.constexpr, NORM_MIN: tl.constexpr, DROP: tl.constexpr,
                    FLAG_BELOW: tl.constexpr, TWICE: tl.constexpr):
    # Column r of Gram-Schmidt: v projected out of b0..b{r-1} (TWICE: classical GS twice where
    # needed, the reference's MGS2 up to rounding), then unit length, and whether v kept less than
    # FLAG_BELOW of its squared norm (uniform; r > 0). A v left with at most DROP of it depends on
    # the earlier columns and is replaced by e_r made orthogonal to them.
    flagged = False
    if r == 0:
        norm2 = tl.sum(v * v, axis=0)
    else:
        v, v0, cc = _project_out(v, b0, b1, b2)
        # b_j orthonormal: |v - sum c_j b_j|^2 = |v|^2 - sum c_j^2
        norm2 = v0 - cc
        # Kahan's criterion: a pass that keeps at least half of |v|^2 leaves v orthogonal to
        # working accuracy, so the second pass runs only after cancellation (uniform branch)
        if TWICE and norm2 < 0.5 * v0:
            v, vv, cc = _project_out(v, b0, b1, b2)
            norm2 = vv - cc
            if norm2 < 0.5 * vv:  # cancellation again: measure directly
                norm2 = tl.sum(v * v, axis=0)
        dependent = norm2 <= DROP * v0  # a zero column too (0 <= 0)
        flagged = (norm2 < FLAG_BELOW * v0) | dependent
        if dependent:
            # a q0 with repeated columns, a rank-deficient state (the reference's normalised
            # rounding noise may come out parallel to b_0): keep R directions
            v = tl.where(tl.arange(0, v.shape[0]) == r, 1.0, 0.0).to(v.dtype)
            v, _, _ = _project_out(v, b0, b1, b2)
            v, _, _ = _project_out(v, b0, b1, b2)
            norm2 = tl.sum(v * v, axis=0)
    return v / tl.maximum(tl.sqrt_rn(tl.maximum(norm2, 0.0)), NORM_MIN), flagged


@triton.jit
def _unit_columns(a0, a1, a2, a3):
    # the four columns [N] each scaled by its own power of two (max |column| in [1, 2); zero
    # columns stay zero), exactly: a change of basis by a positive diagonal, which the Q of a
    # QR factorisation does not see
    m0, m1, m2, m3 = _split4(tl.max(_join4(tl.abs(a0), tl.abs(a1), tl.abs(a2), tl.abs(a3)), axis=0))
    return (a0 * pow2(-clamped_exponent(m0, -126, 126)), a1 * pow2(-clamped_exponent(m1, -126, 126)),
            a2 * pow2(-clamped_exponent(m2, -126, 126)), a3 * pow2(-clamped_exponent(m3, -126, 126)))


@triton.jit
def basis(a0, a1, a2, a3, NORM_MIN: tl.constexpr, DROP: tl.constexpr, FLAG_BELOW: tl.constexpr,
          TWICE: tl.constexpr):
    """SPEC step 3's orthonormal columns of a thin product's four columns [N] (``_group_sum``).
    Scale-free: each column is first scaled by its own power of two (``_unit_columns``), which
    Gram-Schmidt does not see and which keeps fp32 norms of tiny columns from underflowing.
    Returns the four unit columns [N] and whether a column kept less than FLAG_BELOW of its
    squared norm against the earlier ones (a uniform scalar); a column keeping at most DROP of it
    is replaced by e_r made orthogonal to them."""
    a0, a1, a2, a3 = _unit_columns(a0, a1, a2, a3)
    zero = tl.zeros_like(a0)
    b0, _ = _unit_direction(a0, zero, zero, zero, 0, NORM_MIN, DROP, FLAG_BELOW, TWICE)
    b1, d1 = _unit_direction(a1, b0, zero, zero, 1, NORM_MIN, DROP, FLAG_BELOW, TWICE)
    b2, d2 = _unit_direction(a2, b0, b1, zero, 2, NORM_MIN, DROP, FLAG_BELOW, TWICE)
    b3, d3 = _unit_direction(a3, b0, b1, b2, 3, NORM_MIN, DROP, FLAG_BELOW, TWICE)
    return b0, b1, b2, b3, d1 | d2 | d3


@triton.jit
def _guard_scale(mu, LIMIT: tl.constexpr):
    # the power of two that keeps fp16 u_r finite: 2^e with max|u_r| / 2^e <= LIMIT
    return tl.where(mu > LIMIT, exponent(mu / LIMIT) + 1, 0)


@triton.jit
def residual(cb, s_v, f, At, k_hi, k_mid, k_lo, q_rep, u_rep_t, RP: tl.constexpr, UPCAST: tl.constexpr):
    """SPEC step 4 formed once: E = C * (s_v f^T) + A^T KU - q_new^T u_new, exact products
    accumulated in fp32 onto the dequantised codes. ``q_rep`` [V, 16] / ``u_rep_t`` [16, K]: the
    fp16 new tokens replicated (column / row c = token c % 4); both are exact in two bf16 parts,
    and the 16 products (hi, lo) x (hi, lo) fill one k-step."""
    e = cb.to(tl.float32) * s_v[:, None] * f[None, :]
    e = _mma(At, k_hi, e, UPCAST)
    e = _mma(At, k_mid, e, UPCAST)
    e = _mma(At, k_lo, e, UPCAST)
    c = tl.arange(0, RP)
    qh, ql = _split_bf16(q_rep.to(tl.float32))
    uh, ul = _split_bf16(-u_rep_t.to(tl.float32))  # negated in fp32 (the interpreter's bf16 negation is not)
    lhs = tl.where(c[None, :] < 8, qh, ql)  # part c // 8 of q_new
    rhs = tl.where((c[:, None] // 4) % 2 == 0, uh, ul)  # part (c // 4) % 2 of -u_new
    return _mma(lhs, rhs, e, UPCAST)


@triton.jit
def scales_and_codes(e, QM: tl.constexpr, SCALE_MIN: tl.constexpr, MAGIC: tl.constexpr,
                     MAGIC_BITS: tl.constexpr):
    """SPEC steps 5-6 on E [V, K]: (codes int8, s_k [K], s_v [V])."""
    ae = tl.abs(e)
    # each thread computes the scales of all its 32 columns: the fast sqrt (within 1 ulp) keeps
    # that cheap; the codes use the stored scales, so the decoded state is unaffected
    s_k = tl.maximum(tl.sqrt(tl.sum(ae, axis=0) * (1.0 / e.shape[0])), SCALE_MIN)
    inv_k = 1.0 / s_k
    s_v = tl.maximum(tl.max(ae * inv_k[None, :], axis=1), SCALE_MIN)
    x = e * inv_k[None, :] * (QM / s_v)[:, None]
    x = tl.minimum(tl.maximum(x, -QM), QM)
    # round half to even through the fp32 mantissa; the low byte is the int8 code
    codes = ((x + MAGIC).to(tl.int32, bitcast=True) - MAGIC_BITS).to(tl.int8)
    return codes, s_k, s_v


@triton.jit(noinline=True)
def _flush_program(
    slot, head,
    codes_in, sk_in, sv_in, u_in, q_in, codes_out, sk_out, sv_out, u_out, q_out,
    kbuf, ubuf, gbuf, w, pcum, q0,
    C_SLOT: tl.constexpr, C_HEAD: tl.constexpr, SK_SLOT: tl.constexpr, SK_HEAD: tl.constexpr,
    SV_SLOT: tl.constexpr, SV_HEAD: tl.constexpr,
    U_SLOT: tl.constexpr, U_HEAD: tl.constexpr, U_ROW: tl.constexpr,
    Q_SLOT: tl.constexpr, Q_HEAD: tl.constexpr, Q_ROW: tl.constexpr,
    IN_PLACE: tl.constexpr, UPCAST: tl.constexpr, PARTS: tl.constexpr,
    NH: tl.constexpr, NV: tl.constexpr, NK: tl.constexpr, NL: tl.constexpr,
    NR: tl.constexpr, RP: tl.constexpr, MR: tl.constexpr,
    QM: tl.constexpr, SCALE_MIN: tl.constexpr, NORM_MIN: tl.constexpr, DROP: tl.constexpr,
    U_LIMIT: tl.constexpr, MAGIC: tl.constexpr, MAGIC_BITS: tl.constexpr, ILL: tl.constexpr,
    ORTHONORMAL_QK: tl.constexpr, SCALAR_GATE: tl.constexpr,
):
    # One (slot, head) flushed. ORTHONORMAL_QK: the reference's path (qk orthonormalised). Without
    # it, where the qv basis is ill-conditioned (a column keeps less than ILL of its squared norm),
    # nothing is stored and the result is True: the caller runs the program again with
    # ORTHONORMAL_QK.
    tl.static_assert((NL % NR == 0) & (NL + 2 * NR <= MR))
    prog = slot * NH + head
    v = tl.arange(0, NV)
    k = tl.arange(0, NK)
    j = tl.arange(0, NL)
    m = tl.arange(0, MR)  # rows of the low-rank tile
    c = tl.arange(0, RP)  # columns of the thin operands
    live = c < NR
    win = m < NL
    tok = (m >= NL) & (m < NL + 2 * NR)
    tok_row = m % NR  # (m - L) % R: L is a multiple of R

    # window and old checkpoint, straight into the low-rank tile's rows; the gate: per channel
    # (the entries' decays D_j and exp(pcum)) or scalar (no decays, the product p: one word)
    if SCALAR_GATE:
        D = tl.full([MR, NK], 1.0, dtype=tl.float32)
        p = tl.load(pcum + prog + k * 0)
    else:
        D = decay(gbuf + prog * (NL * NK), m, k, NL, NK)
        p = tl.exp(tl.load(pcum + prog * NK + k))
    wj = tl.load(w + prog * NL + m, mask=win, other=0.0)
    keys = tl.load(kbuf + prog * (NL * NK) + m[:, None] * NK + k[None, :], mask=win[:, None], other=0.0)
    ubuf_t = tl.load(ubuf + prog * (NL * NV) + m[None, :] * NV + v[:, None], mask=win[None, :], other=0.0)
    codes = tl.load(codes_in + slot * C_SLOT + head * C_HEAD + v[:, None] * NK + k[None, :])
    s_k = tl.load(sk_in + slot * SK_SLOT + head * SK_HEAD + k)
    s_v = tl.load(sv_in + slot * SV_SLOT + head * SV_HEAD + v)
    u_rows = tl.load(u_in + slot * U_SLOT + head * U_HEAD + tok_row[:, None] * U_ROW + k[None, :],
                     mask=tok[:, None], other=0.0)
    q_rows_t = tl.load(q_in + slot * Q_SLOT + head * Q_HEAD + tok_row[None, :] * Q_ROW + v[:, None],
                       mask=tok[None, :], other=0.0)
    f, At, KU = rebuild_factors(s_k, p, u_rows, q_rows_t, ubuf_t, keys, wj, D, m, NL, NR, QM)
    k_hi, k_mid, k_lo = _split3_bf16(KU)  # KU meets the tensor cores as three bf16 parts
    # int8 -> fp32 through the fp32 mantissa (integer add, float subtract; I2F runs at a quarter
    # of the FP32 rate), then bf16 once: exact. The products use it as C and as C^T.
    cb = ((codes.to(tl.int32) + MAGIC_BITS).to(tl.float32, bitcast=True) - MAGIC).to(tl.bfloat16)

    # one round of subspace iteration on the factors (S is never formed)
    q0_rep = tl.load(q0 + v[:, None] * NR + (c % NR)[None, :])  # [V, RP], column c = q0[:, c % R]
    a0, a1, a2, a3 = _group_sum(thin_products(cb, q0_rep, s_v, f, At, k_hi, k_mid, k_lo, True, PARTS, RP,
                                              UPCAST))  # S^T q0
    if ORTHONORMAL_QK:
        # the reference's path: qk orthonormal, the second pass where the first cancelled (so that
        # a repeated column is found dependent and replaced by e_r, not kept as rounding noise)
        k0, k1, k2, k3, _ = basis(a0, a1, a2, a3, NORM_MIN, DROP, DROP, True)
    else:
        # qk = S^T q0 with each column scaled by its own power of two, not orthonormalised: the
        # reference's qk is S^T q0 R^-1 (R upper triangular with a positive diagonal), and S qk R^-1
        # has the same QR factor Q as S qk, so qv is the reference's in exact arithmetic
        k0, k1, k2, k3 = _unit_columns(a0, a1, a2, a3)
    b0, b1, b2, b3 = _group_sum(thin_products(cb, _replicate(k0, k1, k2, k3, RP), f, s_v, At, k_hi, k_mid, k_lo, False,
                                              PARTS, RP, UPCAST))  # S qk
    p0, p1, p2, p3, ill = basis(b0, b1, b2, b3, NORM_MIN, DROP, ILL, True)  # qv, the token basis
    # rare: S S^T q0 conditioned beyond ~1e4 (a rank-deficient or very coherent state, q0 with
    # repeated columns), where fp32 products no longer hold qv's last columns to the tokens'
    # precision: left to the reference's path
    retry = ill & (not ORTHONORMAL_QK)
    if not retry:
        u0, u1, u2, u3 = _group_sum(thin_products(cb, _replicate(p0, p1, p2, p3, RP), s_v, f, At, k_hi, k_mid, k_lo,
                                                  True, PARTS, RP, UPCAST))  # uk = S^T qv
        # where fp16 u_r would overflow (coherent states above |S| ~ 6e3) a power of two moves from
        # u_r to q_r: exact for q^T u. Without max|S| there is no cheap bound to skip the check.
        e0, e1, e2, e3 = _split4(tl.max(_join4(tl.abs(u0), tl.abs(u1), tl.abs(u2), tl.abs(u3)), axis=0))
        e0, e1, e2, e3 = (_guard_scale(e0, U_LIMIT), _guard_scale(e1, U_LIMIT), _guard_scale(e2, U_LIMIT),
                          _guard_scale(e3, U_LIMIT))
        u_rep = _replicate(u0 * pow2(-e0), u1 * pow2(-e1), u2 * pow2(-e2), u3 * pow2(-e3), RP).to(tl.float16)
        q_rep = _replicate(p0 * pow2(e0), p1 * pow2(e1), p2 * pow2(e2), p3 * pow2(e3), RP).to(tl.float16)
        u_rep_t = tl.trans(u_rep)  # [RP, K], row r = u_new[r]

        e = residual(cb, s_v, f, At, k_hi, k_mid, k_lo, q_rep, u_rep_t, RP, UPCAST)
        codes_new, s_k_new, s_v_new = scales_and_codes(e, QM, SCALE_MIN, MAGIC, MAGIC_BITS)

        tl.store(codes_out + slot * C_SLOT + head * C_HEAD + v[:, None] * NK + k[None, :], codes_new)
        tl.store(sk_out + slot * SK_SLOT + head * SK_HEAD + k, s_k_new)
        tl.store(sv_out + slot * SV_SLOT + head * SV_HEAD + v, s_v_new)
        tl.store(u_out + slot * U_SLOT + head * U_HEAD + c[:, None] * U_ROW + k[None, :], u_rep_t,
                 mask=live[:, None])
        tl.store(q_out + slot * Q_SLOT + head * Q_HEAD + c[None, :] * Q_ROW + v[:, None], q_rep,
                 mask=live[None, :])
        if IN_PLACE:
            # every thread's window loads are consumed before any reset lands
            tl.debug_barrier()
            tl.store(w + prog * NL + j, tl.zeros([NL], dtype=tl.float32))
            if SCALAR_GATE:
                tl.store(pcum + prog, 1.0)  # p = 1
            else:
                tl.store(gbuf + prog * (NL * NK) + j[:, None] * NK + k[None, :], tl.full([NL, NK], 1.0, dtype=tl.float16))
                tl.store(pcum + prog * NK + k, tl.zeros([NK], dtype=tl.float32))
    return retry


@triton.jit
def _flush_one(
    slot, head,
    codes_in, sk_in, sv_in, u_in, q_in, codes_out, sk_out, sv_out, u_out, q_out,
    kbuf, ubuf, gbuf, w, pcum, q0,
    C_SLOT: tl.constexpr, C_HEAD: tl.constexpr, SK_SLOT: tl.constexpr, SK_HEAD: tl.constexpr,
    SV_SLOT: tl.constexpr, SV_HEAD: tl.constexpr,
    U_SLOT: tl.constexpr, U_HEAD: tl.constexpr, U_ROW: tl.constexpr,
    Q_SLOT: tl.constexpr, Q_HEAD: tl.constexpr, Q_ROW: tl.constexpr,
    IN_PLACE: tl.constexpr, UPCAST: tl.constexpr, PARTS: tl.constexpr,
    NH: tl.constexpr, NV: tl.constexpr, NK: tl.constexpr, NL: tl.constexpr,
    NR: tl.constexpr, RP: tl.constexpr, MR: tl.constexpr,
    QM: tl.constexpr, SCALE_MIN: tl.constexpr, NORM_MIN: tl.constexpr, DROP: tl.constexpr,
    U_LIMIT: tl.constexpr, MAGIC: tl.constexpr, MAGIC_BITS: tl.constexpr, ILL: tl.constexpr,
    SCALAR_GATE: tl.constexpr,
):
    # program (slot, head) flushed with qk unit-scaled; the reference's path (qk orthonormalised)
    # only where that run's qv basis was ill-conditioned (uniform), as a second run, so that
    # no register copy of the first run's operands stays live through it, or at once for a
    # scalar-gate window with its gate product below ORTHONORMAL_BELOW (mostly ill there)
    if SCALAR_GATE:
        again = tl.load(pcum + slot * NH + head) < ORTHONORMAL_BELOW
    else:
        again = False
    if not again:
        again = _flush_program(
            slot, head,
            codes_in, sk_in, sv_in, u_in, q_in, codes_out, sk_out, sv_out, u_out, q_out,
            kbuf, ubuf, gbuf, w, pcum, q0,
            C_SLOT, C_HEAD, SK_SLOT, SK_HEAD, SV_SLOT, SV_HEAD, U_SLOT, U_HEAD, U_ROW,
            Q_SLOT, Q_HEAD, Q_ROW, IN_PLACE, UPCAST, PARTS, NH, NV, NK, NL, NR, RP, MR,
            QM, SCALE_MIN, NORM_MIN, DROP, U_LIMIT, MAGIC, MAGIC_BITS, ILL, False, SCALAR_GATE,
        )
    if again:
        _flush_program(
            slot, head,
            codes_in, sk_in, sv_in, u_in, q_in, codes_out, sk_out, sv_out, u_out, q_out,
            kbuf, ubuf, gbuf, w, pcum, q0,
            C_SLOT, C_HEAD, SK_SLOT, SK_HEAD, SV_SLOT, SV_HEAD, U_SLOT, U_HEAD, U_ROW,
            Q_SLOT, Q_HEAD, Q_ROW, IN_PLACE, UPCAST, PARTS, NH, NV, NK, NL, NR, RP, MR,
            QM, SCALE_MIN, NORM_MIN, DROP, U_LIMIT, MAGIC, MAGIC_BITS, ILL, True, SCALAR_GATE,
        )


@triton.jit(do_not_specialize=["q0", "idx", "num_programs", "picks", "pick_stride"])  # no recompile per batch or alignment
def _flush_kernel(
    codes_in, sk_in, sv_in, u_in, q_in,  # old checkpoint
    codes_out, sk_out, sv_out, u_out, q_out,  # new checkpoint (aliases the old one in a pool)
    kbuf, ubuf, gbuf, w, pcum, q0, idx, hcnt,
    num_programs,  # candidate programs: len(idx) * H in a pool, B * H otherwise
    picks, pick_stride,  # persistent grid: int32 scratch, pick_stride words per CTA
    C_SLOT: tl.constexpr, C_HEAD: tl.constexpr,  # element strides of the checkpoint tensors
    SK_SLOT: tl.constexpr, SK_HEAD: tl.constexpr,
    SV_SLOT: tl.constexpr, SV_HEAD: tl.constexpr,
    U_SLOT: tl.constexpr, U_HEAD: tl.constexpr, U_ROW: tl.constexpr,
    Q_SLOT: tl.constexpr, Q_HEAD: tl.constexpr, Q_ROW: tl.constexpr,
    IN_PLACE: tl.constexpr,  # pool mode: programs from idx, due when hcnt == L, window reset
    UPCAST: tl.constexpr,  # running under TRITON_INTERPRET=1
    PARTS: tl.constexpr,  # bf16 parts of the thin operands in the subspace products (2 or 3)
    PERSISTENT: tl.constexpr,  # a grid of resident CTAs sharing out the due programs
    TILE: tl.constexpr,  # candidates whose flags a CTA reads at once (persistent grid)
    CTAS: tl.constexpr,  # persistent grid size (resident CTAs on the device)
    NH: tl.constexpr, NV: tl.constexpr, NK: tl.constexpr, NL: tl.constexpr,
    NR: tl.constexpr, RP: tl.constexpr, MR: tl.constexpr,
    QM: tl.constexpr, SCALE_MIN: tl.constexpr, NORM_MIN: tl.constexpr, DROP: tl.constexpr,
    U_LIMIT: tl.constexpr, MAGIC: tl.constexpr, MAGIC_BITS: tl.constexpr, ILL: tl.constexpr,
    SCALAR_GATE: tl.constexpr,  # the scalar gate (GDN): gbuf None, pcum holds the gate product p
):
    if not PERSISTENT:  # one CTA per candidate
        c = tl.program_id(0)
        if IN_PLACE:
            slot = tl.load(idx + c // NH)
            if slot <= 0:
                return
            if tl.load(hcnt + slot * NH + c % NH) != NL:
                return
        else:
            slot = c // NH
        _flush_one(
            slot.to(tl.int64), c % NH,
            codes_in, sk_in, sv_in, u_in, q_in, codes_out, sk_out, sv_out, u_out, q_out,
            kbuf, ubuf, gbuf, w, pcum, q0,
            C_SLOT, C_HEAD, SK_SLOT, SK_HEAD, SV_SLOT, SV_HEAD, U_SLOT, U_HEAD, U_ROW,
            Q_SLOT, Q_HEAD, Q_ROW, IN_PLACE, UPCAST, PARTS, NH, NV, NK, NL, NR, RP, MR,
            QM, SCALE_MIN, NORM_MIN, DROP, U_LIMIT, MAGIC, MAGIC_BITS, ILL, SCALAR_GATE,
        )
        return
    # Persistent grid (pool mode): every CTA reads all due flags, ranks the due programs in
    # candidate order, and takes ranks pid, pid + G, ...: balanced for any pattern, and a call
    # with nothing due costs one flag scan instead of one CTA launch per candidate. The body is
    # a separate function, so its registers do not add to the loop's.
    pid = tl.program_id(0)
    G: tl.constexpr = CTAS  # a constant divisor: the rank arithmetic stays multiply-shift
    # a tile is [slots, heads]: the rank scan runs over the heads inside a warp and over the
    # slots once, instead of one long scan over every candidate
    row = tl.arange(0, TILE // NH)
    head = tl.arange(0, NH)
    mine = picks + pid * pick_stride
    count = 0
    for first in range(0, num_programs // NH, TILE // NH):
        slots = tl.load(idx + first + row, mask=first + row < num_programs // NH, other=0)
        live = (slots > 0)[:, None]
        fill = tl.load(hcnt + slots.to(tl.int64)[:, None] * NH + head[None, :], mask=live, other=0)
        due = fill == NL  # masked loads read 0
        per_slot = tl.sum(due.to(tl.int32), axis=1)
        found = tl.sum(per_slot, axis=0)
        if found > 0:  # the rank scan only where something is due
            rank = count + (tl.cumsum(per_slot, axis=0) - per_slot)[:, None] + tl.cumsum(due.to(tl.int32), axis=1) - 1
            tl.store(mine + rank // G, slots[:, None] * NH + head[None, :], mask=due & (rank % G == pid))
        count += found
    tl.debug_barrier()  # the picks are written by other threads of this CTA
    for t in range(0, tl.cdiv(count - pid, G)):
        prog = tl.load(mine + t).to(tl.int32)  # (functional launches pass a dummy pointer)
        _flush_one(
            (prog // NH).to(tl.int64), prog % NH,
            codes_in, sk_in, sv_in, u_in, q_in, codes_out, sk_out, sv_out, u_out, q_out,
            kbuf, ubuf, gbuf, w, pcum, q0,
            C_SLOT, C_HEAD, SK_SLOT, SK_HEAD, SV_SLOT, SV_HEAD, U_SLOT, U_HEAD, U_ROW,
            Q_SLOT, Q_HEAD, Q_ROW, IN_PLACE, UPCAST, PARTS, NH, NV, NK, NL, NR, RP, MR,
            QM, SCALE_MIN, NORM_MIN, DROP, U_LIMIT, MAGIC, MAGIC_BITS, ILL, SCALAR_GATE,
        )


_OWN_CONSTANTS = dict(RP=RANK_PAD, MR=LOW_RANK_ROWS, ILL=ILL_COLUMN)  # the constants only this kernel takes
_CONSTANTS = dict(**FLUSH_CONSTANTS, **_OWN_CONSTANTS)  # all of its constants (scripts/compile_sm90.py)


def pool_tiles() -> list[int]:
    """The flag-scan tiles a pool call of this kernel may use (one: FLAG_TILE; a pool's warm-up
    compiles each)."""
    return [FLAG_TILE]


def launch_flush(ckpt_in, ckpt_out, window, q0, idx=None, hcnt=None, picks=None, ctas_per_sm: int = CTAS_PER_SM):
    """Launch the flush kernel.

    ``ckpt_in``/``ckpt_out``: ``(codes, s_k, s_v, u, q)`` tensors of shape ``[S, H, ...]`` with
    unit innermost stride and equal strides (the same tensors for an in-place pool flush).
    ``window``: ``(kbuf, ubuf, gbuf, w, pcum)`` dense ``[S, H, ...]``, or for the scalar gate
    (``family.GDN``) ``(kbuf, ubuf, None, w, p)`` with ``p`` fp32 ``[S, H]``. With ``idx`` (int32
    ``[N]``) and ``hcnt`` (int32 ``[S, H]``), programs ``(idx[i], h)`` run only where
    ``idx[i] > 0`` and ``hcnt == L`` and get their window reset; without them, every
    ``(b, h)`` of the batch runs and the window is left alone. No host synchronisation.
    ``picks``: int32 scratch of ``pick_words(S * H, device)`` words for the persistent pool grid
    (allocated here when not given); ``ctas_per_sm``: its resident CTAs an SM. Returns Triton's launched kernel object (registers,
    spills), or None for an empty launch.
    """
    in_place = idx is not None
    num_programs = (idx.numel() if in_place else ckpt_in[0].shape[0]) * ckpt_in[0].shape[1]
    if num_programs == 0:
        return None
    dummy = q0  # unused pointer arguments in functional mode
    # a pool call may have few or no programs due: resident CTAs share out the due ones
    persistent = in_place and PERSISTENT_POOL
    grid = (resident_ctas(q0.device, ctas_per_sm) if persistent else num_programs,)
    picks, pick_stride = pool_picks(num_programs, hcnt, grid[0], picks) if persistent else (dummy, 0)
    # launch on the tensors' GPU, which need not be the current device
    with torch.cuda.device(q0.device) if q0.is_cuda else contextlib.nullcontext():
        return _flush_kernel[grid](
            **flush_arguments(ckpt_in, ckpt_out, window, q0, idx if in_place else dummy,
                              hcnt if in_place else dummy, picks, num_programs, pick_stride),
            IN_PLACE=in_place, UPCAST=interpreting(), PERSISTENT=persistent, PARTS=SUBSPACE_SPLIT, TILE=FLAG_TILE,
            CTAS=grid[0], **_OWN_CONSTANTS,
            num_warps=NUM_WARPS, num_stages=1, **({"maxnreg": MAX_REGISTERS} if MAX_REGISTERS else {}),
        )
