"""Kernel experiments on the GPU: time flush_inplace (all due, L2-cold, as the benchmark does)
for launch variants, and print the compiler's register and spill counts of each."""

import argparse

import torch

from leapquant import bench
from leapquant.eval import flush_inputs as inputs
from leapquant.kda.flush import triton_kernel as flush_mod
from leapquant.kda.geometry import FLOOR_BYTES_PER_PROGRAM, H
from leapquant.eval.report import accuracy_case, fmt


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--batch-sizes", default="256")
    ap.add_argument("--num-warps", default="8")
    ap.add_argument("--persistent", default="0,1", help="pool grid: one CTA per candidate (0) or resident CTAs (1)")
    ap.add_argument("--due", default="1", help="fractions of programs due")
    ap.add_argument("--maxnreg", default="0", help="register caps to try (0: none)")
    ap.add_argument("--split", default="2", help="bf16 parts in the subspace products: 2, 3 or 2,3")
    ap.add_argument("--accuracy", action="store_true", help="also judge run() on the SPEC and stress families")
    args = ap.parse_args()
    bw = bench.copy_bandwidth("cuda")
    q0 = inputs.make("random", 1, "cuda", seed=1)["q0"]
    x = inputs.make("random", 1, "cuda", seed=2)
    ck = tuple(x[n] for n in inputs.CHECKPOINT_ARGS)
    print(f"copy bandwidth {bw / 1e9:.0f} GB/s")
    for nw in map(int, args.num_warps.split(",")):
        flush_mod.NUM_WARPS = nw
        k = flush_mod.launch_flush(ck, tuple(torch.empty_like(t) for t in ck),
                                   tuple(x[n] for n in inputs.WINDOW_ARGS), q0)
        regs, spills = getattr(k, "n_regs", "?"), getattr(k, "n_spills", "?")
        for persistent, cap, split in [(p, c, sp) for p in map(int, args.persistent.split(","))
                                       for c in map(int, args.maxnreg.split(",")) for sp in map(int, args.split.split(","))]:
            flush_mod.PERSISTENT_POOL = bool(persistent)
            flush_mod.MAX_REGISTERS = cap or None
            flush_mod.SUBSPACE_SPLIT = split
            if args.accuracy:
                for B in map(int, args.batch_sizes.split(",")):
                    for fam in inputs.all_families():
                        res = accuracy_case(fam, B, "cuda", seed=B)[3]
                        print(f"split={split} B={B} {fam:14s} {'PASS' if res['ok'] else 'FAIL'} worst head "
                              f"{fmt(res['head'].worst_ratio)} b,h {fmt(res['batch_head'].worst_ratio)}", flush=True)
            for frac in map(float, args.due.split(",")):
                for B in map(int, args.batch_sizes.split(",")):
                    t = bench.time_flush(B, "cuda", q0, due_fraction=frac)["median_ms"]
                    floor = B * H * FLOOR_BYTES_PER_PROGRAM / bw * 1e3
                    print(f"num_warps={nw:2d} regs={regs} spills={spills} persistent={persistent} maxnreg={cap} split={split} due={frac:.4f} "
                          f"B={B:4d} {t:.4f} ms  floor {floor:.4f}  x{t / floor:.2f}", flush=True)


if __name__ == "__main__":
    main()
