"""A small workload for Nsight Compute, run twice (the first call compiles; profile the second,
the only one between cudaProfilerStart and Stop: `ncu --profile-from-start off`):
``python scripts/ncu_target.py [B] [flush|pool|step] [DUE] [kda|gdn]`` -- run() (the flush,
functional form), flush_inplace() on a pool of B sequences filled as the bench fills it with each
program due with probability DUE (default 1: the bench's all-due timing; its window restored
before the second call), or step() (the decode step) on B sequences of the random family; of the
KDA family unless the last argument is gdn (the flush and the step only)."""

import sys

import torch

if any(a in ("-h", "--help") for a in sys.argv[1:]):
    print(__doc__)
    sys.exit(0)
B = int(sys.argv[1]) if len(sys.argv) > 1 else 64
op = sys.argv[2] if len(sys.argv) > 2 else "flush"
family = sys.argv[4] if len(sys.argv) > 4 else "kda"
if family == "gdn" and op != "pool":
    from leapquant.eval import gdn_inputs
    from leapquant.gdn import run, step

    call = step if op == "step" else run
    x = (gdn_inputs.make_step if op == "step" else gdn_inputs.make_flush)("random", B, "cuda", seed=1)
elif op == "step":
    from leapquant.eval import step_inputs
    from leapquant.kda import step as call

    x = step_inputs.make("random", B, "cuda", 1)
elif op == "pool":
    from leapquant.bench import fill_pool, restore_gates
    from leapquant.eval import flush_inputs
    from leapquant.kda import Pool, flush_inplace

    pool = Pool(B + 1, "cuda")
    slots = torch.arange(1, B + 1, dtype=torch.int32, device="cuda")
    saved = fill_pool(pool, [slots], seed=1000 + B, due_fraction=float(sys.argv[3]) if len(sys.argv) > 3 else 1.0)
    q0 = flush_inputs.make("random", 1, "cuda", seed=512)["q0"]

    def call():  # a flush empties the window and leaves hcnt at L (due again), as bench.time_flush
        flush_inplace(pool, slots, q0)
        restore_gates(pool, slots, saved[0])

    x = {}
else:
    from leapquant.eval import flush_inputs
    from leapquant.kda import run as call

    x = flush_inputs.make("random", B, "cuda", seed=1)
call(**x)  # the functional forms compile here (a Pool compiled its kernel, one launch a flag tile)
torch.cuda.synchronize()
# the second call between profiler start and stop: `ncu --profile-from-start off` profiles it
# alone (with --launch-skip 1 and the default profile-from-start, ncu counts launches from the
# process's start, the warm-up's included)
torch.cuda.cudart().cudaProfilerStart()
call(**x)
torch.cuda.synchronize()
torch.cuda.cudart().cudaProfilerStop()
