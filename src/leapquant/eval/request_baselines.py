"""The NVlabs/kda requests' own kernels (their ``baseline.py``, TileLang) as a layer of the engine
loop: the step request's ``step_inplace`` then the flush request's ``flush_inplace``, on one pool
in the requests' layout, filled from one of our pools.

The requests' folders are not part of this package: give their copies' parent folder (holding
``conless-leapquant-<family>-{flush,step}/baseline.py``); tilelang must import. The TileLang
kernels are compiled for a pool size, so every pair here uses ``SLOTS`` slots whatever the batch:
one compile a kernel serves every batch size. Sources: NVlabs/kda requests
conless-leapquant-{kda,gdn}-{flush,step}.
"""

from __future__ import annotations

import functools
import importlib.util
from pathlib import Path

import torch

from ..family import Family

SLOTS = 520  # slots of every pool here: the largest batch (512) and slot 0, rounded up


@functools.lru_cache(maxsize=None)
def baseline(folder: str, family: str, operation: str):
    """The module ``<folder>/conless-leapquant-<family>-<operation>/baseline.py``."""
    path = Path(folder) / f"conless-leapquant-{family}-{operation}" / "baseline.py"
    spec = importlib.util.spec_from_file_location(f"request_baseline_{family}_{operation}", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def available(folder: str | None, family: Family) -> bool:
    """Whether both of ``family``'s baselines import from ``folder`` (tilelang present)."""
    if not folder:
        return False
    try:
        baseline(folder, family.name, "step")
        baseline(folder, family.name, "flush")
    except (ImportError, OSError):
        return False
    return True


class Pair:
    """One layer's state on the requests' kernels: a flush-request pool and a step-request pool
    sharing every tensor (the same layout), its contents copied from ``pool`` (ours, any layout)."""

    def __init__(self, folder: str, pool, family: Family):
        self.step_mod = baseline(folder, family.name, "step")
        self.flush_mod = baseline(folder, family.name, "flush")
        dev = pool.device
        self.flush_pool = self.flush_mod.Pool(SLOTS, dev)
        self.step_pool = self.step_mod.Pool(SLOTS, dev)
        fp, n = self.flush_pool, pool.num_slots
        for name in ("codes", "s_k", "s_v", "uq", "kbuf", "ubuf", "w", "hcnt", *family.window):
            dst, src = getattr(fp, name), getattr(pool, name)
            dst[:n].copy_(src.view(dst[:n].shape))  # (GDN's p: [NS, NH] ours, [NS, NH, 1] theirs)
        for name in vars(self.step_pool):  # the step's pool: the same tensors
            if isinstance(getattr(self.step_pool, name), torch.Tensor) and hasattr(fp, name):
                setattr(self.step_pool, name, getattr(fp, name))
        self.scalar_gate = family.scalar_gate

    def decode(self, idx, mixed, a, b, A_log, dt_bias, o, q0) -> None:
        """The step of ``idx`` (our calls' arguments; GDN's ``a`` ``[N, H]`` and ``dt_bias``
        ``[H]`` given the requests' trailing 1), then the flush of the windows it filled."""
        if self.scalar_gate:
            a, dt_bias = a[..., None], dt_bias[:, None]
        self.step_mod.step_inplace(self.step_pool, idx, mixed, a, b, A_log, dt_bias, o)
        self.flush_mod.flush_inplace(self.flush_pool, idx, q0)
