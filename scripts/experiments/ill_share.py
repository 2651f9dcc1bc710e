"""How often the flush's unit-scaled qk path finds its qv basis ill-conditioned in the engine
loop's states, by the window's gate product (CPU; the evidence for ``geometry.ORTHONORMAL_QK_BELOW``).

    python scripts/experiments/ill_share.py [--family gdn] [--batch 16] [--tokens 40] [--skip 16]

Runs one layer of the engine loop's model (``leapquant.eval.engine_loop.Model``: its pool, staggered
windows, tokens and gates) on the CPU: a step and a flush a token. Before each flush, for every due
program, the rebuilt state S (fp64) and the kernels' test on X = S S^T q0: the qv basis
``flush.emulation.basis`` builds, flagged where a column keeps less than ``ILL_COLUMN`` of its
squared norm. Counts from token ``--skip`` on (the windows the steps built), binned by the gate
product p (GDN) or by exp(max pcum) (KDA)."""

import argparse

import torch

from leapquant.eval import engine_loop
from leapquant.eval.step_loop import FAMILY_API
from leapquant.family import FAMILIES
from leapquant.flush import emulation, naive
from leapquant.geometry import ILL_COLUMN, L

BINS = (0.0, 1e-8, 1e-4, 1e-3, 1e-2, 0.1, 1.01)


def ill_flags(S: torch.Tensor, q0: torch.Tensor) -> torch.Tensor:
    """[n] bool: the unit-scaled path's qv basis of S [n, V, K] is ill-conditioned (the kernels'
    flag; column scalings of S^T q0 do not change it)."""
    return emulation.basis(S @ (S.transpose(-1, -2) @ q0.to(S.dtype)), twice=True, flag_below=ILL_COLUMN)[1]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--family", default="gdn", choices=sorted(FAMILIES))
    ap.add_argument("--batch", type=int, default=16)
    ap.add_argument("--tokens", type=int, default=40)
    ap.add_argument("--skip", type=int, default=L)
    args = ap.parse_args()
    fam = FAMILIES[args.family]
    api = FAMILY_API[fam.name]
    m = engine_loop.Model(args.batch, "cpu", layers=1, matmul=False, fla=False, family=fam)
    pool, par = m.pools[0], m.params
    gates, flags = [], []
    for t in range(args.tokens):
        api.step_inplace(pool, m.idx, m.mixed, m.a, m.b, par["A_log"], par["dt_bias"], m.o)
        due = pool.hcnt == L
        if t >= args.skip and bool(due.any()):
            slot, head = due.nonzero(as_tuple=True)
            ckpt = [x[slot, head] for x in pool.checkpoint]
            win = dict(zip(fam.window, (x[slot, head] for x in pool.window)))
            if fam.scalar_gate:
                S = naive.rebuild_scalar(*ckpt, win["kbuf"], win["ubuf"], win["w"], win["p"], torch.float64)
                gates.append(win["p"])
            else:
                S = naive.rebuild(*ckpt, win["kbuf"], win["ubuf"], win["gbuf"], win["w"], win["pcum"], torch.float64)
                gates.append(win["pcum"].max(-1).values.exp())
            flags.append(ill_flags(S, m.q0))
        api.flush_inplace(pool, m.idx, m.q0)
    g, f = torch.cat(gates), torch.cat(flags)
    print(f"{fam.name}: {int(f.sum())} of {f.numel()} flushed programs ill (tokens {args.skip} to {args.tokens - 1})")
    for lo, hi in zip(BINS, BINS[1:]):
        sel = (g >= lo) & (g < hi)
        print(f"  gate in [{lo:g}, {hi:g}): {int(sel.sum())} programs, {int(f[sel].sum())} ill")


if __name__ == "__main__":
    main()
