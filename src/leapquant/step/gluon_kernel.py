"""Gluon kernel of the per-token decode step (both families) for Hopper (sm_90a): one program =
one (sequence, head).

The portable kernel's formulation and phases (``triton_kernel.py``: every load first, the
window's rows only below the fill count), with the layouts chosen by hand so that the sums cost
few shuffles and few shared-memory rounds, and the codes products on the integer tensor cores:

- the codes products ``C (f kn)`` and ``C (f qn)``: mma.sync m16n8k32 s8 with the staged codes as
  the A operand as they are (no conversion), and each thin vector ``f x`` as ``STEP_DIGITS``
  signed 7-bit digits under one power of two (B [K, 16]: an int8 [16, K] buffer written once);
  the int32 sums are exact and weighed back in fp32 (55 bits below the vector's largest element;
  ``emulation.py`` holds the same arithmetic in PyTorch, tested on the CPU);
- the window [L, N] (kbuf, gbuf, ubuf) and the tokens [R, N] (u, q): a thread owns a whole column,
  so the entry decays' running product and the sums over j and r are in-thread;
- the window's projections (sums over k of the decayed keys) go through one layout change to 16
  columns a thread;
- kn and qn travel as pairs (``_pair_to``): each of their layout changes, and the tokens'
  cross-warp sums, is one exchange for both;
- the codes and the window's live rows (16 KiB, plus 768 h - 256 B below a fill count h >= 1)
  are copied into shared memory (cp.async, 16 bytes a thread) while the token's phase runs, so
  no registers wait on them; at 72 registers a thread, 7 CTAs share an SM. Rows at or past h are
  not read (2026-12-04: -12% at B=16, -5% at B=256, -1.4% at B=512 at fill count 1);
- the order of a program's memory round trips, as ptxas issues them (``token_loads`` is called
  above the slot id's load in the source): the slot id first (pool form; a row with no
  sequence, id <= 0, writes its zero output row and returns), then the token's loads
  (``token_loads``) beside every load of the slot and the codes' copy; a barrier; only then the
  window's copies, which wait for h. Without the barrier ptxas put those copies first and every
  other load a round trip later. The weights also come an entry a thread (``ENTRIES``) for the
  entry's writes: held 16 a thread, a scalar gate's decayed weights cost ~100 instructions.
  Together (offline: 1,320 SASS a warp instead of 1,456 in GDN's request layout, 1,504 instead
  of 1,536 in KDA's packed one): GDN's step -14% at B=16, -17% at 32 and 64, -12% at 128, -7%
  at 512; KDA's -4% to -13% at B <= 256, -2.7% at 512 (H100, 2026-12-07, docs/benchmarks.md).
  The slot id ahead of the token's loads (1,328 / 1,512 SASS) took KDA's pool step another 3-6%
  off at every B, and a quarter of pad rows 14-25% (H100, 2026-12-07).

Measured on the H200 (2026-12-03, A/B runs in one process; docs/benchmarks.md): the integer tensor
cores took 3% off at B >= 256 (21% fewer SASS instructions, 22% fewer executed: most became idle
issue slots, each program being a chain of loads, reductions and exchanges), 6 CTAs an SM another
2-3%, and one cross-warp reduction for the token's sums and the digits' scale (``token_side``)
6-8% more: 0.0792 / 0.1493 ms at B = 256 / 512, 1.17x / 1.10x the step issue's memory floor.
2026-12-04 (the window below the fill count, 7 CTAs an SM): 0.0749 / 0.1438 ms at fill
count 1, 1.10x / 1.06x the floor at that run's 4.21 TB/s; TileLang's step 0.0783 / 0.1479.
The eight digits carry 55 bits below the largest element of f x: fp32 precision for every element
within 2^31 of it (``emulation.py``; six digits before 2026-12-03, as fast on the H200). docs/experiments.md
lists what was tried.

Verified with triton 3.6.0 (the Gluon API moves between releases; ``kernel.py`` picks this path
only where it was verified). Source: LeapQuant (arXiv 2609.38166); NVlabs/kda request
conless-leapquant-kda-step.
"""

