#!/usr/bin/env bash
# A/B of kernel versions in one device call (NOTES items 43-55): each version's package copied
# to ab/<name>/leapquant (an untracked folder in the checkout, so the device run carries it;
# delete it before committing). Run from the repository root:
#   bash scripts/ab.sh BASE CANDIDATE [CANDIDATE ...]
# 1. scripts/compare_outputs.py: every candidate's run() outputs against BASE's, bit for bit (B=512)
# 2. the GPU tests on every candidate
# 3. python -m leapquant.bench --batch-sizes 16,512 for BASE and the candidates, interleaved twice
# Logs under $OUT (the bench output of all versions in one file, ab.log); a summary table last.
set -u
export PYTHONUNBUFFERED=1
R=$PWD/ab
OUT=${OUT:-out}; mkdir -p "$OUT"
base=$1; shift
L=$OUT/ab.log
PYTHONPATH=$R/$base python3 scripts/compare_outputs.py save /tmp/base.pt --batch-size 512 > $OUT/cmp_save.log 2>&1; echo "save rc $?"
for v in "$@"; do
  PYTHONPATH=$R/$v python3 scripts/compare_outputs.py compare /tmp/base.pt > $OUT/cmp_$v.log 2>&1; echo "compare $v rc $?"; tail -n 10 $OUT/cmp_$v.log
done
for v in "$@"; do
  PYTHONPATH=$R/$v timeout 200 python3 -m pytest -q -m gpu tests/ -x > $OUT/pytest_$v.log 2>&1; echo "pytest $v: $(tail -n 1 $OUT/pytest_$v.log)"
done
for rep in 1 2; do
  for v in $base "$@"; do
    echo "== $v $rep" >> $L
    PYTHONPATH=$R/$v python3 -m leapquant.bench --batch-sizes 16,512 >> $L 2>&1
  done
done
python3 - "$L" <<'PY'
import re,sys
cur=None
for line in open(sys.argv[1]):
    if line.startswith("=="): cur=line.strip(); continue
    m=re.match(r"\s*(16|512)\s+\S+\s+\S+\s+\S+\s+\S+\s+\S+\s+\S+\s+(PASS|FAIL)\s+(\S+)\s+\S+\s+(\S+)",line)
    if m: print(cur,"B",m.group(1),m.group(2),m.group(3),"ms x",m.group(4))
    m=re.match(r"\s*(nothing due|1 in 16 due)\s+\d+\s+(\S+)",line)
    if m: print(cur,m.group(1),m.group(2))
PY
