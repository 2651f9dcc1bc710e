"""The NVlabs/kda requests' own kernels (their ``baseline.py``, TileLang) as the layers of the
engine loop: the step request's ``step_inplace`` then the flush request's ``flush_inplace``, on one
pool in the requests' layout holding every layer, filled from our pools.

The requests' folders are not part of this package: give their copies' parent folder (holding
``conless-leapquant-<family>-{flush,step}/baseline.py``); tilelang must import. The TileLang
kernels are compiled for a pool size, so the pool here has ``SLOTS`` slots whatever the batch,
the size the request benchmarks' own timing takes at their largest batch: one compile a kernel
serves every batch size and both. Sources: NVlabs/kda requests
conless-leapquant-{kda,gdn}-{flush,step}."""

from __future__ import annotations

import functools
import importlib.util
from pathlib import Path

import torch

from ..family import Family

LAYER_SLOTS = 513  # slots a layer takes in the shared pool: the largest batch (512) and its slot 0
SLOTS = 8 * LAYER_SLOTS  # 4,104: the request benchmarks' own largest pool (8 sets of 512 and 8), so
# the kernels compiled for those serve here too


@functools.lru_cache(maxsize=None)
def baseline(folder: str, family: str, operation: str):
    """The module ``<folder>/conless-leapquant-<family>-<operation>/baseline.py``."""
    path = Path(folder) / f"conless-leapquant-{family}-{operation}" / "baseline.py"
    spec = importlib.util.spec_from_file_location(f"request_baseline_{family}_{operation}", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


UNAVAILABLE: dict = {}  # (folder, family name) -> why its baselines did not import


def available(folder: str | None, family: Family) -> bool:
    """Whether both of ``family``'s baselines import from ``folder`` (tilelang present); why
    not is kept in ``UNAVAILABLE``."""
    if not folder:
        return False
    try:
        baseline(folder, family.name, "step")
        baseline(folder, family.name, "flush")
    except Exception as err:  # a missing file, tilelang or one of its libraries
        UNAVAILABLE[(folder, family.name)] = repr(err)[:300]
        return False
    return True


class Layers:
    """The layers' states on the requests' kernels: one pool in the requests' layout (``SLOTS``
    slots; a flush-request pool and a step-request pool sharing every tensor), layer ``l`` in
    slots ``l * LAYER_SLOTS + 1 ..``, its contents copied from ``pools[l]`` (ours, any layout).
    Building it compiles the requests' kernels (tilelang, nvcc). Each layer's ids are made once
    a ``(layer, idx)`` and kept: an ``idx`` rewritten in place is not seen (the engine loop's is
    fixed).

    Raises: ValueError for more layers or slots than ``SLOTS`` holds; whatever the requests'
    modules raise (a compile that fails)."""

    def __init__(self, folder: str, pools: list, family: Family):
        if len(pools) * LAYER_SLOTS > SLOTS or any(p.num_slots > LAYER_SLOTS for p in pools):
            raise ValueError(f"at most {SLOTS // LAYER_SLOTS} layers of {LAYER_SLOTS} slots")
        self.step_mod = baseline(folder, family.name, "step")
        self.flush_mod = baseline(folder, family.name, "flush")
        dev = pools[0].device
        self.flush_pool = fp = self.flush_mod.Pool(SLOTS, dev)
        self.step_pool = self.step_mod.Pool(SLOTS, dev)
        for layer, pool in enumerate(pools):
            part = slice(layer * LAYER_SLOTS, layer * LAYER_SLOTS + pool.num_slots)
            for name in ("codes", "s_k", "s_v", "uq", "kbuf", "ubuf", "w", "hcnt", *family.window):
                dst = getattr(fp, name)[part]
                dst.copy_(getattr(pool, name).view(dst.shape))  # (GDN's p: [NS, NH] ours, [NS, NH, 1] theirs)
        for name in vars(self.step_pool):  # the step's pool: the same tensors
            if isinstance(getattr(self.step_pool, name), torch.Tensor) and hasattr(fp, name):
                setattr(self.step_pool, name, getattr(fp, name))
        self.scalar_gate = family.scalar_gate
        self._ids = {}

    def decode(self, layer: int, idx, mixed, a, b, A_log, dt_bias, o, q0) -> None:
        """Layer ``layer``'s step of ``idx`` (our calls' arguments and slot ids; GDN's ``a``
        ``[N, H]`` and ``dt_bias`` ``[H]`` given the requests' trailing 1), then the flush of the
        windows it filled. The layer's ids in the shared pool are made on its first call."""
        key = (layer, idx.data_ptr(), idx.numel())
        if key not in self._ids:
            self._ids[key] = torch.where(idx > 0, idx + layer * LAYER_SLOTS, 0).to(torch.int32)
        ids = self._ids[key]
        if self.scalar_gate:
            a, dt_bias = a[..., None], dt_bias[:, None]
        self.step_mod.step_inplace(self.step_pool, ids, mixed, a, b, A_log, dt_bias, o)
        self.flush_mod.flush_inplace(self.flush_pool, ids, q0)
