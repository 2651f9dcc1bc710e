"""Cycles per SPEC phase of the Gluon kernel from an Nsight Compute source export.

    python scripts/ncu_phases.py SASS_CSV ELAPSED_CYCLES PROGRAMS [--in-place [--tile T]] [--opcodes N] [--code]

SASS_CSV (plain or gzip) is `ncu -i REPORT --page source --csv --print-source sass` of one `_flush_kernel`
launch (`bash scripts/gpu.sh --ncu` writes it); ELAPSED_CYCLES the launch's "Elapsed Cycles"
from the same report (SM cycles at the clock it ran at, which ncu does not fix: ~1.79 GHz
in the H200 runs, not the 1.98 GHz boost clock) and PROGRAMS the programs it flushed
(`scripts/ncu_target.py 64`: 2048, functional mode). The kernel is compiled
here for sm_90a with the same triton (it must be the device's release, so the SASS addresses
match; a pool launch with the pool's strides and the flag-scan tile of PROGRAMS candidates; a
different instruction count is an error), the line table comes from `nvdisasm -g`, and each
instruction's stall samples go to the phase of its source line: helpers by function, `_flush_program` by its phase comments.
Instructions inlined from triton's own library (the reductions' combine steps) form a row of
their own: the line table gives no call site for them. Prints the cycles, warp instructions and
shared-memory wavefronts per program, then a markdown table: share of stall samples, cycles per
program per SM (share x elapsed cycles / programs per SM), share of executed instructions,
instructions per warp, top stall reasons. With --opcodes, a second table:
per phase, the executed instructions per warp and program by SASS opcode (the generated code's
mix: what a phase spends its issue slots on). With --code, a third: per phase the hot code (SASS
instructions executed at least once, and their bytes) and its instruction-fetch (no_inst) stall
samples, as a share of all samples and as cycles a program an SM.
"""

import argparse
import collections
import inspect
import re
import subprocess
import tempfile

from compile_sm90 import H200_SMS, compile_gluon, nvidia_tool
from ncu_lines import line_table, opcode, read_sass_csv
from leapquant.flush import gluon_kernel as flush_gluon
from leapquant.launch import flag_tile

NUM_WARPS = flush_gluon.NUM_WARPS
# helpers -> phase (the SPEC phases are helpers of their own: rebuild_factors, thin_products, basis,
# residual, scales_and_codes)
HELPER_PHASE = {
    "_prefetch": "inputs", "decay": "rebuild factors", "_mul": "rebuild factors", "rebuild_factors": "rebuild factors",
    "_codes_bf16": "rebuild factors", "_split_bf16": "rebuild factors",
    "thin_products": "thin products", "_store_parts": "thin products", "_stage_columns": "thin products",
    "_store_low_rank_dots": "thin products", "_basis_columns": "thin products",
    "_part_sums": "thin products",
    "_split3_bf16": "thin products", "_select_rows": "thin products",
    "basis": "bases", "_unit_scale": "bases", "_gram": "bases", "_pick": "bases", "_dot": "bases",
    "_cholesky_pass": "bases", "_inv_norm": "bases", "_at_least_0": "bases", "_orthonormal_cols": "bases",
    "_replace_dependent": "bases",
    "_guard_overflow": "tokens", "residual": "residual",
    "scales_and_codes": "scales and codes", "_column_sums": "scales and codes",
    "_store_checkpoint": "stores and resets", "_reset_window": "stores and resets",
    "_stage_views": "inputs", "_stage_words": "inputs", "_set_up_buffers": "inputs", "_keep_staged": "inputs",
    "_stacked": "rebuild factors", "_staging_buffer": "inputs", "_split_row": "thin products",
    "_ku_rows": "thin products",
    "_add": "kernel (_flush_kernel)", "_popc": "kernel (_flush_kernel)",  # the flag scan's
    "_nth_set_bit": "kernel (_flush_kernel)",
}
# _flush_program: a phase starts at the first line containing its marker (in this order)
PROGRAM_MARKERS = (
    ("this program's inputs", "inputs"), ("rebuild_factors(", "rebuild factors"),
    ("# one round of subspace iteration", "subspace calls"), ("# where fp16 u_r would overflow", "tokens"),
    ("e = residual(", "residual"), ("_store_checkpoint(", "stores and resets"),
    ("# the next program's inputs", "next program's copies"), ("# uk = S^T qv", "uk call"),
)


def line_phases() -> dict:
    """Source line of flush/gluon_kernel.py -> phase name."""
    lines = inspect.getsource(flush_gluon).splitlines()
    phases, func, start, seen = {}, None, None, set()
    for i, text in enumerate(lines, 1):
        m = re.match(r"def (\w+)", text)
        if m:
            func = m.group(1)
        if func == "_flush_program":
            for marker, name in PROGRAM_MARKERS:
                if marker in text and name not in seen:
                    start = name
                    seen.add(name)
            phases[i] = start or "program set-up"
        else:
            phases[i] = HELPER_PHASE.get(func, f"kernel ({func})")
    missing = {name for _, name in PROGRAM_MARKERS} - seen
    if missing:
        raise SystemExit(f"phase markers not found in _flush_program: {sorted(missing)}")
    return phases


LIBRARY = "reductions (triton's library code: sums, maxima)"
# helpers of the package's own neutral modules the kernel inlines, by file (nvdisasm gives no call
# site for them either)
SHARED = {"fp32_bits.py": "exponent bits (fp32_bits: pow2, exponent, clamped_exponent; bases and tokens)"}


