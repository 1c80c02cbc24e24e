#!/usr/bin/env bash
# The one script for a machine with an NVIDIA GPU and no package registry (see docs/gpu.md).
# Usage: scripts/gpu-check.sh [--dry-run] [--set core|python] OUT_DIR
#
# Two sets of steps, each one command of at most 400 s (a GPU machine runs 600 s per command):
# `core` (the default: the C++ tests, examples and benchmarks) and `python` (the wheel
# gpu-build.sh made for the GPU machine's Python, its pytest suite on the GPU, and the Hugging Face
# comparison: htp.torch.offload against accelerate and the naive way). HTP_GPU_CHECK_SET also picks.
#
# Runs the steps of the table below in order, each under its own budget (`timeout`), all within
# HTP_GPU_CHECK_SECONDS (400) in total: one run and a rerun, with one machine start, fit in the
# 15 minutes of a GPU session. A step ends as one of: ok, FAIL (its exit status or its verdict), TIMEOUT (it ran out
# of its budget: never a pass), SKIP (it cannot run on this machine: no torch, no NCCL, no
# sanitizer support; the reason is in the summary). Exit status 1 on any FAIL or TIMEOUT, or when a
# GPU is present but a cuda test skipped or none ran on it.
#
# Results: OUT_DIR receives exactly two files, rewritten after every step so that a run cut short
# still returns what it did: summary.txt (each step's outcome, the facts) and gpu-check.tar.gz (the
# logs, facts.txt and every benchmark's JSON). A GPU machine hands back at most 8 files.
#
# Uses build-gpu/ (made by scripts/gpu-build.sh elsewhere from the copy list in scripts/common.sh,
# and carried here; HTP_GPU_CHECK_BUILD names another folder with the same layout) or, when absent
# and the dependencies are installed, builds it.
#
# --dry-run (or HTP_GPU_CHECK_DRY_RUN=1): for a machine without a GPU (the test command runs it on
# the tree assemble_gpu_tree makes from its own build). Checks that the budgets fit the total, that
# every step's binary is in the tree, starts (--help, or its test list) and knows every flag the
# step passes, and that no more than 8 files would come back; runs nothing on a GPU.
set -uo pipefail
dry=${HTP_GPU_CHECK_DRY_RUN:-0}
if [[ ${1:-} == -h || ${1:-} == --help ]]; then
  sed -n '2,/^set -uo/p' "${BASH_SOURCE[0]}" | sed '$d; s/^# \{0,1\}//'
  exit 0
fi
set_name=${HTP_GPU_CHECK_SET:-core}
while [[ ${1:-} == --* ]]; do
  case $1 in
    --dry-run) dry=1; shift ;;
    --set) set_name=${2:?--set needs core or python}; shift 2 ;;
    *) echo "gpu-check: unknown option $1" >&2; exit 2 ;;
  esac
done
out=${1:?usage: scripts/gpu-check.sh [--dry-run] OUT_DIR}
mkdir -p "$out"
out=$(cd "$out" && pwd) || { echo "gpu-check: cannot use $out as the output folder" >&2; exit 1; }
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$root"
export PATH=/usr/local/cuda/bin:$PATH
start=$(date +%s)
total=${HTP_GPU_CHECK_SECONDS:-400}
deadline=$((start + total))

