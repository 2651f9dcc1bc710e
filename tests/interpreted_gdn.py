"""Run the portable (Triton) flush and step kernels on GDN inputs (``SCALAR_GATE``, ``KEY_GROUP``
2) under TRITON_INTERPRET=1 (set by the caller) on small CPU cases; print one JSON line of
verdicts. Used by test_gdn.py in a subprocess, because the interpreter is chosen when the kernel
module is imported."""

import json
import os
import sys
import time

sys.path.insert(0, os.path.dirname(__file__))
import gdn_checks  # noqa: E402

from leapquant.eval import gdn_inputs  # noqa: E402

out = {"interpreted": os.environ.get("TRITON_INTERPRET") == "1", "seconds": {}}


def timed(name, fn, *args, **kwargs):
    t = time.time()
    res = fn(*args, **kwargs)
    out["seconds"][name] = round(time.time() - t, 1)
    return res


step_kernel = gdn_checks.kernel_step
flush_kernel = gdn_checks.kernel_flush
# the functional forms: every family at B = 1 on all 32 heads (every edge-case head) and at B = 2
# on 8 heads (two sequences: the batch stride)
out["step"] = {}
out["flush"] = {}
for fam in gdn_inputs.STEP_FAMILIES:
    out["step"][f"{fam}_b1"] = timed(f"step_{fam}_b1", gdn_checks.functional_step, fam, 1, "cpu", step_kernel)
    out["step"][f"{fam}_b2"] = timed(f"step_{fam}_b2", gdn_checks.functional_step, fam, 2, "cpu", step_kernel, heads=8)
for fam in gdn_inputs.FLUSH_FAMILIES:
    out["flush"][f"{fam}_b1"] = timed(f"flush_{fam}_b1", gdn_checks.functional_flush, fam, 1, "cpu", flush_kernel)
    out["flush"][f"{fam}_b2"] = timed(f"flush_{fam}_b2", gdn_checks.functional_flush, fam, 2, "cpu", flush_kernel,
                                      heads=4)
out["dead_rows"] = timed("dead_rows", gdn_checks.dead_rows_unused, "cpu", step_kernel, heads=32)
# the pool forms against the CPU pool path
for fam in ("random", "structured"):
    out[f"pool_step_{fam}"] = timed(f"pool_step_{fam}", gdn_checks.pool_step_form, "cpu",
                                    gdn_checks.kernel_step_inplace("triton"), heads=8, family=fam)
out["pool_flush"] = timed("pool_flush", gdn_checks.pool_flush_form, "cpu", gdn_checks.kernel_flush_inplace("triton"),
                          heads=8)
for heads in (8, 2):
    out[f"full_window_{heads}"] = timed(f"full_window_{heads}", gdn_checks.full_window_kept, "cpu",
                                        gdn_checks.kernel_step_inplace("triton"), heads=heads)
print(json.dumps(out))
