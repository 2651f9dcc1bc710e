#!/usr/bin/env bash
# A lean A/B of flush versions (ab/<name>/leapquant, as for ab.sh; CONTRIBUTING.md says how to
# build them from commits) when device time is short: each candidate's outputs bit for bit
# against BASE's (scripts/compare_outputs.py, B=512), then the bench's pool timing (all due,
# L2-cold) at B=512 (FLUSH_B: comma-separated batch sizes instead; STEADY=1: also 1 in 16 due
# at B=256; NOTHING=1: also nothing due at B=512), the versions interleaved twice, one process
# each. STEP=1: the decode step's pool timing too (bench.time_step at B=64, 256 and 512; the
# step's outputs are not compared).
#   [STEP=1] bash scripts/experiments/time_flush_ab.sh BASE CANDIDATE [CANDIDATE ...]
set -u
case "${1:-}" in ""|-h|--help) sed -n "2,9p" "$0" | sed "s/^# \{0,1\}//"; exit 0 ;; esac
cd "$(dirname "$0")/../.."
OUT=${OUT:-out}
mkdir -p "$OUT"
[ $# -ge 2 ] || { echo "usage: bash scripts/experiments/time_flush_ab.sh BASE CANDIDATE [CANDIDATE ...]"; exit 2; }
for v in "$@"; do
  [ -d "ab/$v/leapquant" ] || { echo "no package at ab/$v/leapquant"; exit 1; }
done
base=$1
saved=$(mktemp --suffix=.pt)
trap 'rm -f "$saved"' EXIT
PYTHONPATH=ab/$base python3 scripts/compare_outputs.py save "$saved" --batch-size 512 > "$OUT/cmp_save.log" 2>&1 || { tail -n 5 "$OUT/cmp_save.log"; exit 1; }
for v in "${@:2}"; do
  PYTHONPATH=ab/$v python3 scripts/compare_outputs.py compare "$saved" 2>&1 | tee "$OUT/cmp_$v.log" | tail -n 9
done
for rep in 1 2; do
  for v in "$@"; do
    PYTHONPATH=ab/$v python3 -c "
from leapquant import bench
from leapquant.eval import flush_inputs
q0 = flush_inputs.make('random', 1, 'cuda', seed=512)['q0']
for B in (${FLUSH_B:-512},):
    print('$v', $rep, f'B={B} all due median ms', round(bench.time_flush(B, 'cuda', q0)['median_ms'], 4), flush=True)
if ${STEADY:-0}:
    print('$v', $rep, 'B=256 1 in 16 due median ms', round(bench.time_flush(256, 'cuda', q0, due_fraction=1 / 16)['median_ms'], 4), flush=True)
if ${NOTHING:-0}:
    print('$v', $rep, 'B=512 nothing due median ms', round(bench.time_flush(512, 'cuda', q0, due_fraction=0.0)['median_ms'], 4), flush=True)
if ${STEP:-0}:
    for B in (64, 256, 512):
        print('$v', $rep, f'step B={B} median ms', round(bench.time_step(B, 'cuda')['median_ms'], 4), flush=True)
" 2>&1 | grep -v -i warn | tee -a "$OUT/times.log"
  done
done
