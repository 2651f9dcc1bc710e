"""Draw latency vs batch size (each leapquant kernel, memory floor, plain PyTorch reference) from
the JSONs of ``python -m leapquant.bench --json`` (one per kernel, from one run).

    python scripts/plot_bench.py docs/latency.png bench_results/<run>.json [more.json ...]
"""

import json
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402


def main(dst: str, *srcs: str) -> None:
    fig, ax = plt.subplots(figsize=(6.4, 4.2))
    for src in srcs:
        with open(src) as f:
            data = json.load(f)
        rows = [r for r in data["rows"] if "flush" in r]
        B = [r["batch_size"] for r in rows]
        kernel = data["env"].get("kernel", "triton")
        ax.plot(B, [r["flush"]["median_ms"] for r in rows], "o-", label=f"leapquant flush_inplace ({kernel})")
    ax.plot(B, [r["floor_ms"] for r in rows], "k--", label="memory floor (55.1 KB/program at copy bandwidth)")
    ax.plot(B, [r["reference_ms"] for r in rows], "s:", label="plain PyTorch fp32 reference")
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    ax.set_xlabel("batch size (sequences x 32 heads)")
    ax.set_ylabel("latency, ms (median)")
    env = data["env"]
    ax.set_title(f"KDA checkpoint flush, all programs due, L2-cold\n{env.get('gpu', env['device'])}, "
                 f"torch {env['torch']}, triton {env['triton']}, {env['date'][:10]}", fontsize=9)
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(dst, dpi=120)


if __name__ == "__main__":
    main(sys.argv[1], *sys.argv[2:])
