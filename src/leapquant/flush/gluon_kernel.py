"""Gluon kernel of the LeapQuant KDA flush for Hopper (sm_90a): one program = one (slot, head).

Flush v3: the subspace products run on the old checkpoint's factors, never on a rebuilt state
(the formulation of ``triton_kernel.py`` and ``emulation.py``; SPEC section 4):

    S     = diag(s_v) C diag(f) + A^T KU',    f = s_k exp(pcum) / 127
    S^T x = f * (C^T (s_v * x)) + KU'^T (A x)       x = q0 or qv   [K, R]
    S y   = s_v * (C (f * y))   + A^T (KU' y)       y = qk         [V, R]
    E     = (C s_v s_k / 127 + q^T u) exp(pcum) + ubuf^T (w kbuf D) - q_new^T u_new   (formed once, at the end)

with the 32-row low-rank tile A = [ubuf (16); q_hi (4); q_lo (4); 0] [32, V] (exact in bf16) and
KU = [w_j kbuf_j D_j (16); u (4); u (4); 0] [32, K] (in shared memory: two bf16 parts, the token
rows exact); KU' is KU with its token rows times exp(pcum), which the kernel applies in fp32.

- The codes are copied once a program into shared memory as bf16 (exact: |c| <= 127), the only
  128 x 128 operand; both orientations come from the wgmma operand descriptor.
- The thin operand (s_v x or f y) goes in as three bf16 parts side by side (one wgmma, N = 16):
  exact products, fp32 accumulation.
- The low-rank corrections: the inner products A x (or KU' y) of the tiles' 16 window and 8
  token rows (not of their 8 zero rows) on the CUDA cores in fp32, then four small wgmmas for
  S^T x (the window and the token rows of KU^T, two bf16 parts each; the token part scaled by
  exp(pcum) with the codes' product) or two for S y (against the exact A^T). The window keys'
  two parts (~2^-16) enter the bases, u and E; E takes the old tokens exactly ((q_hi + q_lo)^T
  (u_hi + u_lo)), and an error in u only changes E, which is quantised as formed.
- The basis: qk is S^T q0 with each column scaled by its own power of two, not orthonormalised
  (the token basis qv = Q(S qk) is the reference's in exact arithmetic: a QR factor Q does not
  change under an upper-triangular change of basis). qv by Cholesky QR with the 4 x 4 Gram matrix
  summed in fp64 (one reduction a pass, a second pass when ill-conditioned), each column first
  scaled by its own power of two (scale-free: no max|S|). Where a column keeps less than
  ILL_COLUMN (1e-8) of its squared norm, or none of it (S S^T q0 conditioned beyond ~1e4:
  rank-deficient or very coherent states, q0 with repeated or zero columns) the program takes
  the reference's path: qk orthonormalised, S qk again, qv with a Gram-Schmidt fallback for
  dependent columns. A scalar-gate window with its gate product below ORTHONORMAL_QK_BELOW takes that
  path at once: its state is mostly its last few entries, and the first attempt mostly ill.
- E is formed once, after the iteration, in the wgmma accumulator of the program's one warpgroup
  (two m64 tiles, 128 registers a thread); nothing the size of S is live during the iteration.
- One warpgroup a program, two resident CTAs an SM (255 registers a thread): two programs'
  chains in flight on an SM, and the iteration's vector work, which every warp repeats on whole
  [N] vectors, done by 4 warps a program instead of 8 (docs/experiments.md).
- ``_flush_program`` is not inlined, so that its per-thread constants are computed in each call
  instead of held across the persistent loop, and it allocates every shared buffer itself
  (Triton 3.6 lays a not-inlined function's scratch from offset 0, whatever its caller holds).
  The next program's inputs are copied (cp.async) into a staging buffer of the call's own while
  it runs its last thin product, the residual and the scales (issued after the basis: earlier,
  B=512 lost 3%; at the residual, the copies' addresses spilled); a masked-off copy at the call's
  end keeps the buffer allocated to the end, so that the allocator places it lowest, under no
  scratch of the call (``tests/test_gluon_offline.py`` reads the offsets).

Measured on the H200 (2026-12-03, A/B runs in one process each; docs/benchmarks.md): 0.919 ms at
B=512 (4.1x the memory floor; the 8-warp, one-CTA-an-SM kernel before it 1.120), 0.0429 at B=16
(0.0460); with nothing due 0.0042 ms at B=512 (0.0038), 1 in 16 due 0.0512 at B=256 (0.0501).
Then the zero rows of the low-rank tiles no longer multiplied, -1 to -2% (B=512
0.906 ms against 0.919 in the same call). Fourteenth: the split columns picked in registers (-1.5
to -2.2% at B >= 64), then the next program's copies under the last product (-2.7 to -4.6% at B
>= 64, -2% at 1 in 16 due, +2.7% at B=16; B=512 0.864 ms against 0.888 in the same call).
Fifteenth: a pool call's flag scan in a tile sized to the call (``launch.flag_tile``): -5% at
B=16, -6% at 1 in 16 due (0.0462 ms against 0.0493), B=512 even.

Verified with triton 3.6.0 (the Gluon API moves between releases; ``kernel.py`` picks this path
only where it was verified). Source: LeapQuant (arXiv 2609.38166); NVlabs/kda request
conless-leapquant-kda-flush.
"""

from __future__ import annotations

import functools

import torch
from triton.experimental import gluon
from triton.experimental.gluon import language as gl
from triton.experimental.gluon.language.nvidia.hopper import (async_copy, fence_async_shared, warpgroup_mma,
                                                                 warpgroup_mma_wait)

from ..geometry import ILL_COLUMN, K, ORTHONORMAL_QK_BELOW
from ..fp32_bits import clamped_exponent, exponent, pow2
from ..gluon_compat import async_load, reinterpret, thread_barrier
from ..launch import (FLAG_TILE, FLUSH_CONSTANTS, GLUON_VERIFIED_TRITON, MOST_CTAS_PER_SM, flag_tile, flag_tiles,
                      flush_arguments, pool_picks, resident_ctas)

VERIFIED_TRITON = GLUON_VERIFIED_TRITON
NUM_WARPS = 4  # one warpgroup a program: it holds E's 128 rows (two m64 tiles)
# uncapped: two CTAs of 128 threads an SM leave 255 registers a thread (8 warps a program at two
# CTAs an SM, capped at 128, spilled and ran 22-36% slower: docs/experiments.md)
MAX_REGISTERS = None
CTAS_PER_SM = 2  # resident CTAs an SM: the persistent grid is this times the SMs
assert CTAS_PER_SM <= MOST_CTAS_PER_SM  # the pool's pick scratch is sized for MOST_CTAS_PER_SM
THIN = gl.constexpr(16)  # thin products' columns: a [N, R] operand's hi, lo and mid parts and R zeros
LOW_RANK = gl.constexpr(32)  # rows of the low-rank tiles A and KU
# the scalar gate: a gate product p below this takes the reference's path at once
ORTHONORMAL_BELOW = gl.constexpr(ORTHONORMAL_QK_BELOW)
# Cholesky QR keeps |Q^T Q - I| ~ eps64 cond^2; a pivot below this fraction of its column
# (cond above ~1e4) sends the unit-scaled qk path to the reference's path, whose qv basis gets a
# second pass there so that it stays orthonormal to fp32 accuracy (its qk basis takes one)
SECOND_PASS_BELOW = ILL_COLUMN

