set -u
export PYTHONUNBUFFERED=1
OUT=${OUT:-out}
PYTHONPATH=$PWD/ab/v3 timeout 240 python3 -m pytest -q -m gpu tests/test_kernel_gpu.py --maxfail=4 -x > $OUT/pytest_v3.log 2>&1
echo "flush GPU tests v3: $(tail -n 1 $OUT/pytest_v3.log)"
grep -E "^E  |Error" $OUT/pytest_v3.log | head -30
for rep in 1 2; do for v in v2 v3:none:1 v3:128:2; do
PYTHONPATH=$PWD/ab/${v%%:*} timeout 100 python3 - $v <<'PY'
import sys
from leapquant import bench
from leapquant.eval import flush_inputs as inputs
name = sys.argv[1].split(":")
if len(name) == 3:
    from leapquant.kda.flush import gluon_kernel as fg
    fg.MAX_REGISTERS = None if name[1] == "none" else int(name[1])
    fg.CTAS_PER_SM = int(name[2])
out = []
for B in (16, 64, 256, 512):
    q0 = inputs.make("random", 1, "cuda", seed=B)["q0"]
    out.append(f"B{B}={bench.time_flush(B, 'cuda', q0)['median_ms']:.4f}")
print(sys.argv[1], " ".join(out), flush=True)
PY
done; done 2>&1 | grep -v Warn | tee $OUT/ab_flush.log
