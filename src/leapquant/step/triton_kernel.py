"""Triton kernel of the per-token KDA decode step on LeapQuant checkpoints: one program = one
(sequence, head).

Design. The step is memory-bound: a program moves ~34 KB and does ~2 x 21K multiply-adds. It
never forms the state ``S`` [V, K], in registers or in global memory. It uses the factor
formulation (``naive.step_products``):

    S x = s_v * (C (f * x)) + Q^T (U' x) + sum_j ubuf_j w_j ((kbuf_j * D_j) . x),   x in {kn, qn}

with ``C`` the int8 codes, ``f = s_k * exp(pcum_new) / 127`` and ``U' = U diag(exp(pcum_new))``.
Every load is issued first, the window's rows only below the fill count ``h`` (rows at or past it
are not read), so a program's bytes are in flight at once; the products run in fp32 on the CUDA
cores (the codes are exact in fp32, both products share one conversion): fp32 accumulation over
128 terms keeps the error ~1e-6 of the criterion's magnitude ``M``, against the request's 1e-5 M.

Phases of a program (the names of ``naive.py`` where it has them):
1. ``token_loads`` (none depends on the slot) and ``token_side``:
   this token's normalised ``kn``, ``qn``, its gate ``g``, ``en``, ``pcum_new``, ``beta``.
2. ``entry_decay`` [L, K] (a reverse cumulative product over the window's gates) and the key side:
   the window's projections ``w_j (kbuf_j * D_j) . x`` [L] and the tokens' ``(U' x)`` [R].
3. the value side: ``C (f * x)`` scaled by ``s_v``, plus ``ubuf^T`` and ``Q^T`` times the key side's
   projections; ``u_new`` and ``o``; then the appended entry (pool form) or the fresh outputs.

Bytes per program (the floor): checkpoint 19,456 (codes 16,384, s_k 512, s_v 512, u and q 2,048)
+ window 12,864 (kbuf, ubuf, gbuf 4,096 each, w 64, pcum 512) + token 1,030 (qx, kx, vx, a 256
each, b 2, fill count 4) + writes 1,544 (o, k_row, u_row, g_row 256 each, pcum 512, one w word
and the fill count, 4 each) = 34,894 B = 34.1 KiB, the step request's bytes; the window rows at
or past ``h`` (and gbuf's row 0, which no decay needs) are not read: 23,118 B at ``h = 1``,
33,870 B at ``h = L - 1``. ``A_log`` and ``dt_bias`` (516 B per head) are shared by all sequences
and come from L2. Rounding and the helpers both step kernels call: ``tl_common.py``.

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

from ..launch import STEP_UNSPECIALISED, step_arguments
from .tl_common import entry_decay, load_pcum, round_bf16, token_loads, token_side, write_entry

NUM_WARPS = 4


@triton.jit
def _codes_fp32(c, MAGIC: tl.constexpr, MAGIC_BITS: tl.constexpr):
    # int8 -> fp32 through the fp32 mantissa: an integer add and a float subtract, exact (I2F runs
    # at a quarter of the FMA rate)
    return (c.to(tl.int32) + MAGIC_BITS).to(tl.float32, bitcast=True) - MAGIC


# the same arguments as the Gluon kernel's (``launch.step_arguments``), in the same order
@triton.jit(do_not_specialize=STEP_UNSPECIALISED)
def _step_kernel(
    codes, s_k, s_v, u, q,  # checkpoint, read only
    kbuf, ubuf, gbuf, w, pcum, fill,  # window and its fill count (pool form: appended in place)
    qx, kx, vx, a, b, A_log, dt_bias,  # this token and the gate's parameters
    o, k_row, u_row, g_row, w_new, pcum_new,  # outputs (pool form: only o; the rest go to the window)
    idx,  # pool form: int32 [N] slot ids (<= 0: no sequence)
    errors,  # pool form: the pool's int32 error counter (ERROR_KINDS: word 0 counts full windows)
    qk_row, v_row,  # element row strides of qx and kx (one) and of vx; a mixed row's stride for both
    C_SLOT: tl.constexpr, C_HEAD: tl.constexpr,  # element strides of the checkpoint tensors
    SK_SLOT: tl.constexpr, SK_HEAD: tl.constexpr,
    SV_SLOT: tl.constexpr, SV_HEAD: tl.constexpr,
    U_SLOT: tl.constexpr, U_HEAD: tl.constexpr, U_ROW: tl.constexpr,
    Q_SLOT: tl.constexpr, Q_HEAD: tl.constexpr, Q_ROW: tl.constexpr,
    IN_PLACE: tl.constexpr,  # pool form
    GUARD_FULL: tl.constexpr,  # pool form, packed layout: a full window never flushed is kept and counted
    NH: tl.constexpr, NV: tl.constexpr, NK: tl.constexpr, NL: tl.constexpr, NR: tl.constexpr,
    QM: tl.constexpr, NORM_EPS: tl.constexpr, SCALE: tl.constexpr, SP_THRESHOLD: tl.constexpr,
    BETA_SMALL: tl.constexpr, MAGIC: tl.constexpr, MAGIC_BITS: tl.constexpr,
    SCALAR_GATE: tl.constexpr,  # the scalar gate (GDN): gbuf, g_row None; pcum / pcum_new hold p
    KEY_GROUP: tl.constexpr,  # heads one key head's q and k serve (GQA; 1: none shared)
):
    tl.static_assert(NK == NV)  # write_entry's one [N] offset serves both sides
    c = tl.program_id(0)
    row = c // NH  # batch row (functional) or entry of idx (pool)
    head = c % NH
    v = tl.arange(0, NV)
    k = tl.arange(0, NK)
    j = NL - 1 - tl.arange(0, NL)  # window rows in reversed entry order (the decay product runs forward)
    r = tl.arange(0, NR)
    out_row = (row.to(tl.int64) * NH + head) * NV
    tok = row.to(tl.int64)
    # the token's loads: none depends on the slot
    kt, qt, vt, xg, b_t, a_log = token_loads(qx, kx, vx, a, b, A_log, dt_bias, tok, qk_row, v_row, head, k, v,
                                             NH, NK, NV, SCALAR_GATE, KEY_GROUP)
    if IN_PLACE:
        slot = tl.load(idx + row).to(tl.int64)
        if slot <= 0:  # no sequence: a zero output row, nothing else
            tl.store(o + out_row + v, tl.zeros([NV], dtype=tl.bfloat16))
            return
    else:
        slot = row.to(tl.int64)
    prog = slot * NH + head
    kwin = prog * (NL * NK)
    vwin = prog * (NL * NV)

    # every load first; the window's rows only below the fill count h (rows at or past it are
    # not read, so a pool's stale rows may hold anything, NaN included), so that a program moves
    # 23,118 B at h = 1 and 33,870 B at h = L - 1
    h = tl.load(fill + prog)
    full = False
    if GUARD_FULL:  # hcnt == L with entry L - 1 still weighted: full, never flushed
        full = (h >= NL) & (tl.load(w + prog * NL + NL - 1, mask=h >= NL, other=0.0) != 0.0)
    h = tl.where(h >= NL, 0, h)  # hcnt == L: the flush just emptied the window
    if GUARD_FULL:
        h = tl.where(full, NL, h)  # every entry live: the output still sees the whole window
    live = j < h
    cb = tl.load(codes + slot * C_SLOT + head * C_HEAD + v[:, None] * NK + k[None, :])  # [V, K] int8
    s_kr = tl.load(s_k + slot * SK_SLOT + head * SK_HEAD + k)
    s_vr = tl.load(s_v + slot * SV_SLOT + head * SV_HEAD + v)
    uu = tl.load(u + slot * U_SLOT + head * U_HEAD + r[:, None] * U_ROW + k[None, :])  # [R, K] fp16
    qq = tl.load(q + slot * Q_SLOT + head * Q_HEAD + r[:, None] * Q_ROW + v[None, :])  # [R, V] fp16
    keys = tl.load(kbuf + kwin + j[:, None] * NK + k[None, :], mask=live[:, None], other=0.0)  # [L, K] bf16
    if not SCALAR_GATE:
        g_after = tl.load(gbuf + kwin + (j[:, None] + 1) * NK + k[None, :], mask=(j[:, None] + 1) < h, other=1.0)
    vals = tl.load(ubuf + vwin + j[:, None] * NV + v[None, :], mask=live[:, None], other=0.0)  # [L, V] bf16
    w_all = tl.load(w + prog * NL + j)
    pcum_old = load_pcum(pcum, prog, k, NK, SCALAR_GATE)
    kn, qn, kq, g, en, beta, pcum_n, pc, f, _, _ = token_side(kt, qt, xg, b_t, a_log, pcum_old, s_kr, NORM_EPS, SCALE,
                                                              SP_THRESHOLD, BETA_SMALL, QM, SCALAR_GATE)

    # the key side: the window's projections w_j (kbuf_j * D_j) . x [L] and the tokens' (U' x) [R]
    # for x = kn and qn, fp32 on the CUDA cores (naive.step_products)
    wl = tl.where(live, w_all, 0.0)
    # no select on the keys or values: their rows at or past h are not loaded (other=0)
    if SCALAR_GATE:  # the decays are the gate itself
        kd = keys.to(tl.float32) * (wl * en)[:, None]
    else:
        kd = keys.to(tl.float32) * entry_decay(g_after, en, h, j) * wl[:, None]
    pk = tl.sum(kd * kn[None, :], axis=1)
    pq = tl.sum(kd * qn[None, :], axis=1)
    up = uu.to(tl.float32) * pc[None, :]
    tk = tl.sum(up * kn[None, :], axis=1)
    tq = tl.sum(up * qn[None, :], axis=1)

    # the value side: S x = s_v * (C (f * x)) + ubuf^T (projections) + Q^T (U' x), f = s_k pc / 127;
    # the codes are exact in fp32 and both products share one conversion
    cf = _codes_fp32(cb, MAGIC, MAGIC_BITS)
    vl = vals.to(tl.float32)
    qf = qq.to(tl.float32)
    Skn = tl.sum(cf * (f * kn)[None, :], axis=1) * s_vr + tl.sum(vl * pk[:, None], axis=0) + tl.sum(qf * tk[:, None], axis=0)
    Sqn = tl.sum(cf * (f * qn)[None, :], axis=1) * s_vr + tl.sum(vl * pq[:, None], axis=0) + tl.sum(qf * tq[:, None], axis=0)
    u_new = beta * (vt - Skn)
    tl.store(o + out_row + v, round_bf16(Sqn + kq * u_new))

    # the appended entry (pool form) or the fresh outputs
    if IN_PLACE:
        tl.debug_barrier()  # every thread has read the window, pcum and the fill count
    write_entry(kbuf, ubuf, gbuf, w, pcum, fill, k_row, u_row, g_row, w_new, pcum_new, prog, out_row, h, k, j,
                kn, u_new, en, pcum_n, w_all, full, errors, IN_PLACE, NK, NV, NL, SCALAR_GATE)


def launch_step(ckpt, window, fill, token, A_log, dt_bias, o, new=None, idx=None, errors=None, guard_full=False,
                key_group=1):
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
    ``errors``: the pool's int32 counter; with ``guard_full`` (the packed layout), a program
    whose window is full and was never flushed (``fill == L``, ``w[L - 1] != 0``) gets its
    output from the whole window, appends nothing and adds 1 to ``errors[0]``; without it
    ``fill == L`` reads as an empty window (the request layout's "just flushed").
    Returns Triton's launched kernel object, or None for an empty launch.
    """
    n_rows = token[3].shape[0]
    if n_rows == 0:
        return None
    with torch.cuda.device(o.device) if o.is_cuda else contextlib.nullcontext():
        return _step_kernel[(n_rows * o.shape[1],)](
            **step_arguments(ckpt, window, fill, token, A_log, dt_bias, o, new, idx, errors, guard_full, key_group),
            num_warps=NUM_WARPS, num_stages=1)
