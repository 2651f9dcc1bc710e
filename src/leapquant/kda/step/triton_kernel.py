"""Triton kernel of the per-token KDA decode step on LeapQuant checkpoints: one program = one
(sequence, head).

Design. The step is memory-bound: a program moves ~34 KB and does ~2 x 16K multiply-adds. It
never forms the state ``S`` [V, K], in registers or in global memory, and its inner products run
on tensor cores with exact operands (``tl.dot``, fp32 accumulation): the codes are exact in
bf16; an fp32 operand is three bf16 parts (~2^-24 relative), laid side by side as columns 0..2
(for kn) and 3..5 (for qn) of a [*, 16] operand, the parts' column sums added afterwards; fp16
``q`` is two exact bf16 parts. It uses the factor formulation (``naive.step_products``):

    S x = s_v * (C (f * x)) + Q^T (U' x) + sum_j ubuf_j w_j ((kbuf_j * D_j) . x),   x in {kn, qn}

with ``C`` the int8 codes, ``f = s_k * exp(pcum_new) / 127`` and ``U' = U diag(exp(pcum_new))``.

Phases of a program:
1. key side (vectors of K, once): this token's normalised ``kn``, ``qn``, its gate ``g``, ``en``,
   ``pcum_new``, ``beta``; the entry decays ``D`` [L, K] from gbuf rows ``j + 1 .. h - 1`` (a
   reverse cumulative product); the window's projections ``w_j (kbuf_j * D_j) . x`` [L] and the
   tokens' ``(U' x)`` [R] for both ``x``; ``f * kn`` and ``f * qn``.
2. value side, ``BLOCK_V`` rows at a time (static loop): the codes tile [BLOCK_V, K] is loaded
   once as int8, converted to fp32 once, and feeds both reductions ``C (f * kn)`` and ``C (f *
   qn)``; the value rows of ``q`` and ``ubuf`` are read once each and feed both; then ``u_new``
   and ``o`` of those rows are stored.
3. stores of the key side: ``k_row = bf16(kn)``, ``g_row = fp16(en)``, ``pcum_new``, the weight.

Bytes per program (the floor): checkpoint 19,456 (codes 16,384, s_k 512, s_v 512, u and q 2,048)
+ window 12,864 (kbuf, ubuf, gbuf 4,096 each, w 64, pcum 512) + token 1,030 (qx, kx, vx, a 256
each, b 2, fill count 4) + writes 1,544 (o, k_row, u_row, g_row 256 each, pcum 512, one w word
and the fill count, 4 each) = 34,894 B = 34.1 KiB. ``A_log`` and ``dt_bias`` (516 B per head)
are shared by all sequences and come from L2. Window rows at or past the fill count ``h`` are
not read (masked loads): a pool's stale rows may hold anything.

Rounding: fp32 -> bf16 by round-to-nearest-even on the bits (``_round_bf16``), because Triton's
CPU interpreter truncates in ``.to(tl.bfloat16)``; the compiled kernel runs the same code, so the
interpreted tests check the bits the GPU produces (up to fp32 ``exp``/``log``/``rsqrt`` ulps).

Two forms, one kernel: functional (program ``(b, head)`` reads ``h`` from an int32 ``[B, H]``
tensor and writes six fresh outputs) and pool (``IN_PLACE``: program ``(i, head)`` serves slot
``idx[i]``; ``idx[i] <= 0`` writes a zero output row and nothing else; ``h = pool.hcnt`` with
``hcnt == L`` read as 0, "just flushed"; appends entry ``h`` in place and sets ``hcnt = h + 1``).

Source: LeapQuant (arXiv 2609.38166); NVlabs/kda request conless-leapquant-kda-step.
"""

from __future__ import annotations

import contextlib

import torch
import triton
import triton.language as tl

from ..format import CHECKPOINT_FIELDS
from ..geometry import H, K, L, QMAX, R, V
from ..launch import checkpoint_strides, interpreting
from ..tl_common import mma as _mma
from .naive import QK_NORM_EPS, QK_SCALE, SOFTPLUS_THRESHOLD

BETA_SERIES_BELOW = 0.5  # |b| below this: beta from a series (see _beta_bf16)
BLOCK_V = 32  # value rows per pass of phase 2: a [32, 128] codes tile is 32 codes a thread
NUM_WARPS = 2
# offline sm_90a: 2 warps run a program in ~9.8K warp instructions (168 registers, 6 CTAs = 12
# warps an SM); 4 warps take ~13.3K (125 registers, 16 warps an SM)


