# Shared by the scripts: where the repository is, how many jobs, how to find nvcc.
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
jobs=$(nproc 2>/dev/null || echo 2)
if ! command -v nvcc >/dev/null 2>&1 && [[ -x /usr/local/cuda/bin/nvcc ]]; then
  export PATH=/usr/local/cuda/bin:$PATH
fi
export CUDACXX=${CUDACXX:-$(command -v nvcc || true)}

# configure_and_build DIR [cmake args...]
configure_and_build() {
  local dir=$1
  shift
  cmake -S "$root" -B "$dir" -G Ninja "$@" >"$dir.configure.log" 2>&1 || { cat "$dir.configure.log"; return 1; }
  cmake --build "$dir" -j "$jobs"
}

# pip_on_build BUILD TYPE: the pip -C settings that make scikit-build-core build the Python extension
# in an existing full build folder (configure_and_build's, of CMAKE_BUILD_TYPE TYPE with
# -DHTP_WERROR=ON): pyproject.toml turns tests, tools, benchmarks, examples and packaging off, which would
# reconfigure that folder without them, so they are turned back on and only htp._htp compiles.
# Sets the array pip_build_args.
pip_on_build() {
  pip_build_args=(-C "build-dir=$1" -C "cmake.build-type=$2" -C cmake.define.HTP_WERROR=ON
                  -C cmake.define.HTP_BUILD_TESTS=ON -C cmake.define.HTP_BUILD_BENCH=ON
                  -C cmake.define.HTP_BUILD_TOOLS=ON
                  -C cmake.define.HTP_BUILD_EXAMPLES=ON -C cmake.define.HTP_PACKAGE=ON)
}

# What travels to the GPU machine: the one list that scripts/gpu-build.sh carries and that the test
# command's dry run of scripts/gpu-check.sh checks (so the dry run sees exactly what the GPU gets).
# Paths are relative to a build folder; globs are expanded there.
gpu_tree_files=(
  tests/test_device tests/test_pager_backends tests/test_collectives tests/test_cuda_interop
  'bench/htp-*' 'examples/htp-example-*'
)

# assemble_gpu_tree BUILD OUT: copies gpu_tree_files from BUILD into a fresh OUT (stripped), plus
# lib/ with the one shared library the binaries need that a GPU machine without a package registry
# lacks (Google Benchmark's). Fails naming any file of the list that BUILD lacks.
assemble_gpu_tree() {
  local build=$1 out=$2 f p found
  rm -rf "$out"
  mkdir -p "$out/lib"
  for p in "${gpu_tree_files[@]}"; do
    found=0
    for f in "$build"/$p; do
      [[ -f $f ]] || continue
      mkdir -p "$out/$(dirname "${f#"$build"/}")"
      cp "$f" "$out/${f#"$build"/}"
      found=1
    done
    (( found )) || { echo "assemble_gpu_tree: $build has no $p" >&2; return 1; }
  done
  strip --strip-unneeded "$out"/tests/* "$out"/bench/* "$out"/examples/*
  cp -L /usr/lib/x86_64-linux-gnu/libbenchmark.so.1debian "$out/lib/"
}

# gpu_python: a Python 3.12 interpreter (the GPU machine's version) that runs here, found by running
# each candidate: HTP_GPU_PYTHON alone when set; else python3.12 on PATH, pyenv's 3.12.x, uv's, the
# system's. (A pyenv shim named python3.12 exists on PATH even when no 3.12 is selected, and fails.)
gpu_python() {
  local c cands=()
  if [[ -n ${HTP_GPU_PYTHON:-} ]]; then
    cands=("$HTP_GPU_PYTHON")
  else
    cands=(python3.12 "$(pyenv root 2>/dev/null || echo "$HOME/.pyenv")"/versions/3.12*/bin/python3.12
           "$HOME"/.local/share/uv/python/cpython-3.12*/bin/python3.12 /usr/bin/python3.12 /usr/local/bin/python3.12)
  fi
  for c in "${cands[@]}"; do
    if "$c" -c 'import sys; assert sys.version_info[:2] == (3, 12)' >/dev/null 2>&1; then
      "$c" -c 'import sys; print(sys.executable)'
      return 0
    fi
  done
  echo "gpu_python: no working Python 3.12 among: ${cands[*]} (pyenv install 3.12, or set HTP_GPU_PYTHON)" >&2
  return 1
}

# build_gpu_wheel BUILD TYPE OUT: the htp wheel for the GPU machine (CPython 3.12, x86_64 Linux),
# built on BUILD (a full CUDA build of CMAKE_BUILD_TYPE TYPE from configure_and_build: only htp._htp
# compiles) by a virtual environment of gpu_python with python/requirements.txt's nanobind and
# scikit-build-core, into a fresh OUT; then checked (scripts/gpu_python.py check-wheel). Fails,
# saying why, when there is no Python 3.12, the build fails or the wheel is not for that machine.
build_gpu_wheel() {
  local build=$1 type=$2 out=$3 gpy venv
  gpy=$(gpu_python) || return 1
  venv=${HTP_VENV_CACHE:-$HOME/.cache/htp}/wheel-py312
  if [[ ! -f $venv/.complete ]] || ! "$venv/bin/python" -c 'import sys; assert sys.version_info[:2] == (3, 12)' 2>/dev/null; then
    rm -rf "$venv"
    "$gpy" -m venv "$venv"
    # shellcheck disable=SC2046
    "$venv/bin/python" -m pip install -q $(grep -E '^(nanobind|scikit-build-core)==' "$root/python/requirements.txt")
    touch "$venv/.complete"
  fi
  rm -rf "$out"
  mkdir -p "$out"
  pip_on_build "$build" "$type"
  "$venv/bin/python" -m pip wheel -q --no-build-isolation --no-deps -w "$out" "${pip_build_args[@]}" \
    -C cmake.define.HTP_WITH_CUDA=ON "$root" >"$build/gpu-wheel.log" 2>&1 ||
    { tail -30 "$build/gpu-wheel.log"; echo "build_gpu_wheel: the wheel did not build (see $build/gpu-wheel.log)" >&2; return 1; }
  python3 "$root/scripts/gpu_python.py" check-wheel --wheels "$out" ||
    { echo "build_gpu_wheel: $out holds no wheel for the GPU machine's Python and platform" >&2; return 1; }
}
