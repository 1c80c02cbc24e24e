#!/usr/bin/env bash
# The one script for a machine with an NVIDIA GPU and no package registry (see docs/gpu.md).
# Usage: scripts/gpu-check.sh [--dry-run] OUT_DIR
#
# Runs, in this order, each step under its own `timeout` so that a stuck step still leaves the
# other steps' JSON in OUT_DIR, all within HTP_GPU_CHECK_SECONDS (450) in total:
#   facts (nvidia-smi, driver version, cuBLAS resolved, ldd of each binary) -> htp-bandwidth ->
#   htp-transfer-bench -> htp-stream-bench decode and prefill -> htp-integrity -> the PyTorch
#   baseline (when torch is there) -> htp-slab-bench -> the cuda test suites (device conformance,
#   the pager end to end) and the examples ->
#   compute-sanitizer memcheck.
# Writes summary.txt (printed last), facts.txt, bench.log, slab.log, tests.log, sanitizer.log and
# the JSON of every benchmark: bandwidth.json, transfer.json, stream.json, trace.json,
# stream-prefill.json, integrity.json, torch-baseline.json, slab.json, slab-churn.json, tests.json,
# pager-tests.json.
# Uses build-gpu/ (made by scripts/gpu-build.sh elsewhere and carried here; HTP_GPU_CHECK_BUILD
# names another build folder with the same layout) or, when absent and the dependencies are
# installed, builds it. Exit status 1 when any step failed, timed out or was skipped for time, when a
# cuda test skipped on a machine with a GPU, or when the driver is too old for CUDA 13.
#
# --dry-run (or HTP_GPU_CHECK_DRY_RUN=1): for a machine without a GPU (CI). Runs the facts step,
# then for every other step checks that its binary starts (--help, or the test list) and knows
# every flag the step passes, without running it; says what it skipped. Uses build/ when
# build-gpu/ is absent.
set -uo pipefail
dry=${HTP_GPU_CHECK_DRY_RUN:-0}
if [[ ${1:-} == -h || ${1:-} == --help ]]; then
  sed -n '2,/^set -uo/p' "${BASH_SOURCE[0]}" | sed '$d; s/^# \{0,1\}//'
  exit 0
fi
if [[ ${1:-} == --dry-run ]]; then
  dry=1
  shift
fi
out=${1:?usage: scripts/gpu-check.sh [--dry-run] OUT_DIR}
mkdir -p "$out"
out=$(cd "$out" && pwd) || { echo "gpu-check: cannot use $out as the output folder" >&2; exit 1; }
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$root"
export PATH=/usr/local/cuda/bin:$PATH
start=$(date +%s)
deadline=$((start + ${HTP_GPU_CHECK_SECONDS:-450}))

build=${HTP_GPU_CHECK_BUILD:-build-gpu}
if [[ $dry == 1 && -z ${HTP_GPU_CHECK_BUILD:-} && ! -d $build/tests ]]; then build=build; fi
if [[ ! -d $build/tests ]]; then
  if [[ $dry == 1 ]]; then
    echo "gpu-check (dry run): no $build/tests; build first" >&2
    exit 1
  fi
  echo "gpu-check: no carried $build/; building here"
  bash scripts/gpu-build.sh >"$out/build.log" 2>&1 || { echo "gpu-check: build failed, see build.log"; tail -30 "$out/build.log"; exit 1; }
fi
export LD_LIBRARY_PATH=$(cd "$build" && pwd)/lib:${LD_LIBRARY_PATH:-}

summary=$out/summary.txt
facts=$out/facts.txt
: >"$summary"
: >"$facts"
: >"$out/bench.log"
: >"$out/tests.log"
note() { echo "$*" | tee -a "$summary"; }
failed=0
skipped=()
fail() { note "FAIL $*"; failed=1; }

# ---- facts ---------------------------------------------------------------------------------------
note "== gpu-check $(date -u +%FT%TZ)$([[ $dry == 1 ]] && echo ' (DRY RUN: nothing runs on a GPU)') =="
note "build: $build; time budget ${HTP_GPU_CHECK_SECONDS:-450} s"
gpus=0
if command -v nvidia-smi >/dev/null 2>&1; then
  {
    echo "== nvidia-smi"
    timeout 30 nvidia-smi 2>&1
    timeout 20 nvidia-smi --query-gpu=name,driver_version,memory.total,pcie.link.gen.current,pcie.link.width.current,clocks.max.sm,clocks.max.memory --format=csv 2>&1
    timeout 20 nvidia-smi topo -m 2>&1 | head -8
  } >>"$facts"
  gpus=$(timeout 20 nvidia-smi -L 2>/dev/null | grep -c '^GPU ' || true)
  driver=$(timeout 20 nvidia-smi --query-gpu=driver_version --format=csv,noheader 2>/dev/null | head -1 | tr -d ' ')
  note "GPU: $(timeout 20 nvidia-smi --query-gpu=name,memory.total --format=csv,noheader 2>/dev/null | head -1) ($gpus listed), driver ${driver:-unknown}"
  # htp links the CUDA 13 runtime statically: it needs the R580 driver branch or newer.
  if [[ $driver =~ ^([0-9]+) ]] && (( BASH_REMATCH[1] < 580 )); then
    fail "driver $driver: htp's static CUDA 13 runtime needs driver 580 or later (cudaErrorInsufficientDriver otherwise)"
  fi
