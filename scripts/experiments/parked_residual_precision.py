"""The criterion's cost of parking E between the scales and the codes (a design question of the
seventeenth session, NOTES.md "E parked between the scales and the codes"): the flush emulation
(``flush.emulation.flush_emulated``, Gluon arithmetic) with its ``scales_and_codes`` replaced by
one that computes s_k and s_v from fp32 E as the kernel does, but the codes from a parked copy of
each 64-column half of E / s_k:

- ``int16``: fixed point under the half's row maximum m (r = round(32767 t / m), t = E / s_k),
  the codes from r m / 32767;
- ``fp16``: E in fp16 under a power of two a row and half, then divided by s_k (the request's
  TileLang kernel parks its residual in fp16 under one power of two for a warp's 32 rows and a
  half: coarser than this).

Prints each family's worst ratio in both forms of SPEC section 5 (head, every (batch, head)) for
the exact codes and both parkings, on the CPU.

    python scripts/experiments/parked_residual_precision.py [B]   (default 16; ~30 s on 2 cores)
"""

import sys

import torch

from leapquant.eval import flush_criterion, flush_inputs
from leapquant.kda.flush import emulation, naive
from leapquant.kda.geometry import QMAX

HALF = 64
EXACT = emulation.scales_and_codes  # the kernel's scales (and codes), as main computes them


def parked_scales_and_codes(mode: str):
    def scales_and_codes(E: torch.Tensor):
        _, s_k, s_v = EXACT(E)  # the scales from fp32 E, unchanged
        inv_k = 1.0 / s_k
        t = E * inv_k.unsqueeze(-2)
        halves = []
        for h in range(E.shape[-1] // HALF):
            cols = slice(HALF * h, HALF * (h + 1))
            if mode == "int16":
                m = t[..., cols].abs().amax(-1, keepdim=True)
                m = torch.where(m > 0, m, torch.ones_like(m))
                halves.append(torch.round(t[..., cols] * (32767.0 / m)) * (m / 32767.0))
            else:
                m = E[..., cols].abs().amax(-1, keepdim=True)
                p = torch.exp2(torch.floor(torch.log2(torch.where(m > 0, m, torch.ones_like(m)))) - 14)
                halves.append((E[..., cols] / p).half().float() * p * inv_k[..., cols].unsqueeze(-2))
        x = torch.cat(halves, -1) * (QMAX / s_v).unsqueeze(-1)
        return torch.round(x.clamp(-QMAX, QMAX)).to(torch.int8), s_k, s_v
    return scales_and_codes


def main():
    B = int(sys.argv[1]) if len(sys.argv) > 1 else 16
    print(f"B={B}: worst err/err_ref, head form / every (batch, head) form")
    for family in flush_inputs.all_families():
        x = flush_inputs.make(family, B, seed=3)
        args = [x[k] for k in flush_inputs.FLUSH_ARGS]
        ref = naive.reference(*args)
        cells = []
        for mode in ("exact", "int16", "fp16"):
            emulation.scales_and_codes = EXACT if mode == "exact" else parked_scales_and_codes(mode)
            r = flush_criterion.evaluate(x, emulation.flush_emulated(*args, kernel="gluon"), ref)
            cells.append(f"{mode} {'PASS' if r['ok'] else 'FAIL'} {r['head'].worst_ratio:.5f} / "
                         f"{r['batch_head'].worst_ratio:.5f}")
        emulation.scales_and_codes = EXACT
        print(f"{family:14s} " + " | ".join(cells), flush=True)


if __name__ == "__main__":
    main()
