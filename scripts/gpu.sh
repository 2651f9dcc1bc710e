#!/usr/bin/env bash
# The one GPU run (an H100 or H200): `python -m leapquant.bench` (accuracy at every batch size; the
# flush, the step, the two pool layouts, the engine loop against fla) on a quiet GPU first, then
# the decode loop against fla over 16 windows, then the GPU tests. Logs and JSON under $OUT (./out when unset): one
# text log gpu.log, bench.json, decode_loop_<family>.json; a short table last.
#   [TEST_S=seconds, 0: no tests] [TESTS="pytest args"] [BENCH_S=seconds, 0: no bench]
#   [SECTIONS=flush,step,layouts,engine] [SIZES=16,32,64,128,256,512] [LOOP_S=seconds, 0: no loop]
#   [FLUSH_CTAS=2,1: the engine loop at each flush grid] [STREAMS=1,2,4: and each count of side streams]
#   [FAMILIES=kda,gdn: the engine loop and the decode loop of each model family]
#   [FLUSH_GROUPS=1,2,4: and each count of layers a flush launch (Overlap(group=...))]
#   [TILELANG=1: the engine loop's TileLang pair too, the requests' baseline.py in .requests (needs .tilelang)]
#   [REQUESTS="kda-flush kda-step": each request's own checks and timings (scripts/request_bench.py)
#    on copies of the NVlabs/kda request folders in .requests/conless-leapquant-NAME (carry .requests)]
#   [REQUEST_KERNELS=gluon,triton: the requests on each kernel] [REQUEST_ARGS=--skip-timing] [REQ_S=seconds]
#   bash scripts/gpu.sh [--portable] [--ncu] [--ncu-step] [--ncu-loop] [--ncu-gdn] [--help]
# --portable: the bench once more on the portable kernels (LEAPQUANT_KERNEL=triton)
# --ncu, --ncu-step: Nsight Compute on the flush (B=64) / the step (B=256), default kernels
# --ncu-loop: on the engine loop's flush launch at B=256 with four layers a launch (a pool call over
#   1,024 sequences, 1 in 16 programs due: 2,048 programs)
# --ncu-gdn: on the GDN flush, every program due, at B=256 (functional form)
# fla-core travels as wheels in .whl (carry it): installed to a folder on PYTHONPATH; TileLang, for the
# requests' baselines, as .tilelang/site.tar.xz (scripts/pack_tilelang.sh; carry .tilelang).
set -uo pipefail
case "${1:-}" in -h|--help) sed -n '2,/^set -uo/p' "$0" | sed '$d' | sed 's/^# \{0,1\}//'; exit 0 ;; esac
cd "$(dirname "$0")/.."
OUT=${OUT:-out}
mkdir -p "$OUT"
export PYTHONPATH=$PWD/src${PYTHONPATH:+:$PYTHONPATH} PYTHONUNBUFFERED=1
if ls .whl/*.whl > /dev/null 2>&1; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl \
    && export PYTHONPATH=$PYTHONPATH:/tmp/site
fi
if [ -f .tilelang/site.tar.xz ]; then  # the requests' TileLang baselines (scripts/pack_tilelang.sh; carry .tilelang)
  mkdir -p /tmp/tlsite && tar -C /tmp/tlsite -xJf .tilelang/site.tar.xz \
    && export PYTHONPATH=$PYTHONPATH:/tmp/tlsite LD_LIBRARY_PATH=/tmp/tlsite/z3/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
fi
log="$OUT/gpu.log"
{ date -u; nvidia-smi; python3 -c "import torch, triton; print('torch', torch.__version__, 'triton', triton.__version__, torch.cuda.get_device_name())"; } > "$log" 2>&1
sizes=${SIZES:+--batch-sizes $SIZES}
for opt in "$@"; do
  case "$opt" in
    --portable) echo "===== bench, portable kernels" >> "$log"
                LEAPQUANT_KERNEL=triton timeout "${BENCH_S:-300}" python3 -m leapquant.bench --sections flush,step $sizes \
                  --json "$OUT/bench_portable.json" >> "$log" 2>&1; echo "portable bench: exit $?" ;;
    --ncu) bash scripts/ncu_profile.sh _flush_kernel "$OUT/ncu" python3 scripts/ncu_target.py 64
           cat "$OUT/ncu.txt" >> "$log"; grep -E "Duration|Registers Per|Achieved Occupancy|Memory Throughput|Issue Slots Busy" "$OUT/ncu.txt" ;;
    --ncu-loop) NCU_TIMEOUT=150 bash scripts/ncu_profile.sh _flush_kernel "$OUT/ncu_loop" python3 scripts/ncu_target.py 1024 pool 0.0625
                cat "$OUT/ncu_loop.txt" >> "$log"; grep -E "Duration|Registers Per|Achieved Occupancy|Memory Throughput|Issue Slots Busy" "$OUT/ncu_loop.txt" ;;
    --ncu-gdn) NCU_TIMEOUT=150 bash scripts/ncu_profile.sh _flush_kernel "$OUT/ncu_gdn" python3 scripts/ncu_target.py 256 flush 1 gdn
               cat "$OUT/ncu_gdn.txt" >> "$log"; grep -E "Duration|Registers Per|Achieved Occupancy|Memory Throughput|Issue Slots Busy" "$OUT/ncu_gdn.txt" ;;
    --ncu-step) NCU_TIMEOUT=150 bash scripts/ncu_profile.sh _step_kernel "$OUT/ncu_step" python3 scripts/ncu_target.py 256 step
                cat "$OUT/ncu_step.txt" >> "$log"; grep -E "Duration|Registers Per|Achieved Occupancy|DRAM Throughput|Issue Slots Busy" "$OUT/ncu_step.txt" ;;
    *) echo "unknown option $opt (see --help)"; exit 2 ;;
  esac
done
if [ "${LOOP_S:-150}" != 0 ]; then
  for fam in $(echo "${FAMILIES:-kda}" | tr , ' '); do
    echo "===== decode loop against fla, $fam" >> "$log"
    timeout "${LOOP_S:-150}" python3 -m leapquant.eval.step_loop --family "$fam" --tokens 256 --sequences 8 \
      --json "$OUT/decode_loop_$fam.json" >> "$log" 2>&1
    echo "decode loop vs fla, $fam: exit $?, worst window $(python3 -c "import json; r=json.load(open('$OUT/decode_loop_$fam.json')); print(f\"{max(r['window_rel']):.3e} over {len(r['window_rel'])} windows\")" 2>/dev/null)"
  done
fi
if [ "${BENCH_S:-300}" != 0 ]; then
  echo "===== bench" >> "$log"
  timeout "${BENCH_S:-300}" python3 -m leapquant.bench --sections "${SECTIONS:-flush,step,layouts,engine}" $sizes \
    ${FLUSH_CTAS:+--engine-flush-ctas $FLUSH_CTAS} ${STREAMS:+--engine-streams $STREAMS} ${FLUSH_GROUPS:+--engine-groups $FLUSH_GROUPS} ${TILELANG:+--requests .requests} \
    ${FAMILIES:+--families $FAMILIES} --json "$OUT/bench.json" > "$OUT/bench.log" 2>&1
  echo "bench: exit $?"; cat "$OUT/bench.log" >> "$log"
  grep -v "^  .* done" "$OUT/bench.log" | sed -n '/^\(flush, every program due\|decode step\|layouts\|engine loop\)/,$p' 
  rm "$OUT/bench.log"
fi
for req in ${REQUESTS:-}; do
  for kern in $(echo "${REQUEST_KERNELS:-gluon}" | tr , ' '); do
    echo "===== request $req, $kern kernels" >> "$log"
    LEAPQUANT_KERNEL=$kern timeout "${REQ_S:-240}" python3 scripts/request_bench.py ".requests/conless-leapquant-$req" \
      ${REQUEST_ARGS:-} > "$OUT/request_${req}_$kern.log" 2>&1
    echo "request $req, $kern: exit $?"; cat "$OUT/request_${req}_$kern.log" >> "$log"
    grep -E "^\| [0-9]" "$OUT/request_${req}_$kern.log"
  done
done
if [ "${TEST_S:-420}" != 0 ]; then
  echo "===== pytest -m gpu ${TESTS:-tests/}" >> "$log"
  timeout "${TEST_S:-420}" python3 -m pytest -q -m gpu -p no:cacheprovider --durations=10 ${TESTS:-tests/} >> "$log" 2>&1
  echo "gpu tests: $(grep -E '(passed|failed|error)' "$log" | tail -n 1)"
  grep -E "^(FAILED|ERROR)" "$log" | head -20
fi