else
  note "GPU: none (no nvidia-smi on this machine)"
fi
note "host: $(nproc) CPUs, $(free -g 2>/dev/null | awk '/^Mem:/ {print $2 " GiB RAM, " $7 " GiB available"}'); CUDA_DEVICE_MAX_CONNECTIONS=${CUDA_DEVICE_MAX_CONNECTIONS:-unset}, CUDA_MODULE_LOADING=${CUDA_MODULE_LOADING:-unset}"
(( gpus == 0 && dry == 0 )) && fail "no GPU listed by nvidia-smi: nothing here can run on the cuda backend"

# cuBLAS for htp-stream-bench: exactly libcublas.so.13 (the CUDA 13 ABI it was linked against),
# from the toolkit's lib64 first, then the toolkit's targets/, then Python wheels.
cublas=
for c in /usr/local/cuda/lib64/libcublas.so.13 /usr/local/cuda-13*/lib64/libcublas.so.13 \
         /usr/local/cuda/targets/*/lib/libcublas.so.13 /usr/local/cuda-13*/targets/*/lib/libcublas.so.13 \
         /usr/local/lib/python3*/dist-packages/nvidia/cu13/lib/libcublas.so.13 \
         /usr/local/lib/python3*/dist-packages/nvidia/cublas/lib/libcublas.so.13 \
         /usr/lib/python3/dist-packages/nvidia/cu13/lib/libcublas.so.13 \
         /opt/*/.venv/lib/python3*/site-packages/nvidia/cu13/lib/libcublas.so.13 \
         /opt/*/.venv/lib/python3*/site-packages/nvidia/cublas/lib/libcublas.so.13; do
  if [[ -e $c ]]; then cublas=$c; break; fi
done
if [[ -n $cublas ]]; then
  export LD_LIBRARY_PATH=$(dirname "$cublas"):$LD_LIBRARY_PATH
  note "cuBLAS: $cublas -> $(readlink -f "$cublas")"
else
  note "cuBLAS: no libcublas.so.13 found (htp-stream-bench cannot start)"
fi
lddout=$(
  echo "== ldd (LD_LIBRARY_PATH=$LD_LIBRARY_PATH)"
  for b in "$build"/bench/htp-* "$build"/tests/test_* "$build"/examples/htp-example-*; do
    [[ -f $b && -x $b ]] || continue
    echo "-- $b"
    ldd "$b" 2>&1
  done
)
echo "$lddout" >>"$facts"
missing=$(grep 'not found' <<<"$lddout" | awk '{print $1}' | sort -u | tr '\n' ' ')
if [[ -n $missing ]]; then
  fail "ldd: libraries not found: $missing(see facts.txt)"
else
  note "ldd: every library of every binary resolves (facts.txt); stream bench uses $(ldd "$build/bench/htp-stream-bench" 2>/dev/null | awk '/libcublas\.so/ {print $3; exit}')"
fi

# ---- steps ---------------------------------------------------------------------------------------
steps_left=12  # timed steps below, so each reserves time for the ones after it
step_env=()

# timeout_for NOMINAL: NOMINAL seconds, cut so that every later step keeps 20 s (+10 s to kill).
timeout_for() {
  local left=$((deadline - $(date +%s) - 20 * (steps_left - 1) - 10))
  (( left < $1 )) && echo "$left" || echo "$1"
}

# dry_check BIN ARGS...: the binary starts and names every --flag in ARGS in its help.
dry_check() {
  local bin=$1
  shift
  local help
  case $bin in
    */htp-example-*) return 0 ;;  # no flags; ldd above checked that it can start
    *.py) help=$(python3 "$bin" --help 2>&1) || return 1 ;;
    */test_*) help=$("$bin" --gtest_list_tests "$@" 2>&1) || return 1
              [[ $(grep -c '^  ' <<<"$help") -gt 0 ]] || { echo "no test matches $*"; return 1; }
              return 0 ;;
    *) help=$(timeout 20 "$bin" --help 2>&1) || return 1 ;;
  esac
  local a
  for a in "$@"; do
    [[ -f $a && -x $a ]] && break  # a wrapped program (compute-sanitizer's): its flags are its own
    [[ $a == --* ]] || continue
    a=${a%%=*}
    grep -q -- "$a" <<<"$help" || { echo "$bin does not know $a"; return 1; }
  done
}

