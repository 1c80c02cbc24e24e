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
# -DHTP_WERROR=ON): pyproject.toml turns tests, benchmarks, examples and packaging off, which would
# reconfigure that folder without them, so they are turned back on and only htp._htp compiles.
# Sets the array pip_build_args.
pip_on_build() {
  pip_build_args=(-C "build-dir=$1" -C "cmake.build-type=$2" -C cmake.define.HTP_WERROR=ON
                  -C cmake.define.HTP_BUILD_TESTS=ON -C cmake.define.HTP_BUILD_BENCH=ON
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
