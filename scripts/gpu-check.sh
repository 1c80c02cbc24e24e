#!/usr/bin/env bash
# The one script for a machine with an NVIDIA GPU and no package registry (see docs/gpu.md).
# Usage: scripts/gpu-check.sh [--dry-run] [--set SET[,SET...]] OUT_DIR
#
# Sets of steps (HTP_GPU_CHECK_SET also picks; the default is headline):
#   headline  first, on a fresh machine: the 64 MiB page latency raw and compressed, the H2D
#             bandwidth, the decode kernel's GB/s on 1 GiB of bf16 (bit-exact), and the Hugging
#             Face 8B-shaped decode at 30% (resident, htp, htp compressed, accelerate) in tokens/s
#   core      the C++ tests on the GPU, the examples, the other benchmarks, memcheck
#   python    the wheel gpu-build.sh made, its cuda tests (python/tests/test_cuda.py)
#   extra     the whole Hugging Face comparison (50%, batch 16, naive): not in the session plan
#   static    the 8B-shaped decode under CUDA graphs at 30%: resident, htp static raw and
#             compressed, htp dynamic, static under torch.compile(mode="reduce-overhead"), in
#             tokens/s with every token checked against resident: not in the session plan
#   train     one training step of the 8B shape (16 layers): resident, save_on_cpu, htp at 30% and
#             50%; step time, bytes paged, exposed gradient reduction, gradients checked against
#             resident: not in the session plan (the plan has no slack for its ~50 s)
# `--set core,python` runs both in one command. Each set has a limit in seconds; its steps' budgets
# must add up to no more, and the session plan below (a machine start, the headline, core and python,
# a rerun of the headline) must fit the 15 minutes of a GPU session: any breach is a FAIL.
#
# Each step runs under its budget (`timeout`) and ends as exactly one summary line:
#   PASS     it ran, exited 0, wrote what it must, and its verdict (if any) passed
#   FAIL     why: its exit status, its verdict, a missing output, or an exit 77 / a skip on a
#            machine with a GPU (only steps marked optional may skip there)
#   SKIP     why: it cannot run here (no GPU; for an optional step, a sanitizer that refuses)
#   TIMEOUT  killed at its budget, or not started because the set's limit was spent; never a pass
# Exit status 1 on any FAIL or TIMEOUT.
#
# Results: OUT_DIR receives exactly two files, rewritten after every step so that a run cut short
# still returns what it did: summary.txt (each step's line, the facts, the headline's figures) and
# gpu-check.tar.gz (the logs, facts.txt and every benchmark's JSON). A GPU machine hands back at
# most 8 files.
#
# Uses build-gpu/ (made by scripts/gpu-build.sh elsewhere from the copy list in scripts/common.sh,
# with the wheel in wheels/, and carried here; HTP_GPU_CHECK_BUILD names another folder with the
# same layout) or, when absent and the dependencies are installed, builds it.
#
# --dry-run (or HTP_GPU_CHECK_DRY_RUN=1): for a machine without a GPU (the test command runs it on
# the tree assemble_gpu_tree makes from its own build). Checks every set's budgets against its limit
# and the estimates beside them, the session plan, that every step's binary is in the tree, starts
# (--help, or its test list) and knows every flag the step passes, that the tree holds one wheel for
# the GPU machine's Python (3.12) and platform, that every conformance test holding a stream is
# named *holds_stream* (memcheck leaves those out), and that no more than 8 files would come back.
#
# For tests only: HTP_GPU_CHECK_GPUS=N takes N as the number of GPUs instead of asking nvidia-smi;
# HTP_GPU_CHECK_PYTHON names the interpreter of the Python steps (default python3);
# HTP_GPU_CHECK_START_S the machine start the session plan assumes (default 180).
set -uo pipefail
dry=${HTP_GPU_CHECK_DRY_RUN:-0}
if [[ ${1:-} == -h || ${1:-} == --help ]]; then
  sed -n '2,/^set -uo/p' "${BASH_SOURCE[0]}" | sed '$d; s/^# \{0,1\}//'
  exit 0