from __future__ import annotations

import torch
from triton.experimental import gluon
from triton.experimental.gluon import language as gl
from triton.experimental.gluon.language.nvidia.ampere import mma_v2
from triton.experimental.gluon.language.nvidia.hopper import async_copy

from ..geometry import STEP_DIGIT_BITS, STEP_DIGITS, STEP_EXPONENT_RANGE
from ..fp32_bits import clamped_exponent, pow2
from ..gluon_compat import async_load, thread_barrier
from ..launch import GLUON_VERIFIED_TRITON, STEP_UNSPECIALISED, step_arguments
from .tl_common import entry_decay, load_pcum, round_bf16, token_loads, token_side, write_entry

VERIFIED_TRITON = GLUON_VERIFIED_TRITON
NUM_WARPS = 4
# registers a thread may use: 72 lets 7 CTAs (28 warps, 222 KB of shared memory) share an SM, no
# spills in either form. H200, 2026-12-04, the window read below the fill count only:
# -2.7% at B=512 and -2.9% at B=256 against 80 (6 CTAs), +0.9% at B=64. 2026-12-03, every
# window row read: 80 -3% at B=512 and -2% at B=256 against 96 (5 CTAs), +2% at B=64; 72 then
# (one spilled word) -1% more at B=512 but +7% at B=64. Before the integer tensor cores the fp32
# codes needed 96 (2026-12-02: -6.7% against 128)
MAX_REGISTERS = 72
WIN = gl.constexpr(gl.BlockedLayout([16, 1], [1, 32], [1, 4], [0, 1]))  # [L, N]: a column a thread
TOK = gl.constexpr(gl.BlockedLayout([4, 1], [1, 32], [1, 4], [0, 1]))  # [R, N]: a column a thread
KEYS = gl.constexpr(gl.BlockedLayout([1, 16], [4, 8], [4, 1], [1, 0]))  # [L, K]: 16 columns a thread
COL = gl.constexpr(gl.SliceLayout(0, WIN))  # [N] vectors: thread t holds element t
# [N, 2] pairs (gl.join's layout of two [N] vectors) of COL, of the rows of WIN, and of the
# columns of KEYS: the pair's element in a register beside it
PAIR_COL = gl.constexpr(gl.DistributedLinearLayout(
    reg_bases=[[0, 1]], lane_bases=[[1, 0], [2, 0], [4, 0], [8, 0], [16, 0]], warp_bases=[[32, 0], [64, 0]],
    block_bases=[], shape=[128, 2]))
PAIR_WIN_ROWS = gl.constexpr(gl.DistributedLinearLayout(
    reg_bases=[[0, 1], [1, 0], [2, 0], [4, 0], [8, 0]], lane_bases=[[0, 0]] * 5, warp_bases=[[0, 0]] * 2,
    block_bases=[], shape=[16, 2]))
PAIR_KEY_COLS = gl.constexpr(gl.DistributedLinearLayout(
    reg_bases=[[0, 1], [1, 0], [2, 0], [4, 0], [8, 0]], lane_bases=[[16, 0], [32, 0], [64, 0], [0, 0], [0, 0]],
    warp_bases=[[0, 0]] * 2, block_bases=[], shape=[128, 2]))
