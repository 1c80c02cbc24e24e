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
exit $bad
