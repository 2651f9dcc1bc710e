"""Shared pieces of the command-line reports: environment record, accuracy cases, tables."""

from __future__ import annotations

import datetime
import json
import platform

import torch

from .kda import criterion, inputs, reference, run


def environment(device: torch.device) -> dict:
    """Date, machine, GPU and library versions, for every JSON the reports write."""
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
    return env


def accuracy_case(family: str, B: int, device, seed: int):
    """Build the inputs of ``family``, flush them with ``run`` and with the fp32 reference,
    and judge ``run`` (SPEC section 5). Returns ``(inputs, candidate, reference, verdict)``."""
    x = inputs.make(family, B, device, seed)
    cand = run(**x)
    ref = inputs.chunked(reference, x)
    return x, cand, ref, criterion.evaluate(x, cand, ref)


def parse_sizes(text: str) -> list[int]:
    return [int(s) for s in text.split(",") if s.strip()]


def pick_device(name: str | None) -> torch.device:
    if name:
        return torch.device(name)
    return torch.device("cuda" if torch.cuda.is_available() else "cpu")


def write_json(path: str, payload: dict) -> None:
    with open(path, "w") as f:
        json.dump(payload, f, indent=1)


def table(headers: list[str], rows: list[list]) -> str:
    cells = [headers] + [[str(c) for c in r] for r in rows]
    widths = [max(len(r[i]) for r in cells) for i in range(len(headers))]
    lines = ["  ".join(c.rjust(wd) for c, wd in zip(r, widths)) for r in cells]
    lines.insert(1, "  ".join("-" * wd for wd in widths))
    return "\n".join(lines)
