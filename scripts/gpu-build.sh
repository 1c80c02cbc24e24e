#!/usr/bin/env bash
# Builds, on this (GPU-less) machine, what scripts/gpu-check.sh runs on the GPU machine: a Release
# build with the CUDA backend, reduced to a small folder build-gpu/ by assemble_gpu_tree
# (scripts/common.sh: the one copy list, which the test command's dry run checks too). Carry build-gpu with the device tool's `carry` (the
# working tree and carried paths must stay under 64 MiB together; this script fails above 56 MiB).
# cudart is linked statically; cuBLAS (libcublas.so.13, hundreds of MiB) is not carried: gpu-check
# takes it from the GPU machine's CUDA 13 toolkit or Python wheels.
# HTP_GPU_BUILD_DIR names the output folder (default build-gpu; the full build goes to DIR-full);
# HTP_GPU_PYTHON the Python 3.12 that builds the wheel (default: the first of python3.12, pyenv's
# and uv's 3.12 that runs).
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"
bash "$root/scripts/setup.sh"
cd "$root"
out=${HTP_GPU_BUILD_DIR:-build-gpu}
full=$out-full
configure_and_build "$full" -DCMAKE_BUILD_TYPE=Release -DHTP_WITH_CUDA=ON -DHTP_WERROR=ON
assemble_gpu_tree "$full" "$out"  # the copy list in common.sh, shared with the test command's dry run

# The GPU machine has a driver, the CUDA 13 toolkit and Python, nothing else: no binary may need a
# shared CUDA runtime, and nothing but the C/C++ runtime, cuBLAS and lib/ may be left to resolve.
# (grep reads a string, not a pipe: with pipefail, `ldd | grep -q` fails when grep exits first)
if grep -q 'libcudart\.so' <<<"$(ldd "$out"/tests/* "$out"/bench/* "$out"/examples/*)"; then
  echo "gpu-build: a binary links the shared CUDA runtime; it must be static (CUDA::cudart_static)" >&2
  exit 1
fi
extra=$(ldd "$out"/tests/* "$out"/bench/* "$out"/examples/* 2>/dev/null | awk '/=>/ {print $1}' | sort -u |
        grep -v -E '^(linux-vdso|libc\.|libm\.|libstdc\+\+|libgcc_s|libpthread|libdl|librt|ld-linux|libcublas|libcublasLt|libbenchmark)' || true)
[[ -z $extra ]] || echo "gpu-build: note: binaries also need $(echo $extra) (present on the GPU machine?)"

# The Python wheel for the GPU machine's Python (CPython 3.12, x86_64 Linux), built here on the same
# configured tree (only htp._htp compiles): the GPU machine has no fmt or spdlog to build it, and no
# registry. gpu-check's wheel step installs it from $out/wheels. build_gpu_wheel (common.sh) finds a
# Python 3.12 by running it (pyenv's, uv's, HTP_GPU_PYTHON), and fails when none runs, the build
# fails, or the wheel's tags or extension are not for that machine: no tree leaves here without it.
build_gpu_wheel "$full" Release "$out/wheels" || { echo "gpu-build: no wheel for the GPU machine; $out is incomplete" >&2; exit 1; }
echo "gpu-build: $(ls "$out"/wheels)"

size_kib=$(du -sk "$out" | cut -f1)
echo "gpu-build: $out is $((size_kib / 1024)) MiB"
if (( size_kib > 56 * 1024 )); then
  echo "gpu-build: $out is over 56 MiB; with the working tree it would not fit the 64 MiB carry" >&2
  exit 1
fi

# The tree as the GPU machine will get it: every set's dry run (binaries, flags, the wheel's tags,
# budgets, the holds_stream names) must pass before it is carried.
rm -rf "$full/gpu-dry-run"
mkdir -p "$full/gpu-dry-run"
for s in headline core python static train; do
  HTP_GPU_CHECK_BUILD=$out bash scripts/gpu-check.sh --dry-run --set "$s" "$full/gpu-dry-run/$s" >"$full/gpu-dry-run/$s.log" 2>&1 ||
    { grep -E '^(FAIL|TIMEOUT)' "$full/gpu-dry-run/$s.log"; echo "gpu-build: the $s set's dry run fails on $out (see $full/gpu-dry-run/$s.log)" >&2; exit 1; }
done
echo "gpu-build: $out passes the dry run of the headline, core, python, static and train sets"