# ---- the steps and their budgets -----------------------------------------------------------------
# Budget in seconds, from the estimate beside it (an H200 machine: ~55 GB/s pinned H2D, 16 cores).
declare -A budget=(
  [facts]=10            # nvidia-smi four times, ldd of 14 binaries: ~3 s
  [tests]=20            # test_device: 18 cuda conformance tests, the largest 4 MiB copies: ~5 s
  [pager-tests]=15      # the pager end to end, 2 tests, ~100 MiB through HBM, checked mode: ~5 s
  [interop-tests]=10    # test_cuda_interop: one pager on the program's stream: ~2 s
  [nccl-tests]=15       # NCCL's first communicator (one rank) starts its proxy thread: ~5 s
  [examples]=20         # 4 examples, each < 64 MiB of paging: ~3 s each
  [bandwidth]=20        # htp-bandwidth: pinned H2D/D2H sweep up to 1 GiB, a few repeats: ~10 s
  [transfer]=20         # htp-transfer-bench: priorities and chunking on 256 MiB: ~8 s
  [stream-decode]=50    # pins, fills and sums 7 GB once (~12 s), then 4 policies x 6 steps (~3 s each)
  [stream-prefill]=25   # the same 7 GB again (~12 s), 2 policies x 3 steps of 2048 tokens (~5 s each)
  [stream-node]=35      # 8 layers, tensor-parallel and swap-and-shard on one GPU: each pins, fills
                        # and sums 3.5 GB (~6 s) and starts an NCCL communicator (~3 s): ~25 s
  [stream-compress]=40  # 4 layers drawn Llama-like (1.7 GB, ~15 s), schedule-k2 raw then compressed
                        # (encoding 1.7 GB on one core ~6 s), 2 steps each: ~25 s
  [integrity]=15        # 600 tensors, 10,000 checksummed acquires through 1 GiB: ~10 s
  [codec]=25            # 1 GiB of Llama-like bf16 drawn and encoded on 16 cores (~2 s), pinned (~1 s),
                        # decoded by the kernel 3 times and compared bit for bit: ~6 s
  [torch-baseline]=30   # import torch (~8 s), 7 GB drawn on the GPU (~3 s), 3 policies x 6 steps (~15 s);
                        # exit 77 when torch or its GPU is missing: a SKIP with the reason
  [slab]=15             # Google Benchmark, 0.05 s per case, ~40 cases: ~5 s (10 s on 2 cores)
  [memcheck]=35         # compute-sanitizer on the cuda conformance tests that cannot hang: ~25 s
  # the python set
  [python-tests]=80     # pip install of the wheel (~3 s), pytest: ~50 tests on sim (~30 s), 6 on cuda
  [hf-offload]=300      # Llama-3.1-8B bf16 drawn on the GPU, 16 GB pinned (~20 s); 32 tokens at batch 1
                        # and 16: resident, naive (~25 s), htp at 30% and 50% (~40 s), htp-compress at
                        # 30% (16 GB encoded on 16 cores ~10 s, ~20 s), accelerate (~30 s)
)
case $set_name in
  core) order=(facts tests pager-tests interop-tests nccl-tests examples bandwidth transfer stream-decode
               stream-prefill stream-node stream-compress integrity codec torch-baseline slab memcheck) ;;
  python) order=(facts python-tests hf-offload) ;;
  *) echo "gpu-check: --set $set_name is neither core nor python" >&2; exit 2 ;;
esac
# in_set NAME: the step belongs to the set being run (the examples run as "example NAME").
in_set() {
  local s=${1%% *}
  [[ $s == example ]] && s=examples
  [[ " ${order[*]} " == *" $s "* ]]
}

summary_lines=()
note() { echo "$*"; summary_lines+=("$*"); }
fail() { note "FAIL $*"; }
# The outcome is read off the summary: any FAIL or TIMEOUT line fails the run.
failures() { printf '%s\n' "${summary_lines[@]}" | grep -c -E '^(FAIL|TIMEOUT)' || true; }

sum=0
for s in "${order[@]}"; do sum=$((sum + budget[$s])); done
if (( sum > total )); then
  fail "budgets: the steps' budgets add up to $sum s, over the $total s total; trim them"
fi

