"""What the Gluon kernel's data path reaches without its math (issue 9's first step): a Gluon
kernel made of the flush kernel's own staging (``_prefetch``: cp.async one program ahead, into
the same shared-memory buffers) and its stores (``_store_checkpoint``,
``_reset_window``), with nothing between: the staged checkpoint is stored as it was read. It moves
the bytes the flush kernel moves: the old checkpoint, window and gates in, the new checkpoint and
the resets out. That is SPEC section 9's floor less 256 B a program: neither kernel reads gbuf's
first row, whose gates no window entry needs.

    python scripts/experiments/bytes_only.py [--batch-sizes 16,512]

Timing as in ``leapquant.bench`` (the profiler's kernel time, 4 warm-up and 16 timed calls,
median, L2-cold with 8 input sets in rotation, the floor from the copy bandwidth measured in the
same run), but of a functional launch over dense tensors: the kernel's resident CTAs striding
over all B x H programs, as ``run`` does. The bench times pool calls, which first scan the due flags
(nothing due at B=512 costs ~0.004 ms) and read the pool's strided layout. Needs an sm_90 GPU and a
triton in ``flush/gluon_kernel.VERIFIED_TRITON``; exits with status 1 if the checkpoint written differs from the one read or
a window is not reset.
"""

import argparse
import statistics

import torch
from triton.experimental import gluon
from triton.experimental.gluon import language as gl
from triton.experimental.gluon.language.nvidia.hopper import async_copy

from leapquant.bench import SETS, TIMED, WARMUP, copy_bandwidth, kernel_times_ms
from leapquant.eval import flush_inputs as inputs
from leapquant import kernel
from leapquant.flush import gluon_kernel as fg
from leapquant.gluon_compat import thread_barrier
from leapquant.launch import resident_ctas as _resident_ctas, checkpoint_strides as _strides
from leapquant.geometry import FLOOR_BYTES_PER_PROGRAM, H
from leapquant.eval.report import environment, parse_sizes

NAME = "_move_bytes_kernel"


