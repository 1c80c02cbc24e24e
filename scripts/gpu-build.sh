#!/usr/bin/env bash
# Builds, on this (GPU-less) machine, what scripts/gpu-check.sh runs on the GPU machine: a Release
# build with the CUDA backend in build-gpu/, plus the one shared library the binaries need that the
# GPU machine lacks (Google Benchmark). Carry build-gpu with the device tool's `carry`.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"
bash "$root/scripts/setup.sh"
cd "$root"
configure_and_build build-gpu -DCMAKE_BUILD_TYPE=Release -DHTP_WITH_CUDA=ON -DHTP_WERROR=ON
mkdir -p build-gpu/lib
cp -L /usr/lib/x86_64-linux-gnu/libbenchmark.so.1 build-gpu/lib/ 2>/dev/null || true
# Only the binaries travel: drop object files so the carried folder stays small.
find build-gpu -name '*.o' -delete
du -sh build-gpu