# Working files live here; OUT_DIR only ever receives the archive and the summary.
work=$(mktemp -d "${TMPDIR:-/tmp}/htp-gpu-check.XXXXXX")
trap 'rm -rf "$work"' EXIT
summary=$work/summary.txt
facts=$work/facts.txt
: >"$facts"
# pack: the summary and the archive into OUT, each written beside and renamed, so that a run
# killed mid-pack still leaves the previous whole archive.
pack() {
  printf '%s\n' "${summary_lines[@]}" >"$summary"
  cp "$summary" "$out/.summary.txt.part" && mv "$out/.summary.txt.part" "$out/summary.txt"
  tar -czf "$out/.gpu-check.tar.gz.part" -C "$work" . 2>/dev/null
  if (( $(stat -c %s "$out/.gpu-check.tar.gz.part") > 15 * 1024 * 1024 )); then  # 16 MiB per file comes back
    rm -f "$work/trace.json"
    tar -czf "$out/.gpu-check.tar.gz.part" -C "$work" . 2>/dev/null
  fi
  mv "$out/.gpu-check.tar.gz.part" "$out/gpu-check.tar.gz"
}

build=${HTP_GPU_CHECK_BUILD:-build-gpu}
if [[ ! -d $build/tests ]]; then
  if [[ $dry == 1 ]]; then
    echo "gpu-check (dry run): no $build/tests; assemble the tree first (assemble_gpu_tree)" >&2
    exit 1
  fi
  echo "gpu-check: no carried $build/; building here"
  bash scripts/gpu-build.sh >"$work/build.log" 2>&1 || { echo "gpu-check: build failed"; tail -30 "$work/build.log"; exit 1; }
fi
build=$(cd "$build" && pwd)

# ---- facts ---------------------------------------------------------------------------------------
note "== gpu-check $(date -u +%FT%TZ)$([[ $dry == 1 ]] && echo ' (DRY RUN: nothing runs on a GPU)') =="
note "build: $build; set $set_name: budgets $sum s of $total s"
gpus=0
if command -v nvidia-smi >/dev/null 2>&1; then
  {
    echo "== nvidia-smi"
    timeout 10 nvidia-smi 2>&1
    timeout 5 nvidia-smi --query-gpu=name,driver_version,memory.total,pcie.link.gen.current,pcie.link.width.current,clocks.max.sm,clocks.max.memory --format=csv 2>&1
    timeout 5 nvidia-smi topo -m 2>&1 | head -8
  } >>"$facts"
  gpus=$(timeout 5 nvidia-smi -L 2>/dev/null | grep -c '^GPU ' || true)
  driver=$(timeout 5 nvidia-smi --query-gpu=driver_version --format=csv,noheader 2>/dev/null | head -1 | tr -d ' ')
  note "GPU: $(timeout 5 nvidia-smi --query-gpu=name,memory.total --format=csv,noheader 2>/dev/null | head -1) ($gpus listed), driver ${driver:-unknown}"
  # htp links the CUDA 13 runtime statically: it needs the R580 driver branch or newer.
  if [[ $driver =~ ^([0-9]+) ]] && (( BASH_REMATCH[1] < 580 )); then
    fail "driver $driver: htp's static CUDA 13 runtime needs driver 580 or later (cudaErrorInsufficientDriver otherwise)"
  fi
else
  note "GPU: none (no nvidia-smi on this machine)"
fi
# MemTotal is a fact, not a limit: a microVM's grows as its memory is touched.
note "host: $(nproc) CPUs, $(free -g 2>/dev/null | awk '/^Mem:/ {print $2 " GiB MemTotal, " $7 " GiB available"}')"
(( gpus == 0 && dry == 0 )) && fail "no GPU listed by nvidia-smi: nothing here can run on the cuda backend"

