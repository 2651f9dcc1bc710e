"""``python -m leapquant.precision``: how close ``leapquant.kda.run`` comes to the fp32 reference.

For every batch size and every input family (``inputs.FAMILIES`` plus ``inputs.STRESS_FAMILIES``
when that exists) it flushes identical inputs with ``run`` (the Triton kernel on CUDA, the fp32
reference on CPU) and with the fp32 reference, and judges ``run`` by the decoded states (SPEC
section 5): worst and median err/err_ref per head and per (batch item, head), heads judged by the
1e-3 cap, the relative error of both against the exact fp64 state, and how many codes and scales
happen to be bitwise equal to the reference's. It writes a JSON record per case, a markdown
summary and a histogram of the per-(batch, head) ratios, prints a table, and exits 1 if any case
fails the criterion.

Source: the LeapQuant paper (arXiv 2609.38166) and the NVlabs/kda request
conless-leapquant-kda-flush.
"""

from __future__ import annotations

import argparse
import math
import sys

import torch

from .eval import flush_inputs as inputs
from .eval.flush_criterion import CAP, FORMS, RATIO_BOUND
from .geometry import H
from .eval.report import (CPU_PATH_NOTE, accuracy_case, check_output, environment, fmt, identical_fraction, markdown_table,
                     parse_sizes, pick_device, relative_error, run_report, table)

DEFAULT_SIZES = "16,32,64,128,256,512"
CPU_SIZES = "2"

WHY_NOT_BITWISE = (
    "Codes and scales are not expected to be bitwise identical to the fp32 reference: SPEC section 4 "
    "leaves the order and precision of intermediates free, so the kernel's Compensator Tokens differ "
    "from the reference's in their last bits, the residual and its scales move with them, and every "
    "code near a rounding boundary may land on the neighbouring integer; two correct implementations "
    "therefore disagree on many codes, which is why the criterion (SPEC section 5) judges the decoded "
    "states against the exact fp64 state, never the codes elementwise."
)
CPU_NOTE = ("Without CUDA, `run` is the fp32 PyTorch flush: the reference plus the token balancing the "
            "kernel also does, so ratios sit at 1.0 except on heads whose fp16 tokens the balancing "
            "rescues: this checks the harness, not the kernel.")


def _num(v: float) -> float | None:
    # NaN (no head judged by ratio, or an all-zero case) becomes JSON null, not the non-standard NaN
    return v if math.isfinite(v) else None


def judge_case(family: str, B: int, device: torch.device, seed: int) -> tuple[dict, torch.Tensor]:
    """Flush one case with ``run`` and with the fp32 reference and judge it.

    Args:
        family: an input family name (SPEC section 6, or a stress family of ``inputs``).
        B: sequences in the batch (``B * H`` programs).
        device: where the inputs are built and both flushes run.
        seed: seed of the input generator.

    Returns:
        ``(record, ratios)``. ``record`` is a JSON-ready dict: ``family``, ``batch_size``,
        ``programs``, ``ok``, ``well_formed``; per form f in (head, batch_head)
        ``worst_ratio_f``, ``median_ratio_f``, ``worst_cap_ratio_f`` (err_c / err_ref, and
        err_c / (1e-3 mean|S|) on captured heads; null when no head is of that kind) and
        ``heads_under_cap_f``; ``heads_under_cap`` (batch_head form); ``rel_error`` and
        ``rel_error_reference`` (mean |decode - S| / mean |S| over the case, dimensionless, S the
        fp64 rebuild); ``codes_identical`` and ``scales_identical`` (fractions in [0, 1] of the
        codes, and of the s_k plus s_v elements, bitwise equal to the reference's).
        ``ratios`` is fp64 ``[n]`` on the CPU: the per-(batch, head) err_c / err_ref of the
        heads judged by ratio (NaNs of captured heads dropped).
    """
    _, cand, ref, res = accuracy_case(family, B, device, seed)
    rec = {"family": family, "batch_size": B, "programs": B * H, "ok": res["ok"],
           "well_formed": res["well_formed"]}
    for f in FORMS:
        r = res[f]
        rec.update({f"worst_ratio_{f}": _num(r.worst_ratio), f"median_ratio_{f}": _num(r.median_ratio),
                    f"worst_cap_ratio_{f}": _num(r.worst_cap_ratio), f"heads_under_cap_{f}": r.heads_under_cap})
    rec["heads_under_cap"] = rec["heads_under_cap_batch_head"]
    rec["rel_error"] = _num(relative_error(res["err"], res["mag"]))
    rec["rel_error_reference"] = _num(relative_error(res["err_ref"], res["mag"]))
    rec["codes_identical"] = identical_fraction(cand[:1], ref[:1])
    rec["scales_identical"] = identical_fraction(cand[1:3], ref[1:3])
    ratio = res["batch_head"].ratio.flatten().double().cpu()
    return rec, ratio[~torch.isnan(ratio)]


