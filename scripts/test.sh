#!/usr/bin/env bash
# The test command: installs what is missing, builds htp (with the CUDA backend when the toolkit is
# present, warnings as errors) and runs every test; then builds the CPU-only suite again under
# AddressSanitizer + UndefinedBehaviorSanitizer and under ThreadSanitizer and runs it.
# Then runs each libFuzzer target for HTP_FUZZ_SECONDS (60) s (scripts/fuzz.sh). The stress test runs
# HTP_STRESS_OPS=2000 operations per thread under the sanitizers (10,000 in the normal build).
# HTP_TEST_QUICK=1 skips the sanitizer builds and fuzzing (for local iteration; CI runs everything).
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"
bash "$root/scripts/setup.sh"
cd "$root"

start=$(date +%s)
echo "== build (RelWithDebInfo, -Werror) =="
configure_and_build build -DCMAKE_BUILD_TYPE=RelWithDebInfo -DHTP_WERROR=ON
echo "== tests =="
ctest --test-dir build --output-on-failure -j "$jobs"
HTP_GPU_CHECK_BUILD=build bash "$root/scripts/gpu-check.sh" --dry-run build/gpu-check-dry-run | grep -E "^(FAIL|dry run)"  # the GPU script still reaches its end (nothing runs on a GPU)

if [[ ${HTP_TEST_QUICK:-0} != 1 ]]; then
  for san in address,undefined thread; do
    dir=build-san-${san//,/-}
    echo "== CPU suite under -fsanitize=$san =="
    configure_and_build "$dir" -DCMAKE_BUILD_TYPE=Debug -DHTP_SANITIZE=$san -DHTP_WERROR=ON \
      -DHTP_BUILD_BENCH=OFF -DHTP_BUILD_EXAMPLES=OFF
    # The install consumer and header check are build-system tests; once is enough.
    TSAN_OPTIONS="halt_on_error=1 second_deadlock_stack=1" \
    UBSAN_OPTIONS="print_stacktrace=1" \
      HTP_STRESS_OPS=2000 \
      ctest --test-dir "$dir" --output-on-failure -j "$jobs" -E 'install_consumer|public_headers'
  done
  # libFuzzer targets (clang, ASan + UBSan), ${HTP_FUZZ_SECONDS:-60} s each; see scripts/fuzz.sh.
  echo "== fuzz =="
  bash "$root/scripts/fuzz.sh"
fi
echo "== all tests passed in $(( $(date +%s) - start )) s =="
