#!/usr/bin/env bash
# Formats htp's C/C++/CUDA sources with .clang-format: every tracked *.cpp *.hpp *.h *.cu *.cuh
# under include src cuda tools bench tests examples fuzz python/src.
#   scripts/format.sh           rewrites the files in place
#   scripts/format.sh --check   changes nothing; lists the files clang-format would change and
#                               exits 1 when there are any (scripts/test.sh runs it before building)
# The format is clang-format 14's (Debian bookworm's /usr/bin/clang-format, what scripts/setup.sh
# installs); other major versions format some constructs differently, so the script refuses them.
# HTP_CLANG_FORMAT names another binary of version 14.
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$root"

mode=fix
case ${1:-} in
  "") ;;
  --check) mode=check ;;
  *) echo "usage: scripts/format.sh [--check]" >&2; exit 2 ;;
esac

clang_format=${HTP_CLANG_FORMAT:-clang-format}
command -v "$clang_format" >/dev/null 2>&1 ||
  { echo "format.sh: $clang_format not found (scripts/setup.sh installs it)" >&2; exit 2; }
version=$("$clang_format" --version)
major=$(sed -nE 's/.*clang-format version ([0-9]+).*/\1/p' <<<"$version")
[[ $major == 14 ]] ||
  { echo "format.sh: need clang-format 14, found: $version (set HTP_CLANG_FORMAT)" >&2; exit 2; }

# A broken .clang-format would otherwise show as every file being unformatted.
"$clang_format" --style=file --dump-config >/dev/null ||
  { echo "format.sh: $clang_format cannot read $root/.clang-format" >&2; exit 2; }

files=()
while IFS= read -r -d '' f; do files+=("$f"); done < <(
  git ls-files -z -- include src cuda tools bench tests examples fuzz python/src |
    grep -zE '\.(cpp|hpp|h|cu|cuh)$')
((${#files[@]})) || { echo "format.sh: no sources found under $root" >&2; exit 2; }
jobs=$(nproc 2>/dev/null || echo 2)

if [[ $mode == fix ]]; then
  # Twice: clang-format 14 sometimes re-aligns trailing comments once more on a second pass (a
  # struct whose member and comment did not fit one line), and --check holds files to that result.
  for _ in 1 2; do
    printf '%s\0' "${files[@]}" | xargs -0 -P "$jobs" -n 16 "$clang_format" -i --style=file
  done
  echo "format.sh: formatted ${#files[@]} files"
  exit 0
fi

# One clang-format per file, so each unformatted file is named once (its per-line warnings are
# dropped; scripts/format.sh then git diff shows the changes).
unformatted=$(printf '%s\0' "${files[@]}" | xargs -0 -P "$jobs" -n 1 sh -c \
  '"$0" --dry-run --Werror --style=file "$1" >/dev/null 2>&1 || echo "$1"' "$clang_format" | sort)
if [[ -n $unformatted ]]; then
  echo "format.sh: $(wc -l <<<"$unformatted") of ${#files[@]} files are not formatted" \
    "(scripts/format.sh formats them):"
  sed 's/^/  /' <<<"$unformatted"
  exit 1
fi
echo "format.sh: all ${#files[@]} files formatted"
