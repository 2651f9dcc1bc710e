"""Gluon kernel of the LeapQuant KDA flush for Hopper (sm_90a): one program = one (slot, head).

The same phases as the portable Triton kernel (``triton_kernel.py``), with the layouts chosen by hand:
``S`` [V, K] lives in the wgmma accumulator of two warpgroups (64 fp32 registers per thread);
the rebuild and the residual are wgmma products whose small operands (window, tokens) sit in
shared memory; the subspace products read ``S`` once stored in shared memory as three bf16 parts
(the transposed products through the operand descriptor, no register copies); the orthonormal
bases come from a Cholesky QR whose 4 x 4 Gram matrix is summed in fp64, so a pass costs one
reduction (shared out over the warps) instead of one per Gram-Schmidt step (qv gets a second
pass when ill-conditioned, dependent columns a Gram-Schmidt fallback); S's three bf16 parts are
split in fp32 arithmetic, since Hopper runs conversion instructions at a fraction of the fp32
rate; the next program's inputs are copied (cp.async) into a staging area, its window values
straight into the rebuild's operand, while the current one computes; the column sums of |E| take
one exchange through shared memory, in the order gl.sum would add them, instead of three shuffle
rounds and a cross-warp stage.

Verified with triton 3.6.0 (the Gluon API moves between releases; ``kernel.py`` picks this path
only where it was verified). Source: LeapQuant (arXiv 2609.38166); NVlabs/kda request
conless-leapquant-kda-flush.
"""

from __future__ import annotations

import functools

import torch
import triton
from triton.experimental import gluon
from triton.experimental.gluon import language as gl
from triton.experimental.gluon.language.nvidia.hopper import (async_copy, fence_async_shared, warpgroup_mma,
                                                                 warpgroup_mma_wait)

from ..geometry import DEPENDENT_COLUMN, EPS, GUARD_FROM_EXP, H, K, L, NORM_FLOOR, QMAX, R, TOKEN_LIMIT, V
from ..launch import (FLAG_TILE, GLUON_VERIFIED_TRITON, ROUND_MAGIC, ROUND_MAGIC_BITS, checkpoint_strides,
                      pick_words, resident_ctas)

VERIFIED_TRITON = GLUON_VERIFIED_TRITON
NUM_WARPS = 8  # two warpgroups: each holds 64 rows of S
THIN = gl.constexpr(16)  # thin products' columns: a [N, R] operand's hi, lo and mid parts and R zeros
PARTS = gl.constexpr(3)  # bf16 parts of each fp32 operand in the subspace products: ~2^-24 relative
# Cholesky QR keeps |Q^T Q - I| ~ eps64 cond^2; a pivot below this fraction of its column
# (cond above ~1e4) gets a second pass so the basis stays orthonormal to fp32 accuracy
SECOND_PASS_BELOW = 1e-8

# S [V, K] fp32 across 8 warps: each warpgroup holds 64 rows (wgmma m64n128)
ACC = gl.constexpr(gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[8, 1], instr_shape=[16, 128, 16]))
# thin products [N, THIN]: S^T x or S x for the R columns of x, its hi, lo and mid parts side by side
ACC_THIN = gl.constexpr(gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[8, 1], instr_shape=[16, THIN, 16]))
ROWS = gl.constexpr(gl.SliceLayout(1, ACC))  # a [V] vector along S's rows
COLS = gl.constexpr(gl.SliceLayout(0, ACC))  # a [K] vector along S's columns
# [16, N] stacks (the Gram matrix's products, a thin operand's rows, the token rows): two rows a
# warp, no replication; a basis column [N] as a vector every warp holds whole
STACK16 = gl.constexpr(gl.BlockedLayout([2, 4], [1, 32], [8, 1], [1, 0]))
VEC = gl.constexpr(gl.SliceLayout(0, STACK16))
THIN_COLS = gl.constexpr(gl.BlockedLayout([4, 4], [32, 1], [1, 8], [1, 0]))  # [N, R]: VEC's rows, R in-thread
EVERY16 = gl.constexpr(gl.BlockedLayout([16], [32], [8], [0]))  # [16], every thread holds all
# window [L, K]: each thread owns whole columns, so the decay products along j are in-thread
WIN = gl.constexpr(gl.BlockedLayout([16, 1], [1, 32], [1, 8], [0, 1]))
# codes [V, K] int8 in 16-byte rows per thread (coalesced loads and stores)
BYTES = gl.constexpr(gl.BlockedLayout([1, 16], [4, 8], [8, 1], [1, 0]))
TOKENS = gl.constexpr(gl.BlockedLayout([1, 4], [2, 16], [8, 1], [1, 0]))  # [16, N] token block
# [slots, H] due flags: a warp reads whole 128-byte rows (16 bytes a thread), four slots a load
FLAGS = gl.constexpr(gl.BlockedLayout([1, 4], [4, 8], [8, 1], [1, 0]))
PLAIN = gl.constexpr(gl.SwizzledSharedLayout(1, 1, 1, [1, 0]))
PLAIN1 = gl.constexpr(gl.SwizzledSharedLayout(1, 1, 1, [0]))
# the next program's inputs are copied (cp.async, 16 bytes a thread where rows allow) into a
# staging area while this one computes
HALVES = gl.constexpr(gl.BlockedLayout([1, 8], [2, 16], [8, 1], [1, 0]))  # [16, N] 16-bit rows
TOKEN_COPY = gl.constexpr(gl.BlockedLayout([1, 2], [1, 32], [4, 2], [1, 0]))  # [R, N] fp16 tokens
WORDS = gl.constexpr(gl.BlockedLayout([1], [32], [8], [0]))  # [N] fp32 (and the flag scan's [slots] due counts)
# [64, N] partial column sums, row 8 w + r for warp w's row pair r: a column's 64 partials in
# two lanes of one warp (w's lowest bit on the lane), 32 in each thread
COLUMN_PARTIALS = gl.constexpr(gl.DistributedLinearLayout(
    reg_bases=[[1, 0], [2, 0], [4, 0], [16, 0], [32, 0]], lane_bases=[[8, 0], [0, 1], [0, 2], [0, 4], [0, 8]],
    warp_bases=[[0, 16], [0, 32], [0, 64]], block_bases=[], shape=[64, 128]))
OPERAND = gl.constexpr(gl.NVMMASharedLayout(swizzle_byte_width=128, element_bitwidth=16, rank=2))