# The libraries htp's binaries load: lib/ of the tree, cuBLAS (exactly libcublas.so.13, the ABI
# htp-stream-bench links) and NCCL (dlopen'ed, from the nvidia-nccl-cu13 wheel when the system has
# none). They go into the environment of htp's steps only: the Python steps keep this shell's own,
# since a foreign libstdc++ or cuBLAS on LD_LIBRARY_PATH can break `import torch`.
site_dirs=$(python3 -c 'import site; print(" ".join(site.getsitepackages()))' 2>/dev/null || true)
first_file() { local c; for c in "$@"; do [[ -e $c ]] && { echo "$c"; return 0; }; done; return 1; }
wheel_libs() {  # wheel_libs NAME: NAME under the nvidia wheels' lib folders of every site dir
  local d
  for d in $site_dirs /usr/local/lib/python3*/dist-packages /usr/lib/python3/dist-packages \
           /opt/*/.venv/lib/python3*/site-packages; do
    echo "$d/nvidia/cu13/lib/$1 $d/nvidia/cublas/lib/$1 $d/nvidia/nccl/lib/$1"
  done
}
# shellcheck disable=SC2046
cublas=$(first_file /usr/local/cuda/lib64/libcublas.so.13 /usr/local/cuda-13*/lib64/libcublas.so.13 \
         /usr/local/cuda/targets/*/lib/libcublas.so.13 $(wheel_libs libcublas.so.13)) || cublas=
# shellcheck disable=SC2046
nccl=$(first_file ${HTP_NCCL_LIBRARY:-} /usr/local/cuda/lib64/libnccl.so.2 /usr/lib/x86_64-linux-gnu/libnccl.so.2 \
       $(wheel_libs libnccl.so.2)) || nccl=
htp_ld=$build/lib${cublas:+:$(dirname "$cublas")}${nccl:+:$(dirname "$nccl")}
htp_env=(LD_LIBRARY_PATH="$htp_ld${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" CUDA_MODULE_LOADING=EAGER)
[[ -n $nccl ]] && htp_env+=(HTP_NCCL_LIBRARY="$nccl")
note "cuBLAS: ${cublas:-none found (htp-stream-bench cannot start)}; NCCL: ${nccl:-none found}"
lddout=$(for b in "$build"/bench/htp-* "$build"/tests/test_* "$build"/examples/htp-example-*; do
           [[ -f $b && -x $b ]] || continue
           echo "-- $b"
           env "${htp_env[@]}" ldd "$b" 2>&1
         done)
echo "$lddout" >>"$facts"
missing=$(grep 'not found' <<<"$lddout" | awk '{print $1}' | sort -u | tr '\n' ' ')
[[ -z $missing ]] && note "ldd: every library of every binary resolves (facts.txt)" ||
  fail "ldd: libraries not found: $missing(see facts.txt)"
pack

# ---- running a step ------------------------------------------------------------------------------
skip() { note "SKIP $1: $2"; }

# dry_check BIN ARGS...: the binary starts and names every --flag in ARGS in its help.
dry_check() {
  local bin=$1 help a
  shift
  case $bin in
    */htp-example-*) return 0 ;;  # no flags; ldd above checked that it can start
    *.py) help=$(python3 "$bin" --help 2>&1) || { echo "$bin --help failed"; return 1; } ;;
    */test_*) help=$(env "${htp_env[@]}" timeout 20 "$bin" --gtest_list_tests "$@" 2>&1) || { echo "$bin cannot list its tests"; return 1; }
              [[ $(grep -c '^  ' <<<"$help") -gt 0 ]] || { echo "no test of $bin matches $*"; return 1; }
              return 0 ;;
    *) help=$(env "${htp_env[@]}" timeout 20 "$bin" --help 2>&1) || { echo "$bin --help failed"; return 1; } ;;
  esac
  for a in "$@"; do
    [[ -f $a && -x $a ]] && break  # a wrapped program (compute-sanitizer's): its flags are its own
    [[ $a == --* ]] || continue
    a=${a%%=*}
    grep -q -- "$a" <<<"$help" || { echo "$bin does not know $a"; return 1; }
  done
}

