"""Run the Triton decode step kernel under TRITON_INTERPRET=1 (set by the caller) on small CPU
cases; print one JSON line of verdicts. Used by test_step_interpreted.py in a subprocess, because
the interpreter is chosen when the kernel module is imported."""

import json
import os
import sys
import time

sys.path.insert(0, os.path.dirname(__file__))
import step_checks  # noqa: E402

from leapquant.eval import step_inputs  # noqa: E402

out = {"interpreted": os.environ.get("TRITON_INTERPRET") == "1", "seconds": {}}
t = time.time()
out["beta_disagreements"] = step_checks.kernel_beta_disagreements("cpu")
out["seconds"]["beta"] = round(time.time() - t, 1)
out["functional"] = {}
for fam in step_inputs.FAMILIES:
    t = time.time()
    out["functional"][fam] = step_checks.functional(fam, 1, "cpu", step_checks.kernel_functional)
    out["seconds"][fam] = round(time.time() - t, 1)
t = time.time()
out["dead_rows"] = step_checks.dead_rows_unused("cpu", step_checks.kernel_functional)
out["seconds"]["dead_rows"] = round(time.time() - t, 1)
for fam in ("random", "structured"):
    t = time.time()
    out[f"pool_{fam}"] = step_checks.pool_form("cpu", step_checks.kernel_inplace, family=fam)
    out["seconds"][f"pool_{fam}"] = round(time.time() - t, 1)
# a full window never flushed (packed layout: kept and counted), at 32 and at 4 heads
for heads in (32, 4):
    t = time.time()
    out[f"full_window_{heads}"] = step_checks.full_window_kept("cpu", step_checks.kernel_inplace, heads=heads)
    out["seconds"][f"full_window_{heads}"] = round(time.time() - t, 1)
# the Pool's warm-up (what Pool() runs on CUDA), here on a CPU pool given the CUDA pool's kernels
import torch  # noqa: E402

from leapquant.kda import Pool  # noqa: E402
from leapquant.kernel import choose  # noqa: E402
from leapquant.launch import pick_words  # noqa: E402

pool = Pool(3, "cpu")
pool.kernel, pool.step_kernel = choose("cpu"), choose("cpu", "step")
pool.picks = torch.empty(pick_words(pool.hcnt.numel(), pool.device), dtype=torch.int32)
names = ("raw", "kbuf", "ubuf", "gbuf", "w", "pcum", "hcnt")
before = {n: getattr(pool, n).clone() for n in names}
pool._warm_up()
out["warm_up_untouched"] = all(torch.equal(before[n], getattr(pool, n)) for n in names)
print(json.dumps(out))
