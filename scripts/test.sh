#!/usr/bin/env bash
# The test command: installs what is missing, builds htp (with the CUDA backend when the toolkit is
# present, warnings as errors) and runs every test; then builds the CPU-only suite again under
# AddressSanitizer + UndefinedBehaviorSanitizer and under ThreadSanitizer and runs it.
# HTP_TEST_QUICK=1 skips the sanitizer builds (for local iteration; CI runs everything).
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"
bash "$root/scripts/setup.sh"
cd "$root"

start=$(date +%s)
echo "== build (RelWithDebInfo, -Werror) =="
configure_and_build build -DCMAKE_BUILD_TYPE=RelWithDebInfo -DHTP_WERROR=ON
echo "== tests =="
ctest --test-dir build --output-on-failure -j "$jobs"

if [[ ${HTP_TEST_QUICK:-0} != 1 ]]; then
  for san in address,undefined thread; do
    dir=build-san-${san//,/-}
    echo "== CPU suite under -fsanitize=$san =="
    configure_and_build "$dir" -DCMAKE_BUILD_TYPE=Debug -DHTP_SANITIZE=$san -DHTP_WERROR=ON \
      -DHTP_BUILD_BENCH=OFF -DHTP_BUILD_EXAMPLES=OFF
    # The install consumer and header check are build-system tests; once is enough.
    TSAN_OPTIONS="halt_on_error=1 second_deadlock_stack=1" \
    UBSAN_OPTIONS="print_stacktrace=1" \
      ctest --test-dir "$dir" --output-on-failure -j "$jobs" -E 'install_consumer|public_headers'
  done
fi
echo "== all tests passed in $(( $(date +%s) - start )) s =="