# the codes products on the integer tensor cores (mma.sync m16n8k32 s8): the codes [V, K] as the A
# operand straight from their staged copy, the thin operand [K, 16] as B: for each of kn and qn,
# DIGITS signed 7-bit digits of f x under one power-of-two scale (columns 0-7 and 8-15), exact
# int32 sums, recombined in fp32
MMA = gl.constexpr(gl.NVMMADistributedLayout(version=[2, 0], warps_per_cta=[4, 1], instr_shape=[16, 8]))
CODES_A = gl.constexpr(gl.DotOperandLayout(operand_index=0, parent=MMA, k_width=4))
DIGITS_B = gl.constexpr(gl.DotOperandLayout(operand_index=1, parent=MMA, k_width=4))
DIGITS = gl.constexpr(STEP_DIGITS)  # digits a vector (step/emulation.py: the arithmetic, tested on the CPU)
DIGIT_BITS = gl.constexpr(STEP_DIGIT_BITS)
LOWEST_EXPONENT = gl.constexpr(STEP_EXPONENT_RANGE[0])  # the digits' scale exponent, clamped (geometry.py)
HIGHEST_EXPONENT = gl.constexpr(STEP_EXPONENT_RANGE[1])
THIN_COLS = gl.constexpr(16)  # the B operand's columns: kn's digits in 0-7, qn's in 8-15
K_STEP = gl.constexpr(32)  # k of one mma.sync m16n8k32
# the copies into shared memory, 16 bytes a thread; the codes' buffer swizzled (16-byte chunks
# xor the row) so that ldmatrix's eight 16-byte rows of an 8 x 8 matrix hit distinct banks
COPY_BYTES = gl.constexpr(gl.BlockedLayout([1, 16], [4, 8], [4, 1], [1, 0]))  # [V, K] int8
COPY_HALVES = gl.constexpr(gl.BlockedLayout([1, 8], [2, 16], [4, 1], [1, 0]))  # [L, N] 16-bit
ENTRIES = gl.constexpr(gl.BlockedLayout([1], [32], [4], [0]))  # [L]: an entry a thread (threads t and t + 16 alike)
CODES_STAGE = gl.constexpr(gl.SwizzledSharedLayout(16, 1, 8, [1, 0]))  # also the digits' [16, K] rows
PLAIN = gl.constexpr(gl.SwizzledSharedLayout(1, 1, 1, [1, 0]))
@gluon.jit
def _digit_rows(y, rows, first: gl.constexpr, scale, MAGIC: gl.constexpr):
    # y * scale (|y * scale| < 64) = sum_d digit_d 2^(-7 d) + (a remainder below 2^(-7 DIGITS)),
    # digits rounded to nearest, |digit_d| <= 64; digit d goes to row first + d of ``rows`` (int8,
    # WIN [16, N]). Every step is exact in fp32: e 2^(7 d) is at most 64 in magnitude, so adding
    # MAGIC rounds it into the low mantissa bits (whose low byte is the int8 digit), and e - digit
    # 2^(-7 d) is representable (the digits peel y's 24 bits from the top).
    e = y * scale
    r = gl.arange(0, 16, layout=gl.SliceLayout(1, WIN))[:, None]
    for d in gl.static_range(DIGITS):
        t = e * (2.0 ** (DIGIT_BITS * d)) + MAGIC
        digit = t - MAGIC
        if d + 1 < DIGITS:
            e = e - digit * (2.0 ** (-DIGIT_BITS * d))
        rows = gl.where(r == first + d, t.to(gl.int32, bitcast=True).to(gl.int8)[None, :], rows)
    return rows


