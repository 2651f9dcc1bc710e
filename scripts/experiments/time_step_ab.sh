#!/usr/bin/env bash
# One device call for decode-step candidates ab/NAME... (built as CONTRIBUTING.md says) against
# ab/main: each candidate's outputs against main's bit for bit (compare_step_outputs.py at
# STEP_CMP_B, default 64: the functional form and pool calls at every fill count), then the bench's
# time_step (pool form, L2-cold) at B = STEP_B (default 16,64,256,512) and fill counts STEP_FILLS
# (default 1 and 15: the request's harness and a full window), every version in its own process,
# interleaved twice; STEP_PADS: that share of each call's rows are CUDA-graph pad rows (id -1;
# default 0). Logs under $OUT; a table last (each candidate's mean of the two runs against main's).
#   [STEP_B=16,512] [STEP_FILLS=1,8,15] [STEP_PADS=0.25] bash scripts/experiments/time_step_ab.sh NAME [NAME ...]
set -u
case "${1:-}" in ""|-h|--help) sed -n "2,9p" "$0" | sed "s/^# \{0,1\}//"; exit 0 ;; esac
cd "$(dirname "$0")/../.."
OUT=${OUT:-out}
mkdir -p "$OUT"
saved=$(mktemp --suffix=.pt)
PYTHONPATH=ab/main python3 scripts/experiments/compare_step_outputs.py save "$saved" \
  --batch-size "${STEP_CMP_B:-64}" > "$OUT/step_cmp_save.log" 2>&1 || { tail -n 5 "$OUT/step_cmp_save.log"; exit 1; }
for v in "$@"; do
  PYTHONPATH=ab/$v python3 scripts/experiments/compare_step_outputs.py compare "$saved" > "$OUT/step_cmp_$v.log" 2>&1
  echo "compare $v against main: exit $?"
  tail -n 3 "$OUT/step_cmp_$v.log"
done
: > "$OUT/step_ab.log"
for rep in 1 2; do
  for v in main "$@"; do
    PYTHONPATH=ab/$v timeout 150 python3 - "$v" "$rep" "${STEP_B:-16,64,256,512}" "${STEP_FILLS:-1,15}" "${STEP_PADS:-0}" \
      >> "$OUT/step_ab.log" 2>> "$OUT/step_ab_err.log" <<'EOF'
import sys
from leapquant import bench
v, rep, sizes, fills, pad_share = sys.argv[1:]
for fill in map(int, fills.split(",")):
    for B in map(int, sizes.split(",")):
        pads = {"pads": int(B * float(pad_share))} if float(pad_share) else {}
        print(v, rep, fill, B, f"{bench.time_step(B, 'cuda', fill=fill, **pads)['median_ms']:.4f}", flush=True)
EOF
  done
done
python3 - "$OUT/step_ab.log" <<'EOF'
import collections, statistics, sys
t = collections.defaultdict(list)
for line in open(sys.argv[1]):
    v, rep, fill, B, ms = line.split()
    t[v, int(fill), int(B)].append(float(ms))
names = list(dict.fromkeys(k[0] for k in t))
print("version fill B  run1 run2  against main")
for (v, fill, B), ms in sorted(t.items(), key=lambda kv: (kv[0][1], kv[0][2], names.index(kv[0][0]))):
    base = t.get(("main", fill, B))
    rel = f"{statistics.mean(ms) / statistics.mean(base) - 1:+.1%}" if base else ""
    print(v, fill, B, *(f"{m:.4f}" for m in ms), rel)
EOF
rm -f "$saved"