# run_step NAME LOG ENV BIN ARGS...: BIN under the step's budget (cut to what the total leaves);
# ENV is "htp" (htp's libraries) or "py" (this shell's environment). Returns 0 when it passed,
# 124 when it ran out of time, 3 in a dry run, 4 when BIN is missing, its exit status otherwise;
# says which in the summary (the caller may add a verdict's FAIL to a pass).
run_step() {
  local name=$1 log=$2 kind=$3 bin=$4
  shift 4
  in_set "$name" || return 0
  local t=${budget[${name%% *}]:?no budget for $name}
  if [[ ! -x $bin && ! ( $bin == *.py && -f $bin ) ]]; then
    fail "$name: $bin is not in the tree (add it to gpu_tree_files in scripts/common.sh)"
    return 4
  fi
  local envs=()
  [[ $kind == htp ]] && envs=("${htp_env[@]}")
  if [[ $dry == 1 ]]; then
    local why
    if why=$(dry_check "$bin" "$@"); then
      note "dry  $name: would run $bin $* (budget $t s)"
    else
      fail "$name: $why"
    fi
    return 3  # not run: no verdict to take
  fi
  local left=$((deadline - $(date +%s)))
  (( left < t )) && t=$left
  if (( t < 5 )); then
    note "TIMEOUT $name: not started, the $total s total is spent"
    return 124
  fi
  local t0=$(date +%s) rc
  echo "==== $name: $bin $* (budget $t s)" >>"$log"
  if [[ $bin == *.py ]]; then
    timeout -k 5 "$t" env PYTHONUNBUFFERED=1 python3 "$bin" "$@" >>"$log" 2>&1
  else
    timeout -k 5 "$t" env "${envs[@]}" "$bin" "$@" >>"$log" 2>&1
  fi
  rc=$?
  local took=$(( $(date +%s) - t0 ))
  if (( rc == 0 )); then
    note "ok   $name in ${took} s"
  elif (( rc == 77 )) && [[ $gpus == 0 || $bin == *.py ]]; then
    # Exit 77: "cannot run here" (an example without a GPU, the torch baseline without torch or its
    # GPU). With a GPU, an example that says so fails instead.
    skip "$name" "$(grep -v '^====' "$log" | tail -1 | cut -c1-200) (exit 77)"
  elif (( rc == 124 || rc == 137 )); then
    note "TIMEOUT $name: killed after ${took} s, its budget (see $(basename "$log"))"
    rc=124
  else
    fail "$name: exit $rc after ${took} s (see $(basename "$log"))"
  fi
  pack
  return $rc
}

# verdict NAME REPORT REGEX...: a gtest step's report; a GPU present but unused by the required
# tests is a failure (scripts/gtest_verdict.py).
verdict() {
  local name=$1 report=$2 line
  shift 2
  local req=()
  for r in "$@"; do req+=(--require "$r"); done
  line=$(python3 scripts/gtest_verdict.py "$report" --gpus "$gpus" "${req[@]}") && note "     $name: $line" ||
    fail "$name: $line"
  pack
}

# ---- correctness first: the cuda tests and the examples --------------------------------------------
n_examples=$(find "$build/examples" -maxdepth 1 -name 'htp-example-*' -type f -perm -u+x 2>/dev/null | wc -l)
(( n_examples > 0 )) || ! in_set examples || fail "examples: no executable htp-example-* in $build/examples"
t=$build/tests
# gtest_step NAME BIN REQUIRED_REGEX [ARGS...]: a test binary, then the verdict on its report when
# it ran to the end (0: passed, 1: a test failed).
gtest_step() {
  local name=$1 bin=$2 req=$3 rc
  shift 3
  in_set "$name" || return 0
  run_step "$name" "$work/tests.log" htp "$bin" "$@" --gtest_output="json:$work/$name.json"
  rc=$?
  (( rc <= 1 )) && verdict "$name" "$work/$name.json" "$req"
  return 0
}
gtest_step tests "$t/test_device" '^device_conformance/cuda\.'
gtest_step pager-tests "$t/test_pager_backends" '^pager_backend/cuda\.' --gtest_filter='*cuda*'
gtest_step interop-tests "$t/test_cuda_interop" '^cuda_interop\.the_programs_stream'
# NCCL, loaded at run time: one rank on this GPU. Without a libnccl.so.2 the step is a SKIP.
if [[ -n $nccl || $dry == 1 ]] || ! in_set nccl-tests; then
  gtest_step nccl-tests "$t/test_collectives" '^collectives\.nccl' --gtest_filter='*nccl*'
