#!/usr/bin/env bash
# Builds, on this (GPU-less) machine, what scripts/gpu-check.sh runs on the GPU machine: a Release
# build with the CUDA backend, reduced to a small folder build-gpu/ (stripped test and bench
# binaries, plus lib/ with the one shared library they need that a GPU machine without a package
# registry lacks: Google Benchmark's). Carry build-gpu with the device tool's `carry` (the working
# tree and carried paths must stay under 64 MiB together).
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"
bash "$root/scripts/setup.sh"
cd "$root"
configure_and_build build-gpu-full -DCMAKE_BUILD_TYPE=Release -DHTP_WITH_CUDA=ON -DHTP_WERROR=ON
rm -rf build-gpu
mkdir -p build-gpu/tests build-gpu/bench build-gpu/examples build-gpu/lib
cp build-gpu-full/tests/test_* build-gpu/tests/ 2>/dev/null || true
rm -f build-gpu/tests/*.cmake
cp build-gpu-full/bench/htp-* build-gpu/bench/
cp build-gpu-full/examples/htp-example-* build-gpu/examples/
strip --strip-unneeded build-gpu/tests/* build-gpu/bench/* build-gpu/examples/*
cp -L /usr/lib/x86_64-linux-gnu/libbenchmark.so.1debian build-gpu/lib/
du -sh build-gpu