# run_step NAME NOMINAL_S LOG BIN ARGS...: runs BIN with step_env under its own timeout.
run_step() {
  local name=$1 nominal=$2 log=$3 bin=$4
  shift 4
  local env_now=("${step_env[@]}")
  step_env=()
  if [[ ! -x $bin && ! ( $bin == *.py && -f $bin ) ]]; then
    fail "$name: $bin is not built"
    steps_left=$((steps_left - 1))
    return 1
  fi
  if [[ $dry == 1 ]]; then
    local why
    if why=$(dry_check "$bin" "$@"); then
      note "dry  $name: would run: ${env_now[*]} $bin $* (timeout ${nominal} s)"
      skipped+=("$name")
    else
      fail "$name: $why"
    fi
    steps_left=$((steps_left - 1))
    return 0
  fi
  local t
  t=$(timeout_for "$nominal")
  if (( t < 10 )); then
    fail "$name: skipped, out of time (budget ${HTP_GPU_CHECK_SECONDS:-450} s)"
    skipped+=("$name")
    steps_left=$((steps_left - 1))
    return 1
  fi
  local t0=$(date +%s) rc
  echo "==== $name: ${env_now[*]} $bin $* (timeout $t s)" >>"$log"
  case $bin in
    *.py) timeout -k 10 "$t" env "${env_now[@]}" python3 "$bin" "$@" >>"$log" 2>&1 ;;
    *) timeout -k 10 "$t" env "${env_now[@]}" "$bin" "$@" >>"$log" 2>&1 ;;
  esac
  rc=$?
  local took=$(( $(date +%s) - t0 ))
  steps_left=$((steps_left - 1))
  if (( rc == 0 )); then
    note "ok   $name in ${took} s"
  elif (( rc == 124 || rc == 137 )); then
    fail "$name: timed out after ${took} s (limit $t s; see $(basename "$log"))"
  else
    fail "$name: exit $rc after ${took} s (see $(basename "$log"))"
  fi
  return $rc
}

b=$build/bench
run_step bandwidth 40 "$out/bench.log" "$b/htp-bandwidth" --backend cuda --json "$out/bandwidth.json"
run_step transfer 40 "$out/bench.log" "$b/htp-transfer-bench" --backend cuda --json "$out/transfer.json"
# The streaming benchmark: the policies side by side on Llama-3.1-8B (16 of 32 layers, real shape,
# 8 GB of weights through a 4 GB HBM budget), real cuBLAS GEMMs, every weight read verified.
# CUDA_MODULE_LOADING=EAGER: cuBLAS may pick a kernel the bench's warm-up did not load, and a lazy
# load while the compute stream is parked on a copy's value word can stall the GPU.
step_env=(CUDA_MODULE_LOADING=EAGER)
run_step stream-decode 120 "$out/bench.log" "$b/htp-stream-bench" --backend cuda --model llama-3.1-8b \
  --layers 16 --hbm-budget 0.5 --steps 5 --json "$out/stream.json" --trace "$out/trace.json"
step_env=(CUDA_MODULE_LOADING=EAGER)
run_step stream-prefill 60 "$out/bench.log" "$b/htp-stream-bench" --backend cuda --model llama-3.1-8b \
  --layers 16 --hbm-budget 0.5 --steps 3 --tokens 2048 --policies on-demand,schedule-k2 \
  --json "$out/stream-prefill.json"
# The node modes on the one GPU (N = 1: data-parallel, tensor-parallel and swap-and-shard with
# device-resident staging buffers), the cuda path of --gpus (multi-GPU runs need a larger machine).
step_env=(CUDA_MODULE_LOADING=EAGER)
run_step stream-node 60 "$out/bench.log" "$b/htp-stream-bench" --backend cuda --model llama-3.1-8b \
  --layers 8 --hbm-budget 0.75 --steps 2 --policies schedule-k2 --gpus 1 --json "$out/stream-node.json"
# The integrity run of issue 7: ~3 GiB of tensors through a 1 GiB HBM budget, every acquire
# checksummed by a CUDA kernel, memory returned at the end (exit 1 on any mismatch).
run_step integrity 60 "$out/bench.log" "$b/htp-integrity" --backend cuda --tensors 600 --min-kib 4 \
  --max-mib 48 --hbm-mib 1024 --ops 10000 --zipf 1.1 --seed 1 --json "$out/integrity.json"