@gluon.jit
def _add(a, b):
    return a + b


@gluon.jit
def _mul(a, b):
    return a * b


@gluon.jit
def _pow2(e):
    # 2^e for integer e in [-126, 127], exact, from the exponent bits
    return ((e + 127) << 23).to(gl.float32, bitcast=True)


@gluon.jit
def _exponent(x):
    # e with 2^e <= x < 2^(e+1) for x >= 0 (-127 for 0 and subnormals)
    return ((x.to(gl.int32, bitcast=True) >> 23) & 0xFF) - 127


@gluon.jit
def _split_bf16(x):
    hi = x.to(gl.bfloat16)
    lo = (x - hi.to(gl.float32)).to(gl.bfloat16)
    return hi, lo


# Three bf16 parts of two fp32 values, packed in pairs for the shared-memory stores. Hopper runs
# conversion instructions at a fraction of the fp32 rate, so each part is rounded to bf16's 8
# significant bits in fp32 arithmetic (Veltkamp's split, c = x (2^16 + 1), hi = c - (c - x): round
# to nearest) and its upper half taken; .rn keeps ptxas from fusing the split into an fma. x - hi
# has at most 16 significant bits, so x = hi + mid + lo exactly.
SPLIT3_ASM = gl.constexpr("""{
.reg .f32 c, t, h0, h1, m0, m1, r0, r1;
mul.rn.f32 c, $3, 0f47800100; sub.rn.f32 t, c, $3; sub.rn.f32 h0, c, t;
mul.rn.f32 c, $4, 0f47800100; sub.rn.f32 t, c, $4; sub.rn.f32 h1, c, t;
sub.rn.f32 r0, $3, h0; sub.rn.f32 r1, $4, h1;
mul.rn.f32 c, r0, 0f47800100; sub.rn.f32 t, c, r0; sub.rn.f32 m0, c, t;
mul.rn.f32 c, r1, 0f47800100; sub.rn.f32 t, c, r1; sub.rn.f32 m1, c, t;
sub.rn.f32 r0, r0, m0; sub.rn.f32 r1, r1, m1;
prmt.b32 $0, h0, h1, 0x7632; prmt.b32 $1, m0, m1, 0x7632; prmt.b32 $2, r0, r1, 0x7632;
}""")


@gluon.jit
def _split3_bf16(x):
    # x = hi + mid + lo, three bf16 parts, each the rounding of what the earlier parts leave
    return gl.inline_asm_elementwise(SPLIT3_ASM, "=r,=r,=r,r,r", [x],
                                     dtype=(gl.bfloat16, gl.bfloat16, gl.bfloat16), is_pure=True, pack=2)


@gluon.jit
def _dot(x, y):
    # fp64 inner product of two [N] fp32 vectors: the products are exact in fp64
    return gl.sum(x.to(gl.float64) * y.to(gl.float64), axis=0)


@gluon.jit
def _gram(x0, x1, x2, x3):
    # The 10 fp64 inner products of four [N] vectors (held whole by every warp), as one
    # reduction of a [16, N] stack of products spread over the warps (each warp sums two of
    # them) instead of ten reductions repeated in every warp; one exchange makes them uniform.
    g = gl.arange(0, 16, layout=gl.SliceLayout(1, STACK16))[:, None]
    # row g multiplies columns (i, j): (0,0) (0,1) (0,2) (0,3) (1,1) (1,2) (1,3) (2,2) (2,3) (3,3)
    i = gl.where(g < 4, 0, gl.where(g < 7, 1, gl.where(g < 9, 2, 3)))
    j = gl.where(g < 4, g, gl.where(g < 7, g - 3, gl.where(g < 9, g - 5, 3)))
    a = _select_rows(i, x0, x1, x2, x3)
    b = _select_rows(j, x0, x1, x2, x3)
    sums = gl.convert_layout(gl.sum(a.to(gl.float64) * b.to(gl.float64), axis=1), EVERY16)
    t0, t1 = gl.split(gl.reshape(sums, [8, 2]))
    return _pick(t0, 0), _pick(t1, 0), _pick(t0, 1), _pick(t1, 1), _pick(t0, 2), _pick(t1, 2), \
        _pick(t0, 3), _pick(t1, 3), _pick(t0, 4), _pick(t1, 4)


@gluon.jit
def _pick(t, r: gl.constexpr):
    # element r of a small vector every thread holds whole
    return gl.sum(gl.where(gl.arange(0, t.shape[0], layout=t.type.layout) == r, t, 0.0), axis=0)


@gluon.jit
def _thin_product(s_parts, x_s, TRANSPOSE: gl.constexpr, NN: gl.constexpr):
    # (S or S^T) [N, N] times x [N, R], both sides as three bf16 parts (all nine cross terms:
    # ~2^-24 relative, fp32 class): x_s holds rows (x_hi^T; x_lo^T; x_mid^T; 0), so one product
    # per part of S gives S x_hi, S x_lo and S x_mid side by side. Returns the R columns of the
    # result as [N] fp32 vectors in VEC.
    acc = gl.zeros([NN, THIN], gl.float32, ACC_THIN)
    for part in gl.static_range(PARTS):  # issued back to back: one wait for the three
        if TRANSPOSE:
            acc = warpgroup_mma(s_parts.index(part).permute((1, 0)), x_s.permute((1, 0)), acc, is_async=True)
        else:
            acc = warpgroup_mma(s_parts.index(part), x_s.permute((1, 0)), acc, is_async=True)
    acc = warpgroup_mma_wait(0, deps=[acc])
    # the accumulator's thread holds columns hi and mid (or lo and 0) of a row, and its lane
    # partner the other pair: the sum over the part axis is (hi + mid) + lo, one shuffle
    cols = gl.convert_layout(gl.sum(gl.reshape(acc, [NN, 4, 4]), axis=1), THIN_COLS)
    c02, c13 = gl.split(gl.reshape(cols, [NN, 2, 2]))
    c0, c2 = gl.split(c02)
    c1, c3 = gl.split(c13)
    return (gl.convert_layout(c0, VEC, assert_trivial=True), gl.convert_layout(c1, VEC, assert_trivial=True),
            gl.convert_layout(c2, VEC, assert_trivial=True), gl.convert_layout(c3, VEC, assert_trivial=True))


