#!/usr/bin/env bash
# One Nsight Compute profile of one launch of the kernels matching REGEX in COMMAND (the second
# call of scripts/ncu_target.py, between its cudaProfilerStart and Stop), with the sections every
# profile of this project reads: PREFIX.txt (the details page), PREFIX_sass.csv.gz (per-instruction
# counters for scripts/ncu_lines.py and scripts/ncu_phases.py) and PREFIX_run.log (the command's own
# output); the report itself goes to /tmp (large, and the device machine returns few files).
# NCU_CACHE passes ncu's --cache-control (default all, ncu's own); NCU_TIMEOUT bounds the profiled
# run in seconds (default 200).
#   bash scripts/ncu_profile.sh REGEX PREFIX COMMAND [ARG ...]
set -u
case "${1:-}" in -h|--help) sed -n '2,8p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;; esac
[ $# -ge 3 ] || { echo "usage: bash scripts/ncu_profile.sh REGEX PREFIX COMMAND [ARG ...]"; exit 2; }
regex=$1
prefix=$2
report=/tmp/$(basename "$prefix")
shift 2
timeout "${NCU_TIMEOUT:-200}" ncu --clock-control none --cache-control "${NCU_CACHE:-all}" --kernel-name "regex:$regex" \
  --profile-from-start off --launch-count 1 \
  --section SpeedOfLight --section Occupancy --section LaunchStats --section WarpStateStats \
  --section SchedulerStats --section MemoryWorkloadAnalysis --section SourceCounters \
  -o "$report" -f "$@" > "${prefix}_run.log" 2>&1
ncu -i "$report.ncu-rep" --page details > "$prefix.txt" 2>&1
ncu -i "$report.ncu-rep" --page source --csv --print-source sass | gzip > "${prefix}_sass.csv.gz"
