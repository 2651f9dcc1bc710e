"""Draw latency vs batch size from the JSONs of ``python -m leapquant.bench --json`` (one per
kernel; the floors, the plain PyTorch reference and fla from the first): the flush (each leapquant kernel, its memory floor, the plain PyTorch
reference) and, beside it, the decode step (each kernel, its floor, fla's fp32-state decode).

    python scripts/plot_bench.py docs/latency.png bench_results/<run>.json [more.json ...]
"""

import json
import sys

import matplotlib

from leapquant.kda.geometry import FLOOR_BYTES_PER_PROGRAM, STEP_FLOOR_BYTES_PER_PROGRAM

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402


def _flush_rows(data: dict) -> list:
    return [r for r in data["rows"] if "flush" in r]


def _step_rows(data: dict) -> list:
    return [r for r in data.get("step_rows", []) if "step" in r]


def main(dst: str, *srcs: str) -> None:
    fig, (ax, ax_step) = plt.subplots(1, 2, figsize=(11, 4.2))
    runs = []
    for src in srcs:
        with open(src) as f:
            runs.append(json.load(f))
    for data in runs:  # each file adds its kernel's lines, dated
        kernel = f'{data["env"].get("kernel", "triton")}, {data["env"]["date"][:10]}'
        rows = _flush_rows(data)
        ax.plot([r["batch_size"] for r in rows], [r["flush"]["median_ms"] for r in rows], "o-",
                label=f"leapquant flush_inplace ({kernel})")
        steps = _step_rows(data)
        if steps:
            SB = [r["batch_size"] for r in steps]
            ax_step.plot(SB, [r["step"]["median_ms"] for r in steps], "o-",
                         label=f"leapquant step_inplace, fill count 1 ({kernel})")
            if all("step_full_window" in r for r in steps):  # bench runs from 2026-12-04 on
                ax_step.plot(SB, [r["step_full_window"]["median_ms"] for r in steps], "o:",
                             label=f"leapquant step_inplace, full window ({kernel})")
            ax_step.plot(SB, [r["step"]["median_ms"] + r["flush_1_in_16"]["median_ms"] for r in steps], "^-.",
                         label=f"decode layer: step + flush 1 in 16 due ({kernel})")
    # the floors, the reference, fla and the title's environment from the first JSON (the run the
    # figure is about); the title lists every run's date
    first = runs[0]
    rows, steps, env = _flush_rows(first), _step_rows(first), first["env"]
    B, SB = [r["batch_size"] for r in rows], [r["batch_size"] for r in steps]
    ax.plot(B, [r["floor_ms"] for r in rows], "k--", label=f"memory floor ({FLOOR_BYTES_PER_PROGRAM / 1e3:.1f} KB/program at copy bandwidth)")
    ax.plot(B, [r["reference_ms"] for r in rows], "s:", label="plain PyTorch fp32 reference")
    if steps:
        ax_step.plot(SB, [r["floor_ms"] for r in steps], "k--", label=f"memory floor ({STEP_FLOOR_BYTES_PER_PROGRAM / 1e3:.1f} KB/program)")
        if all(r.get("fla") for r in steps):
            ax_step.plot(SB, [r["fla"]["median_ms"] for r in steps], "s:", label="fla fused_recurrent_kda (fp32 state)")
    dates = ", ".join(sorted({r["env"]["date"][:10] for r in runs}, reverse=True))
    for a, what in ((ax, "KDA checkpoint flush, all programs due"), (ax_step, "KDA decode step and decode layer (one token)")):
        a.set_xscale("log", base=2)
        a.set_yscale("log")
        a.set_xlabel("batch size B (sequences, 32 heads each)")
        a.set_ylabel("latency, ms (median)")
        a.set_title(f"{what}, L2-cold\n{env.get('gpu', env['device'])}, torch {env['torch']}, "
                    f"triton {env['triton']}, {dates}", fontsize=9)
        a.grid(True, which="both", alpha=0.3)
        a.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(dst, dpi=120)


if __name__ == "__main__":
    main(sys.argv[1], *sys.argv[2:])
