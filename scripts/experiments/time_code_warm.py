"""What cold code costs a small pool call: the bench's all-due flush timing (``bench.time_flush``:
L2-cold over 8 slot sets, profiler kernel times) with and without a warming flush of another pool
just before each timed call. The warming call flushes WARM_SLOTS slots (every program due, so
that every resident CTA runs at least one program and its SM fetches the program's code); only
the timed calls' kernels are kept. The difference bounds what a smaller program (less hot code)
could win at that batch size (NOTES.md, "Instruction fetch at small batches").

    python scripts/experiments/time_code_warm.py [B ...]      (default: 16 32 64)
"""

import statistics
import sys

import torch

from leapquant import bench
from leapquant.eval import flush_inputs
from leapquant.kda import L, Pool, flush_inplace
from leapquant.kda.launch import resident_ctas
from leapquant.kda.geometry import H


def time_flush(B: int, device, q0, warm: bool) -> float:
    pool = Pool(bench.SETS * B + 1, device)
    sets = [torch.arange(1 + s * B, 1 + (s + 1) * B, dtype=torch.int32, device=device)
            for s in range(bench.SETS)]
    saved = bench.fill_pool(pool, sets, seed=1000 + B)
    # enough due programs that every resident CTA of the (Gluon) grid runs one
    warm_slots = -(-resident_ctas(device, 2) // H)
    warm_pool = Pool(warm_slots + 1, device)
    warm_idx = torch.arange(1, warm_slots + 1, dtype=torch.int32, device=device)
    bench.fill_pool(warm_pool, [warm_idx], seed=7)
    assert bool((warm_pool.hcnt[1:] == L).all())  # a flush leaves hcnt at L: due again every call

    def call(i):
        if warm:
            flush_inplace(warm_pool, warm_idx, q0)
        s = i % bench.SETS
        flush_inplace(pool, sets[s], q0)
        ahead = (i + bench.SETS // 2) % bench.SETS
        sl = sets[ahead].long()
        pool.w[sl], pool.gbuf[sl], pool.pcum[sl] = saved[ahead]

    calls = bench.WARMUP + bench.TIMED
    times = bench.kernel_times_ms(call, calls * (2 if warm else 1))
    timed = times[1::2] if warm else times
    return statistics.median(timed[bench.WARMUP:])


def main(sizes):
    q0 = flush_inputs.make("random", 1, "cuda", seed=512)["q0"]
    for rep in (1, 2):
        for B in sizes:
            cold = time_flush(B, torch.device("cuda"), q0, warm=False)
            hot = time_flush(B, torch.device("cuda"), q0, warm=True)
            print(f"rep {rep} B={B} all due: cold code {cold:.4f} ms, warm code {hot:.4f} ms "
                  f"({(hot / cold - 1) * 100:+.1f}%)")


if __name__ == "__main__":
    main([int(b) for b in sys.argv[1:]] or [16, 32, 64])