@triton.jit
def _round_bf16(x):
    # fp32 -> bf16, round to nearest even, on the bits (finite x); the final cast is exact
    bits = x.to(tl.int32, bitcast=True)
    bits = bits + 0x7FFF + ((bits >> 16) & 1)
    return (bits & -65536).to(tl.float32, bitcast=True).to(tl.bfloat16)


@triton.jit
def _round_bf16_split(s, err):
    # bf16 of the exact s + err for s > 0 and |err| <= half an fp32 ulp of s: rounding s alone is
    # right except where s is a bf16 midpoint, where the sign of err breaks the tie
    bits = s.to(tl.int32, bitcast=True)
    near = (bits + 0x7FFF + ((bits >> 16) & 1)) & -65536
    tie = (bits & 0xFFFF) == 0x8000
    down = bits & -65536
    bits = tl.where(tie & (err > 0), down + 65536, tl.where(tie & (err < 0), down, near))
    return bits.to(tl.float32, bitcast=True)


@triton.jit
def _beta_bf16(b, SMALL: tl.constexpr):
    # sigmoid(b) correctly rounded to bf16 for a bf16 b (as fp32). For |b| < SMALL, sigmoid(b) =
    # 0.5 + t with t = -e1 / (2 (2 + e1)), e1 = expm1(-b) by its Taylor series (degree 9, no exp:
    # the same bits on every backend), accurate to a few ulps of t; 0.5 + t is then split exactly
    # (Fast2Sum) so the bf16 rounding sees t's low bits. sigmoid(b) ~ 0.5 + b/4 puts small bf16 b
    # as close as 0.04 fp32 ulps of sigmoid to a bf16 midpoint, but never closer than 6.6 ulps of
    # t (b = 0.2275). For |b| >= SMALL the plain sigmoid (fast exp on GPUs: a few ulps) is at least
    # 47.9 ulps from every midpoint. Both margins: over every bf16 b with |b| < 80 (STEP_NOTES.md);
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
    return _round_bf16_split(s, tl.where(small, err, 0.0))


@triton.jit
def _part3(x, p):
    # part p (0, 1, 2: hi, mid, lo) of fp32 x split into three bf16 values, as fp32; the parts
    # sum to x up to ~2^-24 relative (the interpreter truncates instead of rounding: same bound)
    hi = x.to(tl.bfloat16).to(tl.float32)
    r1 = x - hi
    mid = r1.to(tl.bfloat16).to(tl.float32)
    lo = (r1 - mid).to(tl.bfloat16).to(tl.float32)
    return tl.where(p == 0, hi, tl.where(p == 1, mid, lo))


@triton.jit
def _parts_cols(xa, xb, NC: tl.constexpr):
    # [N, NC] bf16: columns 0..2 the three parts of xa [N], columns 3..5 those of xb, zeros beyond
    col = tl.arange(0, NC)[None, :]
    x = tl.where(col < 3, xa[:, None], xb[:, None])
    return tl.where(col < 6, _part3(x, col % 3), 0.0).to(tl.bfloat16)


@triton.jit
def _softplus(x, THRESHOLD: tl.constexpr):
    # log1p(exp(x)) for x <= THRESHOLD, else x; log1p(e) = log(1 + e) * e / ((1 + e) - 1), exact
    # to a few ulps where 1 + e rounds (Goldberg), e itself where 1 + e == 1
    e = tl.exp(tl.minimum(x, THRESHOLD))
    one_e = 1.0 + e
    lp = tl.where(one_e == 1.0, e, tl.log(one_e) * (e / (one_e - 1.0)))
    return tl.where(x <= THRESHOLD, lp, x)


