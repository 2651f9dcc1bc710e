"""What cold code costs a pool call: the bench's all-due flush timing (L2-cold over 8 slot sets,
profiler kernel times) in these modes:

- ``cold``: as the bench runs it;
- ``warm``: a warming flush of another pool just before each timed call, with as many slots as
  the timed call (the same flag-scan tile, so the same binary) and at least enough due programs
  that every resident CTA runs one (its SM fetches the program's code);
- ``warm_l2``: the same warming flush, then a 256 MB memset that evicts L2 (and with it the code's
  lines there) but runs no flush code on the SMs;
- ``warm_tiny``, ``warm_copy``, ``warm_restore``: the warming flush, then one other kernel before
  the timed call: an add on one element (tiny code, no data, no shared memory), a copy of 8 MB
  (small code, data through the caches), or the bench's restore of the warm pool's gate history
  (three index_put kernels, as the bench runs between its timed calls);
- ``fill_only``: no warming call, and in place of the bench's restores only the due counters
  set again (``pool.hcnt.index_fill_``), as the request's benchmark.py runs between its calls
  (the windows stay reset after their first flush: the same code path and the same bytes;
  every program of a set is due again, so only with --due 1).

--step: the decode step instead (``bench.time_step``'s harness, a ``hcnt.fill_`` before each
call), ``bench`` as it runs and ``evict``: the bench's three restore kernels on a flush pool of
B slots before each call.

warm - cold bounds what a smaller program (less hot code) could win at that batch size;
warm_l2 says whether the warm call's gain lives in L2 (code fetched from HBM when cold) or in
the SMs' instruction caches (docs/design.md, "What bounds the kernels").

    python scripts/experiments/time_code_warm.py [--due F] [--modes M,M] [B ...]   (default: all due, every mode, B = 16 32 64)

--due: the timed pool's programs due with probability F (as the bench's 1 in 16 and nothing due);
the warming pool's are all due. Each line gives every mode's median and its ratio to the first
mode's.
"""

import argparse
import statistics

import torch

from leapquant import bench
from leapquant.eval import flush_inputs
from leapquant.kda import L, Pool, flush_inplace
from leapquant.flush.gluon_kernel import CTAS_PER_SM
from leapquant.launch import resident_ctas
from leapquant.geometry import H

MODES = ("cold", "warm", "warm_l2", "warm_tiny", "warm_copy", "warm_restore", "fill_only")
STEP_MODES = ("bench", "evict")


def time_flush(B: int, device, q0, mode: str, due: float = 1.0) -> float:
    pool = Pool(bench.SETS * B + 1, device)
    sets = [torch.arange(1 + s * B, 1 + (s + 1) * B, dtype=torch.int32, device=device)
            for s in range(bench.SETS)]
    saved = bench.fill_pool(pool, sets, seed=1000 + B, due_fraction=due)
    warm_slots = max(B, -(-resident_ctas(device, CTAS_PER_SM) // H))
    warm_pool = Pool(warm_slots + 1, device)
    warm_idx = torch.arange(1, warm_slots + 1, dtype=torch.int32, device=device)
    warm_saved = bench.fill_pool(warm_pool, [warm_idx], seed=7)[0]
    assert bool((warm_pool.hcnt[1:] == L).all())  # a flush leaves hcnt at L: due again every call
    evict = torch.empty(256 << 20, dtype=torch.uint8, device=device)
    one = torch.zeros(1, device=device)
    src, dst = torch.ones(8 << 20, dtype=torch.uint8, device=device), torch.empty(8 << 20, dtype=torch.uint8, device=device)

    def timed_call(i):
        s = i % bench.SETS
        if mode == "fill_only":
            pool.hcnt.index_fill_(0, sets[s].long(), L)
            flush_inplace(pool, sets[s], q0)
            return
        flush_inplace(pool, sets[s], q0)
        ahead = (i + bench.SETS // 2) % bench.SETS
        bench.restore_gates(pool, sets[ahead], saved[ahead])

    def warmed_call(i):  # even i: the warming flush (and the eviction); odd i: the timed one
        if i % 2 == 0:
            flush_inplace(warm_pool, warm_idx, q0)
            if mode == "warm_l2":
                evict.zero_()
            elif mode == "warm_tiny":
                one.add_(1.0)
            elif mode == "warm_copy":
                dst.copy_(src)
            elif mode == "warm_restore":
                bench.restore_gates(warm_pool, warm_idx, warm_saved)
        else:
            timed_call(i // 2)

    calls = bench.WARMUP + bench.TIMED
    if mode in ("cold", "fill_only"):
        timed = bench.kernel_times_ms(timed_call, calls)
    else:
        timed = bench.kernel_times_ms(warmed_call, 2 * calls)[1::2]
    return statistics.median(timed[bench.WARMUP:])


def time_step(B: int, device, mode: str) -> float:
    """bench.time_step's median; ``evict``: the bench's restore kernels on another pool before
    each call."""
    if mode == "bench":
        return bench.time_step(B, device)["median_ms"]
    other = Pool(B + 1, device)
    other_idx = torch.arange(1, B + 1, dtype=torch.int32, device=device)
    other_saved = bench.fill_pool(other, [other_idx], seed=11)[0]

    def evict(i):
        bench.restore_gates(other, other_idx, other_saved)

    return bench.time_step(B, device, before=evict)["median_ms"]


def _line(head: str, t: dict, modes: list) -> str:
    # every mode's median, and its ratio to the first mode's
    return head + ", ".join(f"{m} {t[m]:.4f}" + ("" if m == modes[0] else f" ({(t[m] / t[modes[0]] - 1) * 100:+.1f}%)")
                            for m in modes)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("sizes", type=int, nargs="*", default=[16, 32, 64])
    ap.add_argument("--due", type=float, default=1.0)
    ap.add_argument("--modes", default=None)
    ap.add_argument("--step", action="store_true")
    a = ap.parse_args()
    known = STEP_MODES if a.step else MODES
    modes = (a.modes or ",".join(known)).split(",")
    if unknown := [m for m in modes if m not in known]:
        ap.error(f"unknown modes {unknown}; known: {', '.join(known)}")
    if "fill_only" in modes and a.due != 1.0:
        ap.error("fill_only sets every program of a set due again: only with --due 1")
    q0 = None if a.step else flush_inputs.make("random", 1, "cuda", seed=512)["q0"]
    for rep in (1, 2):
        for B in a.sizes:
            if a.step:
                print(_line(f"rep {rep} step B={B} ms: ", {m: time_step(B, torch.device("cuda"), m) for m in modes}, modes))
            else:
                t = {m: time_flush(B, torch.device("cuda"), q0, m, a.due) for m in modes}
                print(_line(f"rep {rep} B={B} due {a.due:g} ms: ", t, modes))


if __name__ == "__main__":
    main()
