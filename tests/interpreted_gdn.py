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


def flush_routes():
    # the path each program takes: the portable kernel's program body spied on (the interpreter
    # resolves it by name at run time). The random family (no program ill on the unit-scaled
    # path) with the even heads' gate product moved below ORTHONORMAL_QK_BELOW: those run the
    # reference's path once (ORTHONORMAL_QK), the odd ones the unit-scaled path once
    from leapquant.flush import triton_kernel
    from leapquant.geometry import ORTHONORMAL_QK_BELOW

    x = gdn_inputs.make_flush("random", 1, "cpu", seed=5, heads=8)
    x["p"][:, ::2] = ORTHONORMAL_QK_BELOW / 2
    x["p"][:, 1::2] = ORTHONORMAL_QK_BELOW * 2
    calls, body = [], triton_kernel._flush_program

    def spy(slot, head, *args):
        calls.append((int(head), bool(args[-2])))  # args[-2]: ORTHONORMAL_QK
        return body(slot, head, *args)

    triton_kernel._flush_program = spy
    try:
        flush_kernel(x)
    finally:
        triton_kernel._flush_program = body
    return {"calls": sorted(calls), "expected": [(h, h % 2 == 0) for h in range(8)]}


out["routes"] = timed("routes", flush_routes)
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
