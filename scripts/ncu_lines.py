"""Executed instructions and stall samples of a Gluon kernel, per source line and per function,
from an Nsight Compute source export and a local compile of the same kernel.

    python scripts/ncu_lines.py SASS_CSV_GZ LINE_TABLE SOURCE PROGRAMS WARPS [--file PATH] [--kernel NAME] [--top N]

SASS_CSV_GZ: `ncu -i REPORT --page source --csv --print-source sass | gzip` of one launch
(`--section SourceCounters`); LINE_TABLE: `nvdisasm -g -c` of the same kernel compiled here
(`scripts/compile_sm90.py --gluon --dump DIR`; the same triton as the device, so the SASS
offsets match: the script checks every opcode and says how many differ; --kernel: which kernel's
section of the table, default the first); SOURCE: the kernel's Python file (a copy anywhere: the
table's lines belong to it when the table's path ends in "/" + --file, default SOURCE's base
name; give e.g. flush/gluon_kernel.py where two files share a name); PROGRAMS the programs the
launch ran (`scripts/ncu_target.py 64`: 2048); WARPS its warps per CTA. Prints warp
instructions per program, then per function of SOURCE (the `def` a line belongs to; lines of
other files, mostly triton's own library (the reductions' combine steps), are a row of their
own) and per line: instructions per warp and program, share of stall samples, shared-memory
wavefronts per program, top opcodes. ncu_phases.py groups the same counts by SPEC phase for
the flush kernel, through this module's readers.
"""

import argparse
import collections
import csv
import gzip
import re


def opcode(instruction: str) -> str | None:
    """The mnemonic of a SASS instruction's text (its predicate skipped), e.g. FFMA.FTZ; None if empty."""
    words = instruction.split()
    return (words[1] if words[0].startswith("@") else words[0]) if words else None


def line_table(text: str, kernel: str | None = None) -> dict:
    """SASS offset -> ((file path, line), opcode) of one kernel's section (``kernel``, default the
    first) of `nvdisasm -g -c` output (its text); None for code before any line marker."""
    table, where, section = {}, None, None
    for ln in text.splitlines():
        m = re.search(r"\.text\.(\S+?) -+", ln)
        if m:
            if section is not None and kernel is None:
                break  # the first section only
            section = m.group(1)
            continue
        if kernel is not None and section != kernel:
            continue
        m = re.search(r'//## File "([^"]+)", line (\d+)', ln)
        if m:
            where = (m.group(1), int(m.group(2)))
            continue
        m = re.match(r"\s+/\*([0-9a-f]{4,})\*/\s+(.*?);", ln)
        if m:
            table[int(m.group(1), 16)] = (where, opcode(m.group(2)))
    return table


def read_sass_csv(path: str) -> tuple[dict, list, int]:
    """An ncu source export (plain or gzip): (column index by name, the instruction rows, the
    first instruction's address; an instruction's SASS offset is its address minus that)."""
    with (gzip.open if path.endswith(".gz") else open)(path, "rt") as f:
        rows = list(csv.reader(f))
    columns = {name: i for i, name in enumerate(rows[1])}
    return columns, rows[2:], int(rows[2][columns["Address"]], 16)


def functions(lines: list) -> list:
    """(first line, name) of each top-level def in a source file's ``lines``, in order."""
    return [(i + 1, m.group(1)) for i, ln in enumerate(lines) if (m := re.match(r"def (\w+)\(", ln))]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("csv")
    ap.add_argument("lines")
    ap.add_argument("source")
    ap.add_argument("programs", type=int)
    ap.add_argument("warps", type=int)
    ap.add_argument("--file", default=None, help="SOURCE's path as the line table ends it (default: its base name)")
    ap.add_argument("--kernel", default=None, help="the kernel's section in the line table (default: the first)")
    ap.add_argument("--top", type=int, default=30)
    a = ap.parse_args()
    with open(a.lines) as f:
        table = line_table(f.read(), a.kernel)
    suffix = "/" + (a.file or a.source.split("/")[-1]).lstrip("/")
    col, rows, base = read_sass_csv(a.csv)
    with open(a.source) as f:
        src = f.read().splitlines()
    defs = functions(src)

    def ours(where):  # a line of SOURCE
        return where is not None and ("/" + where[0]).endswith(suffix)
    by_line, samples, wavefronts = collections.Counter(), collections.Counter(), collections.Counter()
    by_func, func_samples = collections.Counter(), collections.Counter()
    opcodes = collections.defaultdict(collections.Counter)
    differ = 0
    for r in rows:
        if len(r) <= col["L1 Wavefronts Shared"]:
            continue
        where, op = table.get(int(r[col["Address"]], 16) - base, (None, None))
        if op != opcode(r[col["Source"]]):
            differ += 1
        n, s = int(r[col["Instructions Executed"]] or 0), int(r[col["Warp Stall Sampling (All Samples)"]] or 0)
        by_line[where] += n
        samples[where] += s
        wavefronts[where] += int(r[col["L1 Wavefronts Shared"]] or 0)
        opcodes[where][op.split(".")[0] if op else "?"] += n
        if ours(where):
            func = max((d for d in defs if d[0] <= where[1]), default=(0, "?"))[1]
        else:
            func = "(other files)" if where else "(no line)"
        by_func[func] += n
        func_samples[func] += s
    total, total_samples = sum(by_line.values()), max(sum(samples.values()), 1)
    per = a.programs * a.warps
    print(f"{len(rows)} SASS instructions, {differ} whose opcode differs from the local compile")
    print(f"warp instructions a program: {total / a.programs:,.0f} ({total / per:,.0f} a warp)\n")
    print("| function | instructions a warp and program | share of stall samples |\n|---|---:|---:|")
    for f, n in by_func.most_common():
        print(f"| {f} | {n / per:,.0f} | {func_samples[f] / total_samples:.1%} |")
    print("\n| line | instructions a warp and program | stall samples | shared wavefronts a program | top opcodes | source |")
    print("|---|---:|---:|---:|---|---|")
    for where, n in by_line.most_common(a.top):
        text = src[where[1] - 1].strip()[:60] if ours(where) else ""
        ops = ", ".join(f"{o} {c / per:.0f}" for o, c in opcodes[where].most_common(3))
        print(f"| {'/'.join(where[0].split('/')[-2:])}:{where[1]} | {n / per:,.1f} | {samples[where] / total_samples:.1%} | "
              f"{wavefronts[where] / a.programs:,.0f} | {ops} | `{text}` |" if where else
              f"| ? | {n / per:,.1f} | | | {ops} | |")


if __name__ == "__main__":
    main()