def address_lines(cubin: bytes) -> dict:
    """SASS address -> the flush/gluon_kernel.py line it belongs to, or a label: SHARED's for code
    inlined from the package's neutral modules, LIBRARY for code inlined from triton's own library
    (the reductions' combine steps)."""
    tool = nvidia_tool("nvdisasm")
    with tempfile.NamedTemporaryFile(suffix=".cubin") as f:
        f.write(cubin)
        f.flush()
        out = subprocess.run([tool, "-g", "-c", f.name], capture_output=True, text=True, check=True).stdout

    def where_label(path: str, line: int):
        if path.endswith("flush/gluon_kernel.py"):
            return line
        return next((label for name, label in SHARED.items() if path.endswith(name)), LIBRARY)

    return {offset: where_label(*where) for offset, (where, _) in line_table(out).items() if where}


def cell(text: str) -> str:
    """A markdown table cell: the phase names' | (max|S|) escaped."""
    return text.replace("|", "\\|")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("sass_csv")
    ap.add_argument("elapsed_cycles", type=float)
    ap.add_argument("programs", type=int)
    ap.add_argument("--in-place", action="store_true", help="the launch was a pool call")
    ap.add_argument("--tile", type=int, default=None,
                    help="a pool launch's flag-scan tile (default launch.flag_tile(PROGRAMS); profiles taken before "
                         "the tile followed the call ran the largest, 16384)")
    ap.add_argument("--opcodes", type=int, default=0, metavar="N", help="also the N most executed opcodes per phase")
    ap.add_argument("--code", action="store_true",
                    help="also each phase's hot code (SASS instructions executed at least once, and their bytes) "
                         "and its no_inst (instruction fetch) stall samples")
    args = ap.parse_args()
    phases = line_phases()
    # the build the launch ran: a pool call's flag-scan tile follows its candidates (PROGRAMS is
    # the due count; the bench and ncu_target.py launch pools whose every candidate is due)
    tile = (args.tile or flag_tile(args.programs)) if args.in_place else None
    table = address_lines(compile_gluon(args.in_place, tile).asm["cubin"])
    ix, rows, base = read_sass_csv(args.sass_csv)
    if len(rows) != len(table):
        raise SystemExit(f"{len(rows)} instructions profiled, {len(table)} compiled here: another build (triton "
                         "release, form or tile), whose line table would misplace the samples")
    reasons = [h for h in ix if h.startswith("stall_") and "Not Issued" not in h]
    samples, executed = collections.Counter(), collections.Counter()
    wavefronts = 0.0
    hot = collections.Counter()  # per phase: SASS instructions executed at least once
    why = collections.defaultdict(collections.Counter)
    ops = collections.defaultdict(collections.Counter)
    for r in rows:
        line = table.get(int(r[ix["Address"]], 16) - base)
        p = line if isinstance(line, str) else phases.get(line, "unmapped")
        samples[p] += float(r[ix["Warp Stall Sampling (All Samples)"]] or 0)
        runs = float(r[ix["Instructions Executed"]] or 0)
        executed[p] += runs
        hot[p] += runs > 0
        wavefronts += float(r[ix["L1 Wavefronts Shared"]] or 0)
        op = opcode(r[ix["Source"]])
        if op:
            ops[p][op.split(".")[0]] += float(r[ix["Instructions Executed"]] or 0)
        for h in reasons:
            why[p][h[len("stall_"):]] += float(r[ix[h]] or 0)
    total_s, total_e = sum(samples.values()), sum(executed.values())
    warps = args.programs * NUM_WARPS  # per warp and program
    cycles = args.elapsed_cycles / (args.programs / H200_SMS)
    print(f"{cycles:,.0f} cycles per program per SM; {total_e / args.programs:,.0f} warp instructions and "
          f"{wavefronts / args.programs:,.0f} shared-memory wavefronts per program")
    print("| phase | stall samples | ~cycles | instructions | per warp | top stall reasons |")
    print("|---|---:|---:|---:|---:|---|")
    for p, s in samples.most_common():
        top = ", ".join(f"{k} {v / s * 100:.0f}%" for k, v in why[p].most_common(2)) if s else ""
        print(f"| {cell(p)} | {s / total_s * 100:.1f}% | {s / total_s * cycles:,.0f} | {executed[p] / total_e * 100:.1f}% "
              f"| {executed[p] / warps:,.0f} | {top} |")
    if args.opcodes:
        print(f"\n| phase | per warp | {args.opcodes} most executed opcodes (per warp and program) |")
        print("|---|---:|---|")
        for p, e in executed.most_common():
            mix = ", ".join(f"{k} {v / warps:,.0f}" for k, v in ops[p].most_common(args.opcodes))
            print(f"| {cell(p)} | {e / warps:,.0f} | {mix} |")
    if args.code:
        total_ni = sum(why[p]["no_inst"] for p in why)
        print(f"\nhot code: {sum(hot.values()):,} SASS instructions ({sum(hot.values()) * 16 / 1024:,.0f} KB); "
              f"no_inst {total_ni / total_s * 100:.1f}% of the stall samples")
        print("| phase | hot SASS | KB | no_inst samples (share of all) | no_inst ~cycles a program an SM |")
        print("|---|---:|---:|---:|---:|")
        for p, n in hot.most_common():
            ni = why[p]["no_inst"]
            print(f"| {cell(p)} | {n:,} | {n * 16 / 1024:.1f} | {ni / total_s * 100:.1f}% "
                  f"| {ni / total_s * cycles:,.0f} |")


if __name__ == "__main__":
    main()
