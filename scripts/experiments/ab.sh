#!/usr/bin/env bash
# A/B of kernel versions in one device call, the flush's and the step's figures. Each version's package is a copy
# of src/leapquant at ab/<name>/leapquant, a git-ignored folder in the checkout: name `ab` in the
# device call's carry so that it travels. Run from the repository root:
#   bash scripts/experiments/ab.sh BASE CANDIDATE [CANDIDATE ...]
# 1. scripts/compare_outputs.py: each candidate's run() outputs against BASE's, bit for bit (B=512)
# 2. the GPU tests on each candidate (or on those AB_TESTED names; AB_TEST_PATHS: which tests, default tests/)
# 3. python -m leapquant.bench --batch-sizes 16,512 for BASE and the candidates, interleaved twice
# Logs under $OUT (the bench output of every version, then the compare and test logs, in ab.log; its
# figures in ab_<name>_<rep>.json);
# a summary table last (all PASS: every input family at both batch sizes). Exits 1 when a version
# folder is missing or BASE's outputs cannot be saved; read the compare lines and test counts above
# the table for the rest.
set -u
case "${1:-}" in ""|-h|--help) sed -n "2,13p" "$0" | sed "s/^# \{0,1\}//"; exit 0 ;; esac
cd "$(dirname "$0")/../.."  # the repository root
export PYTHONUNBUFFERED=1
OUT=${OUT:-out}
mkdir -p "$OUT"
versions=$PWD/ab
[ $# -ge 2 ] || { echo "usage: bash scripts/experiments/ab.sh BASE CANDIDATE [CANDIDATE ...]"; exit 2; }
base=$1
shift
for v in "$base" "$@"; do
  [ -d "$versions/$v/leapquant" ] || { echo "no package at ab/$v/leapquant"; exit 1; }
done
saved=$(mktemp --suffix=.pt)
PYTHONPATH=$versions/$base python3 scripts/compare_outputs.py save "$saved" --batch-size 512 > "$OUT/cmp_save.log" 2>&1 \
  || { echo "saving $base's outputs failed:"; tail -n 5 "$OUT/cmp_save.log"; rm -f "$saved"; exit 1; }
for v in "$@"; do
  PYTHONPATH=$versions/$v python3 scripts/compare_outputs.py compare "$saved" > "$OUT/cmp_$v.log" 2>&1
  echo "compare $v against $base: exit $?"
  tail -n 10 "$OUT/cmp_$v.log"
done
for v in ${AB_TESTED:-$@}; do  # AB_TESTED: the candidates whose GPU tests run (default: all)
  PYTHONPATH=$versions/$v timeout 200 python3 -m pytest -q -m gpu ${AB_TEST_PATHS:-tests/} -x > "$OUT/pytest_$v.log" 2>&1
  echo "GPU tests $v: $(tail -n 1 "$OUT/pytest_$v.log")"
done
: > "$OUT/ab.log"
for rep in 1 2; do
  for v in "$base" "$@"; do
    echo "== $v $rep $(PYTHONPATH=$versions/$v python3 -c 'import leapquant; print(leapquant.__file__)')" >> "$OUT/ab.log"
    PYTHONPATH=$versions/$v python3 -m leapquant.bench --batch-sizes 16,512 --json "$OUT/ab_${v}_$rep.json" >> "$OUT/ab.log" 2>&1
  done
done
python3 - "$OUT" "$base" "$@" <<'PY'
import json, sys
out, names = sys.argv[1], sys.argv[2:]
print("version rep  all PASS  flush B=16 ms (x floor)  flush B=512 ms (x floor)  nothing due ms  1 in 16 due ms"
      "  step B=16 ms (x floor)  step B=512 ms (x floor)")
for rep in (1, 2):
    for name in names:
        d = json.load(open(f"{out}/ab_{name}_{rep}.json"))
        rows = {r["batch_size"]: r for r in d["rows"]}
        steps = {r["batch_size"]: r for r in d.get("step_rows", [])}
        steady = [s["median_ms"] for s in d["steady_state"]]
        cells = [f"{rows[b]['flush']['median_ms']:.4f} ({rows[b]['flush']['median_ms'] / rows[b]['floor_ms']:.2f})"
                 for b in (16, 512)]
        cells += [f"{steps[b]['step']['median_ms']:.4f} ({steps[b]['step']['median_ms'] / steps[b]['floor_ms']:.2f})"
                  if b in steps else "-" for b in (16, 512)]
        ok = all(r["ok"] for r in d["rows"]) and all(r["ok"] for r in d.get("step_rows", []))
        print(f"{name:7s} {rep:3d}  {str(ok):8s}  {cells[0]:>23s}  {cells[1]:>24s}  {steady[0]:14.4f}  {steady[1]:14.4f}"
              f"  {cells[2]:>22s}  {cells[3]:>23s}")
PY
rm -f "$saved"
# the compare and test logs into ab.log, so that the files a device call returns (at most 8) hold them
for f in "$OUT"/cmp_*.log "$OUT"/pytest_*.log; do
  if [ -f "$f" ]; then echo "===== $(basename "$f")"; cat "$f"; rm "$f"; fi
done >> "$OUT/ab.log"
