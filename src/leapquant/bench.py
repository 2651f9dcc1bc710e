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
from .kda import L, Pool, flush_inplace, reference, slot_nbytes, step, step_inplace
from .format import MIXED_WIDTH
from .geometry import FLOOR_BYTES_PER_PROGRAM, STEP_FLOOR_BYTES_PER_PROGRAM, H, K, V
from .family import FAMILIES
from .kernel import FORCE_VARIABLE, KERNELS
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


def time_flush(B: int, device, q0: torch.Tensor, due_fraction: float = 1.0, layout: str = "packed") -> dict:
    """Median kernel time (ms) of flush_inplace over B sequences x H heads, each due with
    probability ``due_fraction``, on a pool of ``layout``."""
    pool = Pool(SETS * B + 1, device, layout=layout)
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


def time_step(B: int, device, before=None, fill: int = STEP_FILL, layout: str = "packed", pads: int = 0) -> dict:
    """Median kernel time (ms) of ``step_inplace`` over B rows x H heads, every sequence decoding
    at fill count ``fill`` (0 .. L - 1 live window entries before the token; default 1, as the
    request's benchmark), L2-cold over ``SETS`` slot sets; the last ``pads`` rows of each call
    are a CUDA graph's pad rows (id -1). ``before(i)``, if given, runs before call i (other
    kernels between the steps: what an engine runs there; scripts/experiments/time_code_warm.py),
    on a pool of ``layout``. Raises ValueError for a fill count outside 0 .. L - 1 or a pad count
    outside 0 .. B - 1."""
    if not 0 <= fill < L:
        raise ValueError(f"fill count {fill} outside 0 .. {L - 1}")
    if not 0 <= pads < B:
        raise ValueError(f"pad rows {pads} outside 0 .. {B - 1}")
    pool = Pool(SETS * B + 1, device, layout=layout)
    sets = [torch.arange(1 + s * B, 1 + (s + 1) * B, dtype=torch.int32, device=device) for s in range(SETS)]
    for s, slots in enumerate(sets):
        x = step_inputs.make("random", B, device, seed=3000 + s)
        sl = slots.long()
        for view, name in zip(pool.checkpoint + pool.window, step_inputs.STEP_ARGS):
            view[sl] = x[name]
        slots[B - pads:] = -1
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


SECTIONS = ("flush", "step", "gdn", "layouts", "engine")
LAYOUT_SIZES = "64,256"
LAYOUT_ROUNDS = 2


