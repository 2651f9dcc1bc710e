"""Gluon kernel of the per-token KDA decode step for Hopper (sm_90a): one program = one
(sequence, head).

The portable kernel's formulation and phases (``triton_kernel.py``: every load first, none behind
the fill count; the factor products in fp32 on the CUDA cores), with the layouts chosen by hand so
that the sums cost few shuffles and few shared-memory rounds:

- the codes [V, K] int8: a thread holds 4 rows x 32 columns (two 16-byte pieces, each warp load a
  64-byte run of 8 rows), so each sum over k is 32 terms in-thread and two shuffle rounds; the
  int8 -> fp32 conversion takes four bytes at once (one xor, then a byte permute into the fp32
  mantissa and a subtract per element: exact);
- the window [L, N] (kbuf, gbuf, ubuf) and the tokens [R, N] (u, q): a thread owns a whole column,
  so the entry decays' running product and the sums over j and r are in-thread;
- the window's projections (sums over k of the decayed keys) go through one layout change to 16
  columns a thread;
- kn and qn travel as pairs (``_pair_to``): each of their layout changes, and the tokens'
  cross-warp sums, is one exchange for both (26 barriers a program instead of 32 in the pool
  form);
- the codes and the window (28 KB of a program's 34.9) are copied into shared memory (cp.async,
  16 bytes a thread) while the small loads and the token's phase run, so no registers wait on
  them; the codes are converted one in-thread half at a time, so that the register cap (96) lets
  5 CTAs share an SM.

Measured on the H200 (BENCHMARKS.md, 2026-12-02, sixth session): 1.32x the step's memory floor at
B=256, 1.24x at B=512 (the pairs took 1.4% off at B=512, the halves and the cap of 96 6.7%); the
kernel is bound by the instructions it issues (ncu at B=256: DRAM at 65%, no eligible warp in 34%
of a scheduler's cycles), not by bandwidth. NOTES.md lists what was tried.

Verified with triton 3.6.0 (the Gluon API moves between releases; ``kernel.py`` picks this path
only where it was verified). Source: LeapQuant (arXiv 2609.38166); NVlabs/kda request
conless-leapquant-kda-step.
"""

from __future__ import annotations

import torch
from triton.experimental import gluon
from triton.experimental.gluon import language as gl
from triton.experimental.gluon.language.nvidia.hopper import async_copy

from ..geometry import H
from ..launch import GLUON_VERIFIED_TRITON, STEP_UNSPECIALISED, step_arguments
from .tl_common import entry_decay, round_bf16, token_side, write_entry

VERIFIED_TRITON = GLUON_VERIFIED_TRITON
NUM_WARPS = 4
# registers a thread may use: 96 lets 5 CTAs (20 warps) share an SM; with the codes converted one
# half at a time it spills one value (8 B of stack, 1 spill store and load) in pool form, none in
# the functional form (H200: -6.7% at B=256 and 512 against 128, i.e. 4 CTAs; with the whole codes
# converted at once 96 spilled 144 B, 34 spill stores and loads, +37%; 128 was -11% against the
# 168 the compiler picks unbounded)
MAX_REGISTERS = 96
CODES = gl.constexpr(gl.BlockedLayout([4, 16], [8, 4], [4, 1], [1, 0]))  # [V, K] int8
WIN = gl.constexpr(gl.BlockedLayout([16, 1], [1, 32], [1, 4], [0, 1]))  # [L, N]: a column a thread
TOK = gl.constexpr(gl.BlockedLayout([4, 1], [1, 32], [1, 4], [0, 1]))  # [R, N]: a column a thread
KEYS = gl.constexpr(gl.BlockedLayout([1, 16], [4, 8], [4, 1], [1, 0]))  # [L, K]: 16 columns a thread
COL = gl.constexpr(gl.SliceLayout(0, WIN))  # [N] vectors: thread t holds element t
# [N, 2] pairs (gl.join's layout of two [N] vectors) of COL, of the rows of WIN, and of the
# columns of KEYS and CODES: the pair's element in a register beside it
PAIR_COL = gl.constexpr(gl.DistributedLinearLayout(
    reg_bases=[[0, 1]], lane_bases=[[1, 0], [2, 0], [4, 0], [8, 0], [16, 0]], warp_bases=[[32, 0], [64, 0]],
    block_bases=[], shape=[128, 2]))
