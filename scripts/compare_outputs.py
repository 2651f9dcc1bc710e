"""Bit-for-bit comparison of two versions of the package on the GPU: every input family at one
batch size through ``run()``. Run it once with each version on PYTHONPATH:

    PYTHONPATH=A/src python scripts/compare_outputs.py save /tmp/a.pt [--batch-size 512]
    PYTHONPATH=B/src python scripts/compare_outputs.py compare /tmp/a.pt [--batch-size 512]

The second call prints, per family, whether the five outputs (codes, s_k, s_v, u, q) are
identical and how many elements of each differ. A change meant to reorder work without changing
arithmetic (NOTES items 47, 49) must print "identical" for every family.
"""

import argparse

import torch

from leapquant.kda import inputs, run


def outputs(batch_size: int, seed: int = 3) -> dict:
    """family -> the five outputs of run() on the CPU."""
    result = {}
    for family in inputs.FAMILIES + inputs.STRESS_FAMILIES:
        result[family] = [t.cpu() for t in run(**inputs.make(family, batch_size, "cuda", seed=seed))]
    return result


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("mode", choices=("save", "compare"))
    ap.add_argument("path")
    ap.add_argument("--batch-size", type=int, default=512)
    args = ap.parse_args()
    mine = outputs(args.batch_size)
    if args.mode == "save":
        torch.save(mine, args.path)
        return
    theirs = torch.load(args.path)
    for family, outs in mine.items():
        differing = [int((a != b).sum()) for a, b in zip(outs, theirs[family])]
        verdict = "identical" if not any(differing) else "DIFFERENT"
        print(f"{family:14s} {verdict} (elements differing in codes, s_k, s_v, u, q: {differing})")


if __name__ == "__main__":
    main()
