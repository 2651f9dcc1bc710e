"""``python -m leapquant.bench``: accuracy of ``run`` on the three SPEC input families and the
stress families, then the speed of ``flush_inplace`` against the memory floor measured in the same
process (SPEC sections 5, 9); then the decode step: ``step`` on the step request's three input
families against its element-wise criterion, ``step_inplace``'s speed against its floor, the
stock fp32-state decode kernel (flash-linear-attention's ``fused_recurrent_kda``, T = 1) and the
decode layer's cost per token (step + flush with 1 in 16 programs due) against it.
Sources: LeapQuant (arXiv 2609.38166); NVlabs/kda requests conless-leapquant-kda-flush and
conless-leapquant-kda-step.

Timing: deployment form (a Pool), every program due, CUDA kernel time of the flush kernel from the
PyTorch profiler (copies and fills excluded by name), 4 warm-up and 16 timed calls, L2-cold:
8 disjoint slot sets flushed in rotation. The gate history a flush resets (w, gbuf, pcum) is
restored four calls ahead of the set's next flush, outside the timed kernel. The step: the same
profiler timing with the step request's 6 warm-up and 32 timed calls, every sequence decoding at
fill count 1 (the request's harness) and again at a full window (fill count L - 1: the most live
entries a step reads), 8 slot sets in rotation; its floor is 34.9 KB a program (the request's
bytes, every window row) over the same bandwidth. The kernels read only the live rows: 23.1 KB a
program at fill count 1, 33.9 KB at a full window, the one nearest the floor's bytes.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys

import torch

from .eval import flush_inputs as inputs
from .eval import step_criterion, step_inputs
from .eval.flush_criterion import FORMS
from .kda import L, Pool, flush_inplace, reference, step, step_inplace
from .kda.format import MIXED_WIDTH
from .kda.geometry import FLOOR_BYTES_PER_PROGRAM, STEP_FLOOR_BYTES_PER_PROGRAM, H, K, V
from .kda.kernel import FORCE_VARIABLE, KERNELS
from .eval.report import (CPU_PATH_NOTE, accuracy_case, check_output, environment, fmt, parse_sizes,
                     pick_device, run_report, table)

KERNEL_NAME = "_flush_kernel"
WARMUP, TIMED, SETS = 4, 16, 8
DEFAULT_SIZES = "16,32,64,128,256,512"
# steady state (SPEC section 7): (label, batch size, fraction of programs due)
STEADY_STATE = (("nothing due", 512, 0.0), ("1 in 16 due", 256, 1 / 16))
CPU_SIZES = "2"
STEP_KERNEL_NAME = "_step_kernel"
STEP_WARMUP, STEP_TIMED = 6, 32  # the step request's benchmark
STEP_FILL = 1  # the step request's benchmark decodes at fill count 1
FULL_WINDOW = L - 1  # the most live entries a step reads (its token then fills the window)
DECODE_LAYER_DUE = 1 / 16  # programs due per decode step in steady state (one window in L tokens)
FLA_KERNEL_NAME = "fused_recurrent"  # flash-linear-attention's decode kernel, by name


def copy_bandwidth(device, nbytes: int = 1 << 30, reps: int = 20) -> float:
    """Device-to-device copy bandwidth in bytes/s (bytes read plus written), median of ``reps``."""
    src = torch.empty(nbytes, dtype=torch.uint8, device=device).random_()
    dst = torch.empty_like(src)
    times = []
    for _ in range(reps + 3):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        dst.copy_(src)
        b.record()
        b.synchronize()
        times.append(a.elapsed_time(b) / 1e3)
    return 2 * nbytes / statistics.median(times[3:])


def kernel_times_ms(fn, calls: int, name: str = KERNEL_NAME) -> list[float]:
    """Run ``fn(i)`` for ``i < calls`` under the profiler; durations (ms) of the kernels whose
    name contains ``name``, in launch order."""
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for i in range(calls):
            fn(i)
        torch.cuda.synchronize()
    evs = [e for e in prof.events() if name in e.name and e.device_type == torch.autograd.DeviceType.CUDA]
    evs.sort(key=lambda e: e.time_range.start)
    times = [(e.time_range.end - e.time_range.start) / 1e3 for e in evs]
    if len(times) != calls:
        raise RuntimeError(f"profiler saw {len(times)} '{name}' kernels, expected {calls}")
    return times


def fill_pool(pool: Pool, sets: list[torch.Tensor], seed: int, due_fraction: float = 1.0) -> dict:
    """Give every slot of ``sets`` a random-family checkpoint and window; mark each program due
    (``hcnt = L``) with probability ``due_fraction`` (1: all, 0: none), the others at a fill
    count below L. Returns the gate history (w, gbuf, pcum) per set, to restore after a flush."""
    saved = {}
    gen = torch.Generator(device=pool.device).manual_seed(seed)
    for s, slots in enumerate(sets):
        x = inputs.make("random", slots.numel(), pool.device, seed + s)
        sl = slots.long()
        for view, name in zip(pool.checkpoint + pool.window, inputs.FLUSH_ARGS):
            view[sl] = x[name]
        saved[s] = (x["w"], x["gbuf"], x["pcum"])
        shape = (slots.numel(), H)
        due = torch.rand(shape, generator=gen, device=pool.device) < due_fraction
        partial = torch.randint(0, L, shape, generator=gen, device=pool.device, dtype=torch.int32)
        pool.hcnt[sl] = torch.where(due, torch.full_like(partial, L), partial)
    return saved


def restore_gates(pool: Pool, slots: torch.Tensor, saved: tuple) -> None:
    """Give ``slots`` back the gate history (w, gbuf, pcum) ``fill_pool`` saved for them, so that
    a flushed set has a full window again: the bench's restore between timed calls (three
    index_put kernels)."""
    sl = slots.long()
    pool.w[sl], pool.gbuf[sl], pool.pcum[sl] = saved


def time_flush(B: int, device, q0: torch.Tensor, due_fraction: float = 1.0) -> dict:
    """Median kernel time (ms) of flush_inplace over B sequences x H heads, each due with
    probability ``due_fraction``."""
    pool = Pool(SETS * B + 1, device)
    sets = [torch.arange(1 + s * B, 1 + (s + 1) * B, dtype=torch.int32, device=device) for s in range(SETS)]
    saved = fill_pool(pool, sets, seed=1000 + B, due_fraction=due_fraction)

    def call(i):
        s = i % SETS
        flush_inplace(pool, sets[s], q0)
        ahead = (i + SETS // 2) % SETS
        restore_gates(pool, sets[ahead], saved[ahead])

    return _summary(kernel_times_ms(call, WARMUP + TIMED)[WARMUP:])


def _summary(timed: list[float]) -> dict:
    return {"median_ms": statistics.median(timed), "min_ms": min(timed), "max_ms": max(timed)}


def step_accuracy(B: int, device) -> dict:
    """``step`` on each of the step request's families (seed B): ``{family: {"ok", "worst"}}``,
    ``worst`` the largest error / tolerance of its element-wise criterion (<= 1 passes)."""
    res = {}
    for fam in step_inputs.FAMILIES:
        x = step_inputs.make(fam, B, device, seed=B)
        ok, worst = step_criterion.judge(step(**x), x)
        res[fam] = {"ok": ok, "worst": worst}
        del x
    return res


def time_step(B: int, device, before=None, fill: int = STEP_FILL) -> dict:
    """Median kernel time (ms) of ``step_inplace`` over B sequences x H heads, every sequence
    decoding at fill count ``fill`` (0 .. L - 1 live window entries before the token; default 1,
    as the request's benchmark), L2-cold over ``SETS`` slot sets. ``before(i)``, if given, runs
    before call i (other kernels between the steps: what an engine runs there;
    scripts/experiments/time_code_warm.py). Raises ValueError for a fill count outside 0 .. L - 1."""
    if not 0 <= fill < L:
        raise ValueError(f"fill count {fill} outside 0 .. {L - 1}")
    pool = Pool(SETS * B + 1, device)
    sets = [torch.arange(1 + s * B, 1 + (s + 1) * B, dtype=torch.int32, device=device) for s in range(SETS)]
    for s, slots in enumerate(sets):
        x = step_inputs.make("random", B, device, seed=3000 + s)
        sl = slots.long()
        for view, name in zip(pool.checkpoint + pool.window, step_inputs.STEP_ARGS):
            view[sl] = x[name]
    params = step_inputs.model_params(device)
    gen = torch.Generator(device=device).manual_seed(B)
    mixed = torch.randn(B, MIXED_WIDTH, generator=gen, device=device).bfloat16()
    a = torch.randn(B, H, K, generator=gen, device=device).bfloat16()
    b = (2 * torch.randn(B, H, generator=gen, device=device)).bfloat16()
    o = torch.empty(B, H, V, dtype=torch.bfloat16, device=device)

    def call(i):
        if before is not None:
            before(i)
        pool.hcnt.fill_(fill)
        step_inplace(pool, sets[i % SETS], mixed, a, b, params["A_log"], params["dt_bias"], o)

    return _summary(kernel_times_ms(call, STEP_WARMUP + STEP_TIMED, STEP_KERNEL_NAME)[STEP_WARMUP:])


def time_fla_decode(B: int, device) -> dict | None:
    """Median kernel time (ms) of flash-linear-attention's fp32-state decode kernel
    (``fla.ops.kda.fused_recurrent_kda``, T = 1, fp32 initial state, final state written,
    l2-norm in the kernel) on B sequences x H heads, L2-cold over ``SETS`` states; None without
    fla (``pip install fla-core``)."""
    try:
        from fla.ops.kda import fused_recurrent_kda
    except ImportError:
        return None
    gen = torch.Generator(device=device).manual_seed(B)
    states = [torch.randn(B, H, K, V, generator=gen, device=device) * 0.1 for _ in range(SETS)]
    q, k = (torch.randn(B, 1, H, K, generator=gen, device=device).bfloat16() for _ in range(2))
    v = torch.randn(B, 1, H, V, generator=gen, device=device).bfloat16()
    g = -torch.rand(B, 1, H, K, generator=gen, device=device)  # log-space decay per channel
    beta = torch.rand(B, 1, H, generator=gen, device=device).bfloat16()

    def call(i):
        fused_recurrent_kda(q, k, v, g, beta, initial_state=states[i % SETS], output_final_state=True,
                            use_qk_l2norm_in_kernel=True)

    return _summary(kernel_times_ms(call, STEP_WARMUP + STEP_TIMED, FLA_KERNEL_NAME)[STEP_WARMUP:])


def time_reference(B: int, device, reps: int = 3) -> float:
    """Median wall time (ms, CUDA events) of the plain PyTorch reference on B sequences."""
    x = inputs.make("random", B, device, seed=2000 + B)
    times = []
    for _ in range(reps + 1):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        reference(**x)
        b.record()
        b.synchronize()
        times.append(a.elapsed_time(b))
    return statistics.median(times[1:])


def _stress_cell(a: dict) -> str:
    return (f"{'PASS' if a['ok'] else 'FAIL'} {fmt(a['worst_ratio_batch_head'])} | "
            f"{fmt(a['worst_cap_ratio_batch_head'])}")


def main(argv=None) -> int:
    """Command-line entry (``argv``: list of str, default ``sys.argv[1:]``). Returns the exit
    code: 0 when every accuracy case passes, 1 otherwise; argparse exits with 2 on bad options."""
    ap = argparse.ArgumentParser(prog="python -m leapquant.bench", description=__doc__.split("\n\n")[0])
    ap.add_argument("--batch-sizes", type=parse_sizes, default=None,
                    help=f"comma list (default {DEFAULT_SIZES}; {CPU_SIZES} on CPU)")
    ap.add_argument("--skip-timing", action="store_true", help="accuracy only")
    ap.add_argument("--json", default=None, help="write every figure to this JSON file ('-': standard output, "
                    "the tables then go to standard error)")
    ap.add_argument("--device", choices=("cuda", "cpu"), default=None, help="default: cuda when present")
    ap.add_argument("--kernel", choices=KERNELS, default=None,
                    help=f"force the kernel of both operations (sets {FORCE_VARIABLE}; default: kernel.choose)")
    args = ap.parse_args(argv)
    check_output(ap, "--json", args.json)
    if args.kernel:
        os.environ[FORCE_VARIABLE] = args.kernel
    device = pick_device(args.device, ap)
    return run_report(_report, args, device)


def _report(args, device) -> tuple[int, dict]:
    """The accuracy cases and timings, printed as they finish, tables last; returns the exit
    status and the JSON payload."""
    on_gpu = device.type == "cuda"
    sizes = args.batch_sizes or parse_sizes(DEFAULT_SIZES if on_gpu else CPU_SIZES)
    env = environment(device)
    print(f"leapquant.bench  {env['date']}  device={env.get('gpu', 'cpu')}  torch={env['torch']}  "
          f"triton={env['triton']}  kernel={env['kernel']}  step_kernel={env['step_kernel']}")
    timing = on_gpu and not args.skip_timing
    if not on_gpu:
        print(f"{CPU_PATH_NOTE} at small batch; timing skipped")
    bandwidth = copy_bandwidth(device) if timing else None
    if bandwidth:
        env["copy_bandwidth_GBps"] = bandwidth / 1e9
        print(f"copy bandwidth {bandwidth / 1e9:.0f} GB/s (read + write); floor = "
              f"{FLOOR_BYTES_PER_PROGRAM} B/program / bandwidth")

    rows, all_ok = [], True
    families = inputs.all_families()
    for B in sizes:
        row = {"batch_size": B, "programs": B * H, "accuracy": {}}
        for fam in families:
            _, _, _, res = accuracy_case(fam, B, device, seed=B)
            row["accuracy"][fam] = {
                "ok": res["ok"], "well_formed": res["well_formed"],
                **{f"worst_ratio_{f}": res[f].worst_ratio for f in FORMS},
                **{f"worst_cap_ratio_{f}": res[f].worst_cap_ratio for f in FORMS},
            }
            all_ok &= res["ok"]
            del res
        row["ok"] = all(a["ok"] for a in row["accuracy"].values())
        if timing:
            q0 = inputs.make("random", 1, device, seed=B)["q0"]
            row["flush"] = time_flush(B, device, q0)
            row["floor_ms"] = B * H * FLOOR_BYTES_PER_PROGRAM / bandwidth * 1e3
            row["reference_ms"] = time_reference(B, device)
        rows.append(row)
        print(f"  B={B} done: {'PASS' if row['ok'] else 'FAIL'}"
              + (f", {row['flush']['median_ms']:.4f} ms" if timing else ""), flush=True)

    step_rows = []
    for B in sizes:
        row = {"batch_size": B, "accuracy": step_accuracy(B, device)}
        row["ok"] = all(a["ok"] for a in row["accuracy"].values())
        all_ok &= row["ok"]
        if timing:
            row["step"] = time_step(B, device)
            row["step_full_window"] = time_step(B, device, fill=FULL_WINDOW)
            row["floor_ms"] = B * H * STEP_FLOOR_BYTES_PER_PROGRAM / bandwidth * 1e3
            row["fla"] = time_fla_decode(B, device)
            q0 = inputs.make("random", 1, device, seed=B)["q0"]
            row["flush_1_in_16"] = time_flush(B, device, q0, due_fraction=DECODE_LAYER_DUE)
        step_rows.append(row)
        print(f"  step B={B} done: {'PASS' if row['ok'] else 'FAIL'}"
              + (f", {row['step']['median_ms']:.4f} ms" if timing else ""), flush=True)

    steady = []
    if timing:
        q0 = inputs.make("random", 1, device, seed=7)["q0"]
        for label, B, frac in STEADY_STATE:
            steady.append({"mode": label, "batch_size": B, "due_fraction": frac,
                           **time_flush(B, device, q0, due_fraction=frac)})
    headers = ["B"] + [f"{f[:6]} {form}" for f in inputs.FAMILIES for form in ("head", "b,h")] + ["verdict"]
    if timing:
        headers += ["flush ms", "floor ms", "x floor", "torch ms"]
    out = []
    for row in rows:
        cells = [row["batch_size"]]
        for fam in inputs.FAMILIES:
            a = row["accuracy"][fam]
            cells += [fmt(a["worst_ratio_head"]), fmt(a["worst_ratio_batch_head"])]
        cells.append("PASS" if row["ok"] else "FAIL")
        if timing:
            t = row["flush"]["median_ms"]
            cells += [f"{t:.4f}", f"{row['floor_ms']:.4f}", f"{t / row['floor_ms']:.2f}", f"{row['reference_ms']:.3f}"]
        out.append(cells)
    print("\nworst err/err_ref per family and form (bound 1.01; captured heads judged by the 1e-3 cap)")
    print(table(headers, out))
    stress = [[row["batch_size"]] + [_stress_cell(row["accuracy"][f]) for f in inputs.STRESS_FAMILIES] for row in rows]
    print("\nstress families: worst err/err_ref (n/a: the fp32 reference is not finite) | worst err/cap "
          "(n/a: no head captured)")
    print(table(["B", *inputs.STRESS_FAMILIES], stress))
    if steady:
        print("\nsteady state (flush kernel, L2-cold)")
        print(table(["mode", "B", "median ms", "min ms", "max ms"],
                    [[t["mode"], t["batch_size"], f"{t['median_ms']:.4f}", f"{t['min_ms']:.4f}", f"{t['max_ms']:.4f}"]
                     for t in steady]))
    print("\ndecode step: worst error / tolerance of the step request's criterion (<= 1 passes)"
          + (f"; step at fill count {STEP_FILL} (the request's harness) and at a full window ({FULL_WINDOW}); "
             "decode layer = step + flush with 1 in 16 due, per token" if timing else ""))
    headers = ["B", *step_inputs.FAMILIES, "verdict"]
    if timing:
        headers += ["step ms", "floor ms", "x floor", "full ms", "full x floor", "fla ms", "layer ms", "fla / layer",
                    "full layer", "fla / full"]
    out = []
    for row in step_rows:
        cells = [row["batch_size"], *(fmt(row["accuracy"][f]["worst"], ".3f") for f in step_inputs.FAMILIES),
                 "PASS" if row["ok"] else "FAIL"]
        if timing:
            t, full, fla = row["step"]["median_ms"], row["step_full_window"]["median_ms"], row["fla"]
            layer = t + row["flush_1_in_16"]["median_ms"]
            full_layer = full + row["flush_1_in_16"]["median_ms"]
            row["layer_ms"], row["full_window_layer_ms"] = layer, full_layer
            cells += [f"{t:.4f}", f"{row['floor_ms']:.4f}", f"{t / row['floor_ms']:.2f}", f"{full:.4f}",
                      f"{full / row['floor_ms']:.2f}", fmt(fla and fla["median_ms"]), f"{layer:.4f}",
                      fmt(fla and fla["median_ms"] / layer, ".2f"), f"{full_layer:.4f}",
                      fmt(fla and fla["median_ms"] / full_layer, ".2f")]
        out.append(cells)
    print(table(headers, out))
    return (0 if all_ok else 1), {"env": env, "rows": rows, "steady_state": steady, "step_rows": step_rows}


if __name__ == "__main__":
    sys.exit(main())