@gluon.jit
def _select_rows(which, c0, c1, c2, c3):
    # [16, N] stack whose row g is the [N] vector c_which[g]
    return gl.where(which == 0, c0[None, :], gl.where(which == 1, c1[None, :], gl.where(which == 2, c2[None, :], c3[None, :])))


@gluon.jit
def _store_operand(x_s, c0, c1, c2, c3):
    # rows (hi^T; lo^T; mid^T; 0) of a [N, R] operand for _thin_product: each warp splits and
    # stores only its own two rows
    g = gl.arange(0, THIN, layout=gl.SliceLayout(1, STACK16))[:, None]
    hi, mid, lo = _split3_bf16(_select_rows(g % 4, c0, c1, c2, c3))
    x_s.store(gl.where(g < 4, hi, gl.where(g < 8, lo, gl.where(g < 12, mid, 0.0))))


# the hardware's fp64 reciprocal square root estimate (~2^-22 relative), no conversions
RSQRT_F64_ASM = gl.constexpr("rsqrt.approx.ftz.f64 $0, $1;")


@gluon.jit
def _inv_norm(d, NORM_MIN: gl.constexpr):
    # 1 / max(sqrt(d), NORM_MIN) in fp64 for a scalar d >= 0: the estimate and one Newton step
    # (2^-44, far below the fp32 basis it scales). No branch, so that ptxas can schedule the
    # back substitution's conversions under the chain of four of these
    dd = gl.where(d > NORM_MIN * NORM_MIN, d, NORM_MIN * NORM_MIN)
    y = gl.inline_asm_elementwise(RSQRT_F64_ASM, "=d,d", [dd], dtype=gl.float64, is_pure=True, pack=1)
    y = y * (1.5 - 0.5 * dd * y * y)
    return gl.where(y < 1.0 / NORM_MIN, y, 1.0 / NORM_MIN)


@gluon.jit
def _at_least_0(x):
    # max(x, 0) for a uniform fp64 scalar: a compare and a select (gl.maximum's NaN rules cost more)
    return gl.where(x > 0.0, x, 0.0)


@gluon.jit
def _cholesky_pass(x0, x1, x2, x3, NORM_MIN: gl.constexpr, DROP: gl.constexpr, SECOND: gl.constexpr):
    # One Cholesky QR pass: Q = X R^-1 with R from the fp64 Gram matrix of X's columns.
    # Returns Q's columns and whether a column depends on the earlier ones or is nearly so.
    g00, g01, g02, g03, g11, g12, g13, g22, g23, g33 = _gram(x0, x1, x2, x3)
    # R upper triangular: d_j = r_jj^2 = |column j|^2 after projecting out the earlier ones
    d0 = _at_least_0(g00)
    i00 = _inv_norm(d0, NORM_MIN)
    r01 = g01 * i00
    r02 = g02 * i00
    r03 = g03 * i00
    d1 = _at_least_0(g11 - r01 * r01)
    i11 = _inv_norm(d1, NORM_MIN)
    r12 = (g12 - r01 * r02) * i11
    r13 = (g13 - r01 * r03) * i11
    d2 = _at_least_0(g22 - r02 * r02 - r12 * r12)
    i22 = _inv_norm(d2, NORM_MIN)
    r23 = (g23 - r02 * r03 - r12 * r13) * i22
    d3 = _at_least_0(g33 - r03 * r03 - r13 * r13 - r23 * r23)
    i33 = _inv_norm(d3, NORM_MIN)
    # back substitution, column by column, in fp64
    y0 = x0.to(gl.float64) * i00
    y1 = (x1.to(gl.float64) - r01 * y0) * i11
    y2 = (x2.to(gl.float64) - r02 * y0 - r12 * y1) * i22
    y3 = (x3.to(gl.float64) - r03 * y0 - r13 * y1 - r23 * y2) * i33
    # uniform flags: a column kept at most DROP (dependent) or less than SECOND of its norm
    dependent = (d1 <= DROP * g11) | (d2 <= DROP * g22) | (d3 <= DROP * g33)
    ill = (d1 < SECOND * g11) | (d2 < SECOND * g22) | (d3 < SECOND * g33)
    return y0.to(gl.float32), y1.to(gl.float32), y2.to(gl.float32), y3.to(gl.float32), dependent, ill


@gluon.jit
def _replace_dependent(b0, b1, b2, r: gl.constexpr, NN: gl.constexpr):
    # a column that depends on the earlier ones becomes e_r made orthogonal to them (twice)
    e = gl.where(gl.arange(0, NN, layout=VEC) == r, 1.0, 0.0)
    for _ in gl.static_range(2):
        e = e - _dot(b0, e).to(gl.float32) * b0 - _dot(b1, e).to(gl.float32) * b1 - _dot(b2, e).to(gl.float32) * b2
    return e


@gluon.jit
def _orthonormal_cols(x0, x1, x2, x3, TWICE: gl.constexpr, NN: gl.constexpr, NORM_MIN: gl.constexpr,
                      DROP: gl.constexpr, SECOND: gl.constexpr):
    # The columns of X [N, R] made orthonormal in order (the Q of X = QR, as the reference's
    # modified Gram-Schmidt gives up to rounding). A column keeping at most DROP of its squared
    # norm depends on the earlier ones: it is replaced by e_r made orthogonal to them.
    q0, q1, q2, q3, dependent, ill = _cholesky_pass(x0, x1, x2, x3, NORM_MIN, DROP, SECOND)
    if dependent:  # rare: a rank-deficient state or a q0 with repeated columns
        zero = gl.zeros([NN], gl.float32, VEC)
        q0 = x0 / gl.maximum(gl.sqrt(_dot(x0, x0)).to(gl.float32), NORM_MIN)
        q1 = x1 - _dot(q0, x1).to(gl.float32) * q0
        q1 = q1 - _dot(q0, q1).to(gl.float32) * q0
        if _dot(q1, q1) <= DROP * _dot(x1, x1):
            q1 = _replace_dependent(q0, zero, zero, 1, NN)
        q1 = q1 / gl.maximum(gl.sqrt(_dot(q1, q1)).to(gl.float32), NORM_MIN)
        q2 = x2 - _dot(q0, x2).to(gl.float32) * q0 - _dot(q1, x2).to(gl.float32) * q1
        q2 = q2 - _dot(q0, q2).to(gl.float32) * q0 - _dot(q1, q2).to(gl.float32) * q1
        if _dot(q2, q2) <= DROP * _dot(x2, x2):
            q2 = _replace_dependent(q0, q1, zero, 2, NN)
        q2 = q2 / gl.maximum(gl.sqrt(_dot(q2, q2)).to(gl.float32), NORM_MIN)
        q3 = x3 - _dot(q0, x3).to(gl.float32) * q0 - _dot(q1, x3).to(gl.float32) * q1 - _dot(q2, x3).to(gl.float32) * q2
        q3 = q3 - _dot(q0, q3).to(gl.float32) * q0 - _dot(q1, q3).to(gl.float32) * q1 - _dot(q2, q3).to(gl.float32) * q2
        if _dot(q3, q3) <= DROP * _dot(x3, x3):
            q3 = _replace_dependent(q0, q1, q2, 3, NN)
        q3 = q3 / gl.maximum(gl.sqrt(_dot(q3, q3)).to(gl.float32), NORM_MIN)
    elif TWICE:
        if ill:  # ill-conditioned: a second pass restores orthogonality
            q0, q1, q2, q3, dependent, ill = _cholesky_pass(q0, q1, q2, q3, NORM_MIN, DROP, SECOND)
    return q0, q1, q2, q3