# E [V, K] fp32 in one warpgroup: two m64n128 tiles, 128 registers a thread
ACC = gl.constexpr(gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[4, 1], instr_shape=[16, 128, 16]))
# thin products [N, THIN]: the R columns of the result, their hi, lo and mid parts side by side
ACC_THIN = gl.constexpr(gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[4, 1], instr_shape=[16, THIN, 16]))
ROWS = gl.constexpr(gl.SliceLayout(1, ACC))  # a [V] vector along E's rows
COLS = gl.constexpr(gl.SliceLayout(0, ACC))  # a [K] vector along E's columns
THIN_ROWS = gl.constexpr(gl.SliceLayout(1, ACC_THIN))  # a [N] vector along a thin product's rows
# [16, N] stacks (the Gram matrix's products, a thin operand's rows, the token rows): four rows a
# warp, no replication; a basis column [N] as a vector every warp holds whole
STACK16 = gl.constexpr(gl.BlockedLayout([4, 4], [1, 32], [4, 1], [1, 0]))
VEC = gl.constexpr(gl.SliceLayout(0, STACK16))
# [8, N] rows (the low-rank tiles' zero rows): two rows a warp, N as VEC has it
ROW8 = gl.constexpr(gl.BlockedLayout([2, 4], [1, 32], [4, 1], [1, 0]))
# [R, N] tokens: a row a warp, N as VEC has it
ROW4 = gl.constexpr(gl.BlockedLayout([1, 4], [1, 32], [4, 1], [1, 0]))
# [16, N, R] products of a low-rank tile's window rows with the R columns of a basis: four rows,
# four elements (VEC's) and the R columns a thread; [8, N, R] those of its 2R token rows (two rows
# a thread)
DOTS = gl.constexpr(gl.BlockedLayout([4, 4, 4], [1, 32, 1], [4, 1, 1], [2, 1, 0]))
TOKEN_DOTS = gl.constexpr(gl.BlockedLayout([2, 4, 4], [1, 32, 1], [4, 1, 1], [2, 1, 0]))
DOT_ROWS = gl.constexpr(gl.SliceLayout(2, DOTS))  # [16, N] the window rows
TOKEN_DOT_ROWS = gl.constexpr(gl.SliceLayout(2, TOKEN_DOTS))  # [8, N] the token rows
DOT_X = gl.constexpr(gl.SliceLayout(0, DOTS))  # [N, R] the basis (TOKEN_DOTS' slice is the same)
DOT_XC = gl.constexpr(gl.SliceLayout(1, DOT_X))  # [N] one column, as VEC
# [M, 32, R] the lanes' partial sums (row, lane, column), regrouped so that a thread adds 16 (8) of
# a row's 32 and one (two) shuffles the rest (in place of five shuffle rounds over every lane)
PARTIALS = gl.constexpr(gl.BlockedLayout([1, 16, 1], [4, 2, 4], [4, 1, 1], [1, 2, 0]))  # M = 16
TOKEN_PARTIALS = gl.constexpr(gl.BlockedLayout([1, 8, 1], [2, 4, 4], [4, 1, 1], [1, 2, 0]))  # M = 8
THIN_COLS = gl.constexpr(gl.BlockedLayout([4, 4], [32, 1], [1, 4], [1, 0]))  # [N, R]: VEC's rows, R in-thread
EVERY16 = gl.constexpr(gl.BlockedLayout([16], [32], [4], [0]))  # [16], every thread holds all
# window [L, K]: each thread owns whole columns, so the decay products along j are in-thread
WIN = gl.constexpr(gl.BlockedLayout([16, 1], [1, 32], [1, 4], [0, 1]))
# codes [V, K] int8 in 16-byte rows per thread (coalesced loads and stores)
BYTES = gl.constexpr(gl.BlockedLayout([1, 16], [4, 8], [4, 1], [1, 0]))
# [slots, H] due flags: a warp reads whole 128-byte rows (16 bytes a thread), four slots a load
FLAGS = gl.constexpr(gl.BlockedLayout([1, 4], [4, 8], [4, 1], [1, 0]))
PLAIN = gl.constexpr(gl.SwizzledSharedLayout(1, 1, 1, [1, 0]))
PLAIN1 = gl.constexpr(gl.SwizzledSharedLayout(1, 1, 1, [0]))
# the next program's inputs are copied (cp.async, 16 bytes a thread where rows allow) into the
# staging buffer (_stage_views)
HALVES = gl.constexpr(gl.BlockedLayout([1, 8], [2, 16], [4, 1], [1, 0]))  # [16, N] 16-bit rows
TOKEN_COPY = gl.constexpr(gl.BlockedLayout([1, 2], [1, 32], [4, 1], [1, 0]))  # [R, N] fp16 tokens
WORDS = gl.constexpr(gl.BlockedLayout([1], [32], [4], [0]))  # [N] fp32 (and the flag scan's [slots] due-bit words)
# [32, N] partial column sums, row 8 w + r (warp w, lane group r): a column's 32 partials in one
# thread
COLUMN_PARTIALS = gl.constexpr(gl.DistributedLinearLayout(
    reg_bases=[[1, 0], [2, 0], [4, 0], [8, 0], [16, 0]], lane_bases=[[0, 1], [0, 2], [0, 4], [0, 8], [0, 16]],
    warp_bases=[[0, 32], [0, 64]], block_bases=[], shape=[32, 128]))
# a thin operand's [R, N] columns, four values a thread: column r = warp, elements 4 lane + {0..3}
# (values VEC holds in the same lane of every warp), so each value is split once in the CTA, not
# in the four warps that store one of its parts. Built by selects on the warp's row
# (``_store_parts``): Triton 3.6 lowers gl.convert_layout from VEC's warp-replicated layout
# through shared memory (one store, one load, two barriers), not as the register pick it is
SPLIT_COLS = gl.constexpr(gl.DistributedLinearLayout(
    reg_bases=[[0, 1], [0, 2]], lane_bases=[[0, 4], [0, 8], [0, 16], [0, 32], [0, 64]], warp_bases=[[1, 0], [2, 0]],
    block_bases=[], shape=[4, 128]))
OPERAND = gl.constexpr(gl.NVMMASharedLayout(swizzle_byte_width=128, element_bitwidth=16, rank=2))
OPERAND_B = gl.constexpr(gl.NVMMASharedLayout(swizzle_byte_width=32, element_bitwidth=16, rank=2))  # [32, THIN]
# the per-program vectors in shared memory (vec_s: four [N] fp32 buffers), by position
DECAY_ROW = gl.constexpr(0)  # exp(pcum)
SK_ROW = gl.constexpr(1)
SV_ROW = gl.constexpr(2)
F_ROW = gl.constexpr(3)  # f = s_k exp(pcum) / 127


@gluon.jit
def _add(a, b):
    return a + b


@gluon.jit
def _mul(a, b):
    return a * b


@gluon.jit
def _popc(x):
    # set bits of each int32
    return gl.inline_asm_elementwise("popc.b32 $0, $1;", "=r,r", [x], dtype=gl.int32, is_pure=True, pack=1)


@gluon.jit
def _nth_set_bit(x, n):
    # position of the n-th (n >= 1) set bit of each int32 from bit 0 up (-1 if it has fewer)
    return gl.inline_asm_elementwise("fns.b32 $0, $1, 0, $2;", "=r,r,r", [x, n], dtype=gl.int32, is_pure=True,
                                     pack=1)


@gluon.jit
def _stacked(a, b):
    # [2M, N]: the rows of a [M, N], then those of b (a register layout, no exchange)
    return gl.reshape(gl.permute(gl.join(a, b), (2, 0, 1)), [2 * a.shape[0], a.shape[1]])


@gluon.jit
def _split_bf16(x):
    hi = x.to(gl.bfloat16)
    lo = (x - hi.to(gl.float32)).to(gl.bfloat16)
    return hi, lo