PAIR_WIN_ROWS = gl.constexpr(gl.DistributedLinearLayout(
    reg_bases=[[0, 1], [1, 0], [2, 0], [4, 0], [8, 0]], lane_bases=[[0, 0]] * 5, warp_bases=[[0, 0]] * 2,
    block_bases=[], shape=[16, 2]))
PAIR_KEY_COLS = gl.constexpr(gl.DistributedLinearLayout(
    reg_bases=[[0, 1], [1, 0], [2, 0], [4, 0], [8, 0]], lane_bases=[[16, 0], [32, 0], [64, 0], [0, 0], [0, 0]],
    warp_bases=[[0, 0]] * 2, block_bases=[], shape=[128, 2]))
PAIR_CODE_COLS = gl.constexpr(gl.DistributedLinearLayout(
    reg_bases=[[0, 1], [1, 0], [2, 0], [4, 0], [8, 0], [64, 0]], lane_bases=[[16, 0], [32, 0], [0, 0], [0, 0], [0, 0]],
    warp_bases=[[0, 0]] * 2, block_bases=[], shape=[128, 2]))
# the copies into shared memory, 16 bytes a thread; the codes' buffer swizzled so that the
# CODES layout's reads (two rows of 64 bytes a quarter-warp) hit distinct banks
COPY_BYTES = gl.constexpr(gl.BlockedLayout([1, 16], [4, 8], [4, 1], [1, 0]))  # [V, K] int8
COPY_HALVES = gl.constexpr(gl.BlockedLayout([1, 8], [2, 16], [4, 1], [1, 0]))  # [L, N] 16-bit
CODES_STAGE = gl.constexpr(gl.SwizzledSharedLayout(16, 1, 8, [1, 0]))
PLAIN = gl.constexpr(gl.SwizzledSharedLayout(1, 1, 1, [1, 0]))
# four int8 codes of a register -> four fp32: bias the bytes to unsigned (xor 0x80), place each in
# the low mantissa byte of 2^23 (0x4B0000bb = 2^23 + c + 128), subtract 2^23 + 128
CODES_ASM = gl.constexpr("""{
.reg .b32 t;
xor.b32 t, $4, 0x80808080;
prmt.b32 $0, t, 0x4B000000, 0x7540; prmt.b32 $1, t, 0x4B000000, 0x7541;
prmt.b32 $2, t, 0x4B000000, 0x7542; prmt.b32 $3, t, 0x4B000000, 0x7543;
sub.f32 $0, $0, 0f4B000080; sub.f32 $1, $1, 0f4B000080;
sub.f32 $2, $2, 0f4B000080; sub.f32 $3, $3, 0f4B000080;
}""")


@gluon.jit
def _codes_fp32(c):
    return gl.inline_asm_elementwise(CODES_ASM, "=r,=r,=r,=r,r", [c], dtype=gl.float32, is_pure=True, pack=4)


@gluon.jit
def _pair_to(x, y, layout: gl.constexpr, PAIRED: gl.constexpr):
    # two [N] tensors of one layout moved into ``layout`` by one exchange (one round of shared
    # memory and barriers on the program's chain instead of two); PAIRED: the layout gl.join
    # gives a pair of [N] tensors in ``layout`` (values never depend on it; the conversions after
    # the split assert only that no data moves between threads, so a wrong PAIRED fails to
    # compile or costs in-thread moves, never results)
    a, b = gl.split(gl.convert_layout(gl.join(x, y), PAIRED))
    return gl.convert_layout(a, layout, assert_trivial=True), gl.convert_layout(b, layout, assert_trivial=True)