fi
sets=${HTP_GPU_CHECK_SET:-headline}
while [[ ${1:-} == --* ]]; do
  case $1 in
    --dry-run) dry=1; shift ;;
    --set) sets=${2:?--set needs headline, core, python, extra, static or train}; shift 2 ;;
    *) echo "gpu-check: unknown option $1" >&2; exit 2 ;;
  esac
done
out=${1:?usage: scripts/gpu-check.sh [--dry-run] [--set SET] OUT_DIR}
mkdir -p "$out"
out=$(cd "$out" && pwd) || { echo "gpu-check: cannot use $out as the output folder" >&2; exit 1; }
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$root"
export PATH=/usr/local/cuda/bin:$PATH
py=${HTP_GPU_CHECK_PYTHON:-python3}
start=$(date +%s)

# ---- the steps: estimate and budget --------------------------------------------------------------
# Seconds on the GPU machine (H100/H200, ~55 GB/s pinned H2D, 16 cores); every budget is at least
# 1.25 x its estimate (the dry run checks). Nothing here has been timed on a GPU yet: the estimates
# come from the sizes below, and the first headline run's summary gives the real times.
#   step            estimate budget  what, and where the estimate comes from
steps_table='
facts                  3      5     nvidia-smi four times, ldd of ~16 binaries
wheel                  6      8     pip install --no-index of the wheel (~3 s), import htp, its cuda device count
bandwidth              6      8     htp-bandwidth, 64 KiB..256 MiB, 1 GiB per point, pinned and pageable: ~24 GiB moved
page-latency          16     20     htp-stream-bench --compress, 2 layers: 0.87 GB drawn Llama-like on one thread (~8 s),
                                    encoded on 16 cores (~1 s); on-demand and schedule-k2, raw then compressed, 3 steps each
codec                 10     13     1 GiB of bf16 drawn and encoded on 16 cores (~2 s), pinned, decoded 3 times, compared;
                                    the CPU ratios on 1M elements (~2 s)
hf-headline          115    144     import torch/transformers (~12 s), 16 GB built on the GPU (~5 s), pinned host copy
                                    (~8 s); 2+32 tokens each: resident (~3 s), htp at 30% (~10 s), htp-compress (16 GB
                                    encoded on 16 cores ~20 s, decode ~7 s, decoded back ~10 s), accelerate (~40 s)
figures                1      2     scripts/gpu_headline.py reads the JSON above
tests                  5      7     test_device: the cuda conformance tests (4 MiB copies at most) and the sim ones
pager-tests            5      7     the pager end to end, 2 tests, ~100 MiB through HBM, checked mode
interop-tests          2      3     test_cuda_interop: one pager on the stream of the program
nccl-tests             5      7     the first NCCL communicator (one rank) starts its proxy thread
examples              12     15     4 examples, each < 64 MiB of paging, ~3 s each (one budget for all)
transfer               8     10     htp-transfer-bench: priorities and chunking on 256 MiB
stream-decode         16     20     8 layers: pins, fills and sums 3.5 GB (~6 s), 4 policies x 6 steps (~2.5 s each)
stream-prefill        16     20     8 layers again (~6 s), 2 policies x 3 steps of 2048 tokens (~5 s each)
stream-node           25     32     8 layers, tensor-parallel and swap-and-shard on one GPU: each pins, fills and
                                    sums 3.5 GB (~6 s) and starts an NCCL communicator (~3 s)
integrity             10     13     600 tensors, 10,000 checksummed acquires through 1 GiB
torch-baseline        16     20     import torch (~8 s), 3.5 GB drawn on the GPU (~2 s), 3 policies x 6 steps (~6 s)
slab                   5      7     Google Benchmark, 0.05 s per case, ~40 cases (CPU only)
memcheck              25     32     compute-sanitizer on the cuda conformance tests that hold no stream
python-tests          25     32     import torch and htp (~8 s), python/tests/test_cuda.py: 7 tests, one Mixtral offload,
                                    the tensor-parallel example on NCCL, world size 1 (~5 s)
