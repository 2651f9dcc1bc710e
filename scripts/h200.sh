#!/usr/bin/env bash
# The one H200 run: GPU tests, accuracy on every batch size, benchmark, kernel variants.
# Full logs under $OUT (./out when unset); a short table last.
#   bash scripts/h200.sh [--sweep]
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-out}
mkdir -p "$OUT"
export PYTHONPATH=$PWD/src${PYTHONPATH:+:$PYTHONPATH} PYTHONUNBUFFERED=1
{ date -u; nvidia-smi; python3 -c "import torch, triton; print('torch', torch.__version__, 'triton', triton.__version__, torch.cuda.get_device_name())"; } > "$OUT/env.txt" 2>&1
python3 -m pytest -q -m gpu tests/ > "$OUT/pytest_gpu.log" 2>&1
echo "gpu tests: $(tail -n 1 "$OUT/pytest_gpu.log")"
if [[ "${1:-}" == "--sweep" ]]; then
  python3 scripts/sweep.py > "$OUT/sweep.log" 2>&1
  cat "$OUT/sweep.log"
fi
python3 -m leapquant.bench --json "$OUT/bench.json" 2>&1 | tee "$OUT/bench.log" | tail -n 12
