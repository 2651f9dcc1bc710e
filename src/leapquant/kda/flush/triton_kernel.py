"""Triton kernel of the LeapQuant KDA flush: one program = one (slot, head).

The program rebuilds the fp32 state ``S`` [V, K] from the old checkpoint and the window, runs one
round of subspace iteration for the new Compensator Tokens, and re-quantizes the residual (SPEC
section 4). Products run on tensor cores with operands that are exact in 16 bits or split into bf16
parts (high and low: about 2^-16 relative; three parts, as in the subspace basis: fp32 class).
Source: LeapQuant (arXiv 2609.38166); NVlabs/kda request conless-leapquant-kda-flush.
"""

from __future__ import annotations

import contextlib

import torch
import triton
import triton.language as tl

from ..geometry import DEPENDENT_COLUMN, EPS, GUARD_FROM_EXP, H, K, L, NORM_FLOOR, QMAX, R, TOKEN_LIMIT, V
from ..launch import FLAG_TILE, ROUND_MAGIC, ROUND_MAGIC_BITS, checkpoint_strides, interpreting, pick_words, resident_ctas

RANK_PAD = 16  # tl.dot needs every dim >= 16: the R tokens ride in a 16-row block
NUM_WARPS = 8
# bf16 parts per operand in the token product uk = S^T qv (2 or 3). The basis products
# a = S^T q0 and b = S qk always take three: the basis moves the residual to first order, and
# two parts (2^-17) put heads whose residual is small against S (token-dominated or small
# states, a nearly blind q0) outside the 1.01 bound (NOTES.md item 25); uk's 2^-17 only moves
# its fp16 rounding, and three parts there cost spills (NOTES.md item 10)
SUBSPACE_SPLIT = 2
MAX_REGISTERS = None  # a cap trades spills for a second resident CTA (NOTES.md)
# Pool calls run on resident CTAs that rank the due programs and share them out: a call with
# nothing due costs one flag scan (4 us at B=512, 86 us with one CTA per candidate) and 1 in 16
# due runs 20-25% faster; all due runs ~5% slower than one CTA per candidate (NOTES.md).
PERSISTENT_POOL = True
# Gram-Schmidt passes for qk (the iterate, which only needs to span S^T q0): one (NOTES.md)
QK_TWICE = tl.constexpr(False)
GUARD_FROM_EXP_C = tl.constexpr(GUARD_FROM_EXP)  # geometry.GUARD_FROM_EXP, as a jit global


@triton.jit
def _split_bf16(x):
    hi = x.to(tl.bfloat16)
    lo = (x - hi.to(tl.float32)).to(tl.bfloat16)
    return hi, lo


@triton.jit
def _mma(a, b, acc, UPCAST: tl.constexpr):
    # UPCAST: Triton's CPU interpreter multiplies bf16 as raw bits; give it fp32 operands
    if UPCAST:
        return tl.dot(a.to(tl.float32), b.to(tl.float32), acc, input_precision="ieee")
    return tl.dot(a, b, acc)


@triton.jit
def _split3_bf16(x):
    hi, mid = _split_bf16(x)
    lo = ((x - hi.to(tl.float32)) - mid.to(tl.float32)).to(tl.bfloat16)
    return hi, mid, lo


@triton.jit
def _dot_fp32(xh, xm, xl, y, THREE: tl.constexpr, UPCAST: tl.constexpr):
    # (xh [+ xm] + xl) @ y with y split the same way. Two parts (xm unused): the terms up to
    # hi*lo, ~2^-16 relative. Three parts: the terms up to hi*lo and mid*mid, ~2^-24 relative.
    if THREE:
        yh, ym, yl = _split3_bf16(y)
        acc = _mma(xh, yh, None, UPCAST)
        acc = _mma(xh, ym, acc, UPCAST)
        acc = _mma(xm, yh, acc, UPCAST)
        acc = _mma(xm, ym, acc, UPCAST)
        acc = _mma(xh, yl, acc, UPCAST)
        acc = _mma(xl, yh, acc, UPCAST)
    else:
        yh, yl = _split_bf16(y)
        acc = _mma(xh, yh, None, UPCAST)
        acc = _mma(xh, yl, acc, UPCAST)
        acc = _mma(xl, yh, acc, UPCAST)
    return acc


@triton.jit
def _add4(a0, a1, a2, a3, b0, b1, b2, b3):
    return a0 + b0, a1 + b1, a2 + b2, a3 + b3


