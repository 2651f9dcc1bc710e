"""Draw latency vs batch size (leapquant flush, memory floor, plain PyTorch reference) from the
JSON of ``python -m leapquant.bench --json``.

    python scripts/plot_bench.py bench_results/<run>.json docs/latency.png
"""

import json
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402


def main(src: str, dst: str) -> None:
    with open(src) as f:
        data = json.load(f)
    rows = [r for r in data["rows"] if "flush" in r]
    B = [r["batch_size"] for r in rows]
    fig, ax = plt.subplots(figsize=(6.4, 4.2))
    ax.plot(B, [r["flush"]["median_ms"] for r in rows], "o-", label="leapquant flush_inplace (Triton)")
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
    main(sys.argv[1], sys.argv[2])
