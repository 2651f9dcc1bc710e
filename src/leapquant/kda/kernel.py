"""Which flush kernel runs on a device: the choice is made here and nowhere else.

``gluon`` (``flush/gluon_kernel.py``): the Hopper kernel, which runs only on sm_90 devices under a
triton release it was verified with; the default there (``GLUON_BY_DEFAULT``). ``triton``
(``flush/triton_kernel.py``): the portable kernel, everywhere else (other GPUs, other triton releases, Triton's
CPU interpreter). ``LEAPQUANT_KERNEL=triton`` or ``=gluon`` forces one.
Source: LeapQuant (arXiv 2609.38166); NVlabs/kda request conless-leapquant-kda-flush.
"""

from __future__ import annotations

import functools
import os

import torch
import triton

KERNELS = ("gluon", "triton")
FORCE_VARIABLE = "LEAPQUANT_KERNEL"
# On the H200 only the Gluon kernel passes every input family in both forms at every batch size
# (the portable one fails small_state at B >= 256), and it is also the faster of the two with
# every program due (BENCHMARKS.md, 2026-12-01): the default wherever it runs.
GLUON_BY_DEFAULT = True


def _gluon_module():
    try:
        from .flush import gluon_kernel
    except Exception:  # a triton without Gluon, or whose Gluon API the module does not fit
        return None
    return gluon_kernel


@functools.lru_cache(maxsize=None)
def _gluon_runs_on(device: torch.device) -> bool:
    if device.type != "cuda" or os.environ.get("TRITON_INTERPRET", "0") == "1":
        return False
    if torch.cuda.get_device_capability(device) != (9, 0):
        return False
    gluon = _gluon_module()
    return gluon is not None and triton.__version__ in gluon.VERIFIED_TRITON


def choose(device) -> str:
    """The kernel that flushes on ``device``: ``"gluon"`` or ``"triton"``.

    ``LEAPQUANT_KERNEL`` (``gluon`` or ``triton``) forces one; otherwise Gluon where
    ``GLUON_BY_DEFAULT`` is set and ``_gluon_runs_on`` holds (sm_90, verified triton, not
    interpreting), else the portable kernel. Raises ValueError for an unknown forced name, or
    for ``gluon`` forced where it cannot run.
    """
    device = torch.device(device)
    forced = os.environ.get(FORCE_VARIABLE, "")
    if forced and forced not in KERNELS:
        raise ValueError(f"{FORCE_VARIABLE}={forced!r}: expected one of {KERNELS}")
    if forced == "gluon" and not _gluon_runs_on(device):
        gluon = _gluon_module()
        verified = gluon.VERIFIED_TRITON if gluon is not None else ()
        raise ValueError(f"{FORCE_VARIABLE}=gluon, but the Gluon kernel needs an sm_90 device and triton "
                         f"{verified} (have {device}, triton {triton.__version__})")
    if forced:
        return forced
    return "gluon" if GLUON_BY_DEFAULT and _gluon_runs_on(device) else "triton"


def module(name: str):
    """The module of kernel ``name`` (``launch_flush``, ``_flush_kernel``)."""
    if name == "gluon":
        from .flush import gluon_kernel

        return gluon_kernel
    from .flush import triton_kernel

    return triton_kernel


def launch_flush(ckpt_in, ckpt_out, window, q0, idx=None, hcnt=None, picks=None, kernel: str | None = None):
    """Launch the flush on ``kernel`` (default: ``choose(q0.device)``); arguments and semantics
    as ``flush.triton_kernel.launch_flush``."""
    name = kernel or choose(q0.device)
    return module(name).launch_flush(ckpt_in, ckpt_out, window, q0, idx=idx, hcnt=hcnt, picks=picks)
