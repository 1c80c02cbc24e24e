#!/usr/bin/env bash
# Builds the libFuzzer targets with clang (CPU-only, -fsanitize=fuzzer,address,undefined) and runs
# each for ${HTP_FUZZ_SECONDS:-60} seconds, starting from the committed corpus (fuzz/corpus/<target>;
# new inputs go to build-fuzz/corpus, not into the repository). A crash is copied into
# fuzz/regressions/<target>/ (commit it with the fix: ctest replays it from then on) and fails the run.
# Usage: scripts/fuzz.sh [target...]   (default: all five)
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"
cd "$root"
seconds=${HTP_FUZZ_SECONDS:-60}
targets=("$@")
[[ ${#targets[@]} -gt 0 ]] ||
  targets=(fuzz_slab_allocator fuzz_token_bucket fuzz_pager fuzz_codec fuzz_safetensors_header)

dir=build-fuzz
CXX=${HTP_FUZZ_CXX:-clang++} configure_and_build "$dir" -DCMAKE_BUILD_TYPE=RelWithDebInfo \
  -DHTP_BUILD_FUZZ=ON -DHTP_WITH_CUDA=OFF -DHTP_WERROR=ON \
  -DHTP_BUILD_TESTS=OFF -DHTP_BUILD_BENCH=OFF -DHTP_BUILD_EXAMPLES=OFF

failed=0
for t in "${targets[@]}"; do
  work=$dir/corpus/$t
  artifacts=$dir/artifacts/$t
  mkdir -p "$work" "$artifacts" "fuzz/regressions/$t"
  echo "== fuzz $t for ${seconds}s =="
  log=$dir/$t.log
  if ASAN_OPTIONS="detect_leaks=1" UBSAN_OPTIONS="print_stacktrace=1:halt_on_error=1" \
      "$dir/fuzz/$t" -max_total_time="$seconds" -timeout=60 -rss_limit_mb=4096 -print_final_stats=1 \
      -artifact_prefix="$artifacts/" "$work" "fuzz/corpus/$t" >"$log" 2>&1; then
    grep -E '^stat::number_of_executed_units|^stat::new_units_added|^stat::peak_rss_mb' "$log" | tr '\n' ' '
    echo
    echo "   corpus: $(ls "$work" | wc -l) inputs (plus $(ls "fuzz/corpus/$t" | wc -l) committed)"
  else
    failed=1
    echo "FUZZ FAILURE in $t; last lines of $log:"
    tail -40 "$log"
    for a in "$artifacts"/crash-* "$artifacts"/timeout-* "$artifacts"/oom-* "$artifacts"/leak-*; do
      [[ -f $a ]] || continue
      cp "$a" "fuzz/regressions/$t/"
      echo "   saved $(basename "$a") to fuzz/regressions/$t/ (replayed by ctest: ${t}_replay)"
    done
  fi
done
exit $failed