# Three bf16 parts of two fp32 values, packed in pairs for the shared-memory stores. Hopper runs
# conversion instructions at a fraction of the fp32 rate, so each part is rounded to bf16's 8
# significant bits in fp32 arithmetic (a Veltkamp split, c = x * 65538 (0f47800100), hi = c - (c - x):
# round to nearest, with exact ties not always to even, as Veltkamp's 2^16 + 1 would give) and its
# upper half taken; .rn keeps ptxas from fusing the split into an fma. x - hi has at most 16
# significant bits, so x = hi + mid + lo exactly.
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
def _select_rows(which, c0, c1, c2, c3):
    # [M, N] stack whose row g is the [N] vector c_which[g] (``which`` [M, 1] in the stack's layout)
    return gl.where(which == 0, c0[None, :], gl.where(which == 1, c1[None, :], gl.where(which == 2, c2[None, :], c3[None, :])))


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
    # uniform flags: a column kept at most DROP (dependent) or less than SECOND of its norm (ill:
    # dependent ones too, a zero column's 0 <= 0 included)
    dependent = (d1 <= DROP * g11) | (d2 <= DROP * g22) | (d3 <= DROP * g33)
    ill = dependent | (d1 < SECOND * g11) | (d2 < SECOND * g22) | (d3 < SECOND * g33)
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
                      DROP: gl.constexpr, SECOND: gl.constexpr, FALLBACK: gl.constexpr):
    # The columns of X [N, R] made orthonormal in order (the Q of X = QR, as the reference's
    # modified Gram-Schmidt gives up to rounding), and a uniform flag. FALLBACK: a column keeping
    # at most DROP of its squared norm (dependent on the earlier ones) is replaced by e_r made
    # orthogonal to them, an ill-conditioned X gets a second pass, and the flag says whether a
    # column was dependent. Otherwise one pass, and the flag says whether a column kept less
    # than SECOND of its squared norm (X conditioned beyond ~SECOND^-1/2): the caller takes
    # another path there.
    q0, q1, q2, q3, dependent, ill = _cholesky_pass(x0, x1, x2, x3, NORM_MIN, DROP, SECOND)
    if FALLBACK and dependent:  # rare: a rank-deficient state or a q0 with repeated columns
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
    elif TWICE and FALLBACK:
        if ill:  # ill-conditioned: a second pass restores orthogonality
            q0, q1, q2, q3, _, _ = _cholesky_pass(q0, q1, q2, q3, NORM_MIN, DROP, SECOND)
    if FALLBACK:
        return q0, q1, q2, q3, dependent
    else:
        return q0, q1, q2, q3, ill


@gluon.jit
def _column_sums(x, NN: gl.constexpr):
    # Sums over the rows of x [N, N] (ACC at 4 warps: a thread holds 4 rows of 32 columns). A
    # thread adds its 4 rows, one exchange gives each thread one column's 32 partials (8 lanes x
    # 4 warps), which it adds in-thread: no shuffle rounds, one layout change
    gl.static_assert(NN == 128)  # COLUMN_PARTIALS' shape
    p = gl.sum(gl.sum(gl.reshape(x, [2, 4, 2, 8, NN]), axis=2), axis=0)  # row 64 m + 16 w + 8 h + r: (w, r)
    p = gl.convert_layout(gl.reshape(p, [32, NN]), COLUMN_PARTIALS)
    return gl.sum(p, axis=0)


@gluon.jit
def _guard_overflow(u, q, LIMIT: gl.constexpr):
    # The checkpoint stores only q^T u: where fp16 u_r would overflow, a power of two moves from
    # u_r to q_r (exact for q^T u)
    mu = gl.max(gl.abs(u), axis=0)
    e = gl.where(mu > LIMIT, exponent(mu / LIMIT) + 1, 0)
    return u * pow2(-e), q * pow2(e)


# int8 codes -> bf16, four at a time: each byte (offset to unsigned) into the mantissa of 2^23,
# subtract 2^23 + 128 (exact), keep the upper half of each fp32 (|c| <= 127 has at most 7
# significant bits: exact in bf16)
CODES_BF16_ASM = gl.constexpr("""{
.reg .b32 t, f0, f1, f2, f3;
xor.b32 t, $2, 0x80808080;
prmt.b32 f0, t, 0x4B000000, 0x7540; prmt.b32 f1, t, 0x4B000000, 0x7541;
prmt.b32 f2, t, 0x4B000000, 0x7542; prmt.b32 f3, t, 0x4B000000, 0x7543;
sub.f32 f0, f0, 0f4B000080; sub.f32 f1, f1, 0f4B000080;
sub.f32 f2, f2, 0f4B000080; sub.f32 f3, f3, 0f4B000080;
prmt.b32 $0, f0, f1, 0x7632; prmt.b32 $1, f2, f3, 0x7632;
}""")


@gluon.jit
def _codes_bf16(c):
    return gl.inline_asm_elementwise(CODES_BF16_ASM, "=r,=r,r", [c], dtype=gl.bfloat16, is_pure=True, pack=4)


@gluon.jit
def _split_row(c):
    # an [N] vector held whole by every warp (VEC) as a row of SPLIT_COLS (the same registers)
    return gl.convert_layout(c, gl.SliceLayout(0, SPLIT_COLS), assert_trivial=True)


@gluon.jit
def _store_parts(dst, c0, c1, c2, c3):
    # dst [THIN, M] <- rows (hi^T; lo^T; mid^T; 0) of the [M, R] operand whose columns are c0..c3
    # (VEC, held whole by every warp): each value split once in the CTA, each thread splitting
    # its four of SPLIT_COLS' (H200, 8 warps: -1.8% at B=512 against four warps splitting each value).
    # Warp r picks column r from the registers it holds, no exchange through shared memory (two
    # barriers fewer a product: -1.5 to -2.2% at B >= 64, 2026-12-03)
    r = gl.arange(0, 4, layout=gl.SliceLayout(1, SPLIT_COLS))[:, None]
    hi, mid, lo = _split3_bf16(_select_rows(r, _split_row(c0), _split_row(c1), _split_row(c2), _split_row(c3)))
    parts = gl.join(gl.join(hi, lo), gl.join(mid, gl.zeros_like(hi)))  # [r, n, j, i]: part 2 i + j
    dst.store(gl.reshape(gl.permute(parts, (3, 2, 0, 1)), [THIN, c0.shape[0]]))  # row 4 (2 i + j) + r


@gluon.jit
def _basis_columns(x0, x1, x2, x3):
    # [N, R] (DOT_X) whose columns are x0..x3 (VEC)
    c = gl.arange(0, 4, layout=gl.SliceLayout(0, DOT_X))[None, :]
    return gl.where(c == 0, gl.convert_layout(x0, DOT_XC, assert_trivial=True)[:, None],
                    gl.where(c == 1, gl.convert_layout(x1, DOT_XC, assert_trivial=True)[:, None],
                             gl.where(c == 2, gl.convert_layout(x2, DOT_XC, assert_trivial=True)[:, None],
                                      gl.convert_layout(x3, DOT_XC, assert_trivial=True)[:, None])))


