"""The Gluon spellings the two Gluon kernels (``flush/gluon_kernel.py``, ``step/gluon_kernel.py``)
use that differ between the triton releases they compile with (``launch.GLUON_COMPILES_WITH``),
each bound here to the one this triton has. Every name lowers to the same PTX under every
release; only its spelling moves:

- ``thread_barrier()``: a barrier of the CTA's threads (``bar.sync``). ``gl.thread_barrier`` in
  3.6 (a ``gpu.barrier``); 3.7 removed it for ``gl.barrier(cluster=False)`` (a ``ttg.barrier
  all``, the same ``bar.sync``).
- ``async_load(smem, pointer, mask=None)``: a cp.async copy of ``pointer``'s elements into the
  shared-memory buffer ``smem``, zero-filled where ``mask`` is false (``async_copy.commit_group``
  and ``async_copy.wait_group`` keep their names). ``async_copy.async_copy_global_to_shared`` in
  3.6 and 3.7; 3.8 renamed it ``async_copy.async_load`` (the old name an alias); 3.9 keeps only
  ``async_load`` (the old name raises).
- ``reinterpret(smem, dtype, shape, layout)``: the same shared memory as another dtype, shape and
  layout. A descriptor method ``_reinterpret(dtype, shape, layout)`` up to 3.8 (optional
  arguments from 3.8); 3.9 renamed it ``reinterpret``.
"""

from __future__ import annotations

from triton.experimental.gluon import language as gl
from triton.experimental.gluon.language._core import builtin
from triton.experimental.gluon.language.nvidia.ampere import async_copy

__all__ = ["async_load", "reinterpret", "thread_barrier"]

thread_barrier = gl.thread_barrier if hasattr(gl, "thread_barrier") else gl.barrier

async_load = async_copy.async_load if hasattr(async_copy, "async_load") else async_copy.async_copy_global_to_shared

_REINTERPRET = "reinterpret" if hasattr(gl.shared_memory_descriptor, "reinterpret") else "_reinterpret"


@builtin
def reinterpret(smem, dtype, shape, layout, _semantic=None):
    """``smem``'s memory as a ``dtype`` buffer of ``shape`` in the shared layout ``layout``."""
    return getattr(smem, _REINTERPRET)(dtype, shape, layout, _semantic=_semantic)
