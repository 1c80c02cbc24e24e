#!/usr/bin/env bash
# The main benchmark on a sensible default: the GPU when one is present, otherwise the sim backend.
# Installs what is missing, builds (Release) and runs. Extra arguments go to the benchmark.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"
bash "$root/scripts/setup.sh"
cd "$root"
configure_and_build build-release -DCMAKE_BUILD_TYPE=Release -DHTP_BUILD_TESTS=OFF
mkdir -p "$root/build-release/results"
if [[ $# -eq 0 ]]; then
  set -- --max-bytes $((64 << 20)) --bytes-per-point $((256 << 20))
fi
exec "$root/build-release/bench/htp-bandwidth" --json "$root/build-release/results/bandwidth.json" "$@"