@gluon.jit
def _column_sums(x, NN: gl.constexpr):
    # Sums over the rows of x [N, N] (ACC), in the order gl.sum(x, axis=0) adds them (the same
    # bits) for a fraction of its instructions and barriers: the accumulator spreads a column
    # over 8 lanes and 8 warps, and gl.sum reduces it by 3 shuffle rounds on all 32 of a thread's
    # columns, then a cross-warp stage. Here a thread adds its two rows, one exchange through
    # shared memory gives each column's 64 partials to two lanes of a warp, which add them in
    # the shuffle tree's order ((r0 + r4) + (r2 + r6)) + ((r1 + r5) + (r3 + r7)) and then over
    # the warps in the cross-warp stage's, the last step one shuffle.
    gl.static_assert(NN == 128)  # COLUMN_PARTIALS' shape
    p = gl.sum(gl.reshape(x, [8, 2, 8, NN]), axis=1)  # row 16 w + 8 h + r: (w, h, r)
    p = gl.convert_layout(gl.reshape(p, [64, NN]), COLUMN_PARTIALS)
    p = gl.reshape(p, [2, 2, 2, 2, 2, 2, NN])  # w = 4 w2 + 2 w1 + w0, r = 4 r2 + 2 r1 + r0
    p = gl.sum(gl.sum(gl.sum(p, axis=3), axis=3), axis=3)
    return gl.sum(gl.sum(gl.sum(p, axis=0), axis=0), axis=0)


@gluon.jit
def _guard_overflow(u, q, LIMIT: gl.constexpr):
    # The checkpoint stores only q^T u: where fp16 u_r would overflow, a power of two moves from
    # u_r to q_r (exact for q^T u)
    mu = gl.max(gl.abs(u), axis=0)
    e = gl.where(mu > LIMIT, _exponent(mu / LIMIT) + 1, 0)
    return u * _pow2(-e), q * _pow2(e)


@gluon.jit
def _prefetch(
    slot, head, stage,
    codes_in, sk_in, sv_in, u_in, q_in, kbuf, ubuf, gbuf, w, pcum, ones,
    C_SLOT: gl.constexpr, C_HEAD: gl.constexpr, SK_SLOT: gl.constexpr, SK_HEAD: gl.constexpr,
    SV_SLOT: gl.constexpr, SV_HEAD: gl.constexpr,
    U_SLOT: gl.constexpr, U_HEAD: gl.constexpr, U_ROW: gl.constexpr,
    Q_SLOT: gl.constexpr, Q_HEAD: gl.constexpr, Q_ROW: gl.constexpr,
    NH: gl.constexpr, NV: gl.constexpr, NK: gl.constexpr, NL: gl.constexpr, NR: gl.constexpr,
):
    # start copying program (slot, head)'s checkpoint, gates and keys into the staging area
    st_codes, st_gbuf, st_kbuf, st_u, st_q, st_pcum, st_sk, st_sv, st_w, decay_s = stage
    prog = slot * NH + head
    vb = gl.arange(0, NV, layout=gl.SliceLayout(1, BYTES))[:, None]
    kb = gl.arange(0, NK, layout=gl.SliceLayout(0, BYTES))[None, :]
    async_copy.async_copy_global_to_shared(st_codes, codes_in + slot * C_SLOT + head * C_HEAD + vb * NK + kb)
    jh = gl.arange(0, NL, layout=gl.SliceLayout(1, HALVES))[:, None]
    nh = gl.arange(0, NK, layout=gl.SliceLayout(0, HALVES))[None, :]
    # the window in reversed entry order (row r holds entry j = L-1-r; the sum over entries does
    # not care), so that D_j is a forward scan: Triton lowers a reverse scan with a shuffle
    # reversal. Row r of the gates holds the gates after entry j: ones, then gbuf rows L-1 .. 1.
    j = NL - 1 - jh
    g_after = gl.where(jh > 0, gbuf + prog * (NL * NK) + (j + 1) * NK + nh, ones + nh)
    async_copy.async_copy_global_to_shared(st_gbuf, g_after)
    async_copy.async_copy_global_to_shared(st_kbuf, kbuf + prog * (NL * NK) + j * NK + nh)
    jr = gl.arange(0, NR, layout=gl.SliceLayout(1, TOKEN_COPY))[:, None]
    nr = gl.arange(0, NK, layout=gl.SliceLayout(0, TOKEN_COPY))[None, :]
    async_copy.async_copy_global_to_shared(st_u.slice(0, NR), u_in + slot * U_SLOT + head * U_HEAD + jr * U_ROW + nr)
    async_copy.async_copy_global_to_shared(st_q.slice(0, NR), q_in + slot * Q_SLOT + head * Q_HEAD + jr * Q_ROW + nr)
    n = gl.arange(0, NK, layout=WORDS)
    async_copy.async_copy_global_to_shared(st_pcum, pcum + prog * NK + n)
    async_copy.async_copy_global_to_shared(st_sk, sk_in + slot * SK_SLOT + head * SK_HEAD + n)
    async_copy.async_copy_global_to_shared(st_sv, sv_in + slot * SV_SLOT + head * SV_HEAD + n)
    async_copy.async_copy_global_to_shared(st_w, w + prog * NL + (NL - 1 - gl.arange(0, NL, layout=WORDS)))
    async_copy.commit_group()


