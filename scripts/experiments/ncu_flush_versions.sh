#!/usr/bin/env bash
# Nsight Compute on the Gluon flush kernel of each A/B tree (ab/<name>/leapquant, as for ab.sh),
# functional form at B=64 (scripts/ncu_target.py; NCU_B: another batch size, NCU_OP=pool: the
# pool form with every program due, as the bench times it): $OUT/ncu_flush_<name>.txt (details)
# and $OUT/ncu_flush_<name>_sass.csv.gz (per-instruction counters for scripts/ncu_lines.py).
# NCU_CACHE passes ncu's --cache-control (default all, ncu's own). none does not give a warm
# profile of the pool form: ncu_target.py restores the window (index_put kernels, which leave the
# flush code cold: NOTES.md, "What the code's first fetch costs a call") before the profiled call.
# The outputs are named by version only: run each setting into its own $OUT.
#   [NCU_B=B] [NCU_OP=flush|pool] [NCU_CACHE=all|none] bash scripts/experiments/ncu_flush_versions.sh NAME [NAME ...]
set -u
cd "$(dirname "$0")/../.."
OUT=${OUT:-out}
mkdir -p "$OUT"
for v in "$@"; do
  PYTHONPATH=ab/$v bash scripts/ncu_profile.sh _flush_kernel "$OUT/ncu_flush_$v" \
    python3 scripts/ncu_target.py "${NCU_B:-64}" "${NCU_OP:-flush}"
  echo "== $v"
  grep -E "Duration|Registers Per|Achieved Occupancy|Issue Slots Busy|No Eligible|Warp Cycles Per Issued|L1/TEX Hit|Local" "$OUT/ncu_flush_$v.txt" | head -20
done
