"""Plot the decode loop's output error per window against flash-linear-attention's fp32 state
(``python -m leapquant.eval.step_loop --json F``), one line per JSON file.

    python scripts/plot_decode_loop.py docs/decode_loop.png bench_results/<run>.json [more.json ...]
"""

import json
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402


def main(argv):
    out, runs = argv[0], argv[1:]
    fig, ax = plt.subplots(figsize=(7, 5))
    for path in runs:
        with open(path) as f:
            r = json.load(f)
        shift = r["args"].get("bias_shift", 0.0)
        label = "model gates" if not shift else f"slow gates (dt_bias {shift:+g})"
        x = range(len(r["window_rel"]))  # numbered from 0, as step_loop prints them
        prefill = "chunk_kda" if r.get("prefill") == "chunk" else "naive"  # runs before the field: naive
        where = f"{r['device']}, {r['args'].get('sequences', '?')} seq., {prefill} prefill"
        ax.plot(x, r["window_rel"], "o-", label=f"{label} ({where}): LeapQuant vs fp32 state")
        ax.plot(x, r["window_worst_head"], ".:", label=f"{label} ({where}): worst (sequence, head)")
    ax.plot(x, r["rounding_rel"], "k--", label="bf16 rounding of the fp32 output alone")
    ax.set_xlabel("window (16 tokens each)")
    ax.set_ylabel("||o - o_fp32|| / ||o_fp32||")
    ax.set_yscale("log")
    ax.set_title("decode loop (step + flush every token) vs fla's fp32 recurrence")
    ax.legend(fontsize=7, loc="upper center", bbox_to_anchor=(0.5, -0.18))  # below: no line hidden
    fig.tight_layout()
    fig.savefig(out, dpi=120)
    print(f"wrote {out}")


if __name__ == "__main__":
    main(sys.argv[1:])