# the caller's pointers and row strides are not specialised on (alignment, value 1): a pool's
# warm-up compiles the one variant every later call of the pool form runs
@triton.jit(do_not_specialize=["idx", "qx", "kx", "vx", "a", "b", "A_log", "dt_bias", "o", "qk_row", "v_row"])
def _step_kernel(
    codes, s_k, s_v, u, q,  # checkpoint, read only
    kbuf, ubuf, gbuf, w, pcum, fill,  # window and its fill count (pool form: appended in place)
    qx, kx, vx, a, b, A_log, dt_bias,  # this token and the gate's parameters
    o, k_row, u_row, g_row, w_new, pcum_new,  # outputs (pool form: only o; the rest go to the window)
    idx,  # pool form: int32 [N] slot ids (<= 0: no sequence)
    qk_row, v_row,  # element row strides of qx and kx (one) and of vx; a mixed row's stride for both
    C_SLOT: tl.constexpr, C_HEAD: tl.constexpr,  # element strides of the checkpoint tensors
    SK_SLOT: tl.constexpr, SK_HEAD: tl.constexpr,
    SV_SLOT: tl.constexpr, SV_HEAD: tl.constexpr,
    U_SLOT: tl.constexpr, U_HEAD: tl.constexpr, U_ROW: tl.constexpr,
    Q_SLOT: tl.constexpr, Q_HEAD: tl.constexpr, Q_ROW: tl.constexpr,
    IN_PLACE: tl.constexpr,  # pool form
    UPCAST: tl.constexpr,  # running under TRITON_INTERPRET=1
    BV: tl.constexpr,  # value rows per pass
    NH: tl.constexpr, NV: tl.constexpr, NK: tl.constexpr, NL: tl.constexpr, NR: tl.constexpr,
    QM: tl.constexpr, NORM_EPS: tl.constexpr, SCALE: tl.constexpr, SP_THRESHOLD: tl.constexpr,
    BETA_SMALL: tl.constexpr,
):
    c = tl.program_id(0)
    row = c // NH  # batch row (functional) or entry of idx (pool)
    head = c % NH
    vv = tl.arange(0, BV)
    k = tl.arange(0, NK)
    j = tl.arange(0, NL)
    r = tl.arange(0, NR)
    out_row = (row.to(tl.int64) * NH + head) * NV
    if IN_PLACE:
        slot = tl.load(idx + row).to(tl.int64)
        if slot <= 0:  # no sequence: a zero output row, nothing else
            for c0 in tl.static_range(0, NV, BV):
                tl.store(o + out_row + c0 + vv, tl.zeros([BV], dtype=tl.bfloat16))
            return
    else:
        slot = row.to(tl.int64)
    prog = slot * NH + head
    h = tl.load(fill + prog)
    h = tl.where(h >= NL, 0, h)  # hcnt == L: the flush just emptied the window

    # phase 1: this token (pool form: q/k/v are the three parts of the sequence's mixed row)
    tok = row.to(tl.int64)
    kt = tl.load(kx + tok * qk_row + head * NK + k).to(tl.float32)
    qt = tl.load(qx + tok * qk_row + head * NK + k).to(tl.float32)
    kn = kt * tl.math.rsqrt(tl.sum(kt * kt, axis=0) + NORM_EPS)
    qn = qt * (tl.math.rsqrt(tl.sum(qt * qt, axis=0) + NORM_EPS) * SCALE)
    kq = tl.sum(kn * qn, axis=0)
    tok_k = (tok * NH + head) * NK
    xg = tl.load(a + tok_k + k).to(tl.float32) + tl.load(dt_bias + head * NK + k)
    g = -tl.exp(tl.load(A_log + head)) * _softplus(xg, SP_THRESHOLD)
    en = tl.exp(g)
    beta = _beta_bf16(tl.load(b + tok * NH + head).to(tl.float32), BETA_SMALL)
    pcum_n = tl.load(pcum + prog * NK + k) + g
    pc = tl.exp(pcum_n)

    # the window and the tokens, one operand A [2L, K]: rows j < L the window's entries
    # w_j kbuf_j * D_j (D_j: en and the gates of the live entries after j; rows >= h are 0), rows
    # L .. L + 2R - 1 the tokens' U' = U diag(pc) (twice: the hi and lo parts of q^T meet them in
    # phase 2), zero beyond. Its products with kn and qn run on tensor cores: A and [kn | qn]
    # split into three bf16 parts each (fp32 class), the parts' column sums added afterwards.
    wbase = prog * (NL * NK)
    live = j < h
    ra = tl.arange(0, 2 * NL)
    g_after = tl.load(gbuf + wbase + (ra[:, None] + 1) * NK + k[None, :], mask=(ra[:, None] + 1) < h, other=1.0)
    decay = tl.cumprod(g_after.to(tl.float32), axis=0, reverse=True) * en[None, :]
    wa = tl.load(w + prog * NL + ra, mask=ra < h, other=0.0)
    if not IN_PLACE:
        w_all = tl.load(w + prog * NL + j)
    keys = tl.load(kbuf + wbase + ra[:, None] * NK + k[None, :], mask=(ra < h)[:, None], other=0.0).to(tl.float32)
    umask = (ra >= NL) & (ra < NL + 2 * NR)
    ur = tl.where(umask, (ra - NL) % NR, 0)
    uu = tl.load(u + slot * U_SLOT + head * U_HEAD + ur[:, None] * U_ROW + k[None, :], mask=umask[:, None], other=0.0).to(tl.float32)
    am = tl.where((ra < NL)[:, None], keys * (decay * wa[:, None]), uu * pc[None, :])
    xkq = _parts_cols(kn, qn, 16)  # [K, 16]
    a_hi = am.to(tl.bfloat16)
    a_r = am - a_hi.to(tl.float32)
    a_mid = a_r.to(tl.bfloat16)
    a_lo = (a_r - a_mid.to(tl.float32)).to(tl.bfloat16)
    pj = _mma(a_hi, xkq, None, UPCAST)
    pj = _mma(a_mid, xkq, pj, UPCAST)
    pj = _mma(a_lo, xkq, pj, UPCAST)  # [2L, 16]
    col = tl.arange(0, 16)[None, :]
    proj_k = tl.sum(tl.where(col < 3, pj, 0.0), axis=1)  # [2L]: w_j (kbuf_j D_j) . kn, then (U' kn)_r
    proj_q = tl.sum(tl.where((col >= 3) & (col < 6), pj, 0.0), axis=1)
    ywt = _parts_cols(proj_k, proj_q, 16)  # [2L, 16]
    # the residual's column factor f = s_k pc / 127, folded into both vectors
    f = tl.load(s_k + slot * SK_SLOT + head * SK_HEAD + k) * pc * (1.0 / QM)
    xf = _parts_cols(f * kn, f * qn, 16)  # [K, 16]

    # phase 2: value rows, BV at a time; every byte of codes, s_v, q and ubuf is read once. One
    # tile's products on tensor cores: codes (exact in bf16) @ xf, scaled by s_v, then
    # [ubuf^T | q^T hi | q^T lo] [BV, 2L] (exact in bf16) @ ywt accumulated on top
    cbase = codes + slot * C_SLOT + head * C_HEAD
    vwin = ubuf + prog * (NL * NV)
    qmask = (ra >= NL) & (ra < NL + 2 * NR)
    qr = tl.where(qmask, (ra - NL) % NR, 0)
    for c0 in tl.static_range(0, NV, BV):
        v = c0 + vv
        cb = tl.load(cbase + v[:, None] * NK + k[None, :])  # [BV, K]
        if UPCAST:
            cb = cb.to(tl.float32)  # the interpreter's int8 -> bf16 is wrong
        else:
            cb = cb.to(tl.bfloat16)
        acc = _mma(cb, xf, None, UPCAST)
        s_vr = tl.load(s_v + slot * SV_SLOT + head * SV_HEAD + v)
        acc = acc * s_vr[:, None]
        vals = tl.load(vwin + ra[None, :] * NV + v[:, None], mask=(ra < h)[None, :], other=0.0).to(tl.float32)
        qt_r = tl.load(q + slot * Q_SLOT + head * Q_HEAD + qr[None, :] * Q_ROW + v[:, None], mask=qmask[None, :], other=0.0).to(tl.float32)
        q_hi = qt_r.to(tl.bfloat16).to(tl.float32)
        a2 = tl.where((ra < NL + NR)[None, :], vals + q_hi, qt_r - q_hi)  # [BV, 2L]
        acc = _mma(a2.to(tl.bfloat16), ywt, acc, UPCAST)
        Skn = tl.sum(tl.where(col < 3, acc, 0.0), axis=1)
        Sqn = tl.sum(tl.where((col >= 3) & (col < 6), acc, 0.0), axis=1)
        vt = tl.load(vx + tok * v_row + head * NV + v).to(tl.float32)
        u_new = beta * (vt - Skn)
        tl.store(o + out_row + v, _round_bf16(Sqn + kq * u_new))
        if IN_PLACE:
            tl.store(vwin + h * NV + v, _round_bf16(u_new))
        else:
            tl.store(u_row + out_row + v, _round_bf16(u_new))

    # phase 3: the key side's outputs
    if IN_PLACE:
        # every thread has read pcum and the fill count before either is overwritten
        tl.debug_barrier()
        tl.store(kbuf + wbase + h * NK + k, _round_bf16(kn))
        tl.store(gbuf + wbase + h * NK + k, en.to(tl.float16))
        tl.store(w + prog * NL + j, tl.full([NL], 1.0, dtype=tl.float32), mask=j == h)
        tl.store(pcum + prog * NK + k, pcum_n)
        tl.store(fill + prog, h + 1)
    else:
        out_k = prog * NK
        tl.store(k_row + out_k + k, _round_bf16(kn))
        tl.store(g_row + out_k + k, en.to(tl.float16))
        tl.store(w_new + prog * NL + j, tl.where(j == h, 1.0, w_all))
        tl.store(pcum_new + out_k + k, pcum_n)