@triton.jit
def _project_out(v, b0, b1, b2):
    # v minus its components along the orthonormal b0..b2 (zero where not built yet); the same
    # reduction gives |v|^2, so a pass costs one exchange between warps
    parts = tl.join(tl.join(b0 * v, b1 * v), tl.join(b2 * v, v * v))  # [N, 2, 2], in-thread
    c01, c2v = tl.split(tl.sum(parts, axis=0))
    c0, c1 = tl.split(c01)
    c2, vv = tl.split(c2v)
    return v - c0 * b0 - c1 * b1 - c2 * b2, vv, c0 * c0 + c1 * c1 + c2 * c2


@triton.jit
def _unit_direction(v, b0, b1, b2, r: tl.constexpr, NORM_MIN: tl.constexpr, DROP: tl.constexpr,
                    TWICE: tl.constexpr):
    # Column r of Gram-Schmidt: v projected out of b0..b{r-1} (TWICE: classical GS twice where
    # needed, the reference's MGS2 up to rounding), then unit length. A v left with less than
    # DROP of its squared norm depends on the earlier columns and is replaced by e_r made
    # orthogonal to them.
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
        if norm2 <= DROP * v0:
            # a q0 with repeated columns, a rank-deficient state (the reference's normalised
            # rounding noise may come out parallel to b_0): keep R directions
            v = tl.where(tl.arange(0, v.shape[0]) == r, 1.0, 0.0).to(v.dtype)
            v, _, _ = _project_out(v, b0, b1, b2)
            v, _, _ = _project_out(v, b0, b1, b2)
            norm2 = tl.sum(v * v, axis=0)
    return v / tl.maximum(tl.sqrt_rn(tl.maximum(norm2, 0.0)), NORM_MIN)


@triton.jit
def _orthonormal_cols(x, RANK: tl.constexpr, NORM_MIN: tl.constexpr, DROP: tl.constexpr,
                      TWICE: tl.constexpr):
    # Gram-Schmidt over the R = 4 columns of x [N, RANK_PAD]; columns >= R come back zero.
    # The columns are worked on as separate vectors, so each pass reduces 4 values, not the
    # padded block.
    tl.static_assert(RANK == 4)
    cols = tl.arange(0, x.shape[1])[None, :]
    zero = tl.zeros([x.shape[0]], dtype=x.dtype)
    b0 = _unit_direction(tl.sum(tl.where(cols == 0, x, 0.0), axis=1), zero, zero, zero, 0, NORM_MIN, DROP, TWICE)
    b1 = _unit_direction(tl.sum(tl.where(cols == 1, x, 0.0), axis=1), b0, zero, zero, 1, NORM_MIN, DROP, TWICE)
    b2 = _unit_direction(tl.sum(tl.where(cols == 2, x, 0.0), axis=1), b0, b1, zero, 2, NORM_MIN, DROP, TWICE)
    b3 = _unit_direction(tl.sum(tl.where(cols == 3, x, 0.0), axis=1), b0, b1, b2, 3, NORM_MIN, DROP, TWICE)
    return tl.where(cols == 0, b0[:, None], tl.where(cols == 1, b1[:, None],
                    tl.where(cols == 2, b2[:, None], tl.where(cols == 3, b3[:, None], 0.0))))


@triton.jit
def _pow2(e):
    # 2^e for integer e in [-126, 127], exact, from the exponent bits
    return ((e + 127) << 23).to(tl.float32, bitcast=True)


@triton.jit
def _exponent(x):
    # e with 2^e <= x < 2^(e+1) for x >= 0 (-127 for 0 and subnormals)
    return ((x.to(tl.int32, bitcast=True) >> 23) & 0xFF) - 127


@triton.jit
def _guard_overflow(uk, qv, LIMIT: tl.constexpr):
    # The checkpoint stores only q^T u, so where fp16 u_r would overflow (coherent states above
    # |S| ~ 6e3) a power of two moves from u_r to q_r: exact for q^T u. Elsewhere the tokens stay
    # as the reference has them.
    mu = tl.max(tl.abs(uk), axis=0)
    e = tl.where(mu > LIMIT, _exponent(mu / LIMIT) + 1, 0)
    return uk * _pow2(-e)[None, :], qv * _pow2(e)[None, :]


