#!/usr/bin/env bash
# Builds, on this (GPU-less) machine, what scripts/gpu-check.sh runs on the GPU machine: a Release
# build with the CUDA backend, reduced to a small folder build-gpu/ by assemble_gpu_tree
# (scripts/common.sh: the one copy list, which the test command's dry run checks too). Carry build-gpu with the device tool's `carry` (the
# working tree and carried paths must stay under 64 MiB together; this script fails above 56 MiB).
# cudart is linked statically; cuBLAS (libcublas.so.13, hundreds of MiB) is not carried: gpu-check
# takes it from the GPU machine's CUDA 13 toolkit or Python wheels.
# HTP_GPU_BUILD_DIR names the output folder (default build-gpu; the full build goes to DIR-full).
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

# The Python wheel for the GPU machine's Python (3.12 there; HTP_GPU_PYTHON names another), built
# here on the same configured tree (only htp._htp compiles): the GPU machine has no fmt or spdlog to
# build it, and no registry. gpu-check's python set installs it from $out/wheels.
gpu_py=${HTP_GPU_PYTHON:-python3.12}
if command -v "$gpu_py" >/dev/null 2>&1; then
  tag=$("$gpu_py" -c 'import sys; print("%d%d" % sys.version_info[:2])')
  wheel_venv=${HTP_VENV_CACHE:-$HOME/.cache/htp}/wheel-py$tag
  if [[ ! -f $wheel_venv/.complete ]]; then
    rm -rf "$wheel_venv"
    "$gpu_py" -m venv "$wheel_venv"
    "$wheel_venv/bin/python" -m pip install -q $(grep -E '^(nanobind|scikit-build-core)==' python/requirements.txt)
    touch "$wheel_venv/.complete"
  fi
  rm -rf "$out/wheels"
  pip_on_build "$full" Release
  "$wheel_venv/bin/python" -m pip wheel -q --no-build-isolation --no-deps -w "$out/wheels" \
    "${pip_build_args[@]}" -C cmake.define.HTP_WITH_CUDA=ON . >"$full.wheel.log" 2>&1 ||
    { tail -30 "$full.wheel.log"; echo "gpu-build: the wheel did not build" >&2; exit 1; }
  echo "gpu-build: $(ls "$out"/wheels)"
else
  echo "gpu-build: no $gpu_py here: gpu-check's python set will find no wheel"
fi

size_kib=$(du -sk "$out" | cut -f1)
echo "gpu-build: $out is $((size_kib / 1024)) MiB"
if (( size_kib > 56 * 1024 )); then
  echo "gpu-build: $out is over 56 MiB; with the working tree it would not fit the 64 MiB carry" >&2
  exit 1
fi