def main(argv=None) -> int:
    """Command-line entry (``argv``: list of str, default ``sys.argv[1:]``). Returns the exit
    code: 0 when every accuracy case passes, 1 otherwise; argparse exits with 2 on bad options."""
    ap = argparse.ArgumentParser(prog="python -m leapquant.bench", description=__doc__.split("\n\n")[0])
    ap.add_argument("--batch-sizes", type=parse_sizes, default=None,
                    help=f"comma list (default {DEFAULT_SIZES}; {CPU_SIZES} on CPU)")
    ap.add_argument("--sections", default=",".join(SECTIONS),
                    help=f"comma list of {', '.join(SECTIONS)} (default: all): the flush's accuracy and speed, the "
                         "step's, both GDN operations' accuracy, the packed against the request layout (interleaved), "
                         "the engine loop")
    ap.add_argument("--layout-sizes", type=parse_sizes, default=parse_sizes(LAYOUT_SIZES),
                    help=f"batch sizes of the layouts section (default {LAYOUT_SIZES})")
    ap.add_argument("--engine-flush-ctas", type=parse_sizes, default=None,
                    help="engine section: the pools' flush CTAs an SM to compare (e.g. 2,1; default: the kernel's own)")
    ap.add_argument("--engine-streams", type=parse_sizes, default=None,
                    help="engine section: the Overlap scope's side streams to compare (e.g. 1,2,4; default: its own)")
    ap.add_argument("--engine-groups", type=parse_sizes, default=None,
                    help="engine section: layers a flush launch to compare (e.g. 1,4), as variants overlap-g1, "
                         "overlap-g4, ... beside overlap (the scope's own choice) of one model")
    ap.add_argument("--requests", default=None,
                    help="engine section: folder holding copies of the NVlabs/kda request folders "
                         "(conless-leapquant-<family>-<operation>): their TileLang step and flush as a variant")
    ap.add_argument("--families", default="kda",
                    help="engine section: the model families' layers to run, comma list of kda, gdn (default kda)")
    ap.add_argument("--skip-timing", action="store_true", help="accuracy only")
    ap.add_argument("--json", default=None, help="write every figure to this JSON file ('-': standard output, "
                    "the tables then go to standard error)")
    ap.add_argument("--device", choices=("cuda", "cpu"), default=None, help="default: cuda when present")
    ap.add_argument("--kernel", choices=KERNELS, default=None,
                    help=f"force the kernel of both operations (sets {FORCE_VARIABLE}; default: kernel.decide)")
    args = ap.parse_args(argv)
    args.sections = [x.strip() for x in args.sections.split(",") if x.strip()]
    if not set(args.sections) <= set(SECTIONS):
        ap.error(f"--sections: expected a comma list of {', '.join(SECTIONS)}, got {args.sections}")
    args.families = [x.strip() for x in args.families.split(",") if x.strip()]
    if not set(args.families) <= set(FAMILIES) or not args.families:
        ap.error(f"--families: expected a comma list of {', '.join(FAMILIES)}, got {args.families}")
    check_output(ap, "--json", args.json)
    if args.kernel:
        os.environ[FORCE_VARIABLE] = args.kernel
    device = pick_device(args.device, ap)
    return run_report(_report, args, device)


def _report(args, device) -> tuple[int, dict]:
    """The sections asked for, printed as they finish, tables last; returns the exit status and
    the JSON payload."""
    on_gpu = device.type == "cuda"
    sizes = args.batch_sizes or parse_sizes(DEFAULT_SIZES if on_gpu else CPU_SIZES)
    env = environment(device)
    print(f"flush kernel: {env['kernel']} ({env['kernel_reason']})")
    print(f"step kernel: {env['step_kernel']} ({env['step_kernel_reason']})")
    print(f"leapquant.bench  {env['date']}  device={env.get('gpu', 'cpu')}  torch={env['torch']}  "
          f"triton={env['triton']}")
    print(f"a slot at {H} heads: {slot_nbytes():,} B packed (the default), {slot_nbytes(H, 'request'):,} B in the "
          f"request's layout, {H * K * V * 4:,} B as an fp32 state")
    env["slot_bytes"] = {"packed": slot_nbytes(), "request": slot_nbytes(H, "request"), "fp32_state": H * K * V * 4}
    timing = on_gpu and not args.skip_timing
    if not on_gpu:
        print(f"{CPU_PATH_NOTE} at small batch; timing skipped")
    bandwidth = copy_bandwidth(device) if timing else None
    if bandwidth:
        env["copy_bandwidth_GBps"] = bandwidth / 1e9
        print(f"copy bandwidth {bandwidth / 1e9:.0f} GB/s (read + write); floors = bytes a program / bandwidth")
    payload, all_ok = {"env": env}, True

    def done(part: dict, text: str) -> None:  # each section's table as soon as it is measured
        payload.update(part)
        print("\n" + text + "\n", flush=True)

    if "flush" in args.sections:
        ok, part, text = _flush_section(sizes, device, timing, bandwidth)
        all_ok &= ok
        done(part, text)
    if "step" in args.sections:
        ok, part, text = _step_section(sizes, device, timing, bandwidth)
        all_ok &= ok
        done(part, text)
    if "gdn" in args.sections:
        ok, part, text = _gdn_section(sizes, device)
        all_ok &= ok
        done(part, text)
    if not timing and {"layouts", "engine"} & set(args.sections):
        print("layouts, engine: timing sections, skipped" + (" (--skip-timing)" if on_gpu else " without a GPU"))
    if timing and "layouts" in args.sections:
        done(*_layouts_section(args.layout_sizes, device))
    if timing and "engine" in args.sections:
        done(*_engine_section(sizes, device, bandwidth, args.engine_flush_ctas, args.engine_streams, args.families,
                              args.engine_groups, args.requests))
    return (0 if all_ok else 1), payload


