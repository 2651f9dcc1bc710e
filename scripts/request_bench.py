"""Run an NVlabs/kda request's own ``benchmark.py`` checks and timings on leapquant, in the
request's pool layout, on any CUDA card.

    python scripts/request_bench.py REQUEST_DIR [--skip-timing] [--bs 16,256] [--baseline]

REQUEST_DIR is a copy of one request folder (``benchmark.py``, ``definition.json``,
``workloads.jsonl``; e.g. ``requests/conless-leapquant-kda-flush`` of NVlabs/kda). The script
imports that ``benchmark.py`` as a module and calls its ``check`` (correctness against the
request's reference) and ``timing`` (its profiler timing, L2-cold) for every batch size, with
leapquant as the implementation: ``run``, ``Pool(..., layout="request")`` and ``flush_inplace``
or ``step_inplace`` of the request's family. Only the request's ``main`` is bypassed, because it
asserts a B200 or B300 card; the card the run used is printed instead. Exits 1 when a case fails.
``--baseline`` also times the request's own ``baseline.py`` (its TileLang kernels; needs tilelang)
in the same process, after leapquant's rows, on pools of one size for every
batch size (the TileLang kernels are compiled for a pool size, so one compile serves them all).

Sources: NVlabs/kda requests conless-leapquant-{kda,gdn}-{flush,step}.
"""

from __future__ import annotations

import argparse
import functools
import importlib
import importlib.util
import json
import sys
import types
from pathlib import Path

import torch

from leapquant.eval import request_baselines

FAMILIES = {"kda": "leapquant.kda", "gdn": "leapquant.gdn"}


def request_module(folder: Path):
    spec = importlib.util.spec_from_file_location("request_benchmark", folder / "benchmark.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def implementation(family: str, operation: str):
    """The request's ``impl`` module: leapquant's functions of ``family`` for ``operation``, on a
    pool in the request's layout."""
    fam = importlib.import_module(FAMILIES[family])
    impl = types.SimpleNamespace(Pool=functools.partial(fam.Pool, layout="request"))
    if operation == "flush":
        impl.run, impl.flush_inplace = fam.run, fam.flush_inplace
    else:
        impl.run, impl.step_inplace = fam.step, fam.step_inplace
    return impl


def baseline(folder: Path, family: str, operation: str, num_slots: int):
    """The request's ``baseline.py`` as the ``impl`` its ``timing`` takes, every pool of
    ``num_slots`` slots (at least what timing asks)."""
    mod = request_baselines.baseline(str(folder.resolve().parent), family, operation)
    impl = types.SimpleNamespace(Pool=lambda n, device="cuda": mod.Pool(max(n, num_slots), device), run=mod.run)
    name = f"{operation}_inplace"
    setattr(impl, name, getattr(mod, name))
    return impl


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("request", type=Path, help="folder holding the request's benchmark.py")
    ap.add_argument("--skip-timing", action="store_true")
    ap.add_argument("--bs", default="", help="batch sizes (default: the request's workloads)")
    ap.add_argument("--baseline", action="store_true", help="also time the request's baseline.py (TileLang)")
    a = ap.parse_args(argv)
    name = a.request.resolve().name  # conless-leapquant-<family>-<operation>
    family, operation = name.split("-")[-2:]
    bench = request_module(a.request)
    ns: dict = {}
    exec(json.loads((a.request / "definition.json").read_text())["reference"], ns)
    ref_run = ns["run"]
    sizes = [json.loads(line)["workload"]["axes"]["batch_size"]
             for line in (a.request / "workloads.jsonl").read_text().splitlines() if line.strip()]
    if a.bs:
        sizes = [int(s) for s in a.bs.split(",")]
    impl = implementation(family, operation)
    dev = torch.device("cuda")
    print(f"{name} on {torch.cuda.get_device_name(0)}, torch {torch.__version__}: leapquant.{family} "
          f"{operation}, request layout\n")
    # one pool size for every batch (one compile): the engine loop's (request_baselines.SLOTS) or more
    base = baseline(a.request, family, operation, max(request_baselines.SLOTS, bench.NSETS * max(sizes) + 8)) \
        if a.baseline else None
    print("| batch_size | programs | worst (structured / second / random) | correctness | latency (ms) |")
    print("| --- | --- | --- | --- | --- |")
    ok_all, ours = True, {}
    for bs in sizes:
        res = bench.check(bs, impl, ref_run, dev)
        ok = all(r[0] for r in res)
        ok_all &= ok
        ours[bs] = t_ms = float("nan") if a.skip_timing else bench.timing(bs, impl, dev)
        worst = " / ".join(f"{r[1]:.4f}" for r in res)
        print(f"| {bs} | {bs * 32} | {worst} | {'PASS' if ok else 'FAIL'} | {t_ms:.4f} |", flush=True)
    if base:  # after ours, so that a slow first compile of theirs cuts nothing of ours
        print("\nthe request's baseline.py (TileLang), same process, the request's timing\n")
        print("| batch_size | TileLang (ms) | leapquant (ms) | leapquant / TileLang |\n| --- | --- | --- | --- |")
        for bs in sizes:
            t_base = bench.timing(bs, base, dev)
            print(f"| {bs} | {t_base:.4f} | {ours[bs]:.4f} | {ours[bs] / t_base:.3f} |", flush=True)
    return 0 if ok_all else 1


if __name__ == "__main__":
    sys.exit(main())
