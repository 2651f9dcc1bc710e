"""Which kernel runs an operation on a device, and why: the choice is made here and nowhere else.

Two operations on one pool: ``flush`` (the window-boundary re-quantization) and ``step`` (the
per-token decode step). Kernels:

- ``gluon``: the Hopper kernels (``flush/gluon_kernel.py``, ``step/gluon_kernel.py``), for sm_90
  devices. Run on a GPU under the triton releases of ``GLUON_VERIFIED_TRITON``; compiled offline
  for sm_90a under every release of ``GLUON_COMPILES_WITH``. Under any other release they run
  only after a self-check on the GPU (``self_check.py``: a few programs of each operation through
  both kernels, judged by the accuracy criteria); a failed check falls back to the portable
  kernels with a warning.
- ``triton``: the portable kernels (``flush/triton_kernel.py``, ``step/triton_kernel.py``),
  everywhere else (other GPUs, Triton's CPU interpreter), and on sm_90 where the Gluon kernels do
  not import or fail their check. On sm_90 that is several times slower: a one-time warning says
  why and what to install.

``LEAPQUANT_KERNEL=triton`` or ``=gluon`` forces one for both operations;
``LEAPQUANT_SELF_CHECK=1`` runs the self-check even on a verified release, ``=fail`` runs it and
fails it (for tests). Source: LeapQuant (arXiv 2609.38166); NVlabs/kda requests
conless-leapquant-kda-flush and conless-leapquant-kda-step.
"""

from __future__ import annotations

import functools
import importlib
import os
import warnings

import torch
import triton

from .family import FAMILIES
from .geometry import H
from .launch import GLUON_VERIFIED_TRITON, interpreting

KERNELS = ("gluon", "triton")
OPERATIONS = {"flush": ("gluon", "triton"), "step": ("gluon", "triton")}  # the kernels each operation has
FORCE_VARIABLE = "LEAPQUANT_KERNEL"
SELF_CHECK_VARIABLE = "LEAPQUANT_SELF_CHECK"  # "1": check a verified release too; "fail": check and fail
# the torch releases whose triton the Gluon kernels were run with on a GPU (torch 2.11 pins 3.6.0)
VERIFIED_TORCH = "2.11"
INSTALL_HINT = (f"install torch {VERIFIED_TORCH} with its triton {GLUON_VERIFIED_TRITON[0]} "
                f"(pip install 'torch=={VERIFIED_TORCH}.*' 'triton=={GLUON_VERIFIED_TRITON[0]}') for the Gluon kernels")
_WARNED: set = set()


def module(name: str, op: str = "flush"):
    """The module of kernel ``name`` for ``op``: ``flush.gluon_kernel`` or ``flush.triton_kernel``
    (``launch_flush``, ``_flush_kernel``), ``step.gluon_kernel`` or ``step.triton_kernel``
    (``launch_step``, ``_step_kernel``). Raises ValueError for a kernel ``op`` does not have."""
    if name not in OPERATIONS.get(op, ()):
        raise ValueError(f"operation {op!r} has no {name!r} kernel (has {OPERATIONS.get(op)})")
    return importlib.import_module(f".{op}.{name}_kernel", __package__)


@functools.lru_cache(maxsize=None)
def _gluon_import_error() -> str | None:
    try:
        for op in OPERATIONS:
            module("gluon", op)
    except Exception as e:  # a triton without Gluon, or whose Gluon API the modules do not fit
        return f"{type(e).__name__}: {e}"
    return None


def _hopper(device: torch.device) -> bool:
    return device.type == "cuda" and not interpreting() and torch.cuda.get_device_capability(device) == (9, 0)


@functools.lru_cache(maxsize=None)
def _gluon_verdict(device: torch.device, heads: int, layout: str, family: str = "kda") -> tuple[bool, str]:
    # (whether the Gluon kernels run on this sm_90 device, why), self-check included
    err = _gluon_import_error()
    if err is not None:
        return False, f"the Gluon kernels do not import under triton {triton.__version__} ({err})"
    forced = os.environ.get(SELF_CHECK_VARIABLE, "")
    if triton.__version__ in GLUON_VERIFIED_TRITON and forced not in ("1", "fail"):
        return True, f"triton {triton.__version__} is a release the Gluon kernels were verified with on a GPU"
    from .self_check import self_check

    ok, detail = self_check(device, heads, layout, fail=forced == "fail", family=FAMILIES[family])
    if ok:
        return True, f"the Gluon kernels passed their self-check on this GPU under triton {triton.__version__} ({detail})"
    return False, f"the Gluon kernels failed their self-check under triton {triton.__version__} ({detail})"


