"""Bit-for-bit comparison of two versions of the decode step on the GPU (the step's counterpart of
``scripts/compare_outputs.py``): ``step()`` on the step request's three families at one batch
size, then ``step_inplace`` twice on a pool whose rows mix live slots at every fill count
(0 .. L, L read as "just flushed") with padded entries (0, and -1 from B = 4 on), every output
and the pool's window and counters after each call. Run once with each version on PYTHONPATH
(``compare`` reruns at the batch size the saved file records):

    PYTHONPATH=ab/main python scripts/experiments/compare_step_outputs.py save /tmp/s.pt [--batch-size 64]
    PYTHONPATH=ab/ring python scripts/experiments/compare_step_outputs.py compare /tmp/s.pt

Prints per case whether every tensor is identical bit for bit and how many elements differ;
exits 1 if any differs.
"""

import argparse
import sys
from pathlib import Path

import torch

from leapquant.eval import step_inputs
from leapquant.kda import L, Pool, step, step_inplace
from leapquant.format import MIXED_WIDTH
from leapquant.geometry import H, K

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # scripts/: the flush's comparison
from compare_outputs import bits  # noqa: E402  (bit patterns: -0.0 and NaN payloads compared as bits)

SEED = 7


def outputs(B: int, device: str = "cuda") -> dict:
    """case -> list of CPU tensors."""
    dev = torch.device(device)
    res = {}
    for fam in step_inputs.FAMILIES:
        res[f"step {fam}"] = [t.cpu() for t in step(**step_inputs.make(fam, B, dev, seed=SEED))]
    pool = Pool(2 * B + 1, dev)
    slots = torch.arange(1, 2 * B + 1, dtype=torch.int32, device=dev)
    x = step_inputs.make("random", 2 * B, dev, seed=SEED + 1)
    sl = slots.long()
    for view, name in zip(pool.checkpoint + pool.window, step_inputs.STEP_ARGS):
        view[sl] = x[name]
    gen = torch.Generator(device=dev).manual_seed(SEED)
    pool.hcnt[sl] = torch.randint(0, L + 1, (2 * B, H), generator=gen, device=dev, dtype=torch.int32)
    idx = slots[torch.randperm(2 * B, generator=gen, device=dev)[:B]].clone()
    idx[::7] = 0
    idx[3::11] = -1
    params = step_inputs.model_params(dev)
    for call in range(2):
        mixed = torch.randn(B, MIXED_WIDTH, generator=gen, device=dev).bfloat16()
        a = torch.randn(B, H, K, generator=gen, device=dev).bfloat16()
        b = (2 * torch.randn(B, H, generator=gen, device=dev)).bfloat16()
        o = torch.full((B, H, K), float("nan"), dtype=torch.bfloat16, device=dev)
        step_inplace(pool, idx, mixed, a, b, params["A_log"], params["dt_bias"], o)
        res[f"pool call {call}"] = [o.cpu()] + [t.cpu() for t in pool.window] + [pool.hcnt.cpu()]
    return res


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("mode", choices=("save", "compare"))
    ap.add_argument("path")
    ap.add_argument("--batch-size", type=int, default=64)
    ap.add_argument("--device", default="cuda")
    a = ap.parse_args()
    if a.mode == "save":
        torch.save({"B": a.batch_size, "outputs": outputs(a.batch_size, a.device)}, a.path)
        print(f"saved the step's outputs at B={a.batch_size} to {a.path}")
        return
    saved = torch.load(a.path)
    now = outputs(saved["B"], a.device)
    bad = False
    for case, ref in saved["outputs"].items():
        diff = [int((bits(x.contiguous()) != bits(y.contiguous())).sum()) for x, y in zip(ref, now[case])]
        same = not any(diff)
        bad |= not same
        print(f"{case:22s} {'identical' if same else 'DIFFERENT'} (elements differing per tensor: {diff})")
    sys.exit(1 if bad else 0)


if __name__ == "__main__":
    main()
