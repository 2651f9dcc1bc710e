#!/usr/bin/env bash
# Build the A/B trees the experiment scripts read (ab/<name>/leapquant, git-ignored; name `ab` in
# the device call's carry): ab/main from HEAD's package, and one tree per NAME=PATCH[+PATCH...]
# with those patches of scripts/experiments/ applied in order (patch names without .patch).
#   bash scripts/experiments/make_ab.sh stage=flush_stage_columns both=flush_fewer_barriers+step_one_exchange
set -euo pipefail
cd "$(dirname "$0")/../.."
rm -rf ab
mkdir -p ab/main
git archive HEAD src/leapquant | tar -x -C ab/main --strip-components=1
for spec in "$@"; do
  name=${spec%%=*}
  mkdir -p "ab/$name"
  cp -r ab/main/leapquant "ab/$name/"
  IFS=+ read -r -a patches <<< "${spec#*=}"
  for p in "${patches[@]}"; do
    (cd "ab/$name" && patch -p2 -s < "../../scripts/experiments/$p.patch")
  done
  echo "ab/$name: ${patches[*]}"
done
