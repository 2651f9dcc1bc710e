"""Run the Triton flush kernel under TRITON_INTERPRET=1 (set by the caller) on small CPU cases;
print one JSON line of verdicts. Used by test_kernel_interpreted.py in a subprocess, because the
interpreter is chosen when the kernel module is imported."""

import json
import os
import sys

sys.path.insert(0, os.path.dirname(__file__))
import flush_checks  # noqa: E402

from leapquant.eval import flush_inputs as inputs  # noqa: E402
from leapquant.flush import triton_kernel as flush_mod  # noqa: E402
from leapquant.flush.triton_kernel import launch_flush  # noqa: E402

TAIL_FAMILIES = ("small_state", "blind_q0")


def kernel_inplace(pool, idx, q0):
    launch_flush(pool.checkpoint, pool.checkpoint, pool.window, q0, idx=idx, hcnt=pool.hcnt)


out = {"interpreted": os.environ.get("TRITON_INTERPRET") == "1"}
# the SPEC families and the stress families (small_state and blind_q0 are the most sensitive to
# the basis's precision, issue 10)
out["functional"] = {fam: flush_checks.functional(fam, 1, "cpu") for fam in inputs.all_families()}
flush_mod.SUBSPACE_SPLIT = 2  # two bf16 parts of the thin operands (three by default)
out["functional_split2"] = {fam: flush_checks.functional(fam, 1, "cpu") for fam in TAIL_FAMILIES}
flush_mod.SUBSPACE_SPLIT = 3
out["zero_q0_column"] = flush_checks.zero_q0_column(flush_checks.launched, "cpu")
q0 = inputs.make("random", 1, "cpu", seed=13)["q0"]
for persistent in (False, True):  # one CTA per candidate, or resident CTAs scanning flags
    flush_mod.PERSISTENT_POOL = persistent
    pool, idx, due = flush_checks.due_pool("cpu")
    out["pool_persistent" if persistent else "pool"] = flush_checks.pool_mode(pool, idx, due, kernel_inplace, q0)
pool, idx, due = flush_checks.due_pool("cpu", layout="request")  # the request's layout (other strides)
out["pool_request_layout"] = flush_checks.pool_mode(pool, idx, due, kernel_inplace, q0)
for persistent in (False, True):  # the reference's path after a first run that must leave no trace
    flush_mod.PERSISTENT_POOL = persistent
    out["fallback_persistent" if persistent else "fallback"] = flush_checks.fallback_matches_functional(
        kernel_inplace, "cpu")
flush_mod.FLAG_TILE = 64  # a flag scan over several tiles (2 slots each)
pool, idx, due = flush_checks.due_pool("cpu")
out["pool_persistent_tiles"] = flush_checks.pool_mode(pool, idx, due, kernel_inplace, q0)
print(json.dumps(out))
