"""A/B of the Gluon decode-step kernel's register cap (``gluon_kernel.MAX_REGISTERS``): the bench's
``time_step`` (pool form, L2-cold) at a few batch sizes for each cap, interleaved twice.
``python scripts/experiments/step_registers.py [none|N ...]`` (default: none 128)."""

import sys

from leapquant import bench
from leapquant.kda.step import gluon_kernel

caps = [None if c == "none" else int(c) for c in (sys.argv[1:] or ["none", "128"])]
print("cap  B  median ms")
for rep in range(2):
    for cap in caps:
        gluon_kernel.MAX_REGISTERS = cap  # read at launch: each Pool compiles its own variant
        for B in (64, 256, 512):
            print(f"{cap or 'none'} {B} {bench.time_step(B, 'cuda')['median_ms']:.4f}", flush=True)
