set -u
OUT=${OUT:-out}
export PYTHONPATH=$PWD/ab/v3
timeout 200 ncu --clock-control none --kernel-name regex:_flush_kernel --launch-skip 1 --launch-count 1 \
  --section SpeedOfLight --section Occupancy --section LaunchStats --section WarpStateStats \
  --section SchedulerStats --section ComputeWorkloadAnalysis --section MemoryWorkloadAnalysis --section InstructionStats \
  python3 scripts/ncu_target.py 256 > $OUT/ncu_v3.txt 2>&1
echo "ncu exit $?"
grep -E "Duration|Registers Per|Shared Memory Config|Dynamic Shared|Achieved Occupancy|Theoretical Occupancy|Block Limit|Waves Per SM|Memory Throughput|DRAM Throughput|Compute \(SM\)|Issue Slots Busy|Issued Ipc|No Eligible|Warp Cycles Per Issued|Executed Instructions  |Shared Memory  |Bank Conflicts|Pipe|One or More" $OUT/ncu_v3.txt | head -50
grep -B2 -A6 "Stall\|stall" $OUT/ncu_v3.txt | grep -E "^ +[A-Z].*(%|cycles)" | head -10
