"""Triton device helpers both decode-step kernels call (the portable kernel, and the Gluon kernel,
which calls ``@triton.jit`` functions on tensors of its own layouts): neutral ground, so that
neither kernel module imports the other's private helpers. ``token_loads`` (a program's
slot-independent loads), ``token_side``, ``entry_decay`` and ``write_entry`` are
phases of a program (named as in ``naive.py`` where it has them); the rest are element-wise.
Every helper works on whatever layout its tensors carry.

Rounding: fp32 -> bf16 by round-to-nearest-even on the bits (``round_bf16``), because Triton's CPU
interpreter truncates in ``.to(tl.bfloat16)``; the compiled kernels run the same code, so the
interpreted tests check the bits the GPU produces (up to fp32 ``exp``/``log``/``rsqrt`` ulps).

Source: LeapQuant (arXiv 2609.38166); NVlabs/kda request conless-leapquant-kda-step.
"""

import triton
import triton.language as tl

BETA_SERIES_BELOW = 0.5  # |b| below this: beta from a series (see beta_bf16)


@triton.jit
def round_bf16(x):
    """fp32 ``x`` (finite) -> bf16, round to nearest even, on the bits; the final cast is exact."""
    bits = x.to(tl.int32, bitcast=True)
    bits = bits + 0x7FFF + ((bits >> 16) & 1)
    return (bits & -65536).to(tl.float32, bitcast=True).to(tl.bfloat16)


@triton.jit
def round_bf16_split(s, err):
    """bf16 of the exact ``s + err`` (fp32, ``s > 0``, ``|err|`` at most half an fp32 ulp of ``s``),
    returned as fp32: rounding ``s`` alone is right except where ``s`` is a bf16 midpoint, where
    the sign of ``err`` breaks the tie."""
    bits = s.to(tl.int32, bitcast=True)
    near = (bits + 0x7FFF + ((bits >> 16) & 1)) & -65536
    tie = (bits & 0xFFFF) == 0x8000
    down = bits & -65536
    bits = tl.where(tie & (err > 0), down + 65536, tl.where(tie & (err < 0), down, near))
    return bits.to(tl.float32, bitcast=True)


@triton.jit
def beta_bf16(b, SMALL: tl.constexpr):
    """``sigmoid(b)`` correctly rounded to bf16, returned as fp32, for a bf16 ``b`` given as fp32
    (``naive.beta_bf16``); ``SMALL``: ``BETA_SERIES_BELOW``."""
    # For |b| < SMALL, sigmoid(b) =
    # 0.5 + t with t = -e1 / (2 (2 + e1)), e1 = expm1(-b) by its Taylor series (degree 9, no exp:
    # the same bits on every backend), accurate to a few ulps of t; 0.5 + t is then split exactly
    # (Fast2Sum) so the bf16 rounding sees t's low bits. sigmoid(b) ~ 0.5 + b/4 puts small bf16 b
    # as close as 0.04 fp32 ulps of sigmoid to a bf16 midpoint, but never closer than 6.6 ulps of
    # t (b = 0.2275). For |b| >= SMALL the plain sigmoid (fast exp on GPUs: a few ulps) is at least
    # 47.9 ulps from every midpoint. Both margins: over every bf16 b with |b| < 80 (867679f; the tests
    # hold every bf16 b to the correctly rounded value);
    # beyond -80 sigmoid(b) is a bf16 subnormal that fp32 exp loses (outside the domain).
    y = -b
    e1 = 1.0 + y * (1.0 / 9.0)
    e1 = 1.0 + y * (1.0 / 8.0) * e1
    e1 = 1.0 + y * (1.0 / 7.0) * e1
    e1 = 1.0 + y * (1.0 / 6.0) * e1
    e1 = 1.0 + y * (1.0 / 5.0) * e1
    e1 = 1.0 + y * (1.0 / 4.0) * e1
    e1 = 1.0 + y * (1.0 / 3.0) * e1
    e1 = 1.0 + y * 0.5 * e1
    e1 = y * e1
    t = tl.math.div_rn(-e1, 2.0 * (2.0 + e1))
    s_small = 0.5 + t
    err = t - (s_small - 0.5)  # exact: |t| < 0.5 (Fast2Sum)
    small = tl.abs(b) < SMALL
    s = tl.where(small, s_small, tl.sigmoid(b))
    return round_bf16_split(s, tl.where(small, err, 0.0))


@triton.jit
def softplus(x, THRESHOLD: tl.constexpr):
    """fp32 ``log1p(exp(x))`` for ``x <= THRESHOLD``, else ``x`` (torch's and fla's convention)."""
    # log1p(e) = log(1 + e) * e / ((1 + e) - 1), exact to a few ulps where 1 + e rounds
    # (Goldberg), e itself where 1 + e == 1
    e = tl.exp(tl.minimum(x, THRESHOLD))
    one_e = 1.0 + e
    lp = tl.where(one_e == 1.0, e, tl.log(one_e) * (e / (one_e - 1.0)))
    return tl.where(x <= THRESHOLD, lp, x)