hf-offload           240    300     the whole comparison: 5 modes, 30% and 50%, batch 1 and 16 (extra set only)
hf-static            175    220     import (~12 s), 16 GB built on the GPU (~5 s), host copy (~8 s); 16 tokens each:
                                    resident (~2 s), static (pinned copy ~7 s, ~4 s), static-compress (encode on
                                    16 cores ~20 s, ~4 s), dynamic (~15 s), resident-compiled (~5 s cached
                                    kernels), compiled (inductor ~90 s) (static set only)
train-step            50     65     import (~12 s, deterministic mode ~2 s), 16 of 32 8B layers built on the GPU (~3 s),
                                    NCCL (~2 s); 1+3 steps of 512 tokens each: resident (~2 s), save_on_cpu (11.5 GB
                                    pinned, ~23 GB over the link a step, ~5 s), pinned host copy (~4 s), htp 30% and
                                    50% (~10 GB paged, ~7 GB of gradients to the host a step, ~8 s each) (train set only)
'
declare -A estimate=() budget=()
while IFS= read -r line; do  # continuation lines start with blanks
  [[ $line =~ ^([a-z][a-z-]*)\ +([0-9]+)\ +([0-9]+)\  ]] || continue
  estimate[${BASH_REMATCH[1]}]=${BASH_REMATCH[2]} budget[${BASH_REMATCH[1]}]=${BASH_REMATCH[3]}
done <<<"$steps_table"
declare -A set_steps=(
  [headline]="facts wheel bandwidth page-latency codec hf-headline figures"
  [core]="facts tests pager-tests interop-tests nccl-tests examples transfer stream-decode stream-prefill
          stream-node integrity torch-baseline slab memcheck"
  [python]="facts wheel python-tests"
  [extra]="facts wheel hf-offload"
  [static]="facts wheel hf-static"
  [train]="facts wheel train-step"
)
declare -A set_limit=([headline]=200 [core]=210 [python]=47 [extra]=330 [static]=240 [train]=80)
# Steps that may SKIP on a machine with a GPU: compute-sanitizer absent, or refusing the device
# (gVisor: "Device not supported"). Any other step that skips there, or exits 77, FAILS.
optional=" memcheck "
# The session plan (/work/.library/device/README.md): 15 minutes of device time, the machine's
# start included; each call also costs its transfers and the untimed packing (call_s).
session_s=900
start_s=${HTP_GPU_CHECK_START_S:-180}
call_s=20
headline_call_max=300  # the headline is one call of at most 300 s on a fresh machine

