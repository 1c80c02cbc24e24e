#!/usr/bin/env bash
# Writes the pager's decision logs (src/pager/decision_log.hpp: every load and why, eviction,
# write-back and move, by tensor name, in decision order) over a fixed set of runs, and the stream
# bench's bytes/MIN figures, into OUT: the yardstick of a refactoring that must not change
# behaviour. Run it on the build before and after the change and compare the folders:
#   scripts/decision-logs.sh build-before /tmp/before && scripts/decision-logs.sh build /tmp/after
#   diff -r /tmp/before /tmp/after
# The runs: the 400-step walk (tests/timing_only_test.cpp, completions awaited each step, so only
# the pager's rules decide), the settled shadow runs (tests/pager_shadow_test.cpp), the schedule and
# lookahead suites, and the stream and MoE benches on sim (bytes/MIN, page-ins, evictions). The
# benches pace their prefetches by measured time, so their logs may differ run to run; their
# figures are compared with the tolerance their own runs show (run this twice on one build).
set -euo pipefail
build=${1:?usage: decision-logs.sh BUILD OUT}
out=${2:?usage: decision-logs.sh BUILD OUT}
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
mkdir -p "$out"
rm -f "$out"/*.log
run() {  # NAME COMMAND...: HTP_DECISION_LOG for one program
  local name=$1
  shift
  HTP_DECISION_LOG="$out/$name.log" "$@" >"$out/$name.stdout" 2>&1 || {
    cat "$out/$name.stdout"
    echo "decision-logs: $name failed"
    exit 1
  }
  touch "$out/$name.log"
}
run walk "$build/tests/test_timing_only" --gtest_filter='timing_only.the_walk_makes_the_recorded_decisions'
for seed in 5 6; do  # the settled shadow runs: every copy completes before the next operation
  run "shadow-$seed" "$build/tests/test_pager_shadow" --gtest_filter="pager_shadow.seed_${seed}_*"
done
run schedule "$build/tests/test_pager_schedule"
run lookahead "$build/tests/test_pager_lookahead"
run stream "$build/bench/htp-stream-bench" --backend sim --config "$root/tests/data/tiny-llama.config.json" \
  --layers 6 --steps 3 --warmup 1 --sweep 0.5,0.75 --slab-mib 1 --chunk-mib 1 --sim-link-gbps 2 \
  --json "$out/stream.json"
run moe "$build/bench/htp-moe-bench" --layers 2 --steps 6 --warmup 3 --sweep 0.4,0.7 --sim-link-gbps 50 \
  --json "$out/moe.json"
python3 - "$out" <<'PY'
import json, sys
out = sys.argv[1]
with open(f"{out}/figures.txt", "w") as f:
    for name in ("stream", "moe"):
        j = json.load(open(f"{out}/{name}.json"))
        def walk(x, path=""):
            if isinstance(x, dict):
                for k, v in x.items():
                    if k in ("bytes_over_min", "page_in_bytes", "bytes_per_step", "page_ins", "evictions"):
                        f.write(f"{name}{path}.{k} {v}\n")
                    else:
                        walk(v, f"{path}.{k}" if not isinstance(v, (int, float, str)) else path)
            elif isinstance(x, list):
                for i, v in enumerate(x):
                    walk(v, f"{path}[{i}]")
        walk(j)
PY
rm -f "$out"/*.stdout
wc -l "$out"/*.log "$out/figures.txt"