else
  skip nccl-tests "no libnccl.so.2 (not in the CUDA toolkit, the system, HTP_NCCL_LIBRARY or an nvidia-nccl-cu13 wheel under: ${site_dirs:-no python})"
fi
# The examples share one budget: each gets what is left of it.
examples_end=$(( $(date +%s) + budget[examples] ))
for e in "$build"/examples/htp-example-*; do
  [[ -x $e ]] || continue
  budget[example]=$(( examples_end - $(date +%s) ))
  (( dry == 1 )) && budget[example]=${budget[examples]}
  run_step "example $(basename "$e")" "$work/tests.log" htp "$e"
done

# ---- measurements ----------------------------------------------------------------------------------
b=$build/bench
run_step bandwidth "$work/bench.log" htp "$b/htp-bandwidth" --backend cuda --json "$work/bandwidth.json"
run_step transfer "$work/bench.log" htp "$b/htp-transfer-bench" --backend cuda --json "$work/transfer.json"
# The streaming benchmark: the policies side by side on Llama-3.1-8B (16 of 32 layers, real shape,
# 7 GB of weights through a 3.5 GB HBM budget), real cuBLAS GEMMs, every weight read verified.
run_step stream-decode "$work/bench.log" htp "$b/htp-stream-bench" --backend cuda --model llama-3.1-8b \
  --layers 16 --hbm-budget 0.5 --steps 5 --policies all-resident,on-demand,schedule-k2,schedule-auto \
  --json "$work/stream.json" --trace "$work/trace.json"
run_step stream-prefill "$work/bench.log" htp "$b/htp-stream-bench" --backend cuda --model llama-3.1-8b \
  --layers 16 --hbm-budget 0.5 --steps 3 --tokens 2048 --policies on-demand,schedule-k2 \
  --json "$work/stream-prefill.json"
# The node modes on the one GPU (N = 1): the cuda path of --gpus (data-parallel on one GPU would
# repeat the single-GPU run).
run_step stream-node "$work/bench.log" htp "$b/htp-stream-bench" --backend cuda --model llama-3.1-8b \
  --layers 8 --hbm-budget 0.75 --steps 2 --gpus 1 --node-only --node-modes tensor-parallel,swap-and-shard \
  --json "$work/stream-node.json"
# Compressed weights (docs/pager.md): the same policy raw and compressed, the decode kernel on every
# page-in, every weight read verified; wire bytes, decode time and the effective logical GB/s.
run_step stream-compress "$work/bench.log" htp "$b/htp-stream-bench" --backend cuda \
  --model llama-3.1-8b --layers 4 --hbm-budget 0.5 --steps 2 --policies schedule-k2 --compress \
  --json "$work/stream-compress.json"
# ~3 GiB of tensors through a 1 GiB HBM budget, every acquire checksummed by a CUDA kernel.
run_step integrity "$work/bench.log" htp "$b/htp-integrity" --backend cuda --tensors 600 --min-kib 4 \
  --max-mib 48 --hbm-mib 1024 --ops 10000 --zipf 1.1 --seed 1 --json "$work/integrity.json"
# The weight codec's decode kernel on 1 GiB of Llama-like bf16 weights, bit-exact against the CPU
# encoder's input, its rate in GB/s of output (docs/codec.md); the CPU ratios on 1M elements beside.
run_step codec "$work/bench.log" htp "$b/htp-codec-bench" --backend cuda --gpu-gib 1 --elements 1048576 \
  --formats bf16 --repeats 1 --json "$work/codec.json"
