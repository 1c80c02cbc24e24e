#!/usr/bin/env bash
# Shows that the dry run of scripts/gpu-check.sh fails where the GPU run would: on a tree that
# lacks a binary the check runs, on step budgets that add up past the total, and when more than 8
# files would come back. Usage: scripts/gpu-check-selftest.sh TREE (a tree from assemble_gpu_tree).
set -uo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
tree=$(cd "${1:?usage: gpu-check-selftest.sh TREE}" && pwd)
scratch=$(mktemp -d)
trap 'rm -rf "$scratch"' EXIT
bad=0
# must_fail WHAT PATTERN ENV...: the dry run exits non-zero and says PATTERN.
must_fail() {
  local what=$1 pattern=$2 log
  shift 2
  rm -rf "$scratch/out"
  mkdir -p "$scratch/out"
  [[ $what == "too many files" ]] && for i in 1 2 3 4 5 6 7; do : >"$scratch/out/left-over-$i.json"; done
  if log=$(env "$@" bash "$root/scripts/gpu-check.sh" --dry-run "$scratch/out" 2>&1); then
    echo "gpu-check self-test: the dry run passed with $what"
    bad=1
  elif ! grep -q -- "$pattern" <<<"$log"; then
    echo "gpu-check self-test: with $what the dry run failed without saying '$pattern':"
    echo "$log" | grep -E '^(FAIL|TIMEOUT)'
    bad=1
  else
    echo "gpu-check self-test: $what fails the dry run: $(grep -m1 -- "$pattern" <<<"$log")"
  fi
}
cp -a "$tree" "$scratch/tree"
rm "$scratch/tree/tests/test_cuda_interop"
must_fail "a binary missing from the tree" "test_cuda_interop is not in the tree" HTP_GPU_CHECK_BUILD="$scratch/tree"
must_fail "budgets over the total" "budgets add up to" HTP_GPU_CHECK_BUILD="$tree" HTP_GPU_CHECK_SECONDS=300
must_fail "too many files" "a GPU machine hands back at most 8" HTP_GPU_CHECK_BUILD="$tree"

# The verdict on a test binary's report (scripts/gtest_verdict.py), which the dry run never reaches.
cat >"$scratch/skipped.json" <<'JSON'
{"testsuites": [{"name": "device_conformance/cuda", "testsuite": [{"name": "copies", "result": "SKIPPED"}]},
                {"name": "make_device", "testsuite": [{"name": "cuda_without_a_gpu", "result": "SKIPPED"}]},
                {"name": "device_conformance/sim", "testsuite": [{"name": "copies", "result": "COMPLETED"}]}]}
JSON
cat >"$scratch/ran.json" <<'JSON'
{"testsuites": [{"name": "device_conformance/cuda", "testsuite": [{"name": "copies", "result": "COMPLETED"}]},
                {"name": "make_device", "testsuite": [{"name": "cuda_without_a_gpu", "result": "SKIPPED"}]}]}
JSON
cat >"$scratch/failed.json" <<'JSON'
{"testsuites": [{"name": "device_conformance/cuda", "testsuite": [{"name": "copies", "result": "COMPLETED",
                 "failures": [{"failure": "expected 1, got 2"}]}]}]}
JSON
# verdict_is WANT_RC WHAT ARGS...
verdict_is() {
  local want=$1 what=$2 got
  shift 2
  python3 "$root/scripts/gtest_verdict.py" "$@" >/dev/null
  got=$?
  if (( got == want )); then
    echo "gpu-check self-test: verdict on $what: exit $got"
  else
    echo "gpu-check self-test: verdict on $what: exit $got, want $want"
    bad=1
  fi
}
req=(--require '^device_conformance/cuda\.')
verdict_is 1 "a cuda test skipped with a GPU" "$scratch/skipped.json" --gpus 1 "${req[@]}"
verdict_is 0 "a cuda test skipped without a GPU" "$scratch/skipped.json" --gpus 0 "${req[@]}"
verdict_is 0 "the cuda tests ran, one skipped by design" "$scratch/ran.json" --gpus 1 "${req[@]}"
verdict_is 1 "a failed test" "$scratch/failed.json" --gpus 1 "${req[@]}"
verdict_is 1 "a GPU present but no required test at all" "$scratch/ran.json" --gpus 1 --require '^pager_backend/cuda\.'
verdict_is 2 "a missing report" "$scratch/none.json" --gpus 1 "${req[@]}"
exit $bad