# The naive ways on the same shapes (per-layer .to("cuda"), accelerate's cpu_offload), when this
# machine's python has torch with CUDA.
if [[ $dry == 1 ]] || python3 -c "import torch, sys; sys.exit(0 if torch.cuda.is_available() else 1)" >/dev/null 2>&1; then
  run_step torch-baseline 60 "$out/bench.log" bench/baselines/torch_offload.py --model llama-3.1-8b \
    --layers 16 --steps 5 --json "$out/torch-baseline.json"
else
  note "skip torch-baseline: no PyTorch with CUDA in this python"
  skipped+=(torch-baseline)
  steps_left=$((steps_left - 1))
fi
run_step slab 30 "$out/slab.log" "$b/htp-slab-bench" --benchmark_min_time=0.05 \
  --json_out="$out/slab.json" --churn_out="$out/slab-churn.json"

cuda_skips=0
# The cuda test suite: the device conformance suite (its cuda instance runs for real here) and the
# examples (which take the cuda backend when a GPU is visible).
if run_step tests 60 "$out/tests.log" "$build/tests/test_device" --gtest_output="json:$out/tests.json" && [[ $dry == 0 ]]; then
  cuda_skips=$(grep -c '^\[  SKIPPED \].*cuda.*([0-9]* ms)' "$out/tests.log" || true)
  note "     tests: $(grep -c '^\[       OK \]' "$out/tests.log") passed, $cuda_skips cuda test(s) skipped"
  if (( gpus > 0 && cuda_skips > 0 )); then
    fail "tests: $cuda_skips cuda test(s) skipped on a machine with a GPU: $(grep -m1 -A1 ': Skipped' "$out/tests.log" | tail -1)"
  fi
fi
# The pager end to end on the GPU: paging, eviction, write-back, compaction, every byte checked.
if run_step pager-tests 60 "$out/tests.log" "$build/tests/test_pager_backends" --gtest_filter='*cuda*' \
     --gtest_output="json:$out/pager-tests.json" && [[ $dry == 0 ]]; then
  pager_skips=$(grep -c '^\[  SKIPPED \].*cuda.*([0-9]* ms)' "$out/tests.log" || true)
  if (( gpus > 0 && pager_skips > cuda_skips )); then
    fail "pager-tests: the cuda pager test skipped on a machine with a GPU"
  fi
fi
# NCCL, loaded at run time: one rank on this GPU (skips, with the reason, where libnccl is absent).
run_step nccl-tests 30 "$out/tests.log" "$build/tests/test_collectives" --gtest_filter='*nccl*' \
  --gtest_output="json:$out/nccl-tests.json" || true
# The interop header: the program's own stream carries a pager and its current device is kept.
steps_left=$((steps_left + 1))  # short, like the examples
if run_step interop-tests 30 "$out/tests.log" "$build/tests/test_cuda_interop" \
     --gtest_filter='*programs_stream*' --gtest_output="json:$out/interop-tests.json" && [[ $dry == 0 ]]; then
  if (( gpus > 0 )) && grep -q '^\[  SKIPPED \].*programs_stream' "$out/tests.log"; then
    fail "interop-tests: the cuda interop test skipped on a machine with a GPU"
  fi
fi
for e in "$build"/examples/htp-example-*; do
  [[ -x $e ]] || continue
  steps_left=$((steps_left + 1))  # the examples are short: they reserve nothing for later steps
  run_step "example $(basename "$e")" 20 "$out/tests.log" "$e"
done

# compute-sanitizer memcheck last, briefly: the cuda tests without the deliberate oversize
# allocation (its failed cudaMalloc is the point of that test), API errors not reported (every
# expected failure would be one).
sanitizer=$(command -v compute-sanitizer || ls /usr/local/cuda*/compute-sanitizer/compute-sanitizer 2>/dev/null | head -1)
if [[ -n $sanitizer ]]; then
  run_step memcheck 60 "$out/sanitizer.log" "$sanitizer" --tool memcheck --report-api-errors no \
    --error-exitcode 9 "$build/tests/test_device" --gtest_filter='*cuda*:-*oversize*'
else
  note "skip memcheck: no compute-sanitizer on this machine"
  skipped+=(memcheck)
fi

if [[ $dry == 1 ]]; then
  note "dry run reached the end in $(( $(date +%s) - start )) s; checked but not run (no GPU): ${skipped[*]:-nothing}"
else
  echo "done in $(( $(date +%s) - start )) s; skipped: ${skipped[*]:-nothing}; $([[ $failed == 0 ]] && echo 'all passed' || echo 'FAILURES above')" >>"$summary"
  # Last, so that the end of the output (what a device tool returns) has the benchmark tables and
  # every step's outcome.
  echo
  echo "---- bench.log (tail) ----"
  tail -40 "$out/bench.log" 2>/dev/null
  echo
  echo "---- summary ----"
  cat "$summary"
fi
exit $failed
