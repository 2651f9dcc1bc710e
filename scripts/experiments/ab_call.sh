#!/usr/bin/env bash
# One device call for flush candidates ab/NAME... (scripts/experiments/make_ab.sh) against ab/main:
# the timing A/B of time_flush_ab.sh (bit-for-bit compare at B=512, then B = 16, 64, 256, 512 all
# due, 1 in 16 due, nothing due; interleaved twice), then per candidate its accuracy (bench
# --skip-timing at ACC_B; ACC="NAME ...": only those, ACC="": none), with NCU=1 Nsight Compute
# (ncu_flush_versions.sh; NCU_B, NCU_OP pass through), and for TESTS="NAME ..." its flush GPU
# tests. A short summary last.
#   [NCU=1] [ACC="NAME ..."] [TESTS="NAME ..."] bash scripts/experiments/ab_call.sh NAME [NAME ...]
set -u
cd "$(dirname "$0")/../.."
# the logs are written to a scratch folder and come back as one archive, $OUT/ab_call.tgz (the
# device machine returns at most 8 files)
DEST=${OUT:-out}
mkdir -p "$DEST"
OUT=$(mktemp -d)
export OUT
python3 -m pip install -q --no-index --no-deps --target /tmp/site .whl/*.whl >/dev/null 2>&1
export PYTHONPATH=/tmp/site
listed() { [[ " $1 " == *" $2 "* ]]; }  # is $2 one of the names in $1
FLUSH_B=${FLUSH_B:-16,64,256,512} STEADY=1 NOTHING=1 bash scripts/experiments/time_flush_ab.sh main "$@" \
  > "$OUT/ab.log" 2>&1
for v in "$@"; do
  if listed "${ACC-$*}" "$v"; then
    (cd "ab/$v" && PYTHONPATH=.:/tmp/site timeout "${ACC_S:-200}" python3 -m leapquant.bench --skip-timing \
      --batch-sizes "${ACC_B:-16,64,256,512}" > "$OUT/acc_$v.log" 2>&1)
  fi
  if [ "${NCU:-0}" = 1 ]; then
    bash scripts/experiments/ncu_flush_versions.sh "$v" > "$OUT/ncu_$v.log" 2>&1
  fi
  if listed "${TESTS:-}" "$v"; then
    (cd "ab/$v" && PYTHONPATH=.:/tmp/site timeout "${TEST_S:-200}" python3 -m pytest -q -x -m gpu \
      ../../tests/test_kernel_gpu.py -p no:cacheprovider > "$OUT/tests_$v.log" 2>&1)
  fi
done
cat "$OUT/times.log"
for v in "$@"; do
  tail -n 4 "$OUT/cmp_$v.log"
  if [ -f "$OUT/acc_$v.log" ]; then
    grep -B2 -A8 "worst err/err_ref per family" "$OUT/acc_$v.log" | tail -n 8
    echo "$v accuracy: $(grep -c PASS "$OUT/acc_$v.log") PASS lines, $(grep -ci FAIL "$OUT/acc_$v.log") FAIL lines"
  fi
  [ -f "$OUT/ncu_$v.log" ] && cat "$OUT/ncu_$v.log"
  [ -f "$OUT/tests_$v.log" ] && tail -n 2 "$OUT/tests_$v.log"
done
tar czf "$DEST/ab_call.tgz" -C "$OUT" .
exit 0
