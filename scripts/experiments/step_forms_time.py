"""Functional- and pool-form step kernel timings of one tree (PYTHONPATH=ab/NAME), B = 256 and 512:
the functional form's kernel by CUDA events around 20 back-to-back launches (``kernel.launch_step``
with preallocated outputs, so the per-call argument checks and allocations of ``step()`` are not
timed; the inputs, ~286 MB at B=256, exceed L2), the pool form by ``bench.time_step``.
    PYTHONPATH=ab/NAME python3 scripts/experiments/step_forms_time.py NAME"""
import sys

import torch

from leapquant import bench
from leapquant.eval import step_inputs
from leapquant.kda.format import CHECKPOINT_FIELDS, WINDOW_FIELDS
from leapquant.kda.kernel import launch_step

LAUNCHES = 20
tag = sys.argv[1]
for B in (256, 512):
    x = step_inputs.make("random", B, "cuda", 1)
    o = torch.empty_like(x["vx"])
    new = (torch.empty_like(x["kx"]), torch.empty_like(x["vx"]), torch.empty_like(x["kx"], dtype=torch.float16),
           torch.empty_like(x["w"]), torch.empty_like(x["pcum"]))
    args = (tuple(x[n] for n in CHECKPOINT_FIELDS), tuple(x[n] for n in WINDOW_FIELDS), x["h"],
            tuple(x[n] for n in step_inputs.TOKEN_ARGS), x["A_log"], x["dt_bias"], o)
    for _ in range(3):
        launch_step(*args, new=new)
    torch.cuda.synchronize()
    ts = []
    for _ in range(15):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        for _ in range(LAUNCHES):
            launch_step(*args, new=new)
        b.record()
        torch.cuda.synchronize()
        ts.append(a.elapsed_time(b) / LAUNCHES)
    ts.sort()
    print(tag, f"functional kernel B={B} median ms", round(ts[len(ts) // 2], 4), flush=True)
    print(tag, f"pool step B={B} median ms", round(bench.time_step(B, "cuda")["median_ms"], 4), flush=True)