@gluon.jit
def _prefetch_values(slot, head, win_s, ubuf, NH: gl.constexpr, NV: gl.constexpr, NL: gl.constexpr):
    # start copying program (slot, head)'s window values (bf16, used as they are) straight into both
    # halves of the rebuild's operand, rows in reversed entry order like the keys
    prog = slot * NH + head
    jh = gl.arange(0, NL, layout=gl.SliceLayout(1, HALVES))[:, None]
    nh = gl.arange(0, NV, layout=gl.SliceLayout(0, HALVES))[None, :]
    vals = ubuf + prog * (NL * NV) + (NL - 1 - jh) * NV + nh
    async_copy.async_copy_global_to_shared(win_s.slice(0, NL), vals)
    async_copy.async_copy_global_to_shared(win_s.slice(NL, NL), vals)
    async_copy.commit_group()


@gluon.jit
def _store_checkpoint(
    slot, head, codes, s_k, s_v, u, q, codes_out, sk_out, sv_out, u_out, q_out,
    C_SLOT: gl.constexpr, C_HEAD: gl.constexpr, SK_SLOT: gl.constexpr, SK_HEAD: gl.constexpr,
    SV_SLOT: gl.constexpr, SV_HEAD: gl.constexpr,
    U_SLOT: gl.constexpr, U_HEAD: gl.constexpr, U_ROW: gl.constexpr,
    Q_SLOT: gl.constexpr, Q_HEAD: gl.constexpr, Q_ROW: gl.constexpr,
    NV: gl.constexpr, NK: gl.constexpr, NR: gl.constexpr,
):
    # program (slot, head)'s checkpoint: codes [V, K] int8 in BYTES (16-byte rows a thread),
    # s_k [K] and s_v [V] in any layout, the tokens u, q as [16, N] rows in STACK16 (token r in
    # row r; rows from R on are not stored)
    vb = gl.arange(0, NV, layout=gl.SliceLayout(1, BYTES))
    kb = gl.arange(0, NK, layout=gl.SliceLayout(0, BYTES))
    gl.store(codes_out + slot * C_SLOT + head * C_HEAD + vb[:, None] * NK + kb[None, :], codes)
    gl.store(sk_out + slot * SK_SLOT + head * SK_HEAD + gl.arange(0, NK, layout=s_k.type.layout), s_k)
    gl.store(sv_out + slot * SV_SLOT + head * SV_HEAD + gl.arange(0, NV, layout=s_v.type.layout), s_v)
    jn = gl.arange(0, 16, layout=gl.SliceLayout(1, STACK16))[:, None]
    nn = gl.arange(0, NK, layout=gl.SliceLayout(0, STACK16))[None, :]
    gl.store(u_out + slot * U_SLOT + head * U_HEAD + jn * U_ROW + nn, u, mask=jn < NR)
    gl.store(q_out + slot * Q_SLOT + head * Q_HEAD + jn * Q_ROW + nn, q, mask=jn < NR)


@gluon.jit
def _reset_window(prog, w, gbuf, pcum, NL: gl.constexpr, NK: gl.constexpr):
    # pool mode: a flushed program's window starts empty (weights 0, gates 1, summed log-gate 0)
    jw = gl.arange(0, NL, layout=gl.SliceLayout(1, WIN))
    kw = gl.arange(0, NK, layout=gl.SliceLayout(0, WIN))
    gl.store(w + prog * NL + jw, gl.zeros([NL], gl.float32, gl.SliceLayout(1, WIN)))
    gl.store(gbuf + prog * (NL * NK) + jw[:, None] * NK + kw[None, :], gl.full([NL, NK], 1.0, gl.float16, WIN))
    gl.store(pcum + prog * NK + gl.arange(0, NK, layout=WORDS), gl.zeros([NK], gl.float32, WORDS))