# The naive ways on the same shapes (per-layer .to("cuda"), accelerate's cpu_offload), in this
# shell's own environment (htp's LD_LIBRARY_PATH could break torch).
# Without torch, or with a torch that sees no GPU, it exits 77 saying why: a SKIP.
run_step torch-baseline "$work/bench.log" py bench/baselines/torch_offload.py --model llama-3.1-8b \
  --layers 16 --steps 5 --json "$work/torch-baseline.json"
run_step slab "$work/slab.log" htp "$b/htp-slab-bench" --benchmark_min_time=0.05 \
  --json_out="$work/slab.json" --churn_out="$work/slab-churn.json"

# compute-sanitizer memcheck, last: the cuda conformance tests except those in which a host
# function or a parked stream waits for work queued after it (if the sanitizer makes a launch wait
# for its kernel, such a test never returns; they ran unsanitised above) and the deliberate oversize
# allocation. API errors are not reported (every expected failure would be one).
sanitizer=$(command -v compute-sanitizer || ls /usr/local/cuda*/compute-sanitizer/compute-sanitizer 2>/dev/null | head -1)
parks='*events_order_work_across_streams*:*event_query_and_synchronize*:*a_stream_waits_on_a_value*'
memcheck_filter="device_conformance/cuda.*:-*oversize*:$parks"
if ! in_set memcheck; then
  :
elif [[ -n $sanitizer ]]; then
  run_step memcheck "$work/sanitizer.log" htp "$sanitizer" --tool memcheck --report-api-errors no \
    --error-exitcode 9 "$t/test_device" --gtest_filter="$memcheck_filter" \
    --gtest_output="json:$work/memcheck.json"
  rc=$?
  refused=$(grep -E -m1 '^=+ .*(Device not supported|not supported on this)' "$work/sanitizer.log" 2>/dev/null)
  if (( rc != 0 && rc != 3 && rc != 9 && rc != 124 )) && [[ -n $refused && ! -s $work/memcheck.json ]]; then
    # The sanitizer refused the device before any test ran (gVisor does): no finding, nothing
    # checked. Its FAIL line becomes a SKIP with the sanitizer's words. Exit 9 is a finding.
    summary_lines[-1]="SKIP memcheck: compute-sanitizer cannot run on this machine: $(cut -c1-160 <<<"$refused")"
    pack
  elif (( rc <= 1 )); then
    verdict memcheck "$work/memcheck.json" '^device_conformance/cuda\.'
  fi
elif [[ $dry == 1 ]]; then
  why=$(dry_check "$t/test_device" --gtest_filter="$memcheck_filter") &&
    skip memcheck "no compute-sanitizer on this machine (its test filter was checked)" || fail "memcheck: $why"
else
  skip memcheck "no compute-sanitizer on this machine"
fi

# ---- the python set: the wheel, its tests on the GPU, the Hugging Face comparison ----------------
py_site=$work/python-site
run_step python-tests "$work/python.log" py scripts/gpu_python.py --wheels "$build/wheels" \
  --site "$py_site" --junit "$work/python-tests.xml"
export PYTHONPATH=$py_site${PYTHONPATH:+:$PYTHONPATH}
run_step hf-offload "$work/python.log" py bench/python/hf_offload_bench.py --out "$work/hf-offload"

took=$(( $(date +%s) - start ))
if [[ $dry == 1 ]]; then
  pack
  n=$(find "$out" -type f | wc -l)
  (( n > 8 )) && fail "results: $n files in $out, but a GPU machine hands back at most 8"
  note "dry run reached the end in $took s; $n file(s) would come back: $(cd "$out" && ls | tr '\n' ' ')"
  pack
else
  outcome="$(failures) step(s) FAILED or TIMED OUT above"
  (( $(failures) == 0 )) && outcome="all passed"
  note "done in $took s of $total s; $outcome"
  pack
  echo
  echo "---- bench.log (tail) ----"
  tar -xzOf "$out/gpu-check.tar.gz" ./bench.log 2>/dev/null | tail -30
fi
(( $(failures) == 0 ))