def _flush_section(sizes, device, timing, bandwidth) -> tuple[bool, dict, str]:
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
    text = ["flush, every program due: worst err/err_ref per family and form (bound 1.01; captured heads judged by "
            "the 1e-3 cap)", table(headers, out)]
    stress = [[row["batch_size"]] + [_stress_cell(row["accuracy"][f]) for f in inputs.STRESS_FAMILIES] for row in rows]
    text += ["\nstress families: worst err/err_ref (n/a: the fp32 reference is not finite) | worst err/cap "
             "(n/a: no head captured)", table(["B", *inputs.STRESS_FAMILIES], stress)]
    if steady:
        text += ["\nsteady state (flush kernel, L2-cold)",
                 table(["mode", "B", "median ms", "min ms", "max ms"],
                       [[t["mode"], t["batch_size"], f"{t['median_ms']:.4f}", f"{t['min_ms']:.4f}", f"{t['max_ms']:.4f}"]
                        for t in steady])]
    return all_ok, {"rows": rows, "steady_state": steady}, "\n".join(text)


def _step_section(sizes, device, timing, bandwidth) -> tuple[bool, dict, str]:
    step_rows, all_ok = [], True
    for B in sizes:
        row = {"batch_size": B, "accuracy": step_accuracy(B, device)}
        row["ok"] = all(a["ok"] for a in row["accuracy"].values())
        all_ok &= row["ok"]
        if timing:
            row["step"] = time_step(B, device)
            row["step_full_window"] = time_step(B, device, fill=FULL_WINDOW)
            row["floor_ms"] = B * H * STEP_FLOOR_BYTES_PER_PROGRAM / bandwidth * 1e3
            row["fla"] = time_fla_decode(B, device)
        step_rows.append(row)
        print(f"  step B={B} done: {'PASS' if row['ok'] else 'FAIL'}"
              + (f", {row['step']['median_ms']:.4f} ms" if timing else ""), flush=True)
    headers = ["B", *step_inputs.FAMILIES, "verdict"]
    if timing:
        headers += ["step ms", "floor ms", "x floor", "full ms", "full x floor", "fla ms"]
    out = []
    for row in step_rows:
        cells = [row["batch_size"], *(fmt(row["accuracy"][f]["worst"], ".3f") for f in step_inputs.FAMILIES),
                 "PASS" if row["ok"] else "FAIL"]
        if timing:
            t, full, fla = row["step"]["median_ms"], row["step_full_window"]["median_ms"], row["fla"]
            cells += [f"{t:.4f}", f"{row['floor_ms']:.4f}", f"{t / row['floor_ms']:.2f}", f"{full:.4f}",
                      f"{full / row['floor_ms']:.2f}", fmt(fla and fla["median_ms"])]
        out.append(cells)
    text = ("decode step: worst error / tolerance of the step request's criterion (<= 1 passes)"
            + (f"; the step alone at fill count {STEP_FILL} (the request's harness) and at a full window "
               f"({FULL_WINDOW}), fla's fp32-state decode kernel alone" if timing else ""))
    return all_ok, {"step_rows": step_rows}, text + "\n" + table(headers, out)