@gluon.jit
def _move_bytes_kernel(
    codes_in, sk_in, sv_in, u_in, q_in, codes_out, sk_out, sv_out, u_out, q_out,
    kbuf, ubuf, gbuf, w, pcum, ones, num_programs,
    C_SLOT: gl.constexpr, C_HEAD: gl.constexpr, SK_SLOT: gl.constexpr, SK_HEAD: gl.constexpr,
    SV_SLOT: gl.constexpr, SV_HEAD: gl.constexpr,
    U_SLOT: gl.constexpr, U_HEAD: gl.constexpr, U_ROW: gl.constexpr,
    Q_SLOT: gl.constexpr, Q_HEAD: gl.constexpr, Q_ROW: gl.constexpr,
    CTAS: gl.constexpr, NH: gl.constexpr, NV: gl.constexpr, NK: gl.constexpr, NL: gl.constexpr,
    NR: gl.constexpr,
):
    pid = gl.program_id(0)
    stage = fg._stage_views(fg._staging_buffer(NV, NK), NV, NK, NL, NR)  # the kernel's staging area
    st_codes, st_gbuf, st_kbuf, st_ubuf, st_u, st_q, st_pcum, st_sk, st_sv, st_w = stage
    if pid < num_programs:
        fg._prefetch((pid // NH).to(gl.int64), pid % NH, stage, codes_in, sk_in, sv_in, u_in, q_in, kbuf, ubuf,
                     gbuf, w, pcum, ones, C_SLOT, C_HEAD, SK_SLOT, SK_HEAD, SV_SLOT, SV_HEAD, U_SLOT, U_HEAD,
                     U_ROW, Q_SLOT, Q_HEAD, Q_ROW, NH, NV, NK, NL, NR, False)
    for c in range(pid, num_programs, CTAS):
        slot = (c // NH).to(gl.int64)
        head = c % NH
        prog = slot * NH + head
        async_copy.wait_group(0)
        thread_barrier()  # every thread's copies have landed
        codes = st_codes.load(fg.BYTES)
        sk = st_sk.load(fg.WORDS)
        sv = st_sv.load(fg.WORDS)
        u = st_u.load(fg.ROW4)
        q = st_q.load(fg.ROW4)
        thread_barrier()  # the staging area is free again
        nxt = c + CTAS
        if nxt < num_programs:
            fg._prefetch((nxt // NH).to(gl.int64), nxt % NH, stage, codes_in, sk_in, sv_in, u_in, q_in, kbuf,
                         ubuf, gbuf, w, pcum, ones, C_SLOT, C_HEAD, SK_SLOT, SK_HEAD, SV_SLOT, SV_HEAD, U_SLOT,
                         U_HEAD, U_ROW, Q_SLOT, Q_HEAD, Q_ROW, NH, NV, NK, NL, NR, False)
        fg._store_checkpoint(slot, head, codes, sk, sv, u, q, codes_out, sk_out, sv_out, u_out, q_out,
                             C_SLOT, C_HEAD, SK_SLOT, SK_HEAD, SV_SLOT, SV_HEAD, U_SLOT, U_HEAD, U_ROW,
                             Q_SLOT, Q_HEAD, Q_ROW, NV, NK, NR)
        fg._reset_window(prog, w, gbuf, pcum, NL, NK, False)


def launch(x: dict, out: list):
    """One launch over the B x H programs of ``x`` (``inputs.make``'s dict on an sm_90 device:
    codes [B, H, V, K] int8, s_k [B, H, K], s_v [B, H, V] fp32, u [B, H, R, K], q [B, H, R, V]
    fp16, and the window): the checkpoint is written to ``out`` (five tensors shaped like the
    checkpoint's), the window of ``x`` is reset in place."""
    ckpt_in = [x[a] for a in inputs.CHECKPOINT_ARGS]
    num_programs = ckpt_in[0].shape[0] * H
    grid = (_resident_ctas(x["q0"].device, fg.CTAS_PER_SM),)
    c = fg._CONSTANTS
    _move_bytes_kernel[grid](
        *ckpt_in, *out, *(x[a] for a in inputs.WINDOW_ARGS), fg._ones(x["q0"].device), num_programs,
        **_strides(*ckpt_in), CTAS=grid[0], NH=c["NH"], NV=c["NV"], NK=c["NK"], NL=c["NL"], NR=c["NR"],
        num_warps=fg.NUM_WARPS)


def main():
    """Time the data path at each batch size against the floor; exits 1 on a wrong copy."""
    ap = argparse.ArgumentParser(description="The Gluon flush kernel's copies and stores without its math, against the floor")
    ap.add_argument("--batch-sizes", default="16,32,64,128,256,512")
    args = ap.parse_args()
    device = torch.device("cuda")
    if not torch.cuda.is_available() or kernel.choose(device) != "gluon":
        raise SystemExit("needs an sm_90 GPU and a triton the Gluon kernel was verified with (kernel.choose)")
    print(NAME, environment(device))
    bw = copy_bandwidth(device)
    print(f"copy bandwidth {bw / 1e9:.0f} GB/s (read + write); floor = {FLOOR_BYTES_PER_PROGRAM} B/program / bandwidth")
    print("  B  bytes-only ms  floor ms  x floor")
    for B in parse_sizes(args.batch_sizes):
        sets = [inputs.make("random", B, device, seed=3000 + s) for s in range(SETS)]
        outs = [[torch.empty_like(x[a]) for a in inputs.CHECKPOINT_ARGS] for x in sets]
        times = kernel_times_ms(lambda i: launch(sets[i % SETS], outs[i % SETS]), WARMUP + TIMED, NAME)[WARMUP:]
        ms = statistics.median(times)
        floor_ms = B * H * FLOOR_BYTES_PER_PROGRAM / bw * 1e3
        print(f"{B:3d}  {ms:13.4f}  {floor_ms:8.4f}  {ms / floor_ms:7.2f}")
        x, o = sets[0], outs[0]
        if not all(torch.equal(x[a], t) for a, t in zip(inputs.CHECKPOINT_ARGS, o)):
            raise SystemExit("bytes-only kernel: the checkpoint written differs from the one read")
        if not ((x["w"] == 0).all() and (x["gbuf"] == 1).all() and (x["pcum"] == 0).all()):
            raise SystemExit("bytes-only kernel: a window was not reset")
        del sets, outs


if __name__ == "__main__":
    main()