@triton.jit(noinline=True)
def _flush_program(
    slot, head,
    codes_in, sk_in, sv_in, u_in, q_in, codes_out, sk_out, sv_out, u_out, q_out,
    kbuf, ubuf, gbuf, w, pcum, q0,
    C_SLOT: tl.constexpr, C_HEAD: tl.constexpr, SK_SLOT: tl.constexpr, SK_HEAD: tl.constexpr,
    SV_SLOT: tl.constexpr, SV_HEAD: tl.constexpr,
    U_SLOT: tl.constexpr, U_HEAD: tl.constexpr, U_ROW: tl.constexpr,
    Q_SLOT: tl.constexpr, Q_HEAD: tl.constexpr, Q_ROW: tl.constexpr,
    IN_PLACE: tl.constexpr, UPCAST: tl.constexpr, SPLIT3: tl.constexpr,
    NH: tl.constexpr, NV: tl.constexpr, NK: tl.constexpr, NL: tl.constexpr,
    NR: tl.constexpr, RP: tl.constexpr,
    QM: tl.constexpr, SCALE_MIN: tl.constexpr, NORM_MIN: tl.constexpr, DROP: tl.constexpr,
    U_LIMIT: tl.constexpr, MAGIC: tl.constexpr, MAGIC_BITS: tl.constexpr,
):
    prog = slot * NH + head
    v = tl.arange(0, NV)
    k = tl.arange(0, NK)
    j = tl.arange(0, NL)
    r = tl.arange(0, RP)
    live = r < NR

    # window: decay of entry j since it was appended, D_j = prod_{i > j} gbuf[i]
    gbase = gbuf + prog * (NL * NK)
    g_after = tl.load(gbase + (j[:, None] + 1) * NK + k[None, :], mask=j[:, None] + 1 < NL, other=1.0)
    decay_j = tl.cumprod(g_after.to(tl.float32), axis=0, reverse=True)
    wj = tl.load(w + prog * NL + j)
    keys = tl.load(kbuf + prog * (NL * NK) + j[:, None] * NK + k[None, :]).to(tl.float32)
    keys = keys * decay_j * wj[:, None]
    vals_t = tl.load(ubuf + prog * (NL * NV) + j[None, :] * NV + v[:, None])  # [V, L] bf16, exact
    decay = tl.exp(tl.load(pcum + prog * NK + k))

    # old checkpoint
    codes = tl.load(codes_in + slot * C_SLOT + head * C_HEAD + v[:, None] * NK + k[None, :])
    s_k = tl.load(sk_in + slot * SK_SLOT + head * SK_HEAD + k)
    s_v = tl.load(sv_in + slot * SV_SLOT + head * SV_HEAD + v)
    u_old = tl.load(u_in + slot * U_SLOT + head * U_HEAD + r[:, None] * U_ROW + k[None, :],
                    mask=live[:, None], other=0.0)
    q_old_t = tl.load(q_in + slot * Q_SLOT + head * Q_HEAD + r[None, :] * Q_ROW + v[:, None],
                      mask=live[None, :], other=0.0)

    # rebuild: fp16 x fp16 products are exact in fp32, so the token part needs no split
    s = _mma(q_old_t, u_old, None, UPCAST)
    # int8 -> fp32 through the fp32 mantissa (integer add, float subtract): I2F runs at a
    # quarter of the FP32 rate
    codes_f = (codes.to(tl.int32) + MAGIC_BITS).to(tl.float32, bitcast=True) - MAGIC
    s = (codes_f * (s_v * (1.0 / QM))[:, None] * s_k[None, :] + s) * decay[None, :]
    kh, kl = _split_bf16(keys)
    s = _mma(vals_t, kh, s, UPCAST)
    s = _mma(vals_t, kl, s, UPCAST)

    # one round of subspace iteration on [N, RANK_PAD] blocks: S stays fp32 for the residual
    # and meets the tensor cores as bf16 parts (three in the basis products, NOTES.md item 25)
    # The iteration is scale-free: run it on S / 2^e with max|S / 2^e| in [1, 2), so that no
    # Gram-Schmidt norm underflows (tiny states) or overflows, and scale u back (exact).
    ex = tl.minimum(tl.maximum(_exponent(tl.max(tl.max(tl.abs(s), axis=1), axis=0)), -126), 126)
    sh, sm, sl = _split3_bf16(s * _pow2(-ex))
    sht, smt, slt = tl.trans(sh), tl.trans(sm), tl.trans(sl)
    q0p = tl.load(q0 + v[:, None] * NR + r[None, :], mask=live[None, :], other=0.0)  # [V, RP]
    # qk only has to span S^T q0 well (b = S qk spans the same space for any basis of it), so
    # one Gram-Schmidt pass does; qv is the token basis and gets both
    qk = _orthonormal_cols(_dot_fp32(sht, smt, slt, q0p, True, UPCAST), NR, NORM_MIN, DROP, QK_TWICE)  # [K, RP]
    qv = _orthonormal_cols(_dot_fp32(sh, sm, sl, qk, True, UPCAST), NR, NORM_MIN, DROP, True)  # [V, RP]
    if SPLIT3:
        uk = _dot_fp32(sht, smt, slt, qv, True, UPCAST)
    else:  # hi and mid are the two-part split of S
        uk = _dot_fp32(sht, sht, smt, qv, False, UPCAST)
    uk = uk * _pow2(ex)
    # |u_r[k]| <= |S[:, k]| |qv_r| < sqrt(V) 2^(ex+1): below 2^14 the guard cannot fire, and
    # its reduction (one more exchange between warps) is skipped
    if ex > GUARD_FROM_EXP_C:
        uk, qv = _guard_overflow(uk, qv, U_LIMIT)
    u_new = tl.trans(uk).to(tl.float16)  # [RP, K]
    q_new_t = qv.to(tl.float16)  # [V, RP]

    # residual against the rounded tokens: fp16 x fp16 products are exact in fp32
    e = _mma(-q_new_t, u_new, s, UPCAST)
    ae = tl.abs(e)
    # each thread computes the scales of all its 32 columns: the fast sqrt (within 1 ulp) keeps
    # that cheap; the codes use the stored scales, so the decoded state is unaffected
    s_k_new = tl.maximum(tl.sqrt(tl.sum(ae, axis=0) * (1.0 / NV)), SCALE_MIN)
    inv_k = 1.0 / s_k_new
    s_v_new = tl.maximum(tl.max(ae * inv_k[None, :], axis=1), SCALE_MIN)
    x = e * inv_k[None, :] * (QM / s_v_new)[:, None]
    x = tl.minimum(tl.maximum(x, -QM), QM)
    # round half to even through the fp32 mantissa; the low byte is the int8 code
    codes_new = ((x + MAGIC).to(tl.int32, bitcast=True) - MAGIC_BITS).to(tl.int8)

    tl.store(codes_out + slot * C_SLOT + head * C_HEAD + v[:, None] * NK + k[None, :], codes_new)
    tl.store(sk_out + slot * SK_SLOT + head * SK_HEAD + k, s_k_new)
    tl.store(sv_out + slot * SV_SLOT + head * SV_HEAD + v, s_v_new)
    tl.store(u_out + slot * U_SLOT + head * U_HEAD + r[:, None] * U_ROW + k[None, :], u_new, mask=live[:, None])
    tl.store(q_out + slot * Q_SLOT + head * Q_HEAD + r[None, :] * Q_ROW + v[:, None], q_new_t, mask=live[None, :])
    if IN_PLACE:
        # every thread's window loads are consumed before any reset lands
        tl.debug_barrier()
        tl.store(w + prog * NL + j, tl.zeros([NL], dtype=tl.float32))
        tl.store(gbase + j[:, None] * NK + k[None, :], tl.full([NL, NK], 1.0, dtype=tl.float16))
        tl.store(pcum + prog * NK + k, tl.zeros([NK], dtype=tl.float32))


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
    SPLIT3: tl.constexpr,  # token product uk with 3-part bf16 operands (else 2; a and b: 3)
    PERSISTENT: tl.constexpr,  # a grid of resident CTAs sharing out the due programs
    TILE: tl.constexpr,  # candidates whose flags a CTA reads at once (persistent grid)
    CTAS: tl.constexpr,  # persistent grid size (resident CTAs on the device)
    NH: tl.constexpr, NV: tl.constexpr, NK: tl.constexpr, NL: tl.constexpr,
    NR: tl.constexpr, RP: tl.constexpr,
    QM: tl.constexpr, SCALE_MIN: tl.constexpr, NORM_MIN: tl.constexpr, DROP: tl.constexpr,
    U_LIMIT: tl.constexpr, MAGIC: tl.constexpr, MAGIC_BITS: tl.constexpr,
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
        _flush_program(
            slot.to(tl.int64), c % NH,
            codes_in, sk_in, sv_in, u_in, q_in, codes_out, sk_out, sv_out, u_out, q_out,
            kbuf, ubuf, gbuf, w, pcum, q0,
            C_SLOT, C_HEAD, SK_SLOT, SK_HEAD, SV_SLOT, SV_HEAD, U_SLOT, U_HEAD, U_ROW,
            Q_SLOT, Q_HEAD, Q_ROW, IN_PLACE, UPCAST, SPLIT3, NH, NV, NK, NL, NR, RP,
            QM, SCALE_MIN, NORM_MIN, DROP, U_LIMIT, MAGIC, MAGIC_BITS,
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
        _flush_program(
            (prog // NH).to(tl.int64), prog % NH,
            codes_in, sk_in, sv_in, u_in, q_in, codes_out, sk_out, sv_out, u_out, q_out,
            kbuf, ubuf, gbuf, w, pcum, q0,
            C_SLOT, C_HEAD, SK_SLOT, SK_HEAD, SV_SLOT, SV_HEAD, U_SLOT, U_HEAD, U_ROW,
            Q_SLOT, Q_HEAD, Q_ROW, IN_PLACE, UPCAST, SPLIT3, NH, NV, NK, NL, NR, RP,
            QM, SCALE_MIN, NORM_MIN, DROP, U_LIMIT, MAGIC, MAGIC_BITS,
        )


_CONSTANTS = dict(NH=H, NV=V, NK=K, NL=L, NR=R, RP=RANK_PAD, QM=float(QMAX), SCALE_MIN=EPS,
                  NORM_MIN=NORM_FLOOR, DROP=DEPENDENT_COLUMN, U_LIMIT=TOKEN_LIMIT,
                  MAGIC=ROUND_MAGIC, MAGIC_BITS=ROUND_MAGIC_BITS)


def launch_flush(ckpt_in, ckpt_out, window, q0, idx=None, hcnt=None, picks=None):
    """Launch the flush kernel.

    ``ckpt_in``/``ckpt_out``: ``(codes, s_k, s_v, u, q)`` tensors of shape ``[S, H, ...]`` with
    unit innermost stride and equal strides (the same tensors for an in-place pool flush).
    ``window``: ``(kbuf, ubuf, gbuf, w, pcum)`` dense ``[S, H, ...]``. With ``idx`` (int32
    ``[N]``) and ``hcnt`` (int32 ``[S, H]``), programs ``(idx[i], h)`` run only where
    ``idx[i] > 0`` and ``hcnt == L`` and get their window reset; without them, every
    ``(b, h)`` of the batch runs and the window is left alone. No host synchronisation.
    ``picks``: int32 scratch of ``pick_words(S, device)`` words for the persistent pool grid
    (allocated here when not given). Returns Triton's launched kernel object (registers,
    spills), or None for an empty launch.
    """
    in_place = idx is not None
    num_programs = (idx.numel() if in_place else ckpt_in[0].shape[0]) * H
    if num_programs == 0:
        return None
    dummy = q0  # unused pointer arguments in functional mode
    kbuf, ubuf, gbuf, w, pcum = window
    # a pool call may have few or no programs due: resident CTAs share out the due ones
    persistent = in_place and PERSISTENT_POOL
    grid = (resident_ctas(q0.device) if persistent else num_programs,)
    # due programs are at most the pool's (slots * heads), so a CTA picks at most this many
    pick_stride = triton.cdiv(min(num_programs, hcnt.shape[0] * H), grid[0]) if persistent else 0
    if persistent and picks is None:
        picks = torch.empty(pick_words(hcnt.shape[0], q0.device), dtype=torch.int32, device=q0.device)
    # launch on the tensors' GPU, which need not be the current device
    with torch.cuda.device(q0.device) if q0.is_cuda else contextlib.nullcontext():
        return _flush_kernel[grid](
            *ckpt_in, *ckpt_out, kbuf, ubuf, gbuf, w, pcum, q0,
            idx if in_place else dummy, hcnt if in_place else dummy, num_programs,
            picks if persistent else dummy, pick_stride,
            **checkpoint_strides(*ckpt_in), IN_PLACE=in_place, UPCAST=interpreting(), PERSISTENT=persistent,
            SPLIT3=SUBSPACE_SPLIT == 3,
            TILE=FLAG_TILE, CTAS=grid[0], **_CONSTANTS,
            num_warps=NUM_WARPS, num_stages=1, **({"maxnreg": MAX_REGISTERS} if MAX_REGISTERS else {}),
        )
