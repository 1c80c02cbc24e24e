#!/usr/bin/env bash
# Installs what htp needs to build, test and benchmark, from Debian's packages, only when missing.
# Idempotent: a second run installs nothing. The CUDA toolkit is expected on the machine already
# (nvcc on PATH or in /usr/local/cuda); without it htp builds CPU-only with the sim backend.
set -euo pipefail

packages=(cmake ninja-build g++ clang clang-format libclang-rt-dev libgtest-dev libgmock-dev
          libbenchmark-dev libfmt-dev libspdlog-dev libcli11-dev nlohmann-json3-dev python3-matplotlib)

missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done

if ((${#missing[@]})); then
  echo "setup: installing ${missing[*]}"
  sudo_cmd=()
  [[ $(id -u) -eq 0 ]] || sudo_cmd=(sudo)
  export DEBIAN_FRONTEND=noninteractive
  "${sudo_cmd[@]}" apt-get update -qq
  "${sudo_cmd[@]}" apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
else
  echo "setup: all packages present"
fi

if ! command -v nvcc >/dev/null 2>&1 && [[ -x /usr/local/cuda/bin/nvcc ]]; then
  echo "setup: nvcc is at /usr/local/cuda/bin (add it to PATH to see it there)"
fi