def _rows(records: list[dict]) -> list[list[str]]:
    return [[r["family"], r["batch_size"], fmt(r["worst_ratio_head"], ".4f"),
             fmt(r["worst_ratio_batch_head"], ".4f"), fmt(r["median_ratio_batch_head"], ".4f"),
             r["heads_under_cap"], fmt(r["rel_error"], ".3e"), fmt(r["rel_error_reference"], ".3e"),
             fmt(r["codes_identical"], ".4f"), fmt(r["scales_identical"], ".4f"),
             "PASS" if r["ok"] else "FAIL"] for r in records]


HEADERS = ["family", "B", "worst head", "worst b,h", "median b,h", "b,h under cap", "rel err",
           "rel err ref", "codes same", "scales same", "verdict"]


def write_markdown(path: str, env: dict, records: list[dict]) -> None:
    """Write the summary: an environment header (date, GPU, torch, triton), one table row per
    (family, batch size) case, and why codes and scales differ from the reference's."""
    gpu = env.get("gpu") or "none (CPU reference path)"
    lines = [
        "# LeapQuant KDA flush: precision against the fp32 reference",
        "",
        f"- date: {env['date']}",
        f"- device: {env['device']}; GPU: {gpu}" + (f" (CUDA {env['cuda']})" if env.get("cuda") else ""),
        f"- torch {env['torch']}, triton {env['triton']}; flush kernel: {env.get('kernel', 'not recorded')}",
        f"- verdict: {sum(r['ok'] for r in records)}/{len(records)} cases pass",
        "",
        f"Ratios are err(run) / err(fp32 reference), err = mean |decode - S| per head with S the exact "
        f"fp64 state; the bound is {RATIO_BOUND}. *head* averages each head index over the batch (the "
        f"request's judge), *b,h* judges every (batch item, head). Heads the format captures almost "
        f"exactly are judged by err <= {CAP:g} mean|S| instead (*b,h under cap*). *rel err* is "
        f"mean |decode - S| / mean |S| over the whole case.",
        "",
        markdown_table(HEADERS, _rows(records)),
        "",
        WHY_NOT_BITWISE,
    ]
    if env["device"].startswith("cpu"):
        lines += ["", CPU_NOTE]
    with open(path, "w") as f:
        f.write("\n".join(lines) + "\n")


def write_histogram(path: str, ratios: dict[str, list[torch.Tensor]], title: str) -> bool:
    """Plot the per-(batch, head) ratios err_c / err_ref (dimensionless), one stacked histogram
    per family, with the 1.01 bound as a vertical line, to a PNG at ``path``. ``ratios`` maps a
    family to its ratio tensors (one per batch size). Returns False, after a printed note, when
    matplotlib (the optional ``plot`` dependency) is not installed."""
    try:
        import matplotlib

        matplotlib.use("Agg")  # no display on GPU hosts
        import matplotlib.pyplot as plt
    except ImportError:
        print(f"matplotlib is not installed (pip install 'leapquant[plot]'): skipping {path}")
        return False
    data = {fam: torch.cat(ts).numpy() for fam, ts in ratios.items() if ts and sum(t.numel() for t in ts)}
    values = list(data.values())
    lo = min([1.0] + [float(v.min()) for v in values])
    hi = max([RATIO_BOUND] + [float(v.max()) for v in values])
    pad = 0.05 * (hi - lo)
    # left: every ratio; right: the band around 1 where the bound bites
    fig, axes = plt.subplots(1, 2, figsize=(11, 4.5))
    for ax, (a, b) in zip(axes, ((lo - pad, hi + pad), (2 - RATIO_BOUND - 0.002, RATIO_BOUND + 0.002))):
        if values:
            clipped = [v[(v >= a) & (v <= b)] for v in values]
            ax.hist(clipped, bins=80, range=(a, b), stacked=True, label=list(data))
        ax.axvline(RATIO_BOUND, color="red", linestyle="--", label=f"bound {RATIO_BOUND}")
        ax.set_xlabel("err(run) / err(fp32 reference), per (batch item, head)")
        ax.set_yscale("log")
    axes[0].set_ylabel("heads")
    axes[1].set_title(f"zoom: {2 - RATIO_BOUND:.2f} .. {RATIO_BOUND:.2f}")
    fig.suptitle(title)
    axes[0].legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return True


