#!/usr/bin/env bash
# The main benchmark on a sensible default: htp-stream-bench on the GPU when one is present,
# otherwise on the sim backend (Llama-3.1-8B, 8 layers of the real shape, about a minute on a
# 2-core machine). Installs what is missing, builds (Release), runs, and plots. Extra arguments go
# to htp-stream-bench (see --help); e.g. scripts/bench.sh --model llama-3.1-70b --hbm-budget 0.3
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"
bash "$root/scripts/setup.sh"
cd "$root"
configure_and_build build-release -DCMAKE_BUILD_TYPE=Release -DHTP_BUILD_TESTS=OFF -DHTP_BUILD_EXAMPLES=OFF
out=$root/build-release/results
mkdir -p "$out"
"$root/build-release/bench/htp-stream-bench" --json "$out/stream.json" --trace "$out/trace.json" "$@"
if /usr/bin/python3 -c "import matplotlib" 2>/dev/null; then
  /usr/bin/python3 "$root/scripts/plot.py" --bench "$out/stream.json" --trace "$out/trace.json" --out "$out" \
    && echo "plots in $out"
fi