def _gdn_section(sizes, device) -> tuple[bool, dict, str]:
    """Both GDN operations on their requests' families at every batch size: ``leapquant.gdn.run``
    against the fp32 reference flush (``gdn_criterion.evaluate_flush``: worst err / err_ref, bound
    1.01) and ``leapquant.gdn.step`` against the fp32 step reference (``gdn_criterion.judge_step``:
    worst figure, bound 1). Source: NVlabs/kda requests conless-leapquant-gdn-flush and -step."""
    from . import gdn
    from .eval import gdn_criterion, gdn_inputs

    rows, all_ok = [], True
    for B in sizes:
        row = {"batch_size": B, "flush": {}, "step": {}}
        for fam in gdn_inputs.FLUSH_FAMILIES:
            x = gdn_inputs.make_flush(fam, B, device, seed=B)
            res = gdn_criterion.evaluate_flush(x, gdn.run(**x), gdn.reference(**x))
            row["flush"][fam] = {"ok": res["ok"], "worst_ratio": res["batch_head"].worst_ratio,
                                 "worst_cap_ratio": res["batch_head"].worst_cap_ratio}
        for fam in gdn_inputs.STEP_FAMILIES if device.type == "cuda" else ():  # (the CPU step is the reference)
            x = gdn_inputs.make_step(fam, B, device, seed=B)
            ok, worst = gdn_criterion.judge_step(gdn.step(**x), gdn.step_reference(**x))
            row["step"][fam] = {"ok": ok, "worst": worst}
        row["ok"] = all(a["ok"] for part in ("flush", "step") for a in row[part].values())
        all_ok &= row["ok"]
        rows.append(row)
        print(f"  gdn B={B} done: {'PASS' if row['ok'] else 'FAIL'}", flush=True)
    out = [[r["batch_size"], *(fmt(r["flush"][f]["worst_ratio"]) for f in gdn_inputs.FLUSH_FAMILIES),
            *(fmt(r["step"][f]["worst"], ".3f") if f in r["step"] else "n/a" for f in gdn_inputs.STEP_FAMILIES),
            "PASS" if r["ok"] else "FAIL"]
           for r in rows]
    text = ("GDN: the flush's worst err/err_ref per (sequence, head) (bound 1.01) and the step's worst figure (bound 1)"
            " per family (n/a: on the CPU the step is its fp32 reference)\n" + table(["B", *(f"flush {f[:6]}" for f in gdn_inputs.FLUSH_FAMILIES),
                                         *(f"step {f[:6]}" for f in gdn_inputs.STEP_FAMILIES), "verdict"], out))
    return all_ok, {"gdn": rows}, text


def _layouts_section(sizes, device) -> tuple[dict, str]:
    """The packed against the request layout, interleaved ``LAYOUT_ROUNDS`` times in this process:
    the flush (every program due, 1 in 16 due) and the step (fill count 1)."""
    cases = (("flush all due", lambda B, q0, lay: time_flush(B, device, q0, layout=lay)),
             ("flush 1 in 16", lambda B, q0, lay: time_flush(B, device, q0, DECODE_LAYER_DUE, layout=lay)),
             ("step", lambda B, q0, lay: time_step(B, device, layout=lay)))
    rows = []
    for B in sizes:
        q0 = inputs.make("random", 1, device, seed=B)["q0"]
        for name, fn in cases:
            got = {"packed": [], "request": []}
            for _ in range(LAYOUT_ROUNDS):
                for lay in got:
                    got[lay].append(fn(B, q0, lay)["median_ms"])
            rows.append({"batch_size": B, "case": name, **{lay: statistics.median(t) for lay, t in got.items()},
                         "rounds": got})
        print(f"  layouts B={B} done", flush=True)
    out = [[r["batch_size"], r["case"], f"{r['packed']:.4f}", f"{r['request']:.4f}", f"{r['packed'] / r['request']:.3f}"]
           for r in rows]
    text = (f"layouts: packed against the request's, median of {LAYOUT_ROUNDS} interleaved rounds (ms)\n"
            + table(["B", "case", "packed", "request", "packed / request"], out))
    return {"layouts": rows}, text


