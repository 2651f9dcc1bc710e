"""A small workload for Nsight Compute, run twice (the first launch compiles; profile the second):
``python scripts/ncu_target.py [B] [flush|step]`` -- run() (the flush) or step() (the decode step)
on B sequences of the random family."""

import sys

import torch

B = int(sys.argv[1]) if len(sys.argv) > 1 else 64
op = sys.argv[2] if len(sys.argv) > 2 else "flush"
if op == "step":
    from leapquant.eval import step_inputs
    from leapquant.kda import step as call

    x = step_inputs.make("random", B, "cuda", 1)
else:
    from leapquant.eval import flush_inputs
    from leapquant.kda import run as call

    x = flush_inputs.make("random", B, "cuda", seed=1)
for _ in range(2):
    call(**x)
torch.cuda.synchronize()
