#!/usr/bin/env bash
# The one H200 run: GPU tests (flush kernels and step), accuracy on every batch size and benchmark
# of each flush kernel, the decode step against its floor and fla's fp32-state decode, and the
# decode loop against fla over 16 windows (carry .whl: the fla-core and einops wheels, see README). Full logs under $OUT (./out when unset): the text logs in one file, h200.log, beside the
# JSON, markdown and figure outputs, so that few files carry everything; a short table last.
#   [PORTABLE=0] [TEST_S=seconds, 0: no tests] [LOOP_S=seconds] [BENCH_S=seconds] bash scripts/h200.sh [--ncu] [--ncu-step] [--step-variants] [--precision] [--bytes-only] [--kernels-hub]
# --ncu-step: Nsight Compute on the default decode-step kernel at B=256 (ncu_step.txt, and the
# per-instruction counters for scripts/ncu_lines.py in ncu_step_sass.csv.gz)
# --step-variants: Gluon step kernel variants A/B (scripts/experiments/step_variants.py; STEP_VARIANTS: its arguments)
# --kernels-hub: the Hugging Face `kernels` loading tests and README's snippet (needs `kernels`
# importable, e.g. from wheels installed to a folder on PYTHONPATH)
# --bytes-only: the Gluon kernel's data path without its math, against the floor (scripts/experiments/bytes_only.py)
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-out}
mkdir -p "$OUT"
export PYTHONPATH=$PWD/src${PYTHONPATH:+:$PYTHONPATH} PYTHONUNBUFFERED=1
# flash-linear-attention (the fp32-state decode the step is compared with) travels as wheels in
# .whl (carry it): fla-core and einops, installed to a folder on PYTHONPATH
if ls .whl/*.whl > /dev/null 2>&1; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl \
    && export PYTHONPATH=$PYTHONPATH:/tmp/site
fi
{ date -u; nvidia-smi; python3 -c "import torch, triton; print('torch', torch.__version__, 'triton', triton.__version__, torch.cuda.get_device_name())"; } > "$OUT/env.txt" 2>&1
# TEST_S: the GPU tests' time limit in seconds (0 leaves them out). The suite takes ~330 s on the
# H200 (step tests 155 s and flush tests 176 s, measured apart): a call with the tests fits its
# 10 minutes with PORTABLE=0 and without --precision (~8 minutes expected). The per-step limits
# guard against a hung step; together they add up to more than 10 minutes
if [ "${TEST_S:-400}" != 0 ]; then
  timeout ${TEST_S:-400} python3 -m pytest -q -m gpu --durations=8 tests/test_step_gpu.py tests/ > "$OUT/pytest_gpu.log" 2>&1
  echo "gpu tests: $(tail -n 1 "$OUT/pytest_gpu.log")"
  grep -E "^(FAILED|ERROR)" "$OUT/pytest_gpu.log" | head -20
fi
for opt in "$@"; do
  case "$opt" in
    --kernels-hub) python3 -m pytest -q -rs tests/test_kernels_load.py tests/test_kernels_build.py > "$OUT/kernels_hub.log" 2>&1
                   echo "kernels loading tests: $(tail -n 1 "$OUT/kernels_hub.log")"
                   python3 -c "$(sed -n "/^python -c '\$/,/^'\$/p" README.md | sed '1d;$d')" 2>&1 | tee -a "$OUT/kernels_hub.log" | tail -n 2 ;;
    --ncu) bash scripts/ncu_profile.sh _flush_kernel "$OUT/ncu" python3 scripts/ncu_target.py 64
           grep -E "Duration|Registers Per|Achieved Occupancy|Theoretical Occupancy|Memory Throughput|Compute \(SM\)|Issue Slots Busy|No Eligible|Stall|Block Limit" "$OUT/ncu.txt" | head -40
           # cycles per phase (the default kernel must be the Gluon one; 64 sequences = 2048 programs)
           cycles=$(grep -m1 "Elapsed Cycles" "$OUT/ncu.txt" | awk '{gsub(",", "", $NF); print $NF}')
           python3 scripts/ncu_phases.py "$OUT/ncu_sass.csv.gz" "$cycles" 2048 --opcodes 6 | tee "$OUT/ncu_phases.md" ;;
    --ncu-step) NCU_TIMEOUT=150 bash scripts/ncu_profile.sh _step_kernel "$OUT/ncu_step" python3 scripts/ncu_target.py 256 step
                # per-line counts: python scripts/ncu_lines.py ncu_step_sass.csv.gz LINES step/gluon_kernel.py 8192 4
                grep -E "Duration|Registers Per|Achieved Occupancy|Theoretical Occupancy|Memory Throughput|DRAM Throughput|Issue Slots Busy|No Eligible|Stall|Block Limit|Warp Cycles Per Issued" "$OUT/ncu_step.txt" | head -30 ;;
    --step-variants) timeout 120 python3 scripts/experiments/step_variants.py ${STEP_VARIANTS:-} > "$OUT/step_variants.log" 2>&1
                     echo "step variants (exit $?):"; cat "$OUT/step_variants.log" ;;
    --bytes-only) python3 scripts/experiments/bytes_only.py > "$OUT/bytes_only.log" 2>&1
                  echo "data path alone (exit $?):"
                  grep -E "copy bandwidth|bytes-only ms|^ *[0-9]+ +[0-9.]+ +[0-9.]+ +[0-9.]+$|bytes-only kernel:|needs an" "$OUT/bytes_only.log" ;;
    --precision) python3 -m leapquant.precision --json "$OUT/precision.json" --markdown "$OUT/precision.md" \
                   --histogram "$OUT/precision.png" > "$OUT/precision.log" 2>&1
                 echo "precision report: exit $?" ;;
  esac
done
if [ "${PORTABLE:-1}" != 0 ]; then  # PORTABLE=0: leave out the portable kernel's bench
  timeout ${BENCH_S:-120} python3 -m leapquant.bench --kernel triton --json "$OUT/bench_triton.json" > "$OUT/bench_triton.log" 2>&1
  echo "portable kernel:"; grep -B1 -A8 "x floor" "$OUT/bench_triton.log"; grep -A4 "steady state" "$OUT/bench_triton.log"
  grep -A8 "stress families" "$OUT/bench_triton.log"
fi
# the decode layer against fla's fp32 state: 256 tokens (16 windows) after a 64-token prefill
# (200 s: fla compiles its kernels on a cold cache, over 60 s when no GPU test ran before)
timeout ${LOOP_S:-200} python3 -m leapquant.eval.step_loop --tokens 256 --sequences 8 --json "$OUT/decode_loop.json" > "$OUT/decode_loop.log" 2>&1
echo "decode loop vs fla (exit $?):"; tail -n 17 "$OUT/decode_loop.log"
echo "default kernel:"
timeout ${BENCH_S:-150} python3 -m leapquant.bench --json "$OUT/bench.json" 2>&1 | tee "$OUT/bench.log" | tail -n 34
# one text log (the device machine returns a handful of files)
for f in env.txt pytest_gpu.log kernels_hub.log ncu_run.log ncu.txt ncu_step.txt step_variants.log bytes_only.log precision.log decode_loop.log bench_triton.log bench.log; do
  if [ -f "$OUT/$f" ]; then echo "===== $f"; cat "$OUT/$f"; rm "$OUT/$f"; fi
done > "$OUT/h200.log"