def _engine_section(sizes, device, bandwidth, flush_ctas=None, streams=None, families=("kda",),
                    groups=None, requests=None) -> tuple[dict, str]:
    """The engine loop (``eval/engine_loop.py``) of each family at every batch size, for each
    flush grid of ``flush_ctas`` (CTAs an SM; None: the kernel's own) and each count of side
    ``streams``; ``groups``: layers a flush launch to compare, each its own overlap variant beside
    ``overlap``, the scope's own choice."""
    from .eval import engine_loop

    rows = []
    for name in families:
        for B in sizes:
            for ctas in flush_ctas or [None]:
                for n in streams or [None]:
                    rows.append({**engine_loop.run(B, device, bandwidth, streams=n, flush_ctas_per_sm=ctas,
                                                   family=FAMILIES[name], groups=tuple(groups or ()),
                                                   requests=requests),
                                 "flush_ctas_per_sm": ctas})
            for r in rows[-len(flush_ctas or [None]) * len(streams or [None]):]:  # each as measured, in case the run is cut
                print(f"  engine loop {name} B={B} floor {r['floor_ms']:.4f}: "
                      + ", ".join(f"{k} {v:.4f}" for k, v in r["ms"].items()) + f" {r.get('errors', '')}", flush=True)
    out, out_mm = [], []
    extra = [f"overlap-g{g}" for g in (rows[0]["flush_groups"] if rows else ())]  # the group sizes' variants
    for r in rows:
        ms, floor = r["ms"], r["floor_ms"]
        fla, best = ms.get("fla"), min(ms[v] for v in ("overlap", *extra))
        head = [r["family"], r["batch_size"], fmt(r["flush_ctas_per_sm"], "d"), r["flush_streams"]]
        out.append([*head, f"{floor:.4f}", f"{ms['serial']:.4f}", f"{ms['serial'] / floor:.2f}",
                    f"{ms['overlap']:.4f}", f"{ms['overlap'] / floor:.2f}",
                    *(f"{ms[v]:.4f} ({ms[v] / floor:.2f})" for v in extra), f"{ms['step']:.4f}", fmt(fla),
                    fmt(fla and fla / best, ".2f"), fmt(ms.get("tilelang")),
                    fmt(ms.get("tilelang") and ms["tilelang"] / best, ".2f")])
        added = ms["overlap+matmul"] - ms["step+matmul"]
        out_mm.append([*head, f"{r['matmul_ms']:.4f}", f"{ms['step+matmul']:.4f}",
                       f"{ms['overlap+matmul']:.4f}", *(f"{ms[v + '+matmul']:.4f}" for v in extra),
                       f"{ms['serial+matmul']:.4f}", f"{added:.4f}",
                       f"{r['flush_bytes_ms'] + 0.02 * ms['overlap+matmul']:.4f}", fmt(ms.get("fla+matmul"))])
    floors = "; ".join(f"{n}: ({FAMILIES[n].step_floor_bytes:,} + {FAMILIES[n].flush_floor_bytes:,} / 16) B"
                       for n in families)
    text = (f"engine loop: {engine_loop.LAYERS} layers, one token in one CUDA graph, ms per token and layer "
            f"(median replay); floor a program at the copy bandwidth, {floors}\n"
            + table(["family", "B", "flush CTAs/SM", "streams", "floor", "serial", "x floor", "overlap", "x floor",
                     *(f"{v} (x floor)" for v in extra), "step only", "fla fp32", "fla / best overlap",
                     "TileLang pair", "TileLang / best overlap"], out)
            + "\n\nwith a bf16 matmul a layer ([B, 2304] x [2304, 24576]): ms per token and layer; flushes add = "
              "overlap - step only, allowed = their bytes' time + 2% of the token\n"
            + table(["family", "B", "flush CTAs/SM", "streams", "matmul", "step only", "overlap", *extra, "serial",
                     "flushes add", "allowed", "fla fp32"], out_mm))
    return {"engine_loop": rows}, text


if __name__ == "__main__":
    sys.exit(main())
