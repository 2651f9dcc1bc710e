"""A small flush workload for Nsight Compute: run() on B sequences of the random family,
twice (the first launch compiles; profile the second)."""

import sys

import torch

from leapquant.eval import flush_inputs as inputs
from leapquant.kda import run

B = int(sys.argv[1]) if len(sys.argv) > 1 else 64
x = inputs.make("random", B, "cuda", seed=1)
for _ in range(2):
    run(**x)
torch.cuda.synchronize()