_CONSTANTS = dict(BV=BLOCK_V, NH=H, NV=V, NK=K, NL=L, NR=R, QM=float(QMAX), NORM_EPS=QK_NORM_EPS,
                  SCALE=QK_SCALE, SP_THRESHOLD=SOFTPLUS_THRESHOLD, BETA_SMALL=BETA_SERIES_BELOW, UPCAST=False)


def launch_step(ckpt, window, fill, token, A_log, dt_bias, o, new=None, idx=None):
    """Launch the decode step kernel on the tensors' device (CUDA, or CPU under
    ``TRITON_INTERPRET=1``); no host synchronisation, no allocation.

    ``ckpt``: ``(codes, s_k, s_v, u, q)``, ``[S, H, ...]`` with unit innermost stride (a pool's
    views, or dense tensors). ``window``: ``(kbuf, ubuf, gbuf, w, pcum)``, dense ``[S, H, ...]``.
    ``fill``: int32 ``[S, H]``, dense: ``h`` (functional) or ``pool.hcnt`` (pool form).
    ``token``: ``(qx, kx, vx, a, b)`` for ``N`` rows: ``qx``, ``kx`` rows of ``H * K`` and ``vx``
    rows of ``H * V`` bf16 elements, unit inner stride, any row stride (``qx`` and ``kx`` the
    same one; views into one mixed row do); ``a`` dense bf16 ``[N, H, K]``; ``b`` dense bf16
    ``[N, H]``. ``A_log`` fp32 ``[H]``, ``dt_bias`` fp32 ``[H, K]``, dense. ``o``: dense bf16
    ``[N, H, V]``, written.

    Functional (``idx`` None, ``N == S``): ``new = (k_row, u_row, g_row, w_new, pcum_new)``, dense
    outputs ``[S, H, ...]``, written; the inputs are not. Pool form (``idx``: int32 ``[N]``,
    dense): ``new`` is None; program ``(i, head)`` with ``idx[i] > 0`` appends to the window of
    slot ``idx[i]`` in place and advances ``fill``; ``idx[i] <= 0`` zeroes row ``i`` of ``o``.
    Returns Triton's launched kernel object, or None for an empty launch.
    """
    qx, kx, vx, a, b = token
    n_rows = a.shape[0]
    if n_rows == 0:
        return None
    in_place = idx is not None
    kbuf, ubuf, gbuf, w, pcum = window
    if in_place:
        dummy = o  # unused output pointers in pool form
        k_row = u_row = g_row = w_new = pcum_new = dummy
    else:
        k_row, u_row, g_row, w_new, pcum_new = new
        idx = fill  # unused pointer
    with torch.cuda.device(o.device) if o.is_cuda else contextlib.nullcontext():
        return _step_kernel[(n_rows * H,)](
            **dict(zip(CHECKPOINT_FIELDS, ckpt)), kbuf=kbuf, ubuf=ubuf, gbuf=gbuf, w=w, pcum=pcum, fill=fill,
            qx=qx, kx=kx, vx=vx, a=a, b=b, A_log=A_log, dt_bias=dt_bias,
            o=o, k_row=k_row, u_row=u_row, g_row=g_row, w_new=w_new, pcum_new=pcum_new,
            idx=idx, qk_row=qx.stride(0), v_row=vx.stride(0),
            **checkpoint_strides(*ckpt), IN_PLACE=in_place, **{**_CONSTANTS, "UPCAST": interpreting()},
            num_warps=NUM_WARPS, num_stages=1,
        )