@triton.jit
def _sums_and_maxima(a0, a1, a2, a3, a4, b0, b1, b2, b3, b4):
    return a0 + b0, a1 + b1, a2 + b2, tl.maximum(a3, b3), tl.maximum(a4, b4)


@triton.jit
def token_loads(qx, kx, vx, a, b, A_log, dt_bias, tok, qk_row, v_row, head, k, v,
                NH: tl.constexpr, NK: tl.constexpr, NV: tl.constexpr, SCALAR_GATE: tl.constexpr,
                KEY_GROUP: tl.constexpr):
    """This token's inputs for the program of ``head`` serving token row ``tok``, as fp32: ``kt``,
    ``qt`` (bf16 rows of stride ``qk_row``, at key head ``head // KEY_GROUP``) at the [K] offsets
    ``k``, ``vt`` (row stride ``v_row``) at the [V] offsets ``v``, the gate's argument ``xg = a +
    dt_bias`` (bf16 ``a`` ``[N, H, K]`` and fp32 ``dt_bias`` ``[H, K]`` at ``k``; ``SCALAR_GATE``: ``a``
    ``[N, H]``, ``dt_bias`` ``[H]``, a scalar), ``b`` (bf16 ``[N, H]``) and ``A_log`` (fp32 ``[H]``).
    None of them depends on the slot: the compiler may issue them before or after the slot id."""
    kt = tl.load(kx + tok * qk_row + (head // KEY_GROUP) * NK + k).to(tl.float32)
    qt = tl.load(qx + tok * qk_row + (head // KEY_GROUP) * NK + k).to(tl.float32)
    vt = tl.load(vx + tok * v_row + head * NV + v).to(tl.float32)
    if SCALAR_GATE:  # one gate a head
        xg = tl.load(a + tok * NH + head).to(tl.float32) + tl.load(dt_bias + head)
    else:
        xg = tl.load(a + (tok * NH + head) * NK + k).to(tl.float32) + tl.load(dt_bias + head * NK + k)
    b_t = tl.load(b + tok * NH + head).to(tl.float32)
    return kt, qt, vt, xg, b_t, tl.load(A_log + head)


@triton.jit
def load_pcum(pcum, prog, k, NK: tl.constexpr, SCALAR_GATE: tl.constexpr):
    """Program ``prog``'s gate state before the token, fp32: its ``pcum`` [K] at the offsets ``k``,
    or (``SCALAR_GATE``, GDN) its gate product ``p``, one word."""
    if SCALAR_GATE:
        return tl.load(pcum + prog)
    else:
        return tl.load(pcum + prog * NK + k)


@triton.jit
def token_side(kt, qt, xg, b_t, a_log, pcum_old, s_k, NORM_EPS: tl.constexpr, SCALE: tl.constexpr,
               SP_THRESHOLD: tl.constexpr, BETA_SMALL: tl.constexpr, QM: tl.constexpr, SCALAR_GATE: tl.constexpr):
    """This token's phase (``naive.normalize_qk``, ``naive.gate``) for one program, from
    ``token_loads``' values (``kt``, ``qt``, ``xg``, ``b_t``, ``a_log``), the program's ``pcum_old``
    (fp32 [K], in ``kt``'s layout) and ``s_k``, the checkpoint's key scales. Returns ``(kn, qn,
    kn . qn, g, en, beta, pcum_new, pc, f, max|f kn|, max|f qn|)``: [K] fp32 vectors in ``kt``'s
    layout (``g`` the log-space gate, ``en = exp(g)``, ``pc = exp(pcum_new)``, ``f = s_k pc /
    QM``) and scalars (``kn . qn``, ``beta`` bf16-exact as fp32, and the two maxima, each within a
    few ulps: one reduction serves the norms, ``kn . qn`` and the maxima, which the Gluon kernel's
    digits scale by).

    ``SCALAR_GATE`` (GDN): ``xg`` a scalar and ``pcum_old`` the gate product ``p`` (a scalar);
    ``g``, ``en`` (= at) and ``pcum_new`` (= p at) are scalars, ``pc`` the [K] vector of ``p at``."""
    g = -tl.exp(a_log) * softplus(xg, SP_THRESHOLD)
    en = tl.exp(g)
    beta = beta_bf16(b_t, BETA_SMALL)
    if SCALAR_GATE:
        pcum_n = pcum_old * en  # p at
        pc = s_k * 0.0 + pcum_n
    else:
        pcum_n = pcum_old + g
        pc = tl.exp(pcum_n)
    f = s_k * pc * (1.0 / QM)
    # the three sums over k and the two maxima in one reduction (one cross-warp round where K
    # spans the warps): kn . qn = (kt . qt) rk rq, max|f kn| = rk max|f kt|
    kk, qq, kt_qt, fk_max, fq_max = tl.reduce((kt * kt, qt * qt, kt * qt, tl.abs(f * kt), tl.abs(f * qt)), 0,
                                              _sums_and_maxima)
    rk = tl.math.rsqrt(kk + NORM_EPS)
    rq = tl.math.rsqrt(qq + NORM_EPS) * SCALE
    kn = kt * rk
    qn = qt * rq
    return kn, qn, kt_qt * rk * rq, g, en, beta, pcum_n, pc, f, fk_max * rk, fq_max * rq


@triton.jit
def entry_decay(g_after, en, h, j):
    """``D_j = en * prod_{j < i < h} gbuf_i`` for live entries ``j < h``, 0 beyond
    (``naive.entry_decay``), fp32 ``[L, K]``. ``j`` [L]: the entry each row holds, entries
    ``L - 1 .. 0`` (reversed, so that the product runs forward along the rows: Triton 3.6 lowers a
    forward scan along in-thread rows without shuffles, a reverse one with them); ``g_after``
    [L, K]: in that row, gbuf of entry ``j + 1`` (fp16; the row of entry ``L - 1`` is never read:
    any value); ``en`` [K] this token's decay; ``h`` the fill count."""
    g_live = tl.where((j[:, None] + 1) < h, g_after.to(tl.float32), 1.0)
    return tl.where((j < h)[:, None], tl.cumprod(g_live, axis=0) * en[None, :], 0.0)


@triton.jit
def write_entry(kbuf, ubuf, gbuf, w, pcum, fill, k_row, u_row, g_row, w_new, pcum_new,
                prog, out_row, h, n, j, kn, u_new, en, pcum_n, w_all, full, errors, IN_PLACE: tl.constexpr,
                NK: tl.constexpr, NV: tl.constexpr, NL: tl.constexpr, SCALAR_GATE: tl.constexpr):
    """The step's window entry: in pool form (``IN_PLACE``) appended in place -- ``kbuf``, ``ubuf``,
    ``gbuf`` row ``h`` of program ``prog`` (bf16 ``kn``, bf16 ``u_new``, fp16 ``en``), ``w[h] = 1``,
    ``pcum = pcum_new``, ``fill = h + 1`` (the caller has made every thread's reads of them happen
    first) -- unless ``full`` (a full window never flushed: nothing appended, 1 added to the
    counter ``errors``); in functional form the fresh outputs ``k_row``, ``u_row`` (row
    ``out_row``), ``g_row``, ``w_new`` (``w_all`` with entry ``h`` set to 1) and ``pcum_new``. ``n``
    [K] (= [V]) and ``j`` [L] are the offsets, in the layouts of the vectors stored.
    ``SCALAR_GATE`` (GDN): no gate row; the live weights decay by ``en`` (= at) with ``w[h] = 1``
    and the gate product ``pcum_n`` (p at, one word a program) is stored in ``pcum`` /
    ``pcum_new``."""
    if full:
        tl.atomic_add(errors, 1)
    elif IN_PLACE:
        kwin = prog * (NL * NK)
        tl.store(ubuf + prog * (NL * NV) + h * NV + n, round_bf16(u_new))
        tl.store(kbuf + kwin + h * NK + n, round_bf16(kn))
        if SCALAR_GATE:
            tl.store(w + prog * NL + j, _decayed_weights(w_all, en, h, j))
            # one word, in j's layout (made from j, not w_all * 0: a NaN in a dead row of w would reach p)
            tl.store(pcum + prog + j * 0, (j * 0).to(tl.float32) + pcum_n, mask=j == 0)
        else:
            tl.store(gbuf + kwin + h * NK + n, en.to(tl.float16))
            tl.store(w + prog * NL + j, (j * 0 + 1).to(tl.float32), mask=j == h)  # ones in j's layout
            tl.store(pcum + prog * NK + n, pcum_n)
        tl.store(fill + prog, h + 1)
    else:
        out_k = prog * NK
        tl.store(u_row + out_row + n, round_bf16(u_new))
        tl.store(k_row + out_k + n, round_bf16(kn))
        if SCALAR_GATE:
            tl.store(w_new + prog * NL + j, _decayed_weights(w_all, en, h, j))
            tl.store(pcum_new + prog + j * 0, (j * 0).to(tl.float32) + pcum_n, mask=j == 0)
        else:
            tl.store(g_row + out_k + n, en.to(tl.float16))
            tl.store(w_new + prog * NL + j, tl.where(j == h, 1.0, w_all))
            tl.store(pcum_new + out_k + n, pcum_n)


@triton.jit
def _decayed_weights(w_all, at, h, j):
    # the scalar gate's weights after a step: live entries (j < h) times at, entry h set to 1
    return tl.where(j == h, 1.0, tl.where(j < h, w_all * at, w_all))
