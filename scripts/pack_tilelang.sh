#!/usr/bin/env bash
# Pack TileLang (what the NVlabs/kda requests' baseline.py kernels need) for a GPU machine without
# network: .tilelang/site.tar.xz, a site folder for Python 3.12 on x86_64 that scripts/gpu.sh unpacks
# onto PYTHONPATH. Under the 64 MiB a device call carries: the wheels of tilelang, apache-tvm-ffi and
# torch-c-dlpack-ext whole, and of z3-solver only libz3 (tilelang's compiler links it).
#   bash scripts/pack_tilelang.sh [TILELANG_VERSION (default 0.1.12, the version the requests name)]
set -euo pipefail
cd "$(dirname "$0")/.."
ver=${1:-0.1.12}  # the requests' baseline.py name 0.1.12
tmp=$(mktemp -d)
get() { python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
  --platform manylinux_2_28_x86_64 --platform manylinux_2_27_x86_64 --platform manylinux_2_24_x86_64 \
  --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 -d "$tmp/wheels" "$@"; }
get "tilelang==$ver"
# its own pins of apache-tvm-ffi and z3-solver
mapfile -t pins < <(unzip -p "$tmp"/wheels/tilelang-*.whl '*/METADATA' | sed -n 's/^Requires-Dist: \(\(apache-tvm-ffi\|z3-solver\)[^;]*\)$/\1/p')
get "${pins[@]}" torch-c-dlpack-ext
mkdir -p "$tmp/site" "$tmp/z3"
for w in "$tmp"/wheels/{tilelang,apache_tvm_ffi,torch_c_dlpack_ext}-*.whl; do unzip -q -o "$w" -d "$tmp/site"; done
unzip -q -o "$tmp"/wheels/z3_solver-*.whl -d "$tmp/z3"
mkdir -p "$tmp/site/z3/lib"
cp "$tmp"/z3/z3/lib/libz3.so.* "$tmp/site/z3/lib/"
echo "# libz3 only: tilelang's compiler links it" > "$tmp/site/z3/__init__.py"
mkdir -p .tilelang
tar -C "$tmp/site" -cf - . | xz -6 -T0 > .tilelang/site.tar.xz
rm -rf "$tmp"
ls -l .tilelang/site.tar.xz