@gluon.jit
def _flush_program(
    slot, head, next_slot, next_head, has_next, stage,
    codes_in, sk_in, sv_in, u_in, q_in, codes_out, sk_out, sv_out, u_out, q_out,
    kbuf, ubuf, gbuf, w, pcum, ones,
    q0_s, win_s, keys_s, tok_u_s, tok_q_s, s_parts, x_s,
    C_SLOT: gl.constexpr, C_HEAD: gl.constexpr, SK_SLOT: gl.constexpr, SK_HEAD: gl.constexpr,
    SV_SLOT: gl.constexpr, SV_HEAD: gl.constexpr,
    U_SLOT: gl.constexpr, U_HEAD: gl.constexpr, U_ROW: gl.constexpr,
    Q_SLOT: gl.constexpr, Q_HEAD: gl.constexpr, Q_ROW: gl.constexpr,
    IN_PLACE: gl.constexpr,
    NH: gl.constexpr, NV: gl.constexpr, NK: gl.constexpr, NL: gl.constexpr, NR: gl.constexpr,
    QM: gl.constexpr, SCALE_MIN: gl.constexpr, NORM_MIN: gl.constexpr, DROP: gl.constexpr,
    SECOND: gl.constexpr, U_LIMIT: gl.constexpr, GUARD_FROM_EXP: gl.constexpr,
    MAGIC: gl.constexpr, MAGIC_BITS: gl.constexpr,
):
    prog = slot * NH + head

    # this program's inputs, staged by _prefetch, into registers; then the next one's copies start
    st_codes, st_gbuf, st_kbuf, st_u, st_q, st_pcum, st_sk, st_sv, st_w, decay_s = stage
    async_copy.wait_group(0)
    gl.thread_barrier()  # every thread's copies have landed; the previous program's products are done
    g_after = st_gbuf.load(WIN)
    keys = st_kbuf.load(WIN).to(gl.float32)
    wj = st_w.load(gl.SliceLayout(1, WIN))
    u_old = st_u.load(TOKENS)
    q_old = st_q.load(TOKENS)
    codes = st_codes.load(BYTES)
    # exp once per column, not in each of the 64 threads that hold a column of S
    decay_s.store(gl.exp(st_pcum.load(WORDS)))
    s_k = st_sk.load(COLS)
    s_v = st_sv.load(ROWS)
    gl.thread_barrier()  # the staging area is free again
    if has_next:
        _prefetch(next_slot, next_head, stage, codes_in, sk_in, sv_in, u_in, q_in, kbuf, ubuf, gbuf, w, pcum, ones,
                  C_SLOT, C_HEAD, SK_SLOT, SK_HEAD, SV_SLOT, SV_HEAD, U_SLOT, U_HEAD, U_ROW,
                  Q_SLOT, Q_HEAD, Q_ROW, NH, NV, NK, NL, NR)

    # window (rows in reversed entry order): decay of entry j since it was appended,
    # D_j = prod_{i > j} gbuf[i], a forward running product over the rows
    decay_j = gl.associative_scan(g_after.to(gl.float32), 0, _mul)
    keys_hi, keys_lo = _split_bf16(keys * decay_j * wj[:, None])
    decay = decay_s.load(COLS)  # written before the barrier above
    keys_s.slice(0, NL).store(keys_hi)
    keys_s.slice(NL, NL).store(keys_lo)
    tok_u_s.store(u_old)
    tok_q_s.store(q_old)
    fence_async_shared()
    gl.thread_barrier()

    # rebuild: fp16 x fp16 products are exact in fp32, so the token part needs no split
    # (the codes are dequantized while the token product runs)
    s = warpgroup_mma(tok_q_s.permute((1, 0)), tok_u_s, gl.zeros([NV, NK], gl.float32, ACC), is_async=True)
    # int8 -> fp32 through the fp32 mantissa (integer add, float subtract): exact
    codes_f = (gl.convert_layout(codes, ACC).to(gl.int32) + MAGIC_BITS).to(gl.float32, bitcast=True) - MAGIC
    row_scaled = codes_f * (s_v * (1.0 / QM))[:, None]
    s = warpgroup_mma_wait(0, deps=[s])
    s = (row_scaled * s_k[None, :] + s) * decay[None, :]
    # window keys as a bf16 hi/lo pair stacked along the reduction: one K = 2L product
    s = warpgroup_mma(win_s.permute((1, 0)), keys_s, s)

    # subspace iteration, scale-free: on S / 2^e with max|S / 2^e| in [1, 2)
    ex = gl.minimum(gl.maximum(_exponent(gl.max(gl.max(gl.abs(s), axis=1), axis=0)), -126), 126)
    s_hi, s_mid, s_lo = _split3_bf16(s * _pow2(-ex))
    s_parts.index(0).store(s_hi)
    s_parts.index(1).store(s_mid)
    s_parts.index(2).store(s_lo)
    fence_async_shared()
    gl.thread_barrier()
    if has_next:  # both warpgroups' rebuild products have read win_s
        _prefetch_values(next_slot, next_head, win_s, ubuf, NH, NV, NL)
    a0, a1, a2, a3 = _thin_product(s_parts, q0_s, True, NK)  # S^T q0
    # qk only has to span S^T q0 (b = S qk spans the same space for any basis of it): one pass
    k0, k1, k2, k3 = _orthonormal_cols(a0, a1, a2, a3, False, NK, NORM_MIN, DROP, SECOND)
    _store_operand(x_s, k0, k1, k2, k3)
    fence_async_shared()
    gl.thread_barrier()
    b0, b1, b2, b3 = _thin_product(s_parts, x_s, False, NV)  # S qk
    p0, p1, p2, p3 = _orthonormal_cols(b0, b1, b2, b3, True, NV, NORM_MIN, DROP, SECOND)
    gl.thread_barrier()  # every warp has read qk from x_s
    _store_operand(x_s, p0, p1, p2, p3)
    fence_async_shared()
    gl.thread_barrier()
    u0, u1, u2, u3 = _thin_product(s_parts, x_s, True, NK)  # S^T qv
    scale = _pow2(ex)
    u0 = u0 * scale
    u1 = u1 * scale
    u2 = u2 * scale
    u3 = u3 * scale
    # |u_r[k]| <= |S[:, k]| |qv_r| < sqrt(V) 2^(ex+1): below 2^14 the guard cannot fire
    if ex > GUARD_FROM_EXP:
        u0, p0 = _guard_overflow(u0, p0, U_LIMIT)
        u1, p1 = _guard_overflow(u1, p1, U_LIMIT)
        u2, p2 = _guard_overflow(u2, p2, U_LIMIT)
        u3, p3 = _guard_overflow(u3, p3, U_LIMIT)

    # residual against the rounded tokens: fp16 x fp16 products are exact in fp32
    jn = gl.arange(0, 16, layout=gl.SliceLayout(1, STACK16))[:, None]  # token r in row r, rows from R on zero
    u_new = gl.where(jn < NR, _select_rows(jn, u0, u1, u2, u3), 0.0).to(gl.float16)
    q_new = gl.where(jn < NR, _select_rows(jn, p0, p1, p2, p3), 0.0).to(gl.float16)
    tok_u_s.store(u_new)
    tok_q_s.store(-q_new)
    fence_async_shared()
    gl.thread_barrier()
    e = warpgroup_mma(tok_q_s.permute((1, 0)), tok_u_s, s)

    # smoothing scales; the fast sqrt is within 1 ulp, and the codes use the stored scales
    # per column once (in the two lanes that hold its sum), not in the 64 threads that hold a column of E
    mean_k = _column_sums(gl.abs(e), NV) * (1.0 / NV)
    s_k_new = gl.maximum(gl.sqrt(mean_k), SCALE_MIN)
    inv_k = gl.convert_layout(gl.minimum(gl.rsqrt(mean_k), 1.0 / SCALE_MIN), COLS)  # no divisions
    e = e * inv_k[None, :]  # |E| / s_k, the row scale's argument
    s_v_new = gl.maximum(gl.max(gl.abs(e), axis=1), SCALE_MIN)
    # no clamp: |e| <= s_v_new on every row, so |x| <= QM (1 + 2^-23), which rounds to QM
    x = e * (QM / s_v_new)[:, None]
    # codes: round half to even through the fp32 mantissa; the low byte is the int8 code
    codes_new = ((x + MAGIC).to(gl.int32, bitcast=True) - MAGIC_BITS).to(gl.int8)

    _store_checkpoint(slot, head, gl.convert_layout(codes_new, BYTES), s_k_new, s_v_new, u_new, q_new,
                      codes_out, sk_out, sv_out, u_out, q_out, C_SLOT, C_HEAD, SK_SLOT, SK_HEAD, SV_SLOT, SV_HEAD,
                      U_SLOT, U_HEAD, U_ROW, Q_SLOT, Q_HEAD, Q_ROW, NV, NK, NR)
    if IN_PLACE:
        # every window load above has landed in registers before these stores issue
        _reset_window(prog, w, gbuf, pcum, NL, NK)


