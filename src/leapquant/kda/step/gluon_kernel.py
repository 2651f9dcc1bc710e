"""Gluon kernel of the per-token KDA decode step for Hopper (sm_90a): one program = one
(sequence, head).

The portable kernel's formulation and phases (``triton_kernel.py``: every load first, none behind
the fill count; the factor products in fp32 on the CUDA cores), with the layouts chosen by hand so
that the sums cost few shuffles and no shared-memory rounds:

- the codes [V, K] int8: a thread holds 4 rows x 32 columns (two 16-byte pieces, each warp load a
  64-byte run of 8 rows), so each sum over k is 32 terms in-thread and two shuffle rounds; the
  int8 -> fp32 conversion takes four bytes at once (one xor, then a byte permute into the fp32
  mantissa and a subtract per element: exact);
- the window [L, N] (kbuf, gbuf, ubuf) and the tokens [R, N] (u, q): a thread owns a whole column,
  so the entry decays' running product and the sums over j and r are in-thread;
- the window's projections (sums over k of the decayed keys) go through one layout change to 16
  columns a thread.

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
from ..launch import step_arguments
from .tl_common import entry_decay, round_bf16, token_side

VERIFIED_TRITON = ("3.6.0",)  # releases whose Gluon API this module was compiled and run with
NUM_WARPS = 4
# registers a thread may use: 128 lets 4 CTAs (16 warps) share an SM instead of 3 at the 168 the
# compiler picks unbounded (offline sm_90a: 4 spilled words; the kernel is latency-bound at 3)
MAX_REGISTERS = 168
CODES = gl.constexpr(gl.BlockedLayout([4, 16], [8, 4], [4, 1], [1, 0]))  # [V, K] int8
WIN = gl.constexpr(gl.BlockedLayout([16, 1], [1, 32], [1, 4], [0, 1]))  # [L, N]: a column a thread
TOK = gl.constexpr(gl.BlockedLayout([4, 1], [1, 32], [1, 4], [0, 1]))  # [R, N]: a column a thread
KEYS = gl.constexpr(gl.BlockedLayout([1, 16], [4, 8], [4, 1], [1, 0]))  # [L, K]: 16 columns a thread
COL = gl.constexpr(gl.SliceLayout(0, WIN))  # [N] vectors: thread t holds element t
# the copies into the stages: 16 bytes a thread; the codes' stage swizzled so that the CODES
# layout's reads (two rows of 64 bytes a quarter-warp) hit distinct banks
COPY_BYTES = gl.constexpr(gl.BlockedLayout([1, 16], [4, 8], [4, 1], [1, 0]))  # [V, K] int8
COPY_HALVES = gl.constexpr(gl.BlockedLayout([1, 8], [2, 16], [4, 1], [1, 0]))  # [L, N] 16-bit
CODES_STAGE = gl.constexpr(gl.SwizzledSharedLayout(16, 1, 8, [1, 0]))
PLAIN = gl.constexpr(gl.SwizzledSharedLayout(1, 1, 1, [1, 0]))
CTAS_PER_SM = 3  # resident CTAs: 2 x 28 KB of stages and 128 threads x 128 registers each
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
def _slot_of(c, idx, num_programs, IN_PLACE: gl.constexpr, NH: gl.constexpr):
    # the slot program c serves: its batch row (functional) or idx of its row (pool form; <= 0: no
    # sequence, and past the last program)
    if IN_PLACE:
        return gl.load(idx + c // NH, mask=c < num_programs, other=0).to(gl.int64)
    return (c // NH).to(gl.int64)


@gluon.jit
def _prefetch(slot, head, codes_s, keys_s, gates_s, vals_s, codes, kbuf, gbuf, ubuf,
              C_SLOT: gl.constexpr, C_HEAD: gl.constexpr, NH: gl.constexpr, NV: gl.constexpr,
              NK: gl.constexpr, NL: gl.constexpr):
    # start copying a program's codes and window (rows in reversed entry order: row r holds
    # entry j = L-1-r; the gates' row r the gate of entry j + 1) into one stage; one commit group
    slot = gl.maximum(slot, 0)  # no sequence: slot 0's bytes, never used
    prog = slot * NH + head
    vb = gl.arange(0, NV, layout=gl.SliceLayout(1, COPY_BYTES))[:, None]
    kb = gl.arange(0, NK, layout=gl.SliceLayout(0, COPY_BYTES))[None, :]
    async_copy.async_copy_global_to_shared(codes_s, codes + slot * C_SLOT + head * C_HEAD + vb * NK + kb)
    j = NL - 1 - gl.arange(0, NL, layout=gl.SliceLayout(1, COPY_HALVES))[:, None]
    nh = gl.arange(0, NK, layout=gl.SliceLayout(0, COPY_HALVES))[None, :]
    kwin = prog * (NL * NK)
    async_copy.async_copy_global_to_shared(keys_s, kbuf + kwin + j * NK + nh)
    async_copy.async_copy_global_to_shared(gates_s, gbuf + kwin + (j + 1) * NK + nh, mask=((j + 1) < NL) & (nh >= 0))
    async_copy.async_copy_global_to_shared(vals_s, ubuf + prog * (NL * NV) + j * NV + nh)
    async_copy.commit_group()


@gluon.jit
def _program(
    c, slot, codes_s, keys_s, gates_s, vals_s,
    s_k, s_v, u, q, kbuf, ubuf, gbuf, w, pcum, fill, qx, kx, vx, a, b, A_log, dt_bias,
    o, k_row, u_row, g_row, w_new, pcum_new, qk_row, v_row,
    SK_SLOT: gl.constexpr, SK_HEAD: gl.constexpr, SV_SLOT: gl.constexpr, SV_HEAD: gl.constexpr,
    U_SLOT: gl.constexpr, U_HEAD: gl.constexpr, U_ROW: gl.constexpr,
    Q_SLOT: gl.constexpr, Q_HEAD: gl.constexpr, Q_ROW: gl.constexpr,
    IN_PLACE: gl.constexpr,
    NH: gl.constexpr, NV: gl.constexpr, NK: gl.constexpr, NL: gl.constexpr, NR: gl.constexpr,
    QM: gl.constexpr, NORM_EPS: gl.constexpr, SCALE: gl.constexpr, SP_THRESHOLD: gl.constexpr,
    BETA_SMALL: gl.constexpr,
):
    # one program (slot, head) whose codes and window are being copied into the stage given
    row = c // NH  # batch row (functional) or entry of idx (pool)
    head = c % NH
    n = gl.arange(0, NK, layout=COL)
    out_row = (row.to(gl.int64) * NH + head) * NV
    prog = gl.maximum(slot, 0) * NH + head
    tok = row.to(gl.int64)

    # the small loads while the copies land: none behind the fill count (window rows at or past
    # h are discarded by a select)
    s_vr = gl.load(s_v + slot * SV_SLOT + head * SV_HEAD + n)
    s_kr = gl.load(s_k + slot * SK_SLOT + head * SK_HEAD + n)
    jw = NL - 1 - gl.arange(0, NL, layout=gl.SliceLayout(1, WIN))  # rows in reversed entry order
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
    async_copy.wait_group(1)  # this program's stage has landed (the next one's copies may not have)
    gl.thread_barrier()

    # the key side: the window's projections w_j (kbuf_j * D_j) . x [L] (summed 16 columns a
    # thread) and the tokens' (U' x) [R] (summed across the CTA), x = kn and qn
    live = jw < h
    wl = gl.where(live, w_all, 0.0)
    keys = keys_s.load(WIN).to(gl.float32)
    kd = gl.where(live[:, None], keys, 0.0) * entry_decay(gates_s.load(WIN), en, h, jw, True) * wl[:, None]
    kd = gl.convert_layout(kd, KEYS)
    kn_keys = gl.convert_layout(kn, gl.SliceLayout(0, KEYS))
    qn_keys = gl.convert_layout(qn, gl.SliceLayout(0, KEYS))
    pk = gl.convert_layout(gl.sum(kd * kn_keys[None, :], axis=1), gl.SliceLayout(1, WIN))
    pq = gl.convert_layout(gl.sum(kd * qn_keys[None, :], axis=1), gl.SliceLayout(1, WIN))
    up = uu.to(gl.float32) * gl.convert_layout(pc, gl.SliceLayout(0, TOK))[None, :]
    tk = gl.sum(up * gl.convert_layout(kn, gl.SliceLayout(0, TOK))[None, :], axis=1)
    tq = gl.sum(up * gl.convert_layout(qn, gl.SliceLayout(0, TOK))[None, :], axis=1)

    # the value side: S x = s_v * (C (f * x)) + ubuf^T (projections) + Q^T (U' x), f = s_k pc / 127
    f = s_kr * pc * (1.0 / QM)
    cf = _codes_fp32(codes_s.load(CODES))
    ck = gl.sum(cf * gl.convert_layout(f * kn, gl.SliceLayout(0, CODES))[None, :], axis=1)
    cq = gl.sum(cf * gl.convert_layout(f * qn, gl.SliceLayout(0, CODES))[None, :], axis=1)
    vl = gl.where(live[:, None], vals_s.load(WIN).to(gl.float32), 0.0)
    qf = qq.to(gl.float32)
    Skn = gl.convert_layout(ck, COL) * s_vr + gl.sum(vl * pk[:, None], axis=0) \
        + gl.convert_layout(gl.sum(qf * tk[:, None], axis=0), COL)
    Sqn = gl.convert_layout(cq, COL) * s_vr + gl.sum(vl * pq[:, None], axis=0) \
        + gl.convert_layout(gl.sum(qf * tq[:, None], axis=0), COL)
    u_new = beta * (vt - Skn)
    gl.store(o + out_row + n, round_bf16(Sqn + kq * u_new))

    # the appended entry
    if IN_PLACE:
        # every thread has read the window, pcum and the fill count before any is overwritten
        gl.thread_barrier()
        kwin = prog * (NL * NK)
        gl.store(ubuf + prog * (NL * NV) + h * NV + n, round_bf16(u_new))
        gl.store(kbuf + kwin + h * NK + n, round_bf16(kn))
        gl.store(gbuf + kwin + h * NK + n, en.to(gl.float16))
        gl.store(w + prog * NL + jw, gl.full([NL], 1.0, gl.float32, gl.SliceLayout(1, WIN)), mask=jw == h)
        gl.store(pcum + prog * NK + n, pcum_n)
        gl.store(fill + prog, h + 1)
    else:
        out_k = prog * NK
        gl.store(u_row + out_row + n, round_bf16(u_new))
        gl.store(k_row + out_k + n, round_bf16(kn))
        gl.store(g_row + out_k + n, en.to(gl.float16))
        gl.store(w_new + prog * NL + jw, gl.where(jw == h, 1.0, w_all))
        gl.store(pcum_new + out_k + n, pcum_n)


# the caller's pointers, row strides and counts are not specialised on (alignment, value 1): a
# pool's warm-up compiles the one variant every later call of the pool form runs
@gluon.jit(do_not_specialize=["idx", "qx", "kx", "vx", "a", "b", "A_log", "dt_bias", "o", "qk_row", "v_row",
                              "num_programs", "ctas"])
def _step_kernel(
    codes, s_k, s_v, u, q,  # checkpoint, read only
    kbuf, ubuf, gbuf, w, pcum, fill,  # window and its fill count (pool form: appended in place)
    qx, kx, vx, a, b, A_log, dt_bias,  # this token and the gate's parameters
    o, k_row, u_row, g_row, w_new, pcum_new,  # outputs (pool form: only o; the rest go to the window)
    idx,  # pool form: int32 [N] slot ids (<= 0: no sequence)
    qk_row, v_row,  # element row strides of qx and kx (one) and of vx; a mixed row's stride for both
    num_programs, ctas,  # programs of the call (N x H) and CTAs of the grid
    C_SLOT: gl.constexpr, C_HEAD: gl.constexpr,  # element strides of the checkpoint tensors
    SK_SLOT: gl.constexpr, SK_HEAD: gl.constexpr,
    SV_SLOT: gl.constexpr, SV_HEAD: gl.constexpr,
    U_SLOT: gl.constexpr, U_HEAD: gl.constexpr, U_ROW: gl.constexpr,
    Q_SLOT: gl.constexpr, Q_HEAD: gl.constexpr, Q_ROW: gl.constexpr,
    IN_PLACE: gl.constexpr,  # pool form
    NH: gl.constexpr, NV: gl.constexpr, NK: gl.constexpr, NL: gl.constexpr, NR: gl.constexpr,
    QM: gl.constexpr, NORM_EPS: gl.constexpr, SCALE: gl.constexpr, SP_THRESHOLD: gl.constexpr,
    BETA_SMALL: gl.constexpr, MAGIC: gl.constexpr, MAGIC_BITS: gl.constexpr,
):
    gl.static_assert(NK == NV)  # one [N] layout serves both sides
    # resident CTAs: CTA i runs programs i, i + ctas, ...; each program's codes and window are
    # copied into one of two stages while the program before it computes
    codes_s = gl.allocate_shared_memory(gl.int8, [2, NV, NK], CODES_STAGE)
    keys_s = gl.allocate_shared_memory(gl.bfloat16, [2, NL, NK], PLAIN)
    gates_s = gl.allocate_shared_memory(gl.float16, [2, NL, NK], PLAIN)
    vals_s = gl.allocate_shared_memory(gl.bfloat16, [2, NL, NV], PLAIN)
    c = gl.program_id(0)
    slot = _slot_of(c, idx, num_programs, IN_PLACE, NH)
    _prefetch(slot, c % NH, codes_s.index(0), keys_s.index(0), gates_s.index(0), vals_s.index(0),
              codes, kbuf, gbuf, ubuf, C_SLOT, C_HEAD, NH, NV, NK, NL)
    slot_next = _slot_of(c + ctas, idx, num_programs, IN_PLACE, NH)
    for it in range(0, gl.cdiv(num_programs - c, ctas)):
        stage = it % 2
        nxt = c + ctas
        gl.thread_barrier()  # the other stage's reads (the program before) are done
        if nxt < num_programs:
            _prefetch(slot_next, nxt % NH, codes_s.index(1 - stage), keys_s.index(1 - stage),
                      gates_s.index(1 - stage), vals_s.index(1 - stage), codes, kbuf, gbuf, ubuf,
                      C_SLOT, C_HEAD, NH, NV, NK, NL)
        else:
            async_copy.commit_group()  # an empty group: the count wait_group(1) relies on
        slot_after = _slot_of(nxt + ctas, idx, num_programs, IN_PLACE, NH)
        if slot > 0 or not IN_PLACE:
            _program(c, slot, codes_s.index(stage), keys_s.index(stage), gates_s.index(stage), vals_s.index(stage),
                     s_k, s_v, u, q, kbuf, ubuf, gbuf, w, pcum, fill, qx, kx, vx, a, b, A_log, dt_bias,
                     o, k_row, u_row, g_row, w_new, pcum_new, qk_row, v_row,
                     SK_SLOT, SK_HEAD, SV_SLOT, SV_HEAD, U_SLOT, U_HEAD, U_ROW, Q_SLOT, Q_HEAD, Q_ROW, IN_PLACE,
                     NH, NV, NK, NL, NR, QM, NORM_EPS, SCALE, SP_THRESHOLD, BETA_SMALL)
        else:  # no sequence: a zero output row, nothing else (its copies still retire in order)
            async_copy.wait_group(1)
            gl.store(o + ((c // NH).to(gl.int64) * NH + c % NH) * NV + gl.arange(0, NV, layout=COL),
                     gl.zeros([NV], gl.bfloat16, COL))
        c = nxt
        slot = slot_next
        slot_next = slot_after


def launch_step(ckpt, window, fill, token, A_log, dt_bias, o, new=None, idx=None):
    """Launch the Gluon decode-step kernel; arguments and semantics as
    ``step.triton_kernel.launch_step``. Needs an sm_90 device and a triton release in
    ``VERIFIED_TRITON`` (``kernel.choose`` checks both). Returns the launched kernel object, or
    None for an empty launch."""
    num_programs = token[3].shape[0] * H
    if num_programs == 0:
        return None
    grid = (CTAS_PER_SM * torch.cuda.get_device_properties(o.device).multi_processor_count,)
    with torch.cuda.device(o.device):
        return _step_kernel[grid](**step_arguments(ckpt, window, fill, token, A_log, dt_bias, o, new, idx),
                                  num_programs=num_programs, ctas=grid[0], num_warps=NUM_WARPS,
                                  maxnreg=MAX_REGISTERS)
