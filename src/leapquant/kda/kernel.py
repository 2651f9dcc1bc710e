"""Which kernel runs an operation on a device: the choice is made here and nowhere else.

Two operations on one pool: ``flush`` (the window-boundary re-quantization) and ``step`` (the
per-token decode step). Kernels:

- ``gluon``: the Hopper kernels (``flush/gluon_kernel.py``, ``step/gluon_kernel.py``), which run
  only on sm_90 devices under a triton release they were verified with; the default there
  (``GLUON_BY_DEFAULT``).
- ``triton``: the portable kernels (``flush/triton_kernel.py``, ``step/triton_kernel.py``),
  everywhere else (other GPUs, other triton releases, Triton's CPU interpreter).

``LEAPQUANT_KERNEL=triton`` or ``=gluon`` forces one for both operations.
Source: LeapQuant (arXiv 2609.38166); NVlabs/kda requests conless-leapquant-kda-flush and
conless-leapquant-kda-step.
"""

from __future__ import annotations

import functools
import importlib
import os

import torch
import triton

from .launch import interpreting

KERNELS = ("gluon", "triton")
OPERATIONS = {"flush": ("gluon", "triton"), "step": ("gluon", "triton")}  # the kernels each operation has
FORCE_VARIABLE = "LEAPQUANT_KERNEL"
# On the H200 both kernels of each operation pass every accuracy case at every batch size, and the
# Gluon ones are the faster (BENCHMARKS.md, 2026-12-02: the flush 1.9x with every program due at
# B=256, the step 2.4x): the default wherever they run.
GLUON_BY_DEFAULT = True


def _gluon_module(op: str = "flush"):
    try:
        return module("gluon", op)
    except Exception:  # a triton without Gluon, or whose Gluon API the module does not fit
        return None


@functools.lru_cache(maxsize=None)
def _gluon_runs_on(device: torch.device, op: str = "flush") -> bool:
    if device.type != "cuda" or interpreting():
        return False
    if torch.cuda.get_device_capability(device) != (9, 0):
        return False
    gluon = _gluon_module(op)
    return gluon is not None and triton.__version__ in gluon.VERIFIED_TRITON


def runnable(device, op: str = "flush") -> tuple[str, ...]:
    """The kernels of ``op`` (``"flush"`` or ``"step"``) that can run on ``device``: the portable
    one always, the Gluon one where ``_gluon_runs_on`` holds; in ``OPERATIONS`` order. Raises
    ValueError for an unknown ``op``."""
    if op not in OPERATIONS:
        raise ValueError(f"unknown operation {op!r}: expected one of {tuple(OPERATIONS)}")
    device = torch.device(device)
    return tuple(k for k in OPERATIONS[op] if k == "triton" or _gluon_runs_on(device, op))


def choose(device, op: str = "flush") -> str:
    """The kernel that runs ``op`` (``"flush"`` or ``"step"``) on ``device``: ``"gluon"`` or
    ``"triton"``.

    ``LEAPQUANT_KERNEL`` (``gluon`` or ``triton``) forces one where ``op`` has it; otherwise
    Gluon where ``op`` has a Gluon kernel, ``GLUON_BY_DEFAULT`` is set and ``_gluon_runs_on``
    holds (sm_90, verified triton, not interpreting), else the portable kernel. Raises
    ValueError for an unknown ``op`` or forced name, or for ``gluon`` forced where it cannot run.
    """
    if op not in OPERATIONS:
        raise ValueError(f"unknown operation {op!r}: expected one of {tuple(OPERATIONS)}")
    device = torch.device(device)
    forced = os.environ.get(FORCE_VARIABLE, "")
    if forced and forced not in KERNELS:
        raise ValueError(f"{FORCE_VARIABLE}={forced!r}: expected one of {KERNELS}")
    if forced == "gluon" and not _gluon_runs_on(device, op):
        gluon = _gluon_module(op)
        verified = gluon.VERIFIED_TRITON if gluon is not None else ()
        raise ValueError(f"{FORCE_VARIABLE}=gluon, but the Gluon kernel needs an sm_90 device and triton "
                         f"{verified} (have {device}, triton {triton.__version__})")
    has = OPERATIONS[op]
    if forced in has:
        return forced
    return "gluon" if "gluon" in has and GLUON_BY_DEFAULT and _gluon_runs_on(device, op) else "triton"


def module(name: str, op: str = "flush"):
    """The module of kernel ``name`` for ``op``: ``flush.gluon_kernel`` or ``flush.triton_kernel``
    (``launch_flush``, ``_flush_kernel``), ``step.gluon_kernel`` or ``step.triton_kernel``
    (``launch_step``, ``_step_kernel``). Raises ValueError for a kernel ``op`` does not have."""
    if name not in OPERATIONS.get(op, ()):
        raise ValueError(f"operation {op!r} has no {name!r} kernel (has {OPERATIONS.get(op)})")
    return importlib.import_module(f".{op}.{name}_kernel", __package__)


def launch_flush(ckpt_in, ckpt_out, window, q0, idx=None, hcnt=None, picks=None, kernel: str | None = None):
    """Launch the flush on ``kernel`` (default: ``choose(q0.device)``); arguments and semantics
    as ``flush.triton_kernel.launch_flush``."""
    name = kernel or choose(q0.device)
    return module(name).launch_flush(ckpt_in, ckpt_out, window, q0, idx=idx, hcnt=hcnt, picks=picks)


def launch_step(ckpt, window, fill, token, A_log, dt_bias, o, new=None, idx=None, kernel: str | None = None):
    """Launch the decode step on ``kernel`` (default: ``choose(o.device, "step")``); arguments and
    semantics as ``step.triton_kernel.launch_step``."""
    name = kernel or choose(o.device, "step")
    return module(name, "step").launch_step(ckpt, window, fill, token, A_log, dt_bias, o, new=new, idx=idx)
