#!/usr/bin/env bash
# one device call for flush candidates ab/NAME... against ab/main: timing A/B (interleaved twice,
# time_flush_ab.sh), then each candidate's accuracy (bench --skip-timing at ACC_B; ACC="NAME ...":
# only those), and with
# NCU=1 Nsight Compute on each (ncu_flush_versions.sh), with TESTS="NAME ..." those candidates' flush GPU tests
#   [NCU=1] [TESTS="NAME ..."] bash scripts/experiments/ab_call.sh NAME [NAME ...]
set -u
cd "$(dirname "$0")/../.."
OUT=${OUT:-out}
mkdir -p "$OUT"
python3 -m pip install -q --no-index --no-deps --target /tmp/site .whl/*.whl >/dev/null 2>&1
export PYTHONPATH=/tmp/site
FLUSH_B=${FLUSH_B:-16,64,256,512} STEADY=1 NOTHING=1 bash scripts/experiments/time_flush_ab.sh main "$@" > "$OUT/ab.log" 2>&1
for v in "$@"; do
  [[ " ${ACC-$*} " == *" $v "* ]] && (cd ab/$v && PYTHONPATH=.:/tmp/site timeout ${ACC_S:-200} python3 -m leapquant.bench --skip-timing --batch-sizes ${ACC_B:-16,64,256,512} > "$OUT/acc_$v.log" 2>&1)
  [ "${NCU:-0}" = 1 ] && PYTHONPATH=/tmp/site bash scripts/experiments/ncu_flush_versions.sh "$v" > "$OUT/ncu_$v.log" 2>&1
  [[ " ${TESTS:-} " == *" $v "* ]] && (cd ab/$v && PYTHONPATH=.:/tmp/site timeout ${TEST_S:-200} python3 -m pytest -q -x -m gpu ../../tests/test_kernel_gpu.py -p no:cacheprovider > "$OUT/tests_$v.log" 2>&1)
done
cat "$OUT/times.log"
for v in "$@"; do
  tail -n 4 "$OUT/cmp_$v.log"; [ -f "$OUT/acc_$v.log" ] && grep -B2 -A8 "worst err/err_ref per family" "$OUT/acc_$v.log" | tail -n 8; [ -f "$OUT/acc_$v.log" ] && grep -c PASS "$OUT/acc_$v.log" && grep -ci FAIL "$OUT/acc_$v.log"
  [ -f "$OUT/ncu_$v.log" ] && cat "$OUT/ncu_$v.log"; [ -f "$OUT/tests_$v.log" ] && tail -n 2 "$OUT/tests_$v.log"
done