def main(argv=None) -> int:
    """Command-line entry point; returns the exit status (0 all cases pass, 1 otherwise)."""
    ap = argparse.ArgumentParser(prog="python -m leapquant.precision", description=__doc__.split("\n\n")[0])
    ap.add_argument("--device", choices=("cuda", "cpu"), default=None,
                    help="default: cuda when present, else cpu (where run() is the fp32 PyTorch flush)")
    ap.add_argument("--batch-sizes", type=parse_sizes, default=None,
                    help=f"comma list (default {DEFAULT_SIZES}; {CPU_SIZES} on CPU)")
    ap.add_argument("--json", default=None, help="write one record per (family, batch size) case here ('-': "
                    "standard output, the tables then go to standard error)")
    ap.add_argument("--markdown", default=None, help="write a markdown summary here")
    ap.add_argument("--histogram", default=None, help="write a PNG histogram of the per-(batch, head) ratios here")
    args = ap.parse_args(argv)
    check_output(ap, "--json", args.json)
    check_output(ap, "--markdown", args.markdown, stdout_ok=False)
    check_output(ap, "--histogram", args.histogram, stdout_ok=False)
    device = pick_device(args.device, ap)
    return run_report(_report, args, device)


def _report(args, device) -> tuple[int, dict]:
    """The cases, judged and printed as they finish, then the markdown, histogram and table;
    returns the exit status and the JSON payload."""
    on_gpu = device.type == "cuda"
    sizes = args.batch_sizes or parse_sizes(DEFAULT_SIZES if on_gpu else CPU_SIZES)
    fams = inputs.all_families()
    env = environment(device)
    print(f"leapquant.precision  {env['date']}  device={env.get('gpu', 'cpu')}  torch={env['torch']}  "
          f"triton={env['triton']}  kernel={env['kernel']}")
    if not on_gpu:
        print(f"{CPU_PATH_NOTE} at batch {','.join(map(str, sizes))}")

    records, ratios = [], {f: [] for f in fams}
    for B in sizes:
        for fam in fams:
            rec, ratio = judge_case(fam, B, device, seed=B)  # seed = B, as in leapquant.bench
            records.append(rec)
            ratios[fam].append(ratio)
            print(f"  {fam} B={B}: {'PASS' if rec['ok'] else 'FAIL'}", flush=True)
        if on_gpu:
            torch.cuda.empty_cache()

    if args.markdown:
        write_markdown(args.markdown, env, records)
        print(f"wrote {args.markdown}")
    if args.histogram:
        under = sum(r["heads_under_cap"] for r in records)
        title = (f"run vs fp32 reference on {env.get('gpu', 'CPU')}, B = {','.join(map(str, sizes))}\n"
                 f"({under} (batch, head) programs judged by the {CAP:g} cap instead, not shown)")
        if write_histogram(args.histogram, ratios, title):
            print(f"wrote {args.histogram}")

    passed = sum(r["ok"] for r in records)
    print(f"\n{passed}/{len(records)} cases pass; ratios err(run)/err(ref), bound {RATIO_BOUND} "
          f"(captured heads judged by the {CAP:g} cap); codes/scales 'same' = bitwise-equal fraction")
    print(table(HEADERS, _rows(records)))
    return (0 if passed == len(records) else 1), {"env": env, "cases": records}


if __name__ == "__main__":
    sys.exit(main())