@gluon.jit
def _store_low_rank_dots(dst, rows, x, PARTS: gl.constexpr):
    # dst [M, THIN] <- rows of the B operand of a low-rank correction: row j holds the inner
    # products of row j of ``rows`` [M, N] (DOT_ROWS or TOKEN_DOT_ROWS) with the columns of x [N, R]
    # (the same tiles' slice), in parts (hi; lo; mid; 0); PARTS regroups the lanes' partial sums
    nn: gl.constexpr = rows.shape[1]
    mm: gl.constexpr = rows.shape[0]
    prod = rows[:, :, None] * x[None, :, :]  # [M, N, R]
    part = gl.sum(gl.reshape(prod, [mm, 32, nn // 32, 4]), axis=2)  # a lane's partial sums (in-thread)
    d = gl.sum(gl.convert_layout(part, PARTS), axis=1)  # [M, R]
    hi = d.to(gl.bfloat16)
    rest = d - hi.to(gl.float32)
    mid = rest.to(gl.bfloat16)
    lo = (rest - mid.to(gl.float32)).to(gl.bfloat16)
    g = gl.arange(0, 4, layout=gl.SliceLayout(0, gl.SliceLayout(2, PARTS)))[None, :, None]  # the part
    tile = gl.where(g == 0, hi[:, None, :], gl.where(g == 1, lo[:, None, :], gl.where(g == 2, mid[:, None, :], 0.0)))
    dst.store(gl.reshape(tile, [mm, THIN]))  # column 4 part + c


@gluon.jit
def _ku_rows(ku_s, first: gl.constexpr, count: gl.constexpr, layout: gl.constexpr):
    # rows first .. first + count of KU in fp32: its hi part plus its lo part (LOW_RANK rows on)
    return (ku_s.slice(first, count).load(layout).to(gl.float32) +
            ku_s.slice(LOW_RANK + first, count).load(layout).to(gl.float32))


@gluon.jit
def _part_sums(acc, NN: gl.constexpr):
    # acc [N, THIN] in the parts layout -> its R columns as [N] vectors in VEC. The accumulator's
    # thread holds columns hi and mid (or lo and 0) of a row, and its lane partner the other
    # pair: the sum over the part axis is (hi + mid) + lo, one shuffle
    cols = gl.convert_layout(gl.sum(gl.reshape(acc, [NN, 4, 4]), axis=1), THIN_COLS)
    c02, c13 = gl.split(gl.reshape(cols, [NN, 2, 2]))
    c0, c2 = gl.split(c02)
    c1, c3 = gl.split(c13)
    return (gl.convert_layout(c0, VEC, assert_trivial=True), gl.convert_layout(c1, VEC, assert_trivial=True),
            gl.convert_layout(c2, VEC, assert_trivial=True), gl.convert_layout(c3, VEC, assert_trivial=True))


@gluon.jit
def _unit_scale(x):
    # x / 2^e with max|x / 2^e| in [1, 2) for an [N] vector (VEC): what the bases see, so that
    # tiny or huge states keep their fp32 norms (Cholesky QR and Gram-Schmidt do not see it)
    return x * pow2(-clamped_exponent(gl.max(gl.abs(x), axis=0), -126, 126))


# --- SPEC phases (the same names in naive.py, emulation.py and triton_kernel.py) -----------------


@gluon.jit
def decay(g_after):
    """SPEC step 1 on the window rows in reversed entry order (row r holds entry L-1-r, ``g_after``
    its gates after it: ones, then gbuf rows L-1 .. 1): D_j = prod_{i > j} gbuf[i], a forward
    running product over the rows (Triton lowers a reverse scan with a shuffle reversal)."""
    return gl.associative_scan(g_after.to(gl.float32), 0, _mul)


@gluon.jit
def rebuild_factors(keys, decay_j, wj, u4, q4, ubuf_rows, codes, c_s, win_s, ku_s, NL: gl.constexpr,
                    NR: gl.constexpr):
    """SPEC step 2 as factors in shared memory (S itself is never formed): the codes as bf16
    (``c_s``), A = [ubuf; q_hi; q_lo; 0] (``win_s``, exact) and KU = [w_j kbuf_j D_j; u; u; 0] in
    two bf16 parts (``ku_s`` rows 0-31 and 32-63; the tokens' parts are exact). ``u4``/``q4``
    [R, N] (ROW4) are the tokens; the tiles hold them twice (rows r and R + r): A's token rows
    pair with KU's, so that A_t^T KU_t = (q_hi + q_lo)^T (u_hi + u_lo) = q^T u exactly."""
    keys_hi, keys_lo = _split_bf16(keys * decay_j * wj[:, None])
    ku_s.slice(0, NL).store(keys_hi)
    ku_s.slice(LOW_RANK, NL).store(keys_lo)
    u_hi, u_lo = _split_bf16(u4.to(gl.float32))  # fp16 = bf16 + bf16, exactly
    ku_s.slice(NL, 2 * NR).store(_stacked(u_hi, u_hi))
    ku_s.slice(LOW_RANK + NL, 2 * NR).store(_stacked(u_lo, u_lo))
    q_hi, q_lo = _split_bf16(q4.to(gl.float32))
    win_s.slice(NL, 2 * NR).store(_stacked(q_hi, q_lo))
    win_s.slice(0, NL).store(ubuf_rows)
    c_s.store(_codes_bf16(codes))


@gluon.jit
def thin_products(x0, x1, x2, x3, c_s, x_s, b_s, bt_s, win_s, ku_s, vec_s, TRANSPOSE: gl.constexpr, NN: gl.constexpr,
                  NL: gl.constexpr, QM: gl.constexpr):
    """S^T x (TRANSPOSE: x [V, R] -> [K, R]) or S y (y [K, R] -> [V, R]) on the factors, the R
    columns given and returned as [N] vectors (VEC):

        S^T x = exp(pcum) (s_k / QM (C^T (s_v x)) + KU_t^T (A_t x)) + KU_w^T (A_w x)
        S y   = s_v (C (f y)) + A^T (KU' y),   KU' = KU with its token rows times exp(pcum)

    (w: the window rows, t: the token rows). The big product takes the thin operand in three
    bf16 parts against the bf16 codes; the corrections take the L + 2R fp32 inner products A x
    (or KU' y) of the tiles' window and token rows (their zero rows are not multiplied) in three
    parts, the window rows' (b_s) and the token rows' (bt_s, zero from row 2R on) as two operands
    against KU^T in two parts (or the exact A^T)."""
    TOKEN_ROWS: gl.constexpr = 8  # 2R: the tokens twice (KU) or q in two parts (A)
    thread_barrier()  # every warp's earlier products have read x_s and b_s, its factors are written
    if TRANSPOSE:
        inner = vec_s[SV_ROW].load(VEC)
        rows = win_s.slice(0, NL).load(DOT_ROWS).to(gl.float32)  # A's window rows (ubuf)
        token_rows = win_s.slice(NL, TOKEN_ROWS).load(TOKEN_DOT_ROWS).to(gl.float32)  # q_hi; q_lo
    else:
        inner = vec_s[F_ROW].load(VEC)
        rows = _ku_rows(ku_s, 0, NL, DOT_ROWS)  # KU's window rows
        token_rows = (_ku_rows(ku_s, NL, TOKEN_ROWS, TOKEN_DOT_ROWS) *
                      vec_s[DECAY_ROW].load(gl.SliceLayout(0, TOKEN_DOT_ROWS))[None, :])  # U'; U'
    _store_parts(x_s, inner * x0, inner * x1, inner * x2, inner * x3)
    x = _basis_columns(x0, x1, x2, x3)
    _store_low_rank_dots(b_s, rows, x, PARTIALS)
    _store_low_rank_dots(bt_s.slice(0, TOKEN_ROWS), token_rows,
                         gl.convert_layout(x, gl.SliceLayout(0, TOKEN_DOTS), assert_trivial=True), TOKEN_PARTIALS)
    fence_async_shared()
    thread_barrier()
    zero = gl.zeros([NN, THIN], gl.float32, ACC_THIN)
    if TRANSPOSE:
        acc = warpgroup_mma(c_s.permute((1, 0)), x_s.permute((1, 0)), zero, is_async=True)  # C^T (s_v x)
        low = warpgroup_mma(ku_s.slice(0, NL).permute((1, 0)), b_s, zero, is_async=True)
        low = warpgroup_mma(ku_s.slice(LOW_RANK, NL).permute((1, 0)), b_s, low, is_async=True)
        tok = warpgroup_mma(ku_s.slice(NL, LOW_RANK - NL).permute((1, 0)), bt_s, zero, is_async=True)
        tok = warpgroup_mma(ku_s.slice(LOW_RANK + NL, LOW_RANK - NL).permute((1, 0)), bt_s, tok, is_async=True)
        acc, low, tok = warpgroup_mma_wait(0, deps=[acc, low, tok])
        sk = vec_s[SK_ROW].load(THIN_ROWS) * (1.0 / QM)
        acc = (acc * sk[:, None] + tok) * vec_s[DECAY_ROW].load(THIN_ROWS)[:, None] + low
    else:
        acc = warpgroup_mma(c_s, x_s.permute((1, 0)), zero, is_async=True)  # C (f y)
        low = warpgroup_mma(win_s.slice(0, NL).permute((1, 0)), b_s, zero, is_async=True)  # A^T (KU' y)
        low = warpgroup_mma(win_s.slice(NL, LOW_RANK - NL).permute((1, 0)), bt_s, low, is_async=True)
        acc, low = warpgroup_mma_wait(0, deps=[acc, low])
        acc = acc * vec_s[SV_ROW].load(THIN_ROWS)[:, None] + low
    return _part_sums(acc, NN)


@gluon.jit
def basis(a0, a1, a2, a3, TWICE: gl.constexpr, NN: gl.constexpr, NORM_MIN: gl.constexpr, DROP: gl.constexpr,
          SECOND: gl.constexpr, FALLBACK: gl.constexpr):
    """SPEC step 3's orthonormal columns of a thin product's columns (VEC), each first scaled by
    its own power of two (scale-free), and a uniform flag: FALLBACK, whether a column depended on
    the earlier ones (it was replaced by a unit direction orthogonal to them); otherwise whether
    the columns were ill-conditioned (a pivot below SECOND of its column: the caller's other path)."""
    return _orthonormal_cols(_unit_scale(a0), _unit_scale(a1), _unit_scale(a2), _unit_scale(a3), TWICE, NN,
                             NORM_MIN, DROP, SECOND, FALLBACK)


@gluon.jit
def residual(c_s, win_s, ku_s, new_u_s, new_q_s, vec_s, NV: gl.constexpr, NK: gl.constexpr, NL: gl.constexpr,
             QM: gl.constexpr):
    """SPEC steps 2 and 4 in one accumulator [V, K] (ACC): E = (C s_v s_k / QM + q^T u) exp(pcum)
    + ubuf^T (w kbuf D) - q_new^T u_new. The token products are exact (bf16 parts of fp16, fp16 x
    fp16), the window keys two bf16 parts; the codes are dequantised while the first product runs."""
    tok_t = win_s.slice(NL, LOW_RANK - NL).permute((1, 0))  # [q_hi; q_lo; 0]^T
    s = warpgroup_mma(tok_t, ku_s.slice(NL, LOW_RANK - NL), gl.zeros([NV, NK], gl.float32, ACC), is_async=True)
    s = warpgroup_mma(tok_t, ku_s.slice(LOW_RANK + NL, LOW_RANK - NL), s, is_async=True)
    row_scaled = c_s.load(ACC).to(gl.float32) * (vec_s[SV_ROW].load(ROWS) * (1.0 / QM))[:, None]
    s = warpgroup_mma_wait(0, deps=[s])
    s = (row_scaled * vec_s[SK_ROW].load(COLS)[None, :] + s) * vec_s[DECAY_ROW].load(COLS)[None, :]
    ubuf_t = win_s.slice(0, NL).permute((1, 0))
    s = warpgroup_mma(ubuf_t, ku_s.slice(0, NL), s, is_async=True)
    s = warpgroup_mma(ubuf_t, ku_s.slice(LOW_RANK, NL), s, is_async=True)
    s = warpgroup_mma(new_q_s.permute((1, 0)), new_u_s, s, is_async=True)  # new_q_s holds -q_new
    return warpgroup_mma_wait(0, deps=[s])


@gluon.jit
def scales_and_codes(e, NV: gl.constexpr, QM: gl.constexpr, SCALE_MIN: gl.constexpr, MAGIC: gl.constexpr,
                     MAGIC_BITS: gl.constexpr):
    """SPEC steps 5-6 on E [V, K] (ACC): (codes int8 in BYTES, s_k [K], s_v [V])."""
    # per column once (in the two lanes that hold its sum), not in the 64 threads that hold a
    # column of E; the fast sqrt is within 1 ulp, and the codes use the stored scales.
    mean_k = _column_sums(gl.abs(e), NV) * (1.0 / NV)
    s_k = gl.maximum(gl.sqrt(mean_k), SCALE_MIN)
    inv_k = gl.convert_layout(gl.minimum(gl.rsqrt(mean_k), 1.0 / SCALE_MIN), COLS)  # no divisions
    e = e * inv_k[None, :]  # |E| / s_k, the row scale's argument
    s_v = gl.maximum(gl.max(gl.abs(e), axis=1), SCALE_MIN)
    # no clamp: |e| <= s_v on every row, so |x| <= QM (1 + 2^-23), which rounds to QM
    x = e * (QM / s_v)[:, None]
    # round half to even through the fp32 mantissa; the low byte is the int8 code
    codes = ((x + MAGIC).to(gl.int32, bitcast=True) - MAGIC_BITS).to(gl.int8)
    return gl.convert_layout(codes, BYTES), s_k, s_v


@gluon.jit
def _prefetch(
    slot, head, stage,
    codes_in, sk_in, sv_in, u_in, q_in, kbuf, ubuf, gbuf, w, pcum, ones,
    C_SLOT: gl.constexpr, C_HEAD: gl.constexpr, SK_SLOT: gl.constexpr, SK_HEAD: gl.constexpr,
    SV_SLOT: gl.constexpr, SV_HEAD: gl.constexpr,
    U_SLOT: gl.constexpr, U_HEAD: gl.constexpr, U_ROW: gl.constexpr,
    Q_SLOT: gl.constexpr, Q_HEAD: gl.constexpr, Q_ROW: gl.constexpr,
    NH: gl.constexpr, NV: gl.constexpr, NK: gl.constexpr, NL: gl.constexpr, NR: gl.constexpr,
    SCALAR_GATE: gl.constexpr,
):
    # start copying program (slot, head)'s checkpoint and window into the staging area (the
    # scalar gate: no gates, and its product p in every word of pcum's place)
    st_codes, st_gbuf, st_kbuf, st_ubuf, st_u, st_q, st_pcum, st_sk, st_sv, st_w = stage
    prog = slot * NH + head
    vb = gl.arange(0, NV, layout=gl.SliceLayout(1, BYTES))[:, None]
    kb = gl.arange(0, NK, layout=gl.SliceLayout(0, BYTES))[None, :]
    async_load(st_codes, codes_in + slot * C_SLOT + head * C_HEAD + vb * NK + kb)
    jh = gl.arange(0, NL, layout=gl.SliceLayout(1, HALVES))[:, None]
    nh = gl.arange(0, NK, layout=gl.SliceLayout(0, HALVES))[None, :]
    # the window in reversed entry order (row r holds entry j = L-1-r; the sums over entries do
    # not care), so that D_j is a forward scan. Row r of the gates holds the gates after entry j:
    # ones, then gbuf rows L-1 .. 1.
    j = NL - 1 - jh
    if not SCALAR_GATE:
        g_after = gl.where(jh > 0, gbuf + prog * (NL * NK) + (j + 1) * NK + nh, ones + nh)
        async_load(st_gbuf, g_after)
    async_load(st_kbuf, kbuf + prog * (NL * NK) + j * NK + nh)
    async_load(st_ubuf, ubuf + prog * (NL * NV) + j * NV + nh)
    jr = gl.arange(0, NR, layout=gl.SliceLayout(1, TOKEN_COPY))[:, None]
    nr = gl.arange(0, NK, layout=gl.SliceLayout(0, TOKEN_COPY))[None, :]
    u_rows = u_in + slot * U_SLOT + head * U_HEAD + jr * U_ROW + nr
    q_rows = q_in + slot * Q_SLOT + head * Q_HEAD + jr * Q_ROW + nr
    async_load(st_u, u_rows)
    async_load(st_q, q_rows)
    n = gl.arange(0, NK, layout=WORDS)
    if SCALAR_GATE:
        async_load(st_pcum, pcum + prog + n * 0)
    else:
        async_load(st_pcum, pcum + prog * NK + n)
    async_load(st_sk, sk_in + slot * SK_SLOT + head * SK_HEAD + n)
    async_load(st_sv, sv_in + slot * SV_SLOT + head * SV_HEAD + n)
    async_load(st_w, w + prog * NL + (NL - 1 - gl.arange(0, NL, layout=WORDS)))
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
    # s_k [K] and s_v [V] in any layout, the tokens u, q as [M, N] rows in one layout (token r in
    # row r; rows from R on are not stored)
    vb = gl.arange(0, NV, layout=gl.SliceLayout(1, BYTES))
    kb = gl.arange(0, NK, layout=gl.SliceLayout(0, BYTES))
    gl.store(codes_out + slot * C_SLOT + head * C_HEAD + vb[:, None] * NK + kb[None, :], codes)
    gl.store(sk_out + slot * SK_SLOT + head * SK_HEAD + gl.arange(0, NK, layout=s_k.type.layout), s_k)
    gl.store(sv_out + slot * SV_SLOT + head * SV_HEAD + gl.arange(0, NV, layout=s_v.type.layout), s_v)
    jn = gl.arange(0, u.shape[0], layout=gl.SliceLayout(1, u.type.layout))[:, None]
    nn = gl.arange(0, NK, layout=gl.SliceLayout(0, u.type.layout))[None, :]
    gl.store(u_out + slot * U_SLOT + head * U_HEAD + jn * U_ROW + nn, u, mask=jn < NR)
    gl.store(q_out + slot * Q_SLOT + head * Q_HEAD + jn * Q_ROW + nn, q, mask=jn < NR)


@gluon.jit
def _reset_window(prog, w, gbuf, pcum, NL: gl.constexpr, NK: gl.constexpr, SCALAR_GATE: gl.constexpr):
    # pool mode: a flushed program's window starts empty (weights 0, gates 1, summed log-gate 0;
    # the scalar gate: its product p = 1)
    jw = gl.arange(0, NL, layout=gl.SliceLayout(1, WIN))
    kw = gl.arange(0, NK, layout=gl.SliceLayout(0, WIN))
    gl.store(w + prog * NL + jw, gl.zeros([NL], gl.float32, gl.SliceLayout(1, WIN)))
    if SCALAR_GATE:
        gl.store(pcum + prog + jw * 0, gl.full([NL], 1.0, gl.float32, gl.SliceLayout(1, WIN)), mask=jw == 0)
    else:
        gl.store(gbuf + prog * (NL * NK) + jw[:, None] * NK + kw[None, :], gl.full([NL, NK], 1.0, gl.float16, WIN))
        gl.store(pcum + prog * NK + gl.arange(0, NK, layout=WORDS), gl.zeros([NK], gl.float32, WORDS))


@gluon.jit
def _unit_scaled_path(a0, a1, a2, a3, c_s, x_s, b_s, bt_s, win_s, ku_s, vec_s, NV: gl.constexpr, NL: gl.constexpr,
                      QM: gl.constexpr, NORM_MIN: gl.constexpr, DROP: gl.constexpr, SECOND: gl.constexpr):
    # qv from qk = S^T q0 with each column scaled by its own power of two, not orthonormalised:
    # the reference's qk is S^T q0 R^-1 (R upper triangular with a positive diagonal), and S qk
    # R^-1 has the same QR factor Q as S qk, so qv is the reference's in exact arithmetic. Also
    # returns whether that basis was ill-conditioned (the caller then takes the reference's path)
    k0 = _unit_scale(a0)
    k1 = _unit_scale(a1)
    k2 = _unit_scale(a2)
    k3 = _unit_scale(a3)
    b0, b1, b2, b3 = thin_products(k0, k1, k2, k3, c_s, x_s, b_s, bt_s, win_s, ku_s, vec_s, False, NV, NL, QM)  # S qk
    return basis(b0, b1, b2, b3, True, NV, NORM_MIN, DROP, SECOND, False)  # qv, the token basis, and ill


# not inlined: its lane-dependent constants are computed in it, not hoisted out of the persistent
# loop and held across programs (at two CTAs an SM they spilled in the inlined 8-warp builds)
@gluon.jit(noinline=True)
def _flush_program(
    slot, head, next_slot, next_head, has_next, first,
    codes_in, sk_in, sv_in, u_in, q_in, codes_out, sk_out, sv_out, u_out, q_out,
    kbuf, ubuf, gbuf, w, pcum, ones, q0,
    C_SLOT: gl.constexpr, C_HEAD: gl.constexpr, SK_SLOT: gl.constexpr, SK_HEAD: gl.constexpr,
    SV_SLOT: gl.constexpr, SV_HEAD: gl.constexpr,
    U_SLOT: gl.constexpr, U_HEAD: gl.constexpr, U_ROW: gl.constexpr,
    Q_SLOT: gl.constexpr, Q_HEAD: gl.constexpr, Q_ROW: gl.constexpr,
    IN_PLACE: gl.constexpr,
    NH: gl.constexpr, NV: gl.constexpr, NK: gl.constexpr, NL: gl.constexpr, NR: gl.constexpr,
    QM: gl.constexpr, SCALE_MIN: gl.constexpr, NORM_MIN: gl.constexpr, DROP: gl.constexpr,
    SECOND: gl.constexpr, U_LIMIT: gl.constexpr, MAGIC: gl.constexpr, MAGIC_BITS: gl.constexpr,
    SCALAR_GATE: gl.constexpr,
):
    prog = slot * NH + head
    # the shared operands: allocated here, not in the kernel (Triton 3.6 places a not-inlined
    # function's scratch from offset 0, over the caller's buffers), at the same offsets in every
    # call, so that what one call stages the next one finds
    stage_s = _staging_buffer(NV, NK)
    c_s = gl.allocate_shared_memory(gl.bfloat16, [NV, NK], OPERAND)  # the codes C [V, K]
    ku_s = gl.allocate_shared_memory(gl.bfloat16, [2 * LOW_RANK, NK], OPERAND)  # KU: hi rows, then lo rows
    win_s = gl.allocate_shared_memory(gl.bfloat16, [LOW_RANK, NV], OPERAND)  # A
    new_u_s = gl.allocate_shared_memory(gl.float16, [16, NK], OPERAND)  # new tokens (q negated)
    new_q_s = gl.allocate_shared_memory(gl.float16, [16, NV], OPERAND)
    x_s = gl.allocate_shared_memory(gl.bfloat16, [THIN, NV], OPERAND)  # thin operand rows
    b_s = gl.allocate_shared_memory(gl.bfloat16, [NL, THIN], OPERAND_B)  # low-rank corrections: window rows
    bt_s = gl.allocate_shared_memory(gl.bfloat16, [LOW_RANK - NL, THIN], OPERAND_B)  # token rows, then zeros
    vec_s = (gl.allocate_shared_memory(gl.float32, [NK], PLAIN1), gl.allocate_shared_memory(gl.float32, [NK], PLAIN1),
             gl.allocate_shared_memory(gl.float32, [NK], PLAIN1), gl.allocate_shared_memory(gl.float32, [NK], PLAIN1))
    q0_s = (gl.allocate_shared_memory(gl.float32, [NV], PLAIN1), gl.allocate_shared_memory(gl.float32, [NV], PLAIN1),
            gl.allocate_shared_memory(gl.float32, [NV], PLAIN1), gl.allocate_shared_memory(gl.float32, [NV], PLAIN1))
    stage = _stage_views(stage_s, NV, NK, NL, NR)
    # every call: q0 and the tiles' zero rows (the allocator may reuse their memory after their
    # last use in a call); the first one also stages its own inputs
    _set_up_buffers(q0, q0_s, win_s, ku_s, bt_s, NV, NL, NR)
    if first:
        _prefetch(slot, head, stage, codes_in, sk_in, sv_in, u_in, q_in, kbuf, ubuf, gbuf, w, pcum, ones,
                  C_SLOT, C_HEAD, SK_SLOT, SK_HEAD, SV_SLOT, SV_HEAD, U_SLOT, U_HEAD, U_ROW,
                  Q_SLOT, Q_HEAD, Q_ROW, NH, NV, NK, NL, NR, SCALAR_GATE)

    # this program's inputs, staged by _prefetch, into registers (the next one's copies start
    # before this one's last thin product)
    st_codes, st_gbuf, st_kbuf, st_ubuf, st_u, st_q, st_pcum, st_sk, st_sv, st_w = stage
    async_copy.wait_group(0)
    thread_barrier()  # every thread's copies have landed; the previous program is done with every buffer
    if not SCALAR_GATE:
        g_after = st_gbuf.load(WIN)
    keys = st_kbuf.load(WIN).to(gl.float32)
    wj = st_w.load(gl.SliceLayout(1, WIN))
    ubuf_rows = st_ubuf.load(HALVES)
    u4 = st_u.load(ROW4)
    q4 = st_q.load(ROW4)
    codes = st_codes.load(BYTES)
    # the per-program vectors once, for every layout that reads them later
    if SCALAR_GATE:
        pc = st_pcum.load(WORDS)  # p, in every word
    else:
        pc = gl.exp(st_pcum.load(WORDS))
    s_k = st_sk.load(WORDS)
    vec_s[DECAY_ROW].store(pc)
    vec_s[SK_ROW].store(s_k)
    vec_s[SV_ROW].store(st_sv.load(WORDS))
    vec_s[F_ROW].store(s_k * pc * (1.0 / QM))

    if SCALAR_GATE:  # no per-entry decays
        rebuild_factors(keys, gl.full([NL, NK], 1.0, gl.float32, WIN), wj, u4, q4, ubuf_rows, codes, c_s, win_s, ku_s,
                        NL, NR)
    else:
        rebuild_factors(keys, decay(g_after), wj, u4, q4, ubuf_rows, codes, c_s, win_s, ku_s, NL, NR)

    # one round of subspace iteration on the factors
    a0, a1, a2, a3 = thin_products(q0_s[0].load(VEC), q0_s[1].load(VEC), q0_s[2].load(VEC), q0_s[3].load(VEC),
                                   c_s, x_s, b_s, bt_s, win_s, ku_s, vec_s, True, NK, NL, QM)  # S^T q0
    if SCALAR_GATE:  # a strongly decayed window (p < ORTHONORMAL_BELOW), mostly ill: the other path at once
        decayed = gl.load(pcum + prog) < ORTHONORMAL_BELOW
        if decayed:
            p0, p1, p2, p3, ill = a0, a1, a2, a3, decayed  # (placeholders: the reference's path below)
        else:
            p0, p1, p2, p3, ill = _unit_scaled_path(a0, a1, a2, a3, c_s, x_s, b_s, bt_s, win_s, ku_s, vec_s,
                                                    NV, NL, QM, NORM_MIN, DROP, SECOND)
    else:
        p0, p1, p2, p3, ill = _unit_scaled_path(a0, a1, a2, a3, c_s, x_s, b_s, bt_s, win_s, ku_s, vec_s,
                                                NV, NL, QM, NORM_MIN, DROP, SECOND)
    if ill:
        # S S^T q0 conditioned beyond ~1e4 (rare in KDA: a rank-deficient or very coherent state,
        # q0 with repeated columns; common where a scalar gate decays fast), where fp32 products
        # no longer hold qv's last columns to the tokens' precision: the reference's path, qk
        # orthonormalised first (a dependent column replaced by e_r)
        k0, k1, k2, k3, _ = basis(a0, a1, a2, a3, False, NK, NORM_MIN, DROP, SECOND, True)
        b0, b1, b2, b3 = thin_products(k0, k1, k2, k3, c_s, x_s, b_s, bt_s, win_s, ku_s, vec_s, False, NV, NL, QM)
        p0, p1, p2, p3, _ = basis(b0, b1, b2, b3, True, NV, NORM_MIN, DROP, SECOND, True)
    # the next program's inputs: their copies run under this program's last product, residual,
    # scales and stores
    if has_next:
        _prefetch(next_slot, next_head, stage, codes_in, sk_in, sv_in, u_in, q_in, kbuf, ubuf, gbuf, w, pcum, ones,
                  C_SLOT, C_HEAD, SK_SLOT, SK_HEAD, SV_SLOT, SV_HEAD, U_SLOT, U_HEAD, U_ROW,
                  Q_SLOT, Q_HEAD, Q_ROW, NH, NV, NK, NL, NR, SCALAR_GATE)
    # uk = S^T qv
    u0, u1, u2, u3 = thin_products(p0, p1, p2, p3, c_s, x_s, b_s, bt_s, win_s, ku_s, vec_s, True, NK, NL, QM)
    # where fp16 u_r would overflow (coherent states above |S| ~ 6e3) a power of two moves from
    # u_r to q_r: exact for q^T u. Without max|S| there is no cheap bound to skip the check.
    u0, p0 = _guard_overflow(u0, p0, U_LIMIT)
    u1, p1 = _guard_overflow(u1, p1, U_LIMIT)
    u2, p2 = _guard_overflow(u2, p2, U_LIMIT)
    u3, p3 = _guard_overflow(u3, p3, U_LIMIT)
    jn = gl.arange(0, 16, layout=gl.SliceLayout(1, STACK16))[:, None]  # token r in row r, rows from R on zero
    u_new = gl.where(jn < NR, _select_rows(jn, u0, u1, u2, u3), 0.0).to(gl.float16)
    q_new = gl.where(jn < NR, _select_rows(jn, p0, p1, p2, p3), 0.0).to(gl.float16)
    new_u_s.store(u_new)
    new_q_s.store(-q_new)
    fence_async_shared()
    thread_barrier()

    e = residual(c_s, win_s, ku_s, new_u_s, new_q_s, vec_s, NV, NK, NL, QM)
    codes_new, s_k_new, s_v_new = scales_and_codes(e, NV, QM, SCALE_MIN, MAGIC, MAGIC_BITS)
    _store_checkpoint(slot, head, codes_new, s_k_new, s_v_new, u_new, q_new,
                      codes_out, sk_out, sv_out, u_out, q_out, C_SLOT, C_HEAD, SK_SLOT, SK_HEAD, SV_SLOT, SV_HEAD,
                      U_SLOT, U_HEAD, U_ROW, Q_SLOT, Q_HEAD, Q_ROW, NV, NK, NR)
    if IN_PLACE:
        # every window load above has landed in registers before these stores issue
        _reset_window(prog, w, gbuf, pcum, NL, NK, SCALAR_GATE)
    _keep_staged(stage_s, pcum, NV, NK, NL)


@gluon.jit
def _staging_buffer(NV: gl.constexpr, NK: gl.constexpr):
    # the next program's inputs, copied (cp.async) while this program computes (_stage_views), in
    # memory of its own that every call keeps live to its end (``_keep_staged``), so that no
    # allocation or scratch of the call lands on copies in flight
    # (named as in _flush_program: tests/test_gluon_offline.py finds its offset by this name)
    return gl.allocate_shared_memory(gl.bfloat16, [NV, NK], PLAIN)


@gluon.jit
def _stage_words(stage_s, NV: gl.constexpr, NK: gl.constexpr):
    # the staging buffer's last 2 KB as [4 N] fp32 words
    return reinterpret(stage_s, gl.float32, [NV * NK // 2], PLAIN1).slice(NV * NK // 2 - 4 * NK, 4 * NK)


@gluon.jit
def _stage_views(stage_s, NV: gl.constexpr, NK: gl.constexpr, NL: gl.constexpr, NR: gl.constexpr):
    # the staging area of the next program's inputs, in _prefetch's order (codes, gates, keys,
    # values, u, q, pcum, s_k, s_v, w): in 256-byte rows the codes (16 KB, rows 0-63), the window
    # (12 KB), the tokens once (2 KB), then [N] fp32 words (2 KB: pcum, s_k, s_v, w and a spare
    # quarter that ``_keep_staged`` writes)
    gl.static_assert(NV * NK + 3 * NL * NK * 2 + 2 * NR * NK * 2 + 4 * NK * 4 == NV * NK * 2)
    halves = reinterpret(stage_s, gl.float16, [NV, NK], PLAIN)
    words = _stage_words(stage_s, NV, NK)
    return (reinterpret(stage_s, gl.int8, [2 * NV, NK], PLAIN).slice(0, NV), halves.slice(4 * NL, NL),
            stage_s.slice(5 * NL, NL), stage_s.slice(6 * NL, NL), halves.slice(7 * NL, NR), halves.slice(7 * NL + NR, NR),
            words.slice(0, NK), words.slice(NK, NK), words.slice(2 * NK, NV), words.slice(3 * NK, NL))


@gluon.jit
def _keep_staged(stage_s, pcum, NV: gl.constexpr, NK: gl.constexpr, NL: gl.constexpr):
    # the staging buffer's last use in a call, so that the allocator keeps it to the call's end:
    # a copy with every lane masked off (cp.async's zero fill of the spare words after w, which
    # nothing reads), no global read
    gl.static_assert(NL <= NK // 2)  # w (words 3 N .. 3 N + L) ends before the zero fill
    n = gl.arange(0, NK // 4, layout=WORDS)
    async_load(_stage_words(stage_s, NV, NK).slice(3 * NK + NK // 2, NK // 4), pcum + n, mask=n < 0)
    async_copy.commit_group()


@gluon.jit
def _set_up_buffers(q0, q0_s, win_s, ku_s, bt_s, NV: gl.constexpr, NL: gl.constexpr, NR: gl.constexpr):
    # every call of _flush_program (the allocator may give their memory to scratch after their
    # last use in a call): q0's columns into shared memory (the first product reads them) and
    # the low-rank tiles' rows that stay zero (from L + 2R on)
    vq = gl.arange(0, NV, layout=WORDS)
    for c in gl.static_range(4):
        q0_s[c].store(gl.load(q0 + vq * NR + c))
    zero = gl.zeros([LOW_RANK - NL - 2 * NR, NV], gl.bfloat16, ROW8)
    win_s.slice(NL + 2 * NR, LOW_RANK - NL - 2 * NR).store(zero)
    ku_s.slice(NL + 2 * NR, LOW_RANK - NL - 2 * NR).store(zero)
    ku_s.slice(LOW_RANK + NL + 2 * NR, LOW_RANK - NL - 2 * NR).store(zero)
    bt_s.slice(2 * NR, LOW_RANK - NL - 2 * NR).store(gl.zeros([LOW_RANK - NL - 2 * NR, THIN], gl.bfloat16, ROW8))
    fence_async_shared()
    thread_barrier()


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
    SECOND: gl.constexpr, U_LIMIT: gl.constexpr, MAGIC: gl.constexpr, MAGIC_BITS: gl.constexpr,
    SCALAR_GATE: gl.constexpr,  # the scalar gate (GDN): gbuf None, pcum holds the gate product p
):
    gl.static_assert(NR == 4)
    gl.static_assert(NV == NK)
    gl.static_assert(NL + 2 * NR <= LOW_RANK)
    pid = gl.program_id(0)
    G: gl.constexpr = CTAS


    if IN_PLACE:
        # every CTA reads all due flags, ranks the due programs in candidate order and takes
        # ranks pid, pid + G, ...: balanced for any pattern, no atomics, nothing to reset
        gl.static_assert(NH <= 32)  # a slot's due flags are the bits of one int32
        gl.static_assert(NH <= CTAS)  # so a slot holds at most one of a CTA's picks
        row = gl.arange(0, TILE // NH, layout=gl.SliceLayout(1, FLAGS))
        hd = gl.arange(0, NH, layout=gl.SliceLayout(0, FLAGS))
        row_words = gl.arange(0, TILE // NH, layout=WORDS)
        mine = picks + pid * pick_stride
        count = 0
        for first in range(0, num_programs // NH, TILE // NH):
            slots = gl.load(idx + first + row, mask=first + row < num_programs // NH, other=0)
            alive = (slots > 0)[:, None]
            fill = gl.load(hcnt + slots.to(gl.int64)[:, None] * NH + hd[None, :], mask=alive, other=0)
            # each slot's due flags as the bits of one word (the heads' bits are distinct, so
            # their sum is their OR); masked loads read 0
            due_bits = gl.sum(gl.where(fill == NL, 1 << hd[None, :], 0), axis=1)
            found = gl.sum(_popc(due_bits), axis=0)
            if found > 0:  # the ranks only where something is due, a slot's words a thread (WORDS)
                bits = gl.convert_layout(due_bits, WORDS)
                per_slot = _popc(bits)
                first_rank = count + gl.associative_scan(per_slot, 0, _add) - per_slot
                # a slot's NH <= G ranks hold at most one of this CTA's (rank = pid mod G): its due
                # program number `take` in the slot, whose head is the word's (take + 1)-th set
                # bit: one division a slot instead of one a program
                take = pid + G - first_rank % G
                take = gl.where(take >= G, take - G, take)
                slot_w = gl.load(idx + first + row_words, mask=first + row_words < num_programs // NH, other=0)
                gl.store(mine + (first_rank + take) // G, slot_w * NH + _nth_set_bit(bits, take + 1),
                         mask=take < per_slot)
            count += found
        thread_barrier()  # the picks are written by other threads of this CTA
        fence_async_shared()
        n = gl.cdiv(count - pid, G)
        start = 0  # i: the CTA's picks in order
        stop = n
        step = 1
    else:
        start = pid  # i: programs pid, pid + G, ...
        stop = num_programs
        step = G
    # one call site for both modes: program p now, nxt staged for the next iteration
    for i in range(start, stop, step):
        if IN_PLACE:
            p = gl.load(mine + i)
            nxt = gl.load(mine + i + 1, mask=i + 1 < n, other=0)
            has_next = i + 1 < n
        else:
            p = i
            nxt = i + G
            has_next = nxt < num_programs
        _flush_program(
            (p // NH).to(gl.int64), p % NH, (nxt // NH).to(gl.int64), nxt % NH, has_next, i == start,
            codes_in, sk_in, sv_in, u_in, q_in, codes_out, sk_out, sv_out, u_out, q_out,
            kbuf, ubuf, gbuf, w, pcum, ones, q0,
            C_SLOT, C_HEAD, SK_SLOT, SK_HEAD, SV_SLOT, SV_HEAD, U_SLOT, U_HEAD, U_ROW,
            Q_SLOT, Q_HEAD, Q_ROW, IN_PLACE, NH, NV, NK, NL, NR,
            QM, SCALE_MIN, NORM_MIN, DROP, SECOND, U_LIMIT, MAGIC, MAGIC_BITS, SCALAR_GATE,
        )
    async_copy.wait_group(0)  # no copy of the last call (its _keep_staged) in flight at the exit


@functools.lru_cache(maxsize=None)
def _ones(device: torch.device) -> torch.Tensor:
    # made on the first launch on a device (a pool's warm-up), never inside a captured graph
    return torch.ones(K, dtype=torch.float16, device=device)


def pool_tiles() -> list[int]:
    """The flag-scan tiles a pool call of this kernel may use (``launch.flag_tile``, by the call's
    candidates; a pool's warm-up compiles each)."""
    return flag_tiles(FLAG_TILE)


def launch_flush(ckpt_in, ckpt_out, window, q0, idx=None, hcnt=None, picks=None, ctas_per_sm: int = CTAS_PER_SM):
    """Launch the Gluon flush kernel; arguments and semantics as ``flush.launch_flush``.

    Both modes run on resident CTAs, ``ctas_per_sm`` an SM (1 or 2; 1 leaves half of each SM's
    shared memory to the kernels it runs beside): a pool call ranks the due programs and shares
    them out, a functional call strides over the batch. Needs an sm_90 device and a triton
    release the kernel runs under (``kernel.decide``). Returns the launched kernel object, or
    None for an empty launch.
    """
    if not 1 <= ctas_per_sm <= MOST_CTAS_PER_SM:
        raise ValueError(f"ctas_per_sm must be 1 .. {MOST_CTAS_PER_SM}, got {ctas_per_sm}")
    in_place = idx is not None
    num_programs = (idx.numel() if in_place else ckpt_in[0].shape[0]) * ckpt_in[0].shape[1]
    if num_programs == 0:
        return None
    grid = (resident_ctas(q0.device, ctas_per_sm),)
    dummy = q0  # unused pointer arguments in functional mode
    picks, pick_stride = pool_picks(num_programs, hcnt, grid[0], picks) if in_place else (dummy, 0)
    tile = flag_tile(num_programs, FLAG_TILE) if in_place else FLAG_TILE  # one of pool_tiles() in a pool
    with torch.cuda.device(q0.device):
        return _flush_kernel[grid](
            **flush_arguments(ckpt_in, ckpt_out, window, q0, idx if in_place else dummy,
                              hcnt if in_place else dummy, picks, num_programs, pick_stride),
            ones=_ones(q0.device), IN_PLACE=in_place, TILE=tile, CTAS=grid[0], **_OWN_CONSTANTS,
            num_warps=NUM_WARPS, **({"maxnreg": MAX_REGISTERS} if MAX_REGISTERS else {}),
        )


_OWN_CONSTANTS = dict(SECOND=SECOND_PASS_BELOW)  # the constants only this kernel takes
_CONSTANTS = dict(**FLUSH_CONSTANTS, **_OWN_CONSTANTS)  # all of its constants (scripts/compile_sm90.py)
