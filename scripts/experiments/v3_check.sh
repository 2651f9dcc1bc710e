set -u
export PYTHONUNBUFFERED=1
OUT=${OUT:-out}
for rep in 1 2; do for v in v2 v3a v3b; do
PYTHONPATH=$PWD/ab/$v timeout 100 python3 - $v <<'PY'
import sys
from leapquant import bench
from leapquant.eval import flush_inputs as inputs
out = []
for B in (16, 256, 512):
    q0 = inputs.make("random", 1, "cuda", seed=B)["q0"]
    out.append(f"B{B}={bench.time_flush(B, 'cuda', q0)['median_ms']:.4f}")
print(sys.argv[1], " ".join(out), flush=True)
PY
done; done 2>&1 | grep -v Warn | tee $OUT/ab_flush.log
for v in v3a v3b; do
  export PYTHONPATH=$PWD/ab/$v
  timeout 120 ncu --clock-control none --kernel-name regex:_flush_kernel --launch-skip 1 --launch-count 1 \
    --section SpeedOfLight --section Occupancy --section LaunchStats --section WarpStateStats --section SchedulerStats \
    --section MemoryWorkloadAnalysis --section SourceCounters -o /tmp/ncu_$v -f python3 scripts/ncu_target.py 64 > $OUT/ncu_run_$v.log 2>&1
  ncu -i /tmp/ncu_$v.ncu-rep --page details > $OUT/ncu_$v.txt 2>&1
  ncu -i /tmp/ncu_$v.ncu-rep --page source --csv --print-source sass > /tmp/sass_$v.csv 2>&1
  grep -E "Duration|Registers Per|Achieved Occupancy|Mem Busy|L1/TEX Cache|Issue Slots Busy|Executed Instructions  |Local Memory Spilling Requests  " $OUT/ncu_$v.txt | head -12
  cycles=$(grep -m1 "Elapsed Cycles" $OUT/ncu_$v.txt | awk '{gsub(",", "", $NF); print $NF}')
  python3 scripts/ncu_phases.py /tmp/sass_$v.csv "$cycles" 2048 --opcodes 6 | tee $OUT/ncu_phases_$v.md
done