def decide(device, op: str = "flush", heads: int = H, layout: str = "packed", family: str = "kda") -> tuple[str, str]:
    """``(kernel, reason)``: the kernel that runs ``op`` (``"flush"`` or ``"step"``) on ``device``
    for a pool of ``heads`` heads in ``layout`` of ``family`` ("kda" or "gdn": its builds are the
    ones self-checked) (``"gluon"`` or ``"triton"``), and why, in words.

    ``LEAPQUANT_KERNEL`` forces one; otherwise Gluon on sm_90 where its modules import and the
    release is verified or the self-check passes (run once a process for each device, head count and layout), else the
    portable kernel, with a one-time ``RuntimeWarning`` on sm_90. Raises ValueError for an
    unknown ``op`` or forced name, or for ``gluon`` forced where it cannot run."""
    if op not in OPERATIONS:
        raise ValueError(f"unknown operation {op!r}: expected one of {tuple(OPERATIONS)}")
    device = torch.device(device)
    forced = os.environ.get(FORCE_VARIABLE, "")
    if forced and forced not in KERNELS:
        raise ValueError(f"{FORCE_VARIABLE}={forced!r}: expected one of {KERNELS}")
    if forced == "triton":
        return "triton", f"{FORCE_VARIABLE}=triton"
    if not _hopper(device):
        if forced == "gluon":
            raise ValueError(f"{FORCE_VARIABLE}=gluon, but the Gluon kernels need an sm_90 device (have {device})")
        where = "the CPU interpreter" if interpreting() or device.type != "cuda" else \
            "compute capability %d.%d (the Gluon kernels are for sm_90)" % torch.cuda.get_device_capability(device)
        return "triton", f"the portable kernel on {where}"
    if forced == "gluon":
        err = _gluon_import_error()
        if err is not None:
            raise ValueError(f"{FORCE_VARIABLE}=gluon, but the Gluon kernels do not import ({err})")
        return "gluon", f"{FORCE_VARIABLE}=gluon"
    runs, why = _gluon_verdict(device, heads, layout, family)
    if runs:
        return "gluon", why
    _warn_once(device, why)
    return "triton", why


def _warn_once(device: torch.device, why: str) -> None:
    if why in _WARNED:
        return
    _WARNED.add(why)
    warnings.warn(f"leapquant: the portable Triton kernels run on {torch.cuda.get_device_name(device)} (sm_90), several "
                  f"times slower than the Gluon kernels, because {why}; {INSTALL_HINT}", RuntimeWarning, stacklevel=3)


def choose(device, op: str = "flush", heads: int = H, layout: str = "packed") -> str:
    """The kernel of ``decide`` (``"gluon"`` or ``"triton"``), without the reason."""
    return decide(device, op, heads, layout)[0]


def choose_for_pool(pool) -> tuple[str, str, str]:
    """``(flush kernel, step kernel, reason)`` for a CUDA ``Pool``, picked once for its life."""
    flush, why = decide(pool.device, "flush", pool.heads, pool.layout, pool.family.name)
    step, why_step = decide(pool.device, "step", pool.heads, pool.layout, pool.family.name)
    return flush, step, why if why == why_step else f"flush: {why}; step: {why_step}"


def runnable(device, op: str = "flush") -> tuple[str, ...]:
    """The kernels of ``op`` (``"flush"`` or ``"step"``) that can run on ``device``: the portable
    one always, the Gluon one on sm_90 where its modules import (verified or not); in
    ``OPERATIONS`` order. Raises ValueError for an unknown ``op``."""
    if op not in OPERATIONS:
        raise ValueError(f"unknown operation {op!r}: expected one of {tuple(OPERATIONS)}")
    device = torch.device(device)
    gluon = _hopper(device) and _gluon_import_error() is None
    return tuple(k for k in OPERATIONS[op] if k == "triton" or gluon)


def launch_flush(ckpt_in, ckpt_out, window, q0, idx=None, hcnt=None, picks=None, kernel: str | None = None,
                 ctas_per_sm: int | None = None):
    """Launch the flush on ``kernel`` (default: ``choose(q0.device)``) with ``ctas_per_sm``
    resident CTAs an SM (default: the kernel's ``CTAS_PER_SM``); arguments and semantics as
    ``flush.triton_kernel.launch_flush``."""
    name = kernel or choose(q0.device, heads=ckpt_in[0].shape[1])
    grid = {"ctas_per_sm": ctas_per_sm} if ctas_per_sm else {}
    return module(name).launch_flush(ckpt_in, ckpt_out, window, q0, idx=idx, hcnt=hcnt, picks=picks, **grid)


def launch_step(ckpt, window, fill, token, A_log, dt_bias, o, new=None, idx=None, errors=None, guard_full=False,
                key_group: int = 1, kernel: str | None = None):
    """Launch the decode step on ``kernel`` (default: ``choose(o.device, "step")``); arguments and
    semantics as ``step.triton_kernel.launch_step``."""
    name = kernel or choose(o.device, "step", heads=o.shape[1])
    return module(name, "step").launch_step(ckpt, window, fill, token, A_log, dt_bias, o, new=new, idx=idx,
                                            errors=errors, guard_full=guard_full, key_group=key_group)