order=()
total=0
for s in ${sets//,/ }; do
  [[ -n ${set_steps[$s]:-} ]] || { echo "gpu-check: --set $s: no such set (headline, core, python, extra, static, train)" >&2; exit 2; }
  total=$((total + ${set_limit[$s]}))
  for x in ${set_steps[$s]}; do [[ " ${order[*]} " == *" $x "* ]] || order+=("$x"); done
done
total=${HTP_GPU_CHECK_SECONDS:-$total}
deadline=$((start + total))
# in_set STEP: the step is one of this run's (the examples run as "example NAME").
in_set() { [[ " ${order[*]} " == *" $1 "* ]]; }

summary_lines=()
declare -A outcome=()
note() { echo "$*"; summary_lines+=("$*"); }
# result STEP STATUS [WHY...]: the step's line in the summary (STATUS: PASS, FAIL, SKIP, TIMEOUT,
# or DRY in a dry run); the end of the run checks that every step of the set has one.
result() {
  local step=$1 status=$2
  shift 2
  note "$(printf '%-8s%s' "$status" "$step")${*:+: $*}"
  step=${step%% *}
  [[ $step == example ]] && step=examples
  outcome[$step]=$status
}
fail() { note "FAIL    $*"; }
# The outcome is read off the summary: any FAIL or TIMEOUT line fails the run.
failures() { printf '%s\n' "${summary_lines[@]}" | grep -c -E '^(FAIL|TIMEOUT)' || true; }

# ---- budgets: each set's against its limit, each budget against its estimate, the session plan ----
budget_problems=()
for s in "${!set_steps[@]}"; do
  sum=0
  for x in ${set_steps[$s]}; do
    [[ -n ${budget[$x]:-} ]] || { budget_problems+=("step $x of set $s has no budget"); continue; }
    sum=$((sum + ${budget[$x]}))
  done
  (( sum > ${set_limit[$s]} )) && budget_problems+=("set $s: the steps' budgets add up to $sum s, over its ${set_limit[$s]} s limit")
done
for x in "${!budget[@]}"; do
  (( ${budget[$x]} * 100 < ${estimate[$x]} * 125 )) &&
    budget_problems+=("step $x: budget ${budget[$x]} s is under 1.25 x its estimate ${estimate[$x]} s")
done
sum=0
for x in "${order[@]}"; do sum=$((sum + ${budget[$x]:-0})); done
(( sum > total )) && budget_problems+=("this run's budgets add up to $sum s, over the $total s total")
plan=$((start_s + 2 * (${set_limit[headline]} + call_s) + ${set_limit[core]} + ${set_limit[python]} + call_s))
(( plan > session_s )) && budget_problems+=("session plan: start $start_s s + headline (${set_limit[headline]} + $call_s s) + core,python (${set_limit[core]} + ${set_limit[python]} + $call_s s) + the headline again = $plan s, over the $session_s s of a session")
(( ${set_limit[headline]} + call_s > headline_call_max )) &&
  budget_problems+=("the headline's ${set_limit[headline]} s limit and $call_s s of packing pass the $headline_call_max s of its call")
for p in "${budget_problems[@]}"; do fail "budgets: $p; trim them"; done

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
  tar -czf "$out/.gpu-check.tar.gz.part" -C "$work" --exclude ./python-site . 2>/dev/null
  if (( $(stat -c %s "$out/.gpu-check.tar.gz.part") > 15 * 1024 * 1024 )); then  # 16 MiB per file comes back
    rm -f "$work/trace.json"
    tar -czf "$out/.gpu-check.tar.gz.part" -C "$work" --exclude ./python-site . 2>/dev/null
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
note "build: $build; sets $sets: budgets $sum s of $total s; session plan $plan s of $session_s s"
facts_bad=()
gpus=0
if [[ -n ${HTP_GPU_CHECK_GPUS:-} ]]; then
  gpus=$HTP_GPU_CHECK_GPUS
  note "GPU: $gpus taken from HTP_GPU_CHECK_GPUS (a test: nvidia-smi not asked)"
elif command -v nvidia-smi >/dev/null 2>&1; then
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
    facts_bad+=("driver $driver: htp's static CUDA 13 runtime needs driver 580 or later (cudaErrorInsufficientDriver otherwise)")
  fi
else
  note "GPU: none (no nvidia-smi on this machine)"
fi
# MemTotal is a fact, not a limit: a microVM's grows as its memory is touched.
note "host: $(nproc) CPUs, $(free -g 2>/dev/null | awk '/^Mem:/ {print $2 " GiB MemTotal, " $7 " GiB available"}'); python: $($py -c 'import sys; print(sys.executable, sys.version.split()[0])' 2>&1 | head -1)"
(( gpus == 0 && dry == 0 )) && facts_bad+=("no GPU listed by nvidia-smi: nothing here can run on the cuda backend")

# The libraries htp's binaries load: lib/ of the tree, cuBLAS (exactly libcublas.so.13, the ABI
# htp-stream-bench links) and NCCL (dlopen'ed, from the nvidia-nccl-cu13 wheel when the system has
# none). They go into the environment of htp's steps only: the Python steps keep this shell's own,
# since a foreign libstdc++ or cuBLAS on LD_LIBRARY_PATH can break `import torch`.
site_dirs=$($py -c 'import site; print(" ".join(site.getsitepackages()))' 2>/dev/null || true)
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
[[ -n $missing ]] && facts_bad+=("ldd: libraries not found: $missing(see facts.txt)")
if (( ${#facts_bad[@]} )); then
  for f in "${facts_bad[@]}"; do result facts FAIL "$f"; done
else
  result facts PASS "in $(( $(date +%s) - start )) s; every library of every binary resolves (facts.txt)"
fi
pack

# ---- running a step ------------------------------------------------------------------------------
# skip STEP WHY: a SKIP where no GPU is present or the step is optional; a FAIL otherwise.
skip() {
  local step=${1%% *}
  [[ $step == example ]] && step=examples
  if (( gpus > 0 )) && [[ $optional != *" $step "* ]]; then
    result "$1" FAIL "skipped on a machine with a GPU ($2)"
  else
    result "$1" SKIP "$2"
  fi
}

# dry_check BIN ARGS...: the binary starts and names every --flag in ARGS in its help (a Python
# script with a subcommand first: that subcommand's help).
dry_check() {
  local bin=$1 help a
  shift
  case $bin in
    */htp-example-*) return 0 ;;  # no flags; ldd above checked that it can start
    *.py) if [[ ${1:-} =~ ^[a-z] ]]; then help=$(python3 "$bin" "$1" --help 2>&1)
          else help=$(python3 "$bin" --help 2>&1); fi || { echo "$bin --help failed"; return 1; } ;;
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

# What a step must leave behind when it exits 0 (under the work folder), and the regex of the tests
# a gtest step's verdict requires to have run on a GPU (scripts/gtest_verdict.py).
declare -A product=(
  [bandwidth]=bandwidth.json [page-latency]=page-latency.json [codec]=codec.json
  [hf-headline]=hf-headline/hf-offload.json [hf-offload]=hf-offload/hf-offload.json
  [hf-static]=hf-static/hf-static.json [train-step]=train-step.json
  [transfer]=transfer.json [stream-decode]=stream.json [stream-prefill]=stream-prefill.json
  [stream-node]=stream-node.json [integrity]=integrity.json [torch-baseline]=torch-baseline.json
  [slab]=slab.json [python-tests]=python-tests.xml
)
declare -A require=(
  [tests]='^device_conformance/cuda\.' [pager-tests]='^pager_backend/cuda\.'
  [interop-tests]='^cuda_interop\.the_programs_stream' [nccl-tests]='^collectives\.nccl'
  [memcheck]='^device_conformance/cuda\.'
)

# run_step NAME LOG ENV BIN ARGS...: BIN under the step's budget (cut to what the total leaves);
# ENV is "htp" (htp's libraries) or "py" (this shell's environment; BIN is a script for $py).
# Writes the step's one summary line; returns 0 when it passed, 124 when it ran out of time, 3 in
# a dry run, 4 when BIN is missing, non-zero otherwise.
run_step() {
  local name=$1 log=$2 kind=$3 bin=$4
  shift 4
  local step=${name%% *}
  [[ $step == example ]] && step=examples
  in_set "$step" || return 0
  local t=${budget[$step]:?no budget for $step}
  [[ $step == examples && $dry != 1 ]] && t=$(( examples_end - $(date +%s) ))
  if [[ ! -x $bin && ! ( $bin == *.py && -f $bin ) ]]; then
    result "$name" FAIL "$bin is not in the tree (add it to gpu_tree_files in scripts/common.sh)"
    return 4
  fi
  local envs=()
  [[ $kind == htp ]] && envs=("${htp_env[@]}")
  if [[ $dry == 1 ]]; then
    local why
    if why=$(dry_check "$bin" "$@"); then
      result "$name" DRY "would run $bin $* (budget $t s, estimate ${estimate[$step]} s)"
    else
      result "$name" FAIL "$why"
    fi
    return 3  # not run: no verdict to take
  fi
  local left=$((deadline - $(date +%s)))
  (( left < t )) && t=$left
  if (( t < 2 )); then
    result "$name" TIMEOUT "not started, the $total s total is spent"
    return 124
  fi
  local t0 rc took
  t0=$(date +%s)
  echo "==== $name: $bin $* (budget $t s)" >>"$log"
  if [[ $bin == *.py ]]; then
    timeout -k 5 "$t" env PYTHONUNBUFFERED=1 "$py" "$bin" "$@" >>"$log" 2>&1
  else
    timeout -k 5 "$t" env "${envs[@]}" "$bin" "$@" >>"$log" 2>&1
  fi
  rc=$?
  took=$(( $(date +%s) - t0 ))
  local last
  last=$(grep -v '^====' "$log" | tail -1 | cut -c1-200)
  if [[ $step == memcheck ]] && (( rc != 0 && rc != 1 && rc != 9 && rc != 124 && rc != 137 )) &&
     [[ ! -s $work/memcheck.json ]] &&
     refused=$(grep -E -m1 '^=+ .*(Device not supported|not supported on this)' "$log"); then
    # The sanitizer refused the device before any test ran (gVisor does): no finding, nothing
    # checked. Exit 9 is a finding, never a SKIP.
    skip "$name" "compute-sanitizer cannot run on this machine: $(cut -c1-160 <<<"$refused")"
  elif (( rc == 77 )); then
    # Exit 77: "cannot run here" (an example without a GPU, torch or its GPU missing). With a GPU
    # present that is a failure, not a skip.
    skip "$name" "exit 77: $last"
  elif (( rc == 124 || rc == 137 )); then
    result "$name" TIMEOUT "killed after ${took} s, its budget (see $(basename "$log"))"
    rc=124
  elif [[ -n ${require[$step]:-} ]] && (( rc <= 1 )) || [[ $step == memcheck && $rc == 9 ]]; then
    # A gtest step that ran to the end (0: passed, 1: a test failed; 9: a memcheck finding): the
    # verdict on its report decides, and a GPU present but unused by the required tests fails.
    local line
    if line=$(python3 scripts/gtest_verdict.py "$work/$step.json" --gpus "$gpus" --require "${require[$step]}") && (( rc == 0 )); then
      result "$name" PASS "in ${took} s; $line"
    else
      result "$name" FAIL "exit $rc after ${took} s; $line"
      rc=1
    fi
  elif (( rc != 0 )); then
    result "$name" FAIL "exit $rc after ${took} s (see $(basename "$log")): $last"
  elif [[ -n ${product[$step]:-} && ! -s $work/${product[$step]} ]]; then
    result "$name" FAIL "exit 0 after ${took} s but it wrote no ${product[$step]}"
    rc=1
  else
    result "$name" PASS "in ${took} s${last:+; $last}"
  fi
  pack
  return $rc
}

# ---- the headline: the wheel, the link, one 64 MiB page, the decode kernel, Hugging Face ----------
py_site=$work/python-site
if in_set wheel && [[ $dry == 1 ]]; then
  # The carried tree must hold one wheel for the GPU machine's Python and platform.
  why=$(python3 scripts/gpu_python.py check-wheel --wheels "$build/wheels" 2>&1) ||
    result wheel FAIL "$(tr '\n' ' ' <<<"$why")"
fi
run_step wheel "$work/python.log" py scripts/gpu_python.py install --wheels "$build/wheels" \
  --site "$py_site" --gpus "$gpus"
export PYTHONPATH=$py_site${PYTHONPATH:+:$PYTHONPATH}
b=$build/bench
run_step bandwidth "$work/bench.log" htp "$b/htp-bandwidth" --backend cuda --min-bytes 65536 \
  --json "$work/bandwidth.json"
# The wait for a page, raw and compressed: on-demand faults every weight in (ms per 64 MiB of what
# it waited for), schedule-k2 beside it; Llama-like weights so that compression sees a real ratio.
run_step page-latency "$work/bench.log" htp "$b/htp-stream-bench" --backend cuda --model llama-3.1-8b \
  --layers 2 --hbm-budget 0.7 --steps 3 --policies on-demand,schedule-k2 --compress \
  --json "$work/page-latency.json"
# The weight codec's decode kernel on 1 GiB of Llama-like bf16 weights, bit-exact against the CPU
# encoder's input, its rate in GB/s of output (docs/codec.md); the CPU ratios on 1M elements beside.
run_step codec "$work/bench.log" htp "$b/htp-codec-bench" --backend cuda --gpu-gib 1 --elements 1048576 \
  --formats bf16 --repeats 1 --json "$work/codec.json"
# Llama-3.1-8B-shaped in bf16 at 30% of its layers in HBM, batch 1: resident, htp, htp compressed
# and accelerate side by side (docs/python.md). The rest of the comparison is the extra set.
run_step hf-headline "$work/python.log" py bench/python/hf_offload_bench.py \
  --modes resident,htp,htp-compress,accelerate --fractions 0.3 --batches 1 --out "$work/hf-headline"
if in_set figures; then
  run_step figures "$work/figures.log" py scripts/gpu_headline.py "$work"
  [[ $dry == 1 ]] || while read -r line; do note "        $line"; done < <(grep -v '^====' "$work/figures.log")
  pack
fi

# ---- correctness: the cuda tests and the examples ----------------------------------------------------
t=$build/tests
gtest_step() {  # gtest_step NAME BIN [ARGS...]: a test binary with its JSON report, the verdict on it
  local name=$1 bin=$2
  shift 2
  run_step "$name" "$work/tests.log" htp "$bin" "$@" --gtest_output="json:$work/$name.json"
}
gtest_step tests "$t/test_device"
gtest_step pager-tests "$t/test_pager_backends" --gtest_filter='*cuda*'
gtest_step interop-tests "$t/test_cuda_interop"
# NCCL, loaded at run time: one rank on this GPU. Without a libnccl.so.2 the step cannot run.
if [[ -n $nccl || $dry == 1 ]]; then
  gtest_step nccl-tests "$t/test_collectives" --gtest_filter='*nccl*'
elif in_set nccl-tests; then
  skip nccl-tests "no libnccl.so.2 (not in the CUDA toolkit, the system, HTP_NCCL_LIBRARY or an nvidia-nccl-cu13 wheel under: ${site_dirs:-no python})"
fi
# The examples share one budget: each gets what is left of it.
if in_set examples; then
  n_examples=0
  examples_end=$(( $(date +%s) + ${budget[examples]} ))
  for e in "$build"/examples/htp-example-*; do
    [[ -f $e && -x $e ]] || continue
    n_examples=$((n_examples + 1))
    run_step "example $(basename "$e")" "$work/tests.log" htp "$e"
  done
  (( n_examples > 0 )) || result examples FAIL "no executable htp-example-* in $build/examples"
fi

# ---- measurements ----------------------------------------------------------------------------------
run_step transfer "$work/bench.log" htp "$b/htp-transfer-bench" --backend cuda --json "$work/transfer.json"
# The streaming benchmark: the policies side by side on Llama-3.1-8B (8 of 32 layers, real shape,
# 3.5 GB of weights through half of it), real cuBLAS GEMMs, every weight read verified.
run_step stream-decode "$work/bench.log" htp "$b/htp-stream-bench" --backend cuda --model llama-3.1-8b \
  --layers 8 --hbm-budget 0.5 --steps 5 --policies all-resident,on-demand,schedule-k2,schedule-auto \
  --json "$work/stream.json" --trace "$work/trace.json"
run_step stream-prefill "$work/bench.log" htp "$b/htp-stream-bench" --backend cuda --model llama-3.1-8b \
  --layers 8 --hbm-budget 0.5 --steps 3 --tokens 2048 --policies on-demand,schedule-k2 \
  --json "$work/stream-prefill.json"
# The node modes on the one GPU (N = 1): the cuda path of --gpus (data-parallel on one GPU would
# repeat the single-GPU run).
run_step stream-node "$work/bench.log" htp "$b/htp-stream-bench" --backend cuda --model llama-3.1-8b \
  --layers 8 --hbm-budget 0.75 --steps 2 --gpus 1 --node-only --node-modes tensor-parallel,swap-and-shard \
  --json "$work/stream-node.json"
# ~3 GiB of tensors through a 1 GiB HBM budget, every acquire checksummed by a CUDA kernel.
run_step integrity "$work/bench.log" htp "$b/htp-integrity" --backend cuda --tensors 600 --min-kib 4 \
  --max-mib 48 --hbm-mib 1024 --ops 10000 --zipf 1.1 --seed 1 --json "$work/integrity.json"
# The naive ways on the shapes of stream-decode (per-layer .to("cuda"), accelerate's cpu_offload), in
# this shell's own environment (htp's LD_LIBRARY_PATH could break torch).
run_step torch-baseline "$work/bench.log" py bench/baselines/torch_offload.py --model llama-3.1-8b \
  --layers 8 --steps 5 --json "$work/torch-baseline.json"
run_step slab "$work/slab.log" htp "$b/htp-slab-bench" --benchmark_min_time=0.05 \
  --json_out="$work/slab.json" --churn_out="$work/slab-churn.json"

# compute-sanitizer memcheck, last: the cuda conformance tests except those that hold a stream on
# the host (if the sanitizer makes a launch wait for its kernel, such a test never returns; they ran
# unsanitised above), which are named *holds_stream* (scripts/holds_stream.py checks the name of
# every test that holds one), and the deliberate oversize allocation. API errors are not reported
# (every expected failure would be one).
memcheck_filter='device_conformance/cuda.*:-*oversize*:*holds_stream*'
if in_set memcheck; then
  sanitizer=$(command -v compute-sanitizer || ls /usr/local/cuda*/compute-sanitizer/compute-sanitizer 2>/dev/null | head -1)
  env "${htp_env[@]}" timeout 20 "$t/test_device" --gtest_list_tests --gtest_filter="$memcheck_filter" >"$work/memcheck-list.txt" 2>&1
  if ! why=$(python3 scripts/holds_stream.py tests/device_conformance.cpp --listed "$work/memcheck-list.txt"); then
    result memcheck FAIL "not run, it would hang: $(grep -v 'breach' <<<"$why" | head -4 | tr '\n' ' ')"
  elif [[ -n $sanitizer ]]; then
    run_step memcheck "$work/sanitizer.log" htp "$sanitizer" --tool memcheck --report-api-errors no \
      --error-exitcode 9 "$t/test_device" --gtest_filter="$memcheck_filter" \
      --gtest_output="json:$work/memcheck.json"
  elif [[ $dry == 1 ]]; then
    if why=$(dry_check "$t/test_device" --gtest_filter="$memcheck_filter"); then
      result memcheck DRY "no compute-sanitizer here; its test filter was checked, every test holding a stream is named *holds_stream*"
    else
      result memcheck FAIL "$why"
    fi
  else
    skip memcheck "no compute-sanitizer on this machine"
  fi
fi

# ---- the python set: the wheel's cuda tests; extra, static, train: outside the session plan --------
run_step python-tests "$work/python.log" py scripts/gpu_python.py test --site "$py_site" \
  --junit "$work/python-tests.xml" --gpus "$gpus"
run_step hf-offload "$work/python.log" py bench/python/hf_offload_bench.py --out "$work/hf-offload"
run_step hf-static "$work/python.log" py bench/python/hf_static_bench.py --out "$work/hf-static"
# One training step of the 8B shape, resident, save_on_cpu and htp at 30% and 50% (docs/python.md);
# --device cuda: no GPU for torch and htp is an exit 77, a FAIL here, never a silent run on sim.
run_step train-step "$work/python.log" py bench/python/train_step_bench.py --device cuda \
  --budgets 0.3,0.5 --out "$work/train-step.json"

# ---- every step has its line -------------------------------------------------------------------------
for s in "${order[@]}"; do
  [[ -n ${outcome[$s]:-} ]] || result "$s" FAIL "no outcome recorded (a step gpu-check.sh never reached)"
done
took=$(( $(date +%s) - start ))
if [[ $dry == 1 ]]; then
  pack
  n=$(find "$out" -type f | wc -l)
  (( n > 8 )) && fail "results: $n files in $out, but a GPU machine hands back at most 8"
  note "dry run reached the end in $took s; $n file(s) would come back: $(cd "$out" && ls | tr '\n' ' ')"
  pack
else
  outcome_line="$(failures) step(s) FAILED or TIMED OUT above"
  (( $(failures) == 0 )) && outcome_line="all passed"
  note "done in $took s of $total s; $outcome_line"
  pack
  echo
  echo "---- bench.log (tail) ----"
  tar -xzOf "$out/gpu-check.tar.gz" ./bench.log 2>/dev/null | tail -30
fi
(( $(failures) == 0 ))
