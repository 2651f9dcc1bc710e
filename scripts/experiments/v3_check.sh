set -u
export PYTHONUNBUFFERED=1
OUT=${OUT:-out}
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
PYTHONPATH=$PWD/ab/v3c timeout 200 python3 -m pytest -q -m gpu tests/test_kernel_gpu.py --maxfail=4 -x > $OUT/pytest_v3c.log 2>&1
echo "flush GPU tests v3c: $(tail -n 1 $OUT/pytest_v3c.log)"
grep -E "^E  |Error" $OUT/pytest_v3c.log | head -20
for rep in 1 2; do for v in v2 v3c; do
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
if grep -q " passed" $OUT/pytest_v3c.log && ! grep -q failed $OUT/pytest_v3c.log; then
  PYTHONPATH=$PWD/ab/v3c:/tmp/site timeout 240 python3 -m leapquant.bench --json $OUT/bench_v3c.json > $OUT/bench_v3c.log 2>&1
  echo "bench exit $?"; tail -n 45 $OUT/bench_v3c.log
fi
