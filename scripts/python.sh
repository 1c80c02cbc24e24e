#!/usr/bin/env bash
# The Python part of the test command: a virtual environment with python/requirements.txt (cached
# under HTP_VENV_CACHE, default ~/.cache/htp, keyed on the file's hash; made from nothing when
# absent), `pip install` of the package from the tree, the pytest suite (python/tests) and the
# H200 comparison's dry run on sim (bench/python/hf_offload_bench.py --dry-run).
# Usage: scripts/python.sh [BUILD]   BUILD: the test command's build folder, reused by the pip build
#        (only the extension compiles); without it pip builds in build-pip (the whole library).
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"
cd "$root"
build=${1:-build-pip}

python=${HTP_PYTHON:-python3}
"$python" -c 'import sys; assert sys.version_info >= (3, 10), sys.version' ||
  { echo "python.sh: htp's Python package needs Python 3.10 or later"; exit 1; }
hash=$(sha256sum python/requirements.txt | cut -c1-16)
venv=${HTP_VENV_CACHE:-$HOME/.cache/htp}/venv-$hash
if [[ ! -f $venv/.complete ]]; then
  echo "== python: virtual environment $venv (from nothing: torch brings ~3 GB) =="
  t0=$(date +%s)
  rm -rf "$venv"
  "$python" -m venv "$venv"
  "$venv/bin/python" -m pip install -q --upgrade pip
  "$venv/bin/python" -m pip install -q -r python/requirements.txt
  touch "$venv/.complete"
  echo "python: environment made in $(( $(date +%s) - t0 )) s"
fi
py=$venv/bin/python

echo "== python: pip install . (build folder $build) =="
t0=$(date +%s)
args=(--no-build-isolation -q)
if [[ $build != build-pip ]]; then
  pip_on_build "$build" RelWithDebInfo  # the test command's own build: only htp._htp compiles
  args+=("${pip_build_args[@]}")
else
  args+=(-C "build-dir=$build")
fi
"$py" -m pip install "${args[@]}" . >"$build.pip.log" 2>&1 || { tail -50 "$build.pip.log"; exit 1; }
echo "python: installed in $(( $(date +%s) - t0 )) s"

echo "== python: pytest =="
# From outside the tree, so `import htp` is the installed package, not python/htp.
(cd /tmp && HTP_LOG_LEVEL=warn "$py" -m pytest -q -p no:cacheprovider "$root/python/tests")

echo "== python: the H200 comparison, dry run (sim, tiny model) =="
(cd /tmp && "$py" "$root/bench/python/hf_offload_bench.py" --dry-run --out "$root/$build/hf-offload-dry-run")

echo "== python: decode under CUDA graphs with static offload, dry run (sim, tiny model) =="
(cd /tmp && "$py" "$root/bench/python/hf_static_bench.py" --dry-run --out "$root/$build/hf-static-dry-run")
