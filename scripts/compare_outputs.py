"""Bit-for-bit comparison of two versions of the package on the GPU: every input family at one
batch size through ``run()``. Run it once with each version on PYTHONPATH:

    PYTHONPATH=A/src python scripts/compare_outputs.py save /tmp/a.pt [--batch-size 512]
    PYTHONPATH=B/src python scripts/compare_outputs.py compare /tmp/a.pt

The second call prints which kernel ran, then per family whether the five outputs (codes, s_k,
s_v, u, q) are identical bit for bit (signed zeros and NaN payloads included) and how many
elements of each differ; it exits with status 1 if any family differs. It reruns at the batch
size and seed the saved file records. A kernel change meant to reorder work without changing
arithmetic (NOTES items 47, 49, 51) must print "identical" for every family.
"""

import argparse
import sys

import torch

from leapquant.eval import flush_inputs as inputs
from leapquant import kernel
from leapquant.kda import run

SEED = 3


def bits(t: torch.Tensor) -> torch.Tensor:
    """The tensor's bit patterns as integers of its width (comparing floats as floats would take
    -0.0 for +0.0 and never match a NaN)."""
    return t.view({1: torch.int8, 2: torch.int16, 4: torch.int32, 8: torch.int64}[t.element_size()])


def outputs(batch_size: int, seed: int) -> dict:
    """family -> the five outputs of run() on the GPU, copied to the CPU."""
    result = {}
    for family in inputs.FAMILIES + inputs.STRESS_FAMILIES:
        result[family] = [t.cpu() for t in run(**inputs.make(family, batch_size, "cuda", seed=seed))]
    return result


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("mode", choices=("save", "compare"))
    ap.add_argument("path")
    ap.add_argument("--batch-size", type=int, default=512, help="save only; compare uses the saved one")
    args = ap.parse_args()
    name = kernel.choose(torch.device("cuda"))
    if args.mode == "save":
        torch.save({"batch_size": args.batch_size, "seed": SEED, "kernel": name,
                    "outputs": outputs(args.batch_size, SEED)}, args.path)
        print(f"saved {name} kernel's outputs at B={args.batch_size} to {args.path}")
        return
    saved = torch.load(args.path)
    mine = outputs(saved["batch_size"], saved["seed"])
    print(f"B={saved['batch_size']}: this {name} kernel against the saved {saved['kernel']} kernel")
    same = True
    for family, theirs in saved["outputs"].items():
        differing = [int((bits(a) != bits(b)).sum()) for a, b in zip(mine[family], theirs, strict=True)]
        same = same and not any(differing)
        verdict = "identical" if not any(differing) else "DIFFERENT"
        print(f"{family:14s} {verdict} (elements differing in codes, s_k, s_v, u, q: {differing})")
    sys.exit(0 if same else 1)


if __name__ == "__main__":
    main()