@gluon.jit
def _codes_products(codes_s, digits_s, yk, yq, mk, mq, MAGIC: gl.constexpr, NV: gl.constexpr, NK: gl.constexpr):
    # C yk and C yq ([V], COL) for the staged codes C [V, K] and yk, yq [K] (COL): each y as DIGITS
    # int8 digits under a power of two 2^(5 - e), e the exponent of mk ~ max|yk| (token_side's,
    # within a few ulps: |y 2^(5 - e)| stays within 64 (1 + 2^-20), so every digit is at most 64
    # in magnitude; clamped so that the power stays finite: a vector below 2^-121 loses digits, as
    # fp32 flushes it), one mma.sync chain over k, the int32 sums (|sum| < 2^21: exact) weighted
    # back in fp32
    ek = clamped_exponent(mk, LOWEST_EXPONENT, HIGHEST_EXPONENT)
    eq = clamped_exponent(mq, LOWEST_EXPONENT, HIGHEST_EXPONENT)
    rows = gl.zeros([THIN_COLS, NK], gl.int8, WIN)
    rows = _digit_rows(yk, rows, 0, pow2(5 - ek), MAGIC)
    rows = _digit_rows(yq, rows, THIN_COLS // 2, pow2(5 - eq), MAGIC)
    digits_s.store(rows)
    acc = gl.zeros([NV, THIN_COLS], gl.int32, MMA)
    for i in gl.static_range(NK // K_STEP):
        a = codes_s.slice(K_STEP * i, K_STEP, dim=1).load(CODES_A)
        b = digits_s.slice(K_STEP * i, K_STEP, dim=1).permute((1, 0)).load(DIGITS_B)
        acc = mma_v2(a, b, acc)
    n = gl.arange(0, THIN_COLS, layout=gl.SliceLayout(0, MMA))
    weight = pow2(-DIGIT_BITS * (n % (THIN_COLS // 2)))  # digit d's 2^(-7 d)
    sums = gl.sum(gl.reshape(acc.to(gl.float32) * weight[None, :], [NV, 2, THIN_COLS // 2]), axis=2)
    ck, cq = gl.split(gl.convert_layout(sums, PAIR_COL))
    ck = gl.convert_layout(ck, COL, assert_trivial=True) * pow2(ek - 5)
    cq = gl.convert_layout(cq, COL, assert_trivial=True) * pow2(eq - 5)
    return ck, cq


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
    errors,  # pool form: the pool's int32 error counter (ERROR_KINDS: word 0 counts full windows)
    qk_row, v_row,  # element row strides of qx and kx (one) and of vx; a mixed row's stride for both
    C_SLOT: gl.constexpr, C_HEAD: gl.constexpr,  # element strides of the checkpoint tensors
    SK_SLOT: gl.constexpr, SK_HEAD: gl.constexpr,
    SV_SLOT: gl.constexpr, SV_HEAD: gl.constexpr,
    U_SLOT: gl.constexpr, U_HEAD: gl.constexpr, U_ROW: gl.constexpr,
    Q_SLOT: gl.constexpr, Q_HEAD: gl.constexpr, Q_ROW: gl.constexpr,
    IN_PLACE: gl.constexpr,  # pool form
    GUARD_FULL: gl.constexpr,  # pool form, packed layout: a full window never flushed is kept and counted
    NH: gl.constexpr, NV: gl.constexpr, NK: gl.constexpr, NL: gl.constexpr, NR: gl.constexpr,
    QM: gl.constexpr, NORM_EPS: gl.constexpr, SCALE: gl.constexpr, SP_THRESHOLD: gl.constexpr,
    BETA_SMALL: gl.constexpr, MAGIC: gl.constexpr, MAGIC_BITS: gl.constexpr,
    SCALAR_GATE: gl.constexpr,  # the scalar gate (GDN): gbuf, g_row None; pcum / pcum_new hold p
    KEY_GROUP: gl.constexpr,  # heads one key head's q and k serve (GQA; 1: none shared)
):
    gl.static_assert(NK == NV)  # one [N] layout serves both sides
    c = gl.program_id(0)
    row = c // NH  # batch row (functional) or entry of idx (pool)
    head = c % NH
    n = gl.arange(0, NK, layout=COL)
    out_row = (row.to(gl.int64) * NH + head) * NV
    tok = row.to(gl.int64)
    # the token's loads (none depends on the slot). ptxas issues them after the slot id's load and
    # its branch, which is the order wanted: the slot id heads the longest chain of round trips
    # (id, fill count, window rows). Kept above the branch (a barrier, 0c33893), they cost 2-5%
    # with no pad rows (H100, 2026-12-07, docs/experiments.md)
    kt, qt, vt, xg, b_t, a_log = token_loads(qx, kx, vx, a, b, A_log, dt_bias, tok, qk_row, v_row, head, n, n,
                                             NH, NK, NV, SCALAR_GATE, KEY_GROUP)
    if IN_PLACE:
        slot = gl.load(idx + row).to(gl.int64)
        if slot <= 0:  # no sequence (a CUDA graph's pad row): a zero output row, nothing else
            gl.store(o + out_row + n, gl.zeros([NV], gl.bfloat16, COL))
            return
    else:
        slot = row.to(gl.int64)
    prog = slot * NH + head
    kwin = prog * (NL * NK)
    vwin = prog * (NL * NV)

    # every load and the codes' copy first, then (after a barrier) the window's rows below the
    # fill count h only (masked copies zero-fill and read nothing): a program moves 33,870 B at
    # h = L - 1 and 23,118 B at h = 1 (34,638 B at every h before 2026-12-04)
    jw = NL - 1 - gl.arange(0, NL, layout=gl.SliceLayout(1, WIN))  # rows in reversed entry order
    # the codes and the window copied (cp.async) into shared memory, rows in reversed entry order
    # like jw: no registers held while they land
    codes_s = gl.allocate_shared_memory(gl.int8, [NV, NK], CODES_STAGE)
    keys_s = gl.allocate_shared_memory(gl.bfloat16, [NL, NK], PLAIN)
    gates_s = gl.allocate_shared_memory(gl.float16, [NL, NK], PLAIN)
    vals_s = gl.allocate_shared_memory(gl.bfloat16, [NL, NV], PLAIN)
    digits_s = gl.allocate_shared_memory(gl.int8, [THIN_COLS, NK], CODES_STAGE)
    vb = gl.arange(0, NV, layout=gl.SliceLayout(1, COPY_BYTES))[:, None]
    kb = gl.arange(0, NK, layout=gl.SliceLayout(0, COPY_BYTES))[None, :]
    async_load(codes_s, codes + slot * C_SLOT + head * C_HEAD + vb * NK + kb)
    h = gl.load(fill + prog)
    s_vr = gl.load(s_v + slot * SV_SLOT + head * SV_HEAD + n)
    s_kr = gl.load(s_k + slot * SK_SLOT + head * SK_HEAD + n)
    w_all = gl.load(w + prog * NL + jw)
    # the weights again, an entry a thread, for the entry's writes where they use them (GDN's
    # decayed weights, the functional form's w_new): every thread holding all 16, as w_all's
    # layout does, cost ~100 instructions a thread on a scalar gate's decayed weights
    je = gl.arange(0, NL, layout=ENTRIES)
    w_entries = gl.load(w + prog * NL + je)
    rt = gl.arange(0, NR, layout=gl.SliceLayout(1, TOK))
    nt = gl.arange(0, NK, layout=gl.SliceLayout(0, TOK))
    uu = gl.load(u + slot * U_SLOT + head * U_HEAD + rt[:, None] * U_ROW + nt[None, :])
    qq = gl.load(q + slot * Q_SLOT + head * Q_HEAD + rt[:, None] * Q_ROW + nt[None, :])
    pcum_old = load_pcum(pcum, prog, n, NK, SCALAR_GATE)
    full = False
    if GUARD_FULL:  # hcnt == L with entry L - 1 still weighted: full, never flushed
        full = (h >= NL) & (gl.load(w + prog * NL + NL - 1) != 0.0)
    h = gl.where(h >= NL, 0, h)  # hcnt == L: the flush just emptied the window
    if GUARD_FULL:
        h = gl.where(full, NL, h)  # every entry live: the output still sees the whole window
    # every load above is issued before a copy waits for h's: without this barrier ptxas placed
    # the window's copies first, so that every other load went out a round trip later
    thread_barrier()
    jc = NL - 1 - gl.arange(0, NL, layout=gl.SliceLayout(1, COPY_HALVES))[:, None]
    nh = gl.arange(0, NK, layout=gl.SliceLayout(0, COPY_HALVES))[None, :]
    live_rows = (jc < h) & (nh >= 0)  # entries 0 .. h-1; the gates of entries 1 .. h-1
    async_load(keys_s, kbuf + kwin + jc * NK + nh, mask=live_rows)
    if not SCALAR_GATE:
        async_load(gates_s, gbuf + kwin + (jc + 1) * NK + nh, mask=((jc + 1) < h) & (nh >= 0))
    async_load(vals_s, ubuf + vwin + jc * NV + nh, mask=live_rows)
    async_copy.commit_group()
    kn, qn, kq, g, en, beta, pcum_n, pc, f, mk, mq = token_side(kt, qt, xg, b_t, a_log, pcum_old, s_kr, NORM_EPS,
                                                                SCALE, SP_THRESHOLD, BETA_SMALL, QM, SCALAR_GATE)
    async_copy.wait_group(0)
    thread_barrier()
    keys = keys_s.load(WIN)
    if not SCALAR_GATE:
        g_after = gates_s.load(WIN)
    vals = vals_s.load(WIN)

    # the key side: the window's projections w_j (kbuf_j * D_j) . x [L] (summed 16 columns a
    # thread) and the tokens' (U' x) [R] (summed across the CTA), x = kn and qn
    live = jw < h
    wl = gl.where(live, w_all, 0.0)
    # no select on the keys or values: their rows at or past h are zero-filled copies, so that a
    # row copied there by mistake reaches the output (the tests put NaN in those rows)
    if SCALAR_GATE:  # the decays are the gate itself
        kd = keys.to(gl.float32) * (wl * en)[:, None]
    else:
        kd = keys.to(gl.float32) * entry_decay(g_after, en, h, jw) * wl[:, None]
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
    ck, cq = _codes_products(codes_s, digits_s, f * kn, f * qn, mk, mq, MAGIC, NV, NK)
    vl = vals.to(gl.float32)
    qf = qq.to(gl.float32)
    tk = gl.convert_layout(tk, gl.SliceLayout(1, TOK))
    tq = gl.convert_layout(tq, gl.SliceLayout(1, TOK))
    Skn = ck * s_vr + gl.sum(vl * pk[:, None], axis=0) + gl.convert_layout(gl.sum(qf * tk[:, None], axis=0), COL)
    Sqn = cq * s_vr + gl.sum(vl * pq[:, None], axis=0) + gl.convert_layout(gl.sum(qf * tq[:, None], axis=0), COL)
    u_new = beta * (vt - Skn)
    gl.store(o + out_row + n, round_bf16(Sqn + kq * u_new))

    # the appended entry (pool form) or the fresh outputs
    if IN_PLACE:
        thread_barrier()  # every thread has read the window, pcum and the fill count
    write_entry(kbuf, ubuf, gbuf, w, pcum, fill, k_row, u_row, g_row, w_new, pcum_new, prog, out_row, h, n, je,
                kn, u_new, en, pcum_n, w_entries, full, errors, IN_PLACE, NK, NV, NL, SCALAR_GATE)


def launch_step(ckpt, window, fill, token, A_log, dt_bias, o, new=None, idx=None, errors=None, guard_full=False,
                key_group=1):
    """Launch the Gluon decode-step kernel; arguments and semantics as
    ``step.triton_kernel.launch_step``. Needs an sm_90 device and a triton release in
    ``VERIFIED_TRITON`` (``kernel.choose`` checks both). Returns the launched kernel object, or
    None for an empty launch."""
    n_rows = token[3].shape[0]
    if n_rows == 0:
        return None
    with torch.cuda.device(o.device):
        return _step_kernel[(n_rows * o.shape[1],)](
            **step_arguments(ckpt, window, fill, token, A_log, dt_bias, o, new, idx, errors, guard_full, key_group),
            num_warps=NUM_WARPS, maxnreg=MAX_REGISTERS)
