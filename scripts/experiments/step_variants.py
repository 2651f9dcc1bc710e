"""A/B of Gluon decode-step kernel variants: module constants of ``step/gluon_kernel.py`` set per
variant (read at launch: each Pool compiles its own), the bench's ``time_step`` (pool form,
L2-cold) at a few batch sizes for each, interleaved twice.
``python scripts/experiments/step_variants.py MAX_REGISTERS=128,STAGED=0 MAX_REGISTERS=96 ...``
(``none`` for no register cap)."""

import sys

from leapquant import bench
from leapquant.kda.step import gluon_kernel


def parse(spec: str) -> dict:
    out = {}
    for item in spec.split(","):
        name, value = item.split("=")
        out[name] = None if value == "none" else int(value)
    return out


variants = [parse(v) for v in sys.argv[1:]] or [{"MAX_REGISTERS": None}, {"MAX_REGISTERS": 128}]
defaults = {name: getattr(gluon_kernel, name) for v in variants for name in v}
print("variant  B  median ms")
for rep in range(2):
    for v in variants:
        for name, value in {**defaults, **v}.items():
            setattr(gluon_kernel, name, bool(value) if name == "STAGED" else value)
        label = ",".join(f"{k}={x}" for k, x in v.items())
        for B in (64, 256, 512):
            print(f"{label} {B} {bench.time_step(B, 'cuda')['median_ms']:.4f}", flush=True)
