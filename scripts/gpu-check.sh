#!/usr/bin/env bash
# The one script for a machine with an NVIDIA GPU and no package registry (see docs/gpu.md).
# Usage: scripts/gpu-check.sh OUT_DIR
# Uses build-gpu/ (made by scripts/gpu-build.sh elsewhere and carried here) or, when absent and the
# dependencies are installed, builds it. Runs every test binary (the cuda conformance instance runs
# for real here), the benchmarks, and compute-sanitizer on the device tests when it works; writes
# logs and JSON under OUT_DIR (at most 8 files: summary.txt, tests.log, bench.log, bandwidth.json,
# transfer.json, integrity.json, stream.json, trace.json) and prints a summary last.
set -uo pipefail
out=${1:?usage: scripts/gpu-check.sh OUT_DIR}
mkdir -p "$out"
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$root"
export PATH=/usr/local/cuda/bin:$PATH
build=build-gpu
if [[ ! -d $build/tests ]]; then
  echo "gpu-check: no carried build-gpu/; building here"
  bash scripts/gpu-build.sh >"$out/build.log" 2>&1 || { echo "gpu-check: build failed, see build.log"; tail -30 "$out/build.log"; exit 1; }
fi
export LD_LIBRARY_PATH=$root/$build/lib:${LD_LIBRARY_PATH:-}
# cuBLAS (htp-stream-bench's GEMMs) from the toolkit, or from the Python wheels PyTorch brings.
cublas=$( (ls /usr/local/cuda*/lib*/libcublas.so.1* /usr/local/lib/python3*/dist-packages/nvidia/cu*/lib/libcublas.so.1* \
           /opt/*/.venv/lib/python3*/site-packages/nvidia/cu*/lib/libcublas.so.1* 2>/dev/null || true) | head -1)
[[ -n $cublas ]] && export LD_LIBRARY_PATH=$(dirname "$cublas"):$LD_LIBRARY_PATH

summary=$out/summary.txt
: >"$summary"
note() { echo "$*" | tee -a "$summary"; }

{
  echo "== $(date -u +%FT%TZ) =="
  nvidia-smi --query-gpu=name,driver_version,memory.total,pcie.link.gen.current,pcie.link.width.current,clocks.sm,clocks.mem --format=csv 2>&1
  nvidia-smi topo -m 2>&1 | head -5
} >>"$summary"
note "GPU: $(nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader 2>/dev/null)"

# ---- tests ---------------------------------------------------------------------------------------
failed=0
: >"$out/tests.log"
for t in "$build"/tests/test_*; do
  [[ -x $t ]] || continue
  name=$(basename "$t")
  log=$(mktemp)
  if timeout 600 "$t" >"$log" 2>&1; then
    note "PASS $name: $(grep -c '^\[       OK \]' "$log") ok, $(grep -c '^\[  SKIPPED \]' "$log") skipped"
  else
    note "FAIL $name"
    failed=1
  fi
  cat "$log" >>"$out/tests.log"
  rm -f "$log"
done
note "skipped tests: $(grep -c '^\[  SKIPPED \]' "$out/tests.log" || true)"

# ---- compute-sanitizer on the stream-ordering tests ------------------------------------------------
if command -v compute-sanitizer >/dev/null 2>&1; then
  for tool in memcheck racecheck; do
    if timeout 300 compute-sanitizer --tool "$tool" --error-exitcode 9 "$build/tests/test_device" \
        --gtest_filter='*cuda*' >>"$out/tests.log" 2>&1; then
      note "compute-sanitizer $tool: clean"
    else
      note "compute-sanitizer $tool: FAILED or unsupported (see tests.log)"
    fi
  done
fi

# ---- benchmarks ----------------------------------------------------------------------------------
run_bench() {  # run_bench NAME ARGS...
  local bin=$build/bench/$1
  shift
  [[ -x $bin ]] || { note "bench $(basename "$bin"): not built"; return; }
  if timeout 300 "$bin" "$@" >>"$out/bench.log" 2>&1; then
    note "bench $(basename "$bin"): ok"
  else
    note "bench $(basename "$bin"): FAILED (see bench.log)"
    failed=1
  fi
}
run_bench htp-bandwidth --backend cuda --json "$out/bandwidth.json"
run_bench htp-transfer-bench --backend cuda --json "$out/transfer.json"
# The integrity run of issue 7: ~3 GiB of tensors through a 1 GiB HBM budget, every acquire
# checksummed by a CUDA kernel, memory returned at the end (exit 1 on any mismatch).
run_bench htp-integrity --backend cuda --tensors 600 --min-kib 4 --max-mib 48 --hbm-mib 1024 \
  --ops 10000 --zipf 1.1 --seed 1 --json "$out/integrity.json"
run_bench htp-slab-bench --benchmark_min_time=0.05
# The streaming benchmark: the policies side by side on Llama-3.1-8B (16 of 32 layers, real shape,
# 8 GB of weights through a 4 GB HBM budget), real cuBLAS GEMMs, decode batch 1 and prefill 2048.
run_bench htp-stream-bench --backend cuda --model llama-3.1-8b --layers 16 --hbm-budget 0.5 \
  --steps 5 --json "$out/stream.json" --trace "$out/trace.json"
run_bench htp-stream-bench --backend cuda --model llama-3.1-8b --layers 16 --hbm-budget 0.5 \
  --steps 3 --tokens 2048 --policies on-demand,schedule-k2

# The naive ways on the same shapes (PyTorch per-layer .to("cuda"), accelerate's cpu_offload), when
# the machine's python has torch: printed into bench.log next to htp-stream-bench's table.
if python3 -c "import torch, sys; sys.exit(0 if torch.cuda.is_available() else 1)" 2>/dev/null; then
  if timeout 300 python3 bench/baselines/torch_offload.py --model llama-3.1-8b --layers 16 --steps 5 \
      >>"$out/bench.log" 2>&1; then
    note "baselines (PyTorch, accelerate): ok"
  else
    note "baselines (PyTorch, accelerate): FAILED (see bench.log)"
  fi
fi

echo
echo "---- summary ----"
cat "$summary"
tail -40 "$out/bench.log" 2>/dev/null
exit $failed
