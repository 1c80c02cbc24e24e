#!/usr/bin/env bash
# The test command: installs what is missing, checks that every C++/CUDA source is formatted
# (scripts/format.sh --check, before anything is built), builds htp (with the CUDA backend when the
# toolkit is present, warnings as errors) and runs every test; then builds the CPU-only suite again
# under AddressSanitizer + UndefinedBehaviorSanitizer and under ThreadSanitizer and runs it.
# Then the Python package (scripts/python.sh): pip install ., pytest, the bench's dry run.
# Then runs each libFuzzer target for HTP_FUZZ_SECONDS (60) s (scripts/fuzz.sh). The stress test runs
# HTP_STRESS_OPS=2000 operations per thread under the sanitizers (10,000 in the normal build).
# HTP_TEST_QUICK=1 skips the sanitizer builds and fuzzing (for local iteration; CI runs everything).
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"
bash "$root/scripts/setup.sh"
cd "$root"

start=$(date +%s)
echo "== format (scripts/format.sh --check) =="
bash "$root/scripts/format.sh" --check
echo "== build (RelWithDebInfo, -Werror) =="
configure_and_build build -DCMAKE_BUILD_TYPE=RelWithDebInfo -DHTP_WERROR=ON
echo "== tests =="
ctest --test-dir build --output-on-failure -j "$jobs"
# The Python package: venv, pip install . (on this build), pytest, the H200 comparison's dry run.
bash "$root/scripts/python.sh" build
echo "== gpu-check dry run, on the tree gpu-build.sh would carry =="
# The same copy list as scripts/gpu-build.sh (assemble_gpu_tree), from this build, and the same
# cp312 wheel (build_gpu_wheel: a Python 3.12 must run here; only htp._htp compiles, for 3.12, in
# this build folder). The dry run of each set fails when the check names a binary the tree lacks or
# a flag it does not know, the wheel is missing or not for the GPU machine, a set's budgets pass
# its limit or the session plan, a conformance test holding a stream is not named *holds_stream*,
# or over 8 files would return.
assemble_gpu_tree build build/gpu-tree
build_gpu_wheel build RelWithDebInfo build/gpu-tree/wheels
for set in headline core python static train; do
  HTP_GPU_CHECK_BUILD=build/gpu-tree bash "$root/scripts/gpu-check.sh" --dry-run --set $set build/gpu-check-dry-run-$set \
    >build/gpu-check-dry-run-$set.log 2>&1 ||
    { cat build/gpu-check-dry-run-$set.log; echo "gpu-check dry run ($set set) FAILED"; exit 1; }
  grep -E "^(SKIP|dry run)" build/gpu-check-dry-run-$set.log
done
bash "$root/scripts/gpu-check-selftest.sh" build/gpu-tree  # and it fails where the GPU run would

if [[ ${HTP_TEST_QUICK:-0} != 1 ]]; then
  for san in address,undefined thread; do
    dir=build-san-${san//,/-}
    echo "== CPU suite under -fsanitize=$san =="
    configure_and_build "$dir" -DCMAKE_BUILD_TYPE=Debug -DHTP_SANITIZE=$san -DHTP_WERROR=ON \
      -DHTP_BUILD_BENCH=OFF -DHTP_BUILD_EXAMPLES=OFF
    # The header check is a build-system test; once is enough. install_consumer runs: it checks the
    # sanitized package (an engine testing under the sanitizer links it).
    TSAN_OPTIONS="halt_on_error=1 second_deadlock_stack=1" \
    UBSAN_OPTIONS="print_stacktrace=1" \
      HTP_STRESS_OPS=2000 \
      ctest --test-dir "$dir" --output-on-failure -j "$jobs" -E 'public_headers'
  done
  # libFuzzer targets (clang, ASan + UBSan), ${HTP_FUZZ_SECONDS:-60} s each; see scripts/fuzz.sh.
  echo "== fuzz =="
  bash "$root/scripts/fuzz.sh"
fi
echo "== all tests passed in $(( $(date +%s) - start )) s =="
