"""Draw the figures of a GPU run: the engine loop per token and layer against batch size (from
``python -m leapquant.bench --json``: the floor, leapquant with the flush overlapped and serial,
fla's fp32-state decode) and, given a decode-loop JSON (``python -m leapquant.eval.step_loop
--json``), the output error per window against fla's fp32 recurrence.

    python scripts/plot_bench.py OUT.png BENCH.json [--decode-loop DECODE_LOOP.json]
"""

import argparse
import json

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("out", help="the PNG to write")
    ap.add_argument("bench", help="a bench JSON with the engine loop section")
    ap.add_argument("--decode-loop", default=None, help="a decode-loop JSON for a second panel")
    args = ap.parse_args(argv)
    with open(args.bench) as f:
        bench = json.load(f)
    rows, env = bench["engine_loop"], bench["env"]
    panels = 2 if args.decode_loop else 1
    fig, axes = plt.subplots(1, panels, figsize=(5.5 * panels, 4.2), squeeze=False)
    ax = axes[0][0]
    B = [r["batch_size"] for r in rows]
    ax.plot(B, [r["floor_ms"] for r in rows], "k--", label="memory floor (step + flush / 16 bytes)")
    for key, style, label in (("overlap", "o-", "leapquant, flush overlapped"), ("serial", "o:", "leapquant, serial"),
                              ("fla", "s-.", "fla fused_recurrent_kda_fwd, fp32 state")):
        if all(key in r["ms"] for r in rows):
            ax.plot(B, [r["ms"][key] for r in rows], style, label=label)
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    ax.set_xlabel("batch size (sequences, 32 heads each)")
    ax.set_ylabel("ms per token and layer (median replay)")
    ax.set_title(f"engine loop, {rows[0]['layers']} layers in one CUDA graph\n{env.get('gpu', env['device'])}, "
                 f"torch {env['torch']}, triton {env['triton']}, {env['date'][:10]}", fontsize=9)
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=7)
    if args.decode_loop:
        with open(args.decode_loop) as f:
            r = json.load(f)
        ax = axes[0][1]
        x = range(len(r["window_rel"]))
        ax.plot(x, r["window_rel"], "o-", label="leapquant against fla's fp32 state")
        ax.plot(x, r["window_worst_head"], ".:", label="worst (sequence, head)")
        ax.plot(x, r["rounding_rel"], "k--", label="bf16 rounding of the fp32 output alone")
        ax.set_xlabel("window (16 tokens each)")
        ax.set_ylabel("||o - o_fp32|| / ||o_fp32||")
        ax.set_yscale("log")
        ax.set_title("decode loop (step + flush every token)", fontsize=9)
        ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(args.out, dpi=120)
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
