#!/usr/bin/env bash
# The main benchmark on a sensible default: htp-stream-bench on the GPU when one is present,
# otherwise on the sim backend (Llama-3.1-8B, 8 layers of the real shape, about a minute on a
# 2-core machine per budget; with no arguments it sweeps budgets of 30, 50 and 75% of the weights).
# Installs what is missing, builds (Release), runs, and plots. Arguments replace the sweep and go
# to htp-stream-bench (see --help); e.g. scripts/bench.sh --model llama-3.1-70b --hbm-budget 0.3
# scripts/bench.sh --scale runs the scale benchmarks instead (sim, a few minutes): per-call cost
# against 10^2..10^6 registered tensors (htp-pager-bench) and a paged KV cache of 100,000 blocks
# (htp-kv-bench, once fitting in HBM and once paging), JSON in build-release/results/.
# scripts/bench.sh --lookahead runs the lookahead and expert comparisons on timing-only sim (about
# 4 minutes): Llama-3.1-8B (8 layers) and 70B (6 layers) at 30/50/75%, module and layer granularity,
# count mode beside automatic; then htp-moe-bench (Mixtral-8x7B, 4 layers) against its oracle.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"
bash "$root/scripts/setup.sh"
cd "$root"
configure_and_build build-release -DCMAKE_BUILD_TYPE=Release -DHTP_BUILD_TESTS=OFF -DHTP_BUILD_EXAMPLES=OFF
out=$root/build-release/results
mkdir -p "$out"
if [[ ${1:-} == --scale ]]; then
  bin=$root/build-release/bench
  "$bin/htp-pager-bench" --benchmark_min_time=0.3 --benchmark_out="$out/pager-scale.json" \
    --benchmark_out_format=json
  "$bin/htp-kv-bench" --batch 16 --steps 4 --json "$out/kv-fits.json"
  "$bin/htp-kv-bench" --batch 40 --steps 3 --json "$out/kv-paging.json"
  echo "JSON in $out"
  exit 0
fi
if [[ ${1:-} == --lookahead ]]; then
  bin=$root/build-release/bench
  "$bin/htp-stream-bench" --backend sim --timing-only --models llama-3.1-8b:8,llama-3.1-70b:6 \
    --sweep 0.3,0.5,0.75 --granularity both --policies schedule-k2,schedule-auto --steps 4 \
    --json "$out/stream-models.json" | tee "$out/stream-models.txt"
  "$bin/htp-moe-bench" --json "$out/moe.json" --trace-out "$out/moe-routing.txt" | tee "$out/moe.txt"
  echo "JSON in $out"
  exit 0
fi
# With no arguments: the HBM budget sweep (30/50/75% of the weights), so the plot has three points.
if [[ $# -eq 0 ]]; then set -- --sweep 0.3,0.5,0.75 --steps 3; fi
"$root/build-release/bench/htp-stream-bench" --json "$out/stream.json" --trace "$out/trace.json" "$@"
if /usr/bin/python3 -c "import matplotlib" 2>/dev/null; then
  /usr/bin/python3 "$root/scripts/plot.py" --bench "$out/stream.json" --trace "$out/trace.json" --out "$out" \
    && echo "plots in $out"
fi