@gluon.jit
def _allocate_stage(NV: gl.constexpr, NK: gl.constexpr, NL: gl.constexpr):
    # the staging area of the next program's inputs, in _prefetch's order (codes, gates, keys, u, q,
    # pcum, s_k, s_v, w), and decay_s (not staged: exp(pcum) per column)
    st_u = gl.allocate_shared_memory(gl.float16, [16, NK], PLAIN)
    st_q = gl.allocate_shared_memory(gl.float16, [16, NV], PLAIN)
    return (gl.allocate_shared_memory(gl.int8, [NV, NK], PLAIN), gl.allocate_shared_memory(gl.float16, [NL, NK], PLAIN),
            gl.allocate_shared_memory(gl.bfloat16, [NL, NK], PLAIN), st_u, st_q,
            gl.allocate_shared_memory(gl.float32, [NK], PLAIN1), gl.allocate_shared_memory(gl.float32, [NK], PLAIN1),
            gl.allocate_shared_memory(gl.float32, [NV], PLAIN1), gl.allocate_shared_memory(gl.float32, [NL], PLAIN1),
            gl.allocate_shared_memory(gl.float32, [NK], PLAIN1))


@gluon.jit
def _zero_token_rows(stage, NV: gl.constexpr):
    # the staged token rows from R on are zero (the copies write rows below R only), once per CTA
    st_codes, st_gbuf, st_kbuf, st_u, st_q, st_pcum, st_sk, st_sv, st_w, decay_s = stage
    st_u.store(gl.zeros([16, NV], gl.float16, HALVES))
    st_q.store(gl.zeros([16, NV], gl.float16, HALVES))
    fence_async_shared()
    gl.thread_barrier()  # before any copy lands beside the zero rows


@gluon.jit
def _set_up_cta(q0, q0_s, stage, NV: gl.constexpr, NR: gl.constexpr):
    # once per CTA: q0 [V, R] as the (hi^T; lo^T; mid^T; 0) rows of a thin operand, and the
    # staged token rows from R on zero
    vq = gl.arange(0, NV, layout=VEC)
    _store_operand(q0_s, gl.load(q0 + vq * NR + 0), gl.load(q0 + vq * NR + 1),
                   gl.load(q0 + vq * NR + 2), gl.load(q0 + vq * NR + 3))
    _zero_token_rows(stage, NV)


