"""Shared pieces of the command-line reports: environment record, accuracy cases, tables.
Source of the criterion and the families: LeapQuant (arXiv 2609.38166); NVlabs/kda request
conless-leapquant-kda-flush."""

from __future__ import annotations

import argparse
import contextlib
import datetime
import json
import math
import os
import platform
import sys

import torch

from ..kda import reference, run
from . import flush_criterion as criterion
from . import flush_inputs as inputs


# what the reports say when there is no GPU: the CPU paths are the references' arithmetic (the
# flush's with its robustness guards), so near-1 ratios check the harness rather than a kernel
CPU_PATH_NOTE = ("no CUDA device: judging the CPU paths (the fp32 PyTorch flush and step, the references' "
                 "arithmetic, so ratios near 1.0000 check the harness rather than a kernel)")


def environment(device: torch.device) -> dict:
    """Date, machine, GPU, library versions and the kernels that run the flush (``kernel``) and the
    step (``step_kernel``) with why (``kernel_reason``, ``step_kernel_reason``; ``kernel.decide``),
    for every JSON the reports write."""
    env = {
        "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "host": platform.node(),
        "python": platform.python_version(),
        "torch": torch.__version__,
        "device": str(device),
    }
    try:
        import triton

        env["triton"] = triton.__version__
    except ImportError:
        env["triton"] = None
    if device.type == "cuda":
        p = torch.cuda.get_device_properties(device)
        env.update(gpu=p.name, sm_count=p.multi_processor_count, cuda=torch.version.cuda,
                   capability=f"{p.major}.{p.minor}")
    from ..kernel import decide

    if device.type == "cuda":
        env["kernel"], env["kernel_reason"] = decide(device)
        env["step_kernel"], env["step_kernel_reason"] = decide(device, "step")
    else:
        env["kernel"], env["step_kernel"] = "cpu (PyTorch flush)", "cpu (PyTorch step)"
        env["kernel_reason"] = env["step_kernel_reason"] = "no CUDA device: the pools run the fp32 PyTorch paths"
    return env


def accuracy_case(family: str, B: int, device, seed: int):
    """Build the inputs of ``family``, flush them with ``run`` and with the fp32 reference,
    and judge ``run`` (SPEC section 5). Returns ``(inputs, candidate, reference, verdict)``."""
    x = inputs.make(family, B, device, seed)
    cand = run(**x)
    ref = inputs.chunked(reference, x)
    return x, cand, ref, criterion.evaluate(x, cand, ref)


def parse_sizes(text: str) -> list[int]:
    """argparse type for ``--batch-sizes``: a comma list of positive ints."""
    try:
        sizes = [int(s) for s in text.split(",") if s.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a comma list of batch sizes, got {text!r}") from None
    if not sizes or min(sizes) < 1:
        raise argparse.ArgumentTypeError(f"batch sizes must be positive integers, got {text!r}")
    return sizes


def pick_device(name: str | None, parser: argparse.ArgumentParser) -> torch.device:
    """The ``--device`` choice (default: cuda when present); a parser error for cuda without CUDA."""
    if name == "cuda" and not torch.cuda.is_available():
        parser.error("--device cuda, but CUDA is not available")
    if name:
        return torch.device(name)
    return torch.device("cuda" if torch.cuda.is_available() else "cpu")


STDOUT = "-"  # an output option's value that means standard output


def check_output(parser: argparse.ArgumentParser, option: str, path: str | None, stdout_ok: bool = True) -> None:
    """Before any work: a parser error (exit 2) unless ``path`` (the value of ``option``) is None,
    ``-`` (standard output, where ``stdout_ok``) or a file whose folder exists and is writable."""
    if path is None or (stdout_ok and path == STDOUT):
        return
    if path == STDOUT:
        parser.error(f"{option} -: only --json can go to standard output")
    folder = os.path.dirname(os.path.abspath(path))
    if not os.path.isdir(folder):
        parser.error(f"{option} {path}: folder {folder} does not exist")
    if os.path.isdir(path):
        parser.error(f"{option} {path}: is a folder")
    if not os.access(folder, os.W_OK):
        parser.error(f"{option} {path}: folder {folder} is not writable")


def human_output(json_path: str | None):
    """Where a report prints its progress and tables: standard error when the JSON goes to
    standard output (``--json -``), so that stdout holds the JSON alone; else standard output."""
    return sys.stderr if json_path == STDOUT else sys.stdout


def run_report(report, args, device) -> int:
    """Run ``report(args, device) -> (status, payload)`` with its printing on ``human_output``,
    then write ``payload`` to ``args.json`` (when given); returns the status."""
    with contextlib.redirect_stdout(human_output(args.json)):
        status, payload = report(args, device)
    if args.json:
        write_json(args.json, payload)
    return status


def write_json(path: str, payload: dict) -> None:
    """Write ``payload`` as strict JSON (NaN and infinities become null) to ``path``, or to
    standard output for ``-``."""
    if path == STDOUT:
        json.dump(_finite(payload), sys.stdout, indent=1)
        sys.stdout.write("\n")
        return
    with open(path, "w") as f:
        json.dump(_finite(payload), f, indent=1)


def _finite(x):
    if isinstance(x, float):
        return x if math.isfinite(x) else None
    if isinstance(x, dict):
        return {k: _finite(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [_finite(v) for v in x]
    return x


def fmt(v, spec: str = ".4f") -> str:
    """A figure for a table: ``n/a`` for None or NaN."""
    return "n/a" if v is None or v != v else format(v, spec)


def table(headers: list[str], rows: list[list]) -> str:
    """Plain-text table: ``headers`` (n str) over ``rows`` (lists of n values, printed with
    ``str``), right-aligned columns separated by two spaces."""
    cells = [headers] + [[str(c) for c in r] for r in rows]
    widths = [max(len(r[i]) for r in cells) for i in range(len(headers))]
    lines = ["  ".join(c.rjust(wd) for c, wd in zip(r, widths)) for r in cells]
    lines.insert(1, "  ".join("-" * wd for wd in widths))
    return "\n".join(lines)


_INT_VIEW = {1: torch.int8, 2: torch.int16, 4: torch.int32, 8: torch.int64}


def identical_fraction(a, b) -> float:
    """Fraction of the elements of the tensors in ``a`` that are bitwise equal to the matching
    elements of ``b`` (pairs of equal shape and dtype), pooled over all pairs. Compared as raw
    bits, so ``-0.0`` differs from ``0.0`` and identical NaN patterns count as equal."""
    same = total = 0
    for x, y in zip(a, b, strict=True):
        if x.shape != y.shape or x.dtype != y.dtype:
            raise ValueError(f"cannot compare {x.dtype}{list(x.shape)} with {y.dtype}{list(y.shape)}")
        dt = _INT_VIEW[x.element_size()]
        same += int((x.contiguous().view(dt) == y.contiguous().view(dt)).sum())
        total += x.numel()
    return same / total if total else float("nan")


def relative_error(err: torch.Tensor, mag: torch.Tensor) -> float:
    """``mean |decode - S| / mean |S|`` over a whole case, from the per-program ``err`` and
    ``mag`` of ``criterion.evaluate`` (every program has V x K elements, so sums suffice)."""
    return float(err.sum() / mag.sum())


def markdown_table(headers: list[str], rows: list[list]) -> str:
    """A GitHub-flavoured markdown table."""
    lines = ["| " + " | ".join(headers) + " |", "|" + "---|" * len(headers)]
    lines += ["| " + " | ".join(str(c) for c in r) + " |" for r in rows]
    return "\n".join(lines)
