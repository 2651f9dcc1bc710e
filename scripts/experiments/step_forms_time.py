"""Functional- and pool-form step timings of one tree (PYTHONPATH=ab/NAME), B = 256 and 512: the
functional form by CUDA events around each call (launch overhead included), the pool form by
bench.time_step.
    PYTHONPATH=ab/NAME python3 scripts/experiments/step_forms_time.py NAME"""
import sys, torch
from leapquant.eval import step_inputs
from leapquant.kda import step
from leapquant import bench
tag = sys.argv[1]
for B in (256, 512):
    x = step_inputs.make("random", B, "cuda", 1)
    for _ in range(3):
        step(**x)
    torch.cuda.synchronize()
    ts = []
    for _ in range(30):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record(); step(**x); b.record(); torch.cuda.synchronize(); ts.append(a.elapsed_time(b))
    ts.sort()
    print(tag, f"functional step B={B} median ms (incl. launch overhead)", round(ts[len(ts)//2], 4), flush=True)
    print(tag, f"pool step B={B} median ms", round(bench.time_step(B, "cuda")["median_ms"], 4), flush=True)