@gluon.jit(do_not_specialize=["q0", "idx", "num_programs", "picks", "pick_stride"])  # no recompile per call
def _flush_kernel(
    codes_in, sk_in, sv_in, u_in, q_in,  # old checkpoint
    codes_out, sk_out, sv_out, u_out, q_out,  # new checkpoint (aliases the old one in a pool)
    kbuf, ubuf, gbuf, w, pcum, q0, idx, hcnt,
    ones,  # fp16 [K] of ones: the gates after the last window entry
    num_programs,  # candidate programs: len(idx) * H in a pool, B * H otherwise
    picks, pick_stride,  # pool mode: int32 scratch, pick_stride words per CTA
    C_SLOT: gl.constexpr, C_HEAD: gl.constexpr,  # element strides of the checkpoint tensors
    SK_SLOT: gl.constexpr, SK_HEAD: gl.constexpr,
    SV_SLOT: gl.constexpr, SV_HEAD: gl.constexpr,
    U_SLOT: gl.constexpr, U_HEAD: gl.constexpr, U_ROW: gl.constexpr,
    Q_SLOT: gl.constexpr, Q_HEAD: gl.constexpr, Q_ROW: gl.constexpr,
    IN_PLACE: gl.constexpr,  # pool mode: programs from idx, due when hcnt == L, window reset
    TILE: gl.constexpr,  # candidates whose flags a CTA reads at once (pool mode)
    CTAS: gl.constexpr,  # grid size: resident CTAs on the device
    NH: gl.constexpr, NV: gl.constexpr, NK: gl.constexpr, NL: gl.constexpr, NR: gl.constexpr,
    QM: gl.constexpr, SCALE_MIN: gl.constexpr, NORM_MIN: gl.constexpr, DROP: gl.constexpr,
    SECOND: gl.constexpr, U_LIMIT: gl.constexpr, GUARD_FROM_EXP: gl.constexpr,
    MAGIC: gl.constexpr, MAGIC_BITS: gl.constexpr,
):
    gl.static_assert(NR == 4)
    gl.static_assert(NV == NK)
    pid = gl.program_id(0)
    G: gl.constexpr = CTAS

    # shared operands, allocated once per CTA and reused by every program it runs
    q0_s = gl.allocate_shared_memory(gl.bfloat16, [THIN, NV], OPERAND)
    win_s = gl.allocate_shared_memory(gl.bfloat16, [2 * NL, NV], OPERAND)
    keys_s = gl.allocate_shared_memory(gl.bfloat16, [2 * NL, NK], OPERAND)
    tok_u_s = gl.allocate_shared_memory(gl.float16, [16, NK], OPERAND)
    tok_q_s = gl.allocate_shared_memory(gl.float16, [16, NV], OPERAND)
    s_parts = gl.allocate_shared_memory(gl.bfloat16, [PARTS, NV, NK], OPERAND)
    x_s = gl.allocate_shared_memory(gl.bfloat16, [THIN, NV], OPERAND)
    stage = _allocate_stage(NV, NK, NL)

    if IN_PLACE:
        # every CTA reads all due flags, ranks the due programs in candidate order and takes
        # ranks pid, pid + G, ...: balanced for any pattern, no atomics, nothing to reset
        row = gl.arange(0, TILE // NH, layout=gl.SliceLayout(1, FLAGS))
        hd = gl.arange(0, NH, layout=gl.SliceLayout(0, FLAGS))
        mine = picks + pid * pick_stride
        count = 0
        for first in range(0, num_programs // NH, TILE // NH):
            slots = gl.load(idx + first + row, mask=first + row < num_programs // NH, other=0)
            alive = (slots > 0)[:, None]
            fill = gl.load(hcnt + slots.to(gl.int64)[:, None] * NH + hd[None, :], mask=alive, other=0)
            due = (fill == NL).to(gl.int32)  # masked loads read 0
            per_slot = gl.sum(due, axis=1)
            found = gl.sum(per_slot, axis=0)
            if found > 0:  # the rank scan only where something is due
                # Triton scans only blocked layouts: the slot totals go through one for the prefix
                flat = gl.convert_layout(per_slot, WORDS)
                before = gl.convert_layout(gl.associative_scan(flat, 0, _add) - flat, gl.SliceLayout(1, FLAGS))
                rank = count + before[:, None] + gl.associative_scan(due, 1, _add) - 1
                gl.store(mine + rank // G, slots[:, None] * NH + hd[None, :], mask=(due != 0) & (rank % G == pid))
            count += found
        gl.thread_barrier()  # the picks are written by other threads of this CTA
        fence_async_shared()
        n = gl.cdiv(count - pid, G)
        if n > 0:  # a CTA with nothing to flush leaves here
            _set_up_cta(q0, q0_s, stage, NV, NR)
            p = gl.load(mine)
            _prefetch((p // NH).to(gl.int64), p % NH, stage, codes_in, sk_in, sv_in, u_in, q_in, kbuf, ubuf, gbuf,
                      w, pcum, ones, C_SLOT, C_HEAD, SK_SLOT, SK_HEAD, SV_SLOT, SV_HEAD, U_SLOT, U_HEAD, U_ROW,
                      Q_SLOT, Q_HEAD, Q_ROW, NH, NV, NK, NL, NR)
            _prefetch_values((p // NH).to(gl.int64), p % NH, win_s, ubuf, NH, NV, NL)
        for t in range(0, n):
            p = gl.load(mine + t)
            nxt = gl.load(mine + t + 1, mask=t + 1 < n, other=0)
            _flush_program(
                (p // NH).to(gl.int64), p % NH, (nxt // NH).to(gl.int64), nxt % NH, t + 1 < n, stage,
                codes_in, sk_in, sv_in, u_in, q_in, codes_out, sk_out, sv_out, u_out, q_out,
                kbuf, ubuf, gbuf, w, pcum, ones,
                q0_s, win_s, keys_s, tok_u_s, tok_q_s, s_parts, x_s,
                C_SLOT, C_HEAD, SK_SLOT, SK_HEAD, SV_SLOT, SV_HEAD, U_SLOT, U_HEAD, U_ROW,
                Q_SLOT, Q_HEAD, Q_ROW, IN_PLACE, NH, NV, NK, NL, NR,
                QM, SCALE_MIN, NORM_MIN, DROP, SECOND, U_LIMIT, GUARD_FROM_EXP, MAGIC, MAGIC_BITS,
            )
    else:
        _set_up_cta(q0, q0_s, stage, NV, NR)
        if pid < num_programs:
            _prefetch((pid // NH).to(gl.int64), pid % NH, stage, codes_in, sk_in, sv_in, u_in, q_in, kbuf, ubuf,
                      gbuf, w, pcum, ones, C_SLOT, C_HEAD, SK_SLOT, SK_HEAD, SV_SLOT, SV_HEAD, U_SLOT, U_HEAD, U_ROW,
                      Q_SLOT, Q_HEAD, Q_ROW, NH, NV, NK, NL, NR)
            _prefetch_values((pid // NH).to(gl.int64), pid % NH, win_s, ubuf, NH, NV, NL)
        for c in range(pid, num_programs, G):
            nxt = c + G
            _flush_program(
                (c // NH).to(gl.int64), c % NH, (nxt // NH).to(gl.int64), nxt % NH, nxt < num_programs, stage,
                codes_in, sk_in, sv_in, u_in, q_in, codes_out, sk_out, sv_out, u_out, q_out,
                kbuf, ubuf, gbuf, w, pcum, ones,
                q0_s, win_s, keys_s, tok_u_s, tok_q_s, s_parts, x_s,
                C_SLOT, C_HEAD, SK_SLOT, SK_HEAD, SV_SLOT, SV_HEAD, U_SLOT, U_HEAD, U_ROW,
                Q_SLOT, Q_HEAD, Q_ROW, IN_PLACE, NH, NV, NK, NL, NR,
                QM, SCALE_MIN, NORM_MIN, DROP, SECOND, U_LIMIT, GUARD_FROM_EXP, MAGIC, MAGIC_BITS,
            )


@functools.lru_cache(maxsize=None)
def _ones(device: torch.device) -> torch.Tensor:
    # made on the first launch on a device (a pool's warm-up), never inside a captured graph
    return torch.ones(K, dtype=torch.float16, device=device)


def launch_flush(ckpt_in, ckpt_out, window, q0, idx=None, hcnt=None, picks=None):
    """Launch the Gluon flush kernel; arguments and semantics as ``flush.launch_flush``.

    Both modes run on resident CTAs (one per SM): a pool call ranks the due programs and shares
    them out, a functional call strides over the batch. Needs an sm_90 device and a triton
    release in ``VERIFIED_TRITON`` (``kernel.choose`` checks both). Returns the launched kernel
    object, or None for an empty launch.
    """
    in_place = idx is not None
    num_programs = (idx.numel() if in_place else ckpt_in[0].shape[0]) * H
    if num_programs == 0:
        return None
    kbuf, ubuf, gbuf, w, pcum = window
    grid = (resident_ctas(q0.device),)
    pick_stride = triton.cdiv(min(num_programs, hcnt.shape[0] * H), grid[0]) if in_place else 0
    if in_place and picks is None:
        picks = torch.empty(pick_words(hcnt.shape[0], q0.device), dtype=torch.int32, device=q0.device)
    dummy = q0  # unused pointer arguments in functional mode
    with torch.cuda.device(q0.device):
        return _flush_kernel[grid](
            *ckpt_in, *ckpt_out, kbuf, ubuf, gbuf, w, pcum, q0,
            idx if in_place else dummy, hcnt if in_place else dummy, _ones(q0.device), num_programs,
            picks if in_place else dummy, pick_stride,
            **checkpoint_strides(*ckpt_in), IN_PLACE=in_place, TILE=FLAG_TILE, CTAS=grid[0], **_CONSTANTS,
            num_warps=NUM_WARPS,
        )


_CONSTANTS = dict(NH=H, NV=V, NK=K, NL=L, NR=R, QM=float(QMAX), SCALE_MIN=EPS, NORM_MIN=NORM_FLOOR,
                  DROP=DEPENDENT_COLUMN, SECOND=SECOND_PASS_BELOW, U_LIMIT=TOKEN_LIMIT,
                  GUARD_FROM_EXP=GUARD_FROM_EXP, MAGIC=ROUND_MAGIC, MAGIC_BITS=ROUND_MAGIC_BITS)
