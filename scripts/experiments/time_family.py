"""Median kernel time (ms) of the functional flush ``run()`` on named input families (all programs
due; a family's inputs decide how many programs take the reference's path), for A/B of kernel
versions on the fallback: ``python scripts/experiments/time_family.py 512 coherent_huge random``."""

import statistics
import sys

from leapquant import bench
from leapquant.eval import flush_inputs as inputs
from leapquant.kda import run

if len(sys.argv) < 3:
    sys.exit("usage: python scripts/experiments/time_family.py B FAMILY [FAMILY ...]")
B = int(sys.argv[1])
for family in sys.argv[2:]:
    args = inputs.make(family, B, "cuda", seed=3)
    timed = bench.kernel_times_ms(lambda i: run(**args), 30)[5:]
    print(f"{family} B={B} median {statistics.median(timed):.4f} ms", flush=True)