# the same arguments as the portable kernel's (``launch.step_arguments``), in the same order
@gluon.jit(do_not_specialize=STEP_UNSPECIALISED)
def _step_kernel(
    codes, s_k, s_v, u, q,  # checkpoint, read only
    kbuf, ubuf, gbuf, w, pcum, fill,  # window and its fill count (pool form: appended in place)
    qx, kx, vx, a, b, A_log, dt_bias,  # this token and the gate's parameters
    o, k_row, u_row, g_row, w_new, pcum_new,  # outputs (pool form: only o; the rest go to the window)
    idx,  # pool form: int32 [N] slot ids (<= 0: no sequence)
    qk_row, v_row,  # element row strides of qx and kx (one) and of vx; a mixed row's stride for both
    C_SLOT: gl.constexpr, C_HEAD: gl.constexpr,  # element strides of the checkpoint tensors
    SK_SLOT: gl.constexpr, SK_HEAD: gl.constexpr,
    SV_SLOT: gl.constexpr, SV_HEAD: gl.constexpr,
    U_SLOT: gl.constexpr, U_HEAD: gl.constexpr, U_ROW: gl.constexpr,
    Q_SLOT: gl.constexpr, Q_HEAD: gl.constexpr, Q_ROW: gl.constexpr,
    IN_PLACE: gl.constexpr,  # pool form
    NH: gl.constexpr, NV: gl.constexpr, NK: gl.constexpr, NL: gl.constexpr, NR: gl.constexpr,
    QM: gl.constexpr, NORM_EPS: gl.constexpr, SCALE: gl.constexpr, SP_THRESHOLD: gl.constexpr,
    BETA_SMALL: gl.constexpr, MAGIC: gl.constexpr, MAGIC_BITS: gl.constexpr,  # (the portable kernel's; CODES_ASM has its own)
):
    gl.static_assert(NK == NV)  # one [N] layout serves both sides
    c = gl.program_id(0)
    row = c // NH  # batch row (functional) or entry of idx (pool)
    head = c % NH
    n = gl.arange(0, NK, layout=COL)
    out_row = (row.to(gl.int64) * NH + head) * NV
    if IN_PLACE:
        slot = gl.load(idx + row).to(gl.int64)
        if slot <= 0:  # no sequence: a zero output row, nothing else
            gl.store(o + out_row + n, gl.zeros([NV], gl.bfloat16, COL))
            return
    else:
        slot = row.to(gl.int64)
    prog = slot * NH + head
    tok = row.to(gl.int64)
    kwin = prog * (NL * NK)
    vwin = prog * (NL * NV)

    # every load first and none behind the fill count (rows at or past h are read whole and
    # discarded by a select; only entry j + 1 past the window is masked)
    jw = NL - 1 - gl.arange(0, NL, layout=gl.SliceLayout(1, WIN))  # rows in reversed entry order
    # the codes and the window copied (cp.async) into shared memory, rows in reversed entry order
    # like jw: no registers held while they land
    codes_s = gl.allocate_shared_memory(gl.int8, [NV, NK], CODES_STAGE)
    keys_s = gl.allocate_shared_memory(gl.bfloat16, [NL, NK], PLAIN)
    gates_s = gl.allocate_shared_memory(gl.float16, [NL, NK], PLAIN)
    vals_s = gl.allocate_shared_memory(gl.bfloat16, [NL, NV], PLAIN)
    vb = gl.arange(0, NV, layout=gl.SliceLayout(1, COPY_BYTES))[:, None]
    kb = gl.arange(0, NK, layout=gl.SliceLayout(0, COPY_BYTES))[None, :]
    async_copy.async_copy_global_to_shared(codes_s, codes + slot * C_SLOT + head * C_HEAD + vb * NK + kb)
    jc = NL - 1 - gl.arange(0, NL, layout=gl.SliceLayout(1, COPY_HALVES))[:, None]
    nh = gl.arange(0, NK, layout=gl.SliceLayout(0, COPY_HALVES))[None, :]
    async_copy.async_copy_global_to_shared(keys_s, kbuf + kwin + jc * NK + nh)
    async_copy.async_copy_global_to_shared(gates_s, gbuf + kwin + (jc + 1) * NK + nh,
                                           mask=((jc + 1) < NL) & (nh >= 0))
    async_copy.async_copy_global_to_shared(vals_s, ubuf + vwin + jc * NV + nh)
    async_copy.commit_group()
    s_vr = gl.load(s_v + slot * SV_SLOT + head * SV_HEAD + n)
    s_kr = gl.load(s_k + slot * SK_SLOT + head * SK_HEAD + n)
    w_all = gl.load(w + prog * NL + jw)
    rt = gl.arange(0, NR, layout=gl.SliceLayout(1, TOK))
    nt = gl.arange(0, NK, layout=gl.SliceLayout(0, TOK))
    uu = gl.load(u + slot * U_SLOT + head * U_HEAD + rt[:, None] * U_ROW + nt[None, :])
    qq = gl.load(q + slot * Q_SLOT + head * Q_HEAD + rt[:, None] * Q_ROW + nt[None, :])
    vt = gl.load(vx + tok * v_row + head * NV + n).to(gl.float32)
    h = gl.load(fill + prog)
    h = gl.where(h >= NL, 0, h)  # hcnt == L: the flush just emptied the window
    kn, qn, kq, g, en, beta, pcum_n, pc = token_side(qx, kx, a, b, A_log, dt_bias, pcum, tok, qk_row, head, prog, n,
                                                     NH, NK, NORM_EPS, SCALE, SP_THRESHOLD, BETA_SMALL)
    async_copy.wait_group(0)
    gl.thread_barrier()
    keys = keys_s.load(WIN)
    g_after = gates_s.load(WIN)
    vals = vals_s.load(WIN)

    # the key side: the window's projections w_j (kbuf_j * D_j) . x [L] (summed 16 columns a
    # thread) and the tokens' (U' x) [R] (summed across the CTA), x = kn and qn
    live = jw < h
    wl = gl.where(live, w_all, 0.0)
    kd = gl.where(live[:, None], keys.to(gl.float32), 0.0) * entry_decay(g_after, en, h, jw) * wl[:, None]
    kd = gl.convert_layout(kd, KEYS)
    # the exchanges in pairs (kn with qn): one round of shared memory each
    kn_keys, qn_keys = _pair_to(kn, qn, gl.SliceLayout(0, KEYS), PAIR_KEY_COLS)
    pk, pq = _pair_to(gl.sum(kd * kn_keys[None, :], axis=1), gl.sum(kd * qn_keys[None, :], axis=1),
                      gl.SliceLayout(1, WIN), PAIR_WIN_ROWS)
    up = uu.to(gl.float32) * gl.convert_layout(pc, gl.SliceLayout(0, TOK))[None, :]
    kn_tok = gl.convert_layout(kn, gl.SliceLayout(0, TOK))
    qn_tok = gl.convert_layout(qn, gl.SliceLayout(0, TOK))
    tk, tq = gl.split(gl.sum(gl.join(up * kn_tok[None, :], up * qn_tok[None, :]), axis=1))  # one cross-warp sum

    # the value side: S x = s_v * (C (f * x)) + ubuf^T (projections) + Q^T (U' x), f = s_k pc / 127
    f = s_kr * pc * (1.0 / QM)
    fk, fq = _pair_to(f * kn, f * qn, gl.SliceLayout(0, CODES), PAIR_CODE_COLS)
    # the codes in their two in-thread halves of 16 columns a thread (columns c and 64 + c), each
    # converted and summed before the next, so that one half's fp32 values are live at a time
    c_lo, c_hi = gl.split(gl.permute(gl.reshape(codes_s.load(CODES), [NV, 2, NK // 2]), (0, 2, 1)))
    half: gl.constexpr = gl.SliceLayout(0, c_lo.type.layout)
    fk_lo, fk_hi = gl.split(gl.permute(gl.reshape(fk, [2, NK // 2]), (1, 0)))
    fq_lo, fq_hi = gl.split(gl.permute(gl.reshape(fq, [2, NK // 2]), (1, 0)))
    fk_lo = gl.convert_layout(fk_lo, half, assert_trivial=True)
    fk_hi = gl.convert_layout(fk_hi, half, assert_trivial=True)
    fq_lo = gl.convert_layout(fq_lo, half, assert_trivial=True)
    fq_hi = gl.convert_layout(fq_hi, half, assert_trivial=True)
    # in-thread sums of each half ([V, 4]: a thread's 16 columns), the lanes' sum once at the end
    cf = _codes_fp32(c_lo)
    sk = gl.sum(gl.reshape(cf * fk_lo[None, :], [NV, 4, NK // 8]), axis=2)
    sq = gl.sum(gl.reshape(cf * fq_lo[None, :], [NV, 4, NK // 8]), axis=2)
    cf = _codes_fp32(c_hi)
    sk = sk + gl.sum(gl.reshape(cf * fk_hi[None, :], [NV, 4, NK // 8]), axis=2)
    sq = sq + gl.sum(gl.reshape(cf * fq_hi[None, :], [NV, 4, NK // 8]), axis=2)
    rows: gl.constexpr = gl.SliceLayout(1, CODES)
    ck, cq = _pair_to(gl.convert_layout(gl.sum(sk, axis=1), rows, assert_trivial=True),
                      gl.convert_layout(gl.sum(sq, axis=1), rows, assert_trivial=True), COL, PAIR_COL)
    vl = gl.where(live[:, None], vals.to(gl.float32), 0.0)
    qf = qq.to(gl.float32)
    tk = gl.convert_layout(tk, gl.SliceLayout(1, TOK))
    tq = gl.convert_layout(tq, gl.SliceLayout(1, TOK))
    Skn = ck * s_vr + gl.sum(vl * pk[:, None], axis=0) + gl.convert_layout(gl.sum(qf * tk[:, None], axis=0), COL)
    Sqn = cq * s_vr + gl.sum(vl * pq[:, None], axis=0) + gl.convert_layout(gl.sum(qf * tq[:, None], axis=0), COL)
    u_new = beta * (vt - Skn)
    gl.store(o + out_row + n, round_bf16(Sqn + kq * u_new))

    # the appended entry (pool form) or the fresh outputs
    if IN_PLACE:
        gl.thread_barrier()  # every thread has read the window, pcum and the fill count
    write_entry(kbuf, ubuf, gbuf, w, pcum, fill, k_row, u_row, g_row, w_new, pcum_new, prog, out_row, h, n, jw,
                kn, u_new, en, pcum_n, w_all, IN_PLACE, NK, NV, NL)


def launch_step(ckpt, window, fill, token, A_log, dt_bias, o, new=None, idx=None):
    """Launch the Gluon decode-step kernel; arguments and semantics as
    ``step.triton_kernel.launch_step``. Needs an sm_90 device and a triton release in
    ``VERIFIED_TRITON`` (``kernel.choose`` checks both). Returns the launched kernel object, or
    None for an empty launch."""
    n_rows = token[3].shape[0]
    if n_rows == 0:
        return None
    with torch.cuda.device(o.device):
        return _step_kernel[(n_rows * H,)](**step_arguments(ckpt, window, fill, token, A_log, dt_bias, o, new, idx),
                                           num_warps=NUM_WARPS, maxnreg=MAX_REGISTERS)
