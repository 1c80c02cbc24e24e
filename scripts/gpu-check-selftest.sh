#!/usr/bin/env bash
# Shows that scripts/gpu-check.sh fails where the GPU run would, in seconds and without a GPU:
#  - its dry run, on the tree given (from assemble_gpu_tree, with its wheel) and copies of it broken
#    one way each: a binary missing, the wheel missing, a wheel with tags for another Python or
#    platform, budgets over the total, a session plan over the 15 minutes, over 8 files returned;
#  - a real run of the headline set on a tree of stub programs with a GPU taken as present
#    (HTP_GPU_CHECK_GPUS=1): all stubs passing is a pass (the control); a step exiting 77, a Python
#    step exiting 77, or a step that exits 0 without its output fails the run;
#  - the verdicts the dry run never reaches: a gtest report with a cuda test skipped, pytest's report
#    with test_cuda.py skipped at module level, the wheel check, the holds_stream naming rule.
# Usage: scripts/gpu-check-selftest.sh TREE
set -uo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
tree=$(cd "${1:?usage: gpu-check-selftest.sh TREE}" && pwd)
scratch=$(mktemp -d)
trap 'rm -rf "$scratch"' EXIT
bad=0
say() { echo "gpu-check self-test: $*"; }

# check_run WANT WHAT PATTERN ARGS... (ENV assignments first): gpu-check.sh exits 0 (WANT=pass) or
# not (WANT=fail) and, when failing, says PATTERN.
check_run() {
  local want=$1 what=$2 pattern=$3 log rc envs=()
  shift 3
  while [[ ${1:-} == *=* ]]; do envs+=("$1"); shift; done
  rm -rf "$scratch/out"
  mkdir -p "$scratch/out"
  [[ $what == "too many files" ]] && for i in 1 2 3 4 5 6 7; do : >"$scratch/out/left-over-$i.json"; done
  log=$(env "${envs[@]}" bash "$root/scripts/gpu-check.sh" "$@" "$scratch/out" 2>&1)
  rc=$?
  if [[ $want == pass ]]; then
    if (( rc == 0 )); then say "$what passes"; else say "$what FAILED, want a pass:"; grep -E '^(FAIL|TIMEOUT)' <<<"$log"; bad=1; fi
  elif (( rc == 0 )); then
    say "gpu-check passed with $what"
    bad=1
  elif ! grep -q -- "$pattern" <<<"$log"; then
    say "with $what gpu-check failed without saying '$pattern':"
    grep -E '^(FAIL|TIMEOUT)' <<<"$log"
    bad=1
  else
    say "$what fails it: $(grep -m1 -- "$pattern" <<<"$log" | cut -c1-160)"
  fi
}

# ---- the dry run on the real tree and broken copies ------------------------------------------------
dry=(--dry-run --set headline)
check_run pass "the dry run of the headline set on $tree" - HTP_GPU_CHECK_BUILD="$tree" "${dry[@]}"
cp -a "$tree" "$scratch/tree"
rm "$scratch/tree/tests/test_cuda_interop"
check_run fail "a binary missing from the tree" "test_cuda_interop is not in the tree" \
  HTP_GPU_CHECK_BUILD="$scratch/tree" --dry-run --set core
cp "$tree/tests/test_cuda_interop" "$scratch/tree/tests/"
rm -rf "$scratch/tree/wheels"
check_run fail "no wheel in the tree" "no htp wheel in" HTP_GPU_CHECK_BUILD="$scratch/tree" "${dry[@]}"
mkdir -p "$scratch/tree/wheels"
real=$(ls "$tree"/wheels/htp-*.whl 2>/dev/null | head -1)
if [[ -n $real ]]; then
  cp "$real" "$scratch/tree/wheels/$(basename "$real" | sed 's/-cp312-cp312-/-cp311-cp311-/')"
  check_run fail "a wheel tagged for CPython 3.11" "are not for CPython 3.12" HTP_GPU_CHECK_BUILD="$scratch/tree" "${dry[@]}"
else
  say "no wheel in $tree to retag (the dry run above has said so)"
  bad=1
fi
check_run fail "budgets over the total" "budgets add up to" HTP_GPU_CHECK_BUILD="$tree" HTP_GPU_CHECK_SECONDS=150 "${dry[@]}"
check_run fail "a session plan over the 15 minutes" "session plan" HTP_GPU_CHECK_BUILD="$tree" HTP_GPU_CHECK_START_S=240 "${dry[@]}"
check_run fail "too many files" "a GPU machine hands back at most 8" HTP_GPU_CHECK_BUILD="$tree" "${dry[@]}"

# ---- a real run of the headline set on stubs, a GPU taken as present ------------------------------
# The stub writes the output each step must leave (--json X, --out DIR, ...) unless
# HTP_STUB_NOWRITE_<name>=1, and exits HTP_STUB_EXIT_<name> (default 0); <name> is the program's
# (or the Python script's) base name with every other character than letters and digits as _.
stub=$scratch/stub
cat >"$stub" <<'STUB'
#!/usr/bin/env bash
prog=$(basename "$0")
if [[ $prog == python ]]; then
  [[ $1 == -c ]] && exec python3 "$@"
  prog=$(basename "$1")
  shift
fi
key=$(tr -c 'A-Za-z0-9\n' '_' <<<"${prog%.py}")
nowrite=HTP_STUB_NOWRITE_$key
exitvar=HTP_STUB_EXIT_$key
echo "stub $prog: exit ${!exitvar:-0}"
if [[ ${!nowrite:-0} != 1 ]]; then
  while (( $# )); do
    case $1 in
      --json | --junit) echo '{}' >"$2"; shift ;;
      --json=* | --json_out=* | --churn_out=*) echo '{}' >"${1#*=}" ;;
      --gtest_output=json:*) echo '{"testsuites": []}' >"${1#--gtest_output=json:}" ;;
      --out) mkdir -p "$2" && echo '{}' >"$2/hf-offload.json"; shift ;;
    esac
    shift
  done
fi
exit "${!exitvar:-0}"
STUB
chmod +x "$stub"
mkdir -p "$scratch/stubs/bin" "$scratch/stubs/tree/lib" "$scratch/stubs/tree/wheels"
cp "$stub" "$scratch/stubs/bin/python"
for f in "$tree"/tests/* "$tree"/bench/* "$tree"/examples/*; do
  mkdir -p "$scratch/stubs/tree/$(basename "$(dirname "$f")")"
  cp "$stub" "$scratch/stubs/tree/$(basename "$(dirname "$f")")/$(basename "$f")"
done
stubs=(HTP_GPU_CHECK_BUILD="$scratch/stubs/tree" HTP_GPU_CHECK_GPUS=1 HTP_GPU_CHECK_PYTHON="$scratch/stubs/bin/python")
check_run pass "the headline set with every stub passing" - "${stubs[@]}" --set headline
check_run fail "a benchmark exiting 77 with a GPU present" "FAIL    codec: skipped on a machine with a GPU (exit 77" \
  "${stubs[@]}" HTP_STUB_EXIT_htp_codec_bench=77 --set headline
check_run fail "a Python step exiting 77 with a GPU present" "FAIL    hf-headline: skipped on a machine with a GPU (exit 77" \
  "${stubs[@]}" HTP_STUB_EXIT_hf_offload_bench=77 --set headline
check_run fail "the wheel step exiting 77 with a GPU present" "FAIL    wheel: skipped on a machine with a GPU" \
  "${stubs[@]}" HTP_STUB_EXIT_gpu_python=77 --set python
check_run fail "a step that exits 0 but writes nothing" "FAIL    page-latency: exit 0 after .* but it wrote no page-latency.json" \
  "${stubs[@]}" HTP_STUB_NOWRITE_htp_stream_bench=1 --set headline
check_run fail "a step over its budget" "TIMEOUT" "${stubs[@]}" HTP_STUB_EXIT_htp_bandwidth=124 --set headline

# ---- verdicts ------------------------------------------------------------------------------------
# is_exit WANT WHAT CMD...: CMD exits WANT.
is_exit() {
  local want=$1 what=$2 got
  shift 2
  "$@" >/dev/null 2>&1
  got=$?
  if (( got == want )); then
    say "$what: exit $got"
  else
    say "$what: exit $got, want $want"
    bad=1
  fi
}
# The gtest verdict (scripts/gtest_verdict.py).
cat >"$scratch/skipped.json" <<'JSON'
{"testsuites": [{"name": "device_conformance/cuda", "testsuite": [{"name": "copies", "result": "SKIPPED"}]},
                {"name": "make_device", "testsuite": [{"name": "cuda_without_a_gpu", "result": "SKIPPED"}]},
                {"name": "device_conformance/sim", "testsuite": [{"name": "copies", "result": "COMPLETED"}]}]}
JSON
cat >"$scratch/ran.json" <<'JSON'
{"testsuites": [{"name": "device_conformance/cuda", "testsuite": [{"name": "copies", "result": "COMPLETED"}]},
                {"name": "make_device", "testsuite": [{"name": "cuda_without_a_gpu", "result": "SKIPPED"}]}]}
JSON
cat >"$scratch/failed.json" <<'JSON'
{"testsuites": [{"name": "device_conformance/cuda", "testsuite": [{"name": "copies", "result": "COMPLETED",
                 "failures": [{"failure": "expected 1, got 2"}]}]}]}
JSON
v=(python3 "$root/scripts/gtest_verdict.py")
req=(--require '^device_conformance/cuda\.')
is_exit 1 "gtest verdict, a cuda test skipped with a GPU" "${v[@]}" "$scratch/skipped.json" --gpus 1 "${req[@]}"
is_exit 0 "gtest verdict, a cuda test skipped without a GPU" "${v[@]}" "$scratch/skipped.json" --gpus 0 "${req[@]}"
is_exit 0 "gtest verdict, the cuda tests ran, one skipped by design" "${v[@]}" "$scratch/ran.json" --gpus 1 "${req[@]}"
is_exit 1 "gtest verdict, a failed test" "${v[@]}" "$scratch/failed.json" --gpus 1 "${req[@]}"
is_exit 1 "gtest verdict, a GPU present but no required test at all" "${v[@]}" "$scratch/ran.json" --gpus 1 --require '^pager_backend/cuda\.'
is_exit 2 "gtest verdict, a missing report" "${v[@]}" "$scratch/none.json" --gpus 1 "${req[@]}"

# The python set's verdict on pytest's report (scripts/gpu_python.py): test_cuda.py skipped at
# module level (what pytest writes when no GPU is visible to torch or htp) fails with a GPU.
cat >"$scratch/module-skip.xml" <<'XML'
<testsuites><testsuite name="pytest"><testcase classname="" name="test_cuda"><skipped message="collection skipped">('test_cuda.py', 12, 'Skipped: no GPU visible to htp and torch')</skipped></testcase></testsuite></testsuites>
XML
cat >"$scratch/cuda-ran.xml" <<'XML'
<testsuites><testsuite name="pytest"><testcase classname="test_cuda" name="test_views_are_cuda_tensors" time="0.1"/></testsuite></testsuites>
XML
cat >"$scratch/cuda-failed.xml" <<'XML'
<testsuites><testsuite name="pytest"><testcase classname="test_cuda" name="test_views_are_cuda_tensors"><failure message="boom"/></testcase></testsuite></testsuites>
XML
p=(python3 "$root/scripts/gpu_python.py")
is_exit 1 "pytest verdict, test_cuda.py skipped at module level with a GPU" "${p[@]}" check-junit "$scratch/module-skip.xml" --gpus 1
is_exit 0 "pytest verdict, test_cuda.py skipped at module level without a GPU" "${p[@]}" check-junit "$scratch/module-skip.xml" --gpus 0
is_exit 0 "pytest verdict, the cuda tests ran" "${p[@]}" check-junit "$scratch/cuda-ran.xml" --gpus 1
is_exit 1 "pytest verdict, a cuda test failed" "${p[@]}" check-junit "$scratch/cuda-failed.xml" --gpus 1
is_exit 1 "pytest verdict, no report" "${p[@]}" check-junit "$scratch/none.xml" --gpus 1

# The wheel check on made-up wheels: the file name's tags, the extension's name, the glibc it needs.
# fake_wheel FILE EXTENSION GLIBC
fake_wheel() {
  mkdir -p "$scratch/wheels-$1"
  python3 - "$scratch/wheels-$1/$1" "$2" "$3" <<'PY'
import sys, zipfile
with zipfile.ZipFile(sys.argv[1], "w") as z:
    z.writestr("htp/__init__.py", "")
    z.writestr(f"htp/{sys.argv[2]}", b"\x7fELF...GLIBC_2.17\x00GLIBC_" + sys.argv[3].encode() + b"\x00GLIBCXX_3.4.29\x00")
PY
  echo "$scratch/wheels-$1"
}
good=htp-0.1.0-cp312-cp312-linux_x86_64.whl
ext=_htp.cpython-312-x86_64-linux-gnu.so
is_exit 0 "wheel check, a cp312 linux_x86_64 wheel" "${p[@]}" check-wheel --wheels "$(fake_wheel $good $ext 2.34)"
is_exit 1 "wheel check, tags for CPython 3.11" "${p[@]}" check-wheel --wheels "$(fake_wheel htp-0.1.0-cp311-cp311-linux_x86_64.whl $ext 2.34)"
is_exit 1 "wheel check, a macOS wheel" "${p[@]}" check-wheel --wheels "$(fake_wheel htp-0.1.0-cp312-cp312-macosx_14_0_arm64.whl $ext 2.34)"
is_exit 1 "wheel check, a 3.11 extension in a cp312 wheel" "${p[@]}" check-wheel --wheels "$(fake_wheel $good _htp.cpython-311-x86_64-linux-gnu.so 2.34)"
is_exit 1 "wheel check, an extension needing glibc 2.38" "${p[@]}" check-wheel --wheels "$(fake_wheel $good $ext 2.38)"
is_exit 1 "wheel check, no wheel" "${p[@]}" check-wheel --wheels "$scratch/no-wheels"

# The holds_stream rule (scripts/holds_stream.py) on made-up conformance tests.
cat >"$scratch/holds.cpp" <<'CPP'
TYPED_TEST(device_conformance, plain_copies) { d.launch_host_func([&] { seen = 1; }, s); }
TYPED_TEST(device_conformance, gated_host_function) {
  d.launch_host_func([opened] { opened.wait(); }, s);
}
TYPED_TEST(device_conformance, waits_on_a_value) { d.wait_value_async(flag, 1, waiter); }
CPP
sed 's/gated_host_function/gated_host_function_holds_stream/; s/waits_on_a_value)/waits_on_a_value_holds_stream)/' \
  "$scratch/holds.cpp" >"$scratch/tagged.cpp"
printf 'device_conformance/cuda.\n  plain_copies\n  gated_host_function_holds_stream\n' >"$scratch/listed.txt"
h=(python3 "$root/scripts/holds_stream.py")
is_exit 1 "holds_stream, tests holding a stream without the tag" "${h[@]}" "$scratch/holds.cpp"
is_exit 0 "holds_stream, every such test tagged" "${h[@]}" "$scratch/tagged.cpp"
is_exit 1 "holds_stream, a tagged test the memcheck filter still lists" "${h[@]}" "$scratch/tagged.cpp" --listed "$scratch/listed.txt"
printf 'device_conformance/cuda.\n  plain_copies\n  gated_host_function\n' >"$scratch/stale.txt"
is_exit 1 "holds_stream, a binary older than the source (an old untagged name listed)" "${h[@]}" "$scratch/tagged.cpp" --listed "$scratch/stale.txt"
printf 'device_conformance/cuda.\n  plain_copies\n' >"$scratch/fine.txt"
is_exit 0 "holds_stream, the binary and the source agree" "${h[@]}" "$scratch/tagged.cpp" --listed "$scratch/fine.txt"
# docs/gpu.md's table of steps gives each step's estimate and budget as the script does.
if why=$(python3 - "$root/scripts/gpu-check.sh" "$root/docs/gpu.md" <<'PY'
import re, sys
script, docs = (open(f).read() for f in sys.argv[1:])
table = script.split("steps_table='", 1)[1].split("'", 1)[0]
want = {m[0]: (m[1], m[2]) for m in re.findall(r"^([a-z][a-z-]*) +(\d+) +(\d+) ", table, re.M)}
got = {m[0]: (m[1], m[2]) for m in re.findall(r"^\| [a-z, ]+ \| ([a-z-]+) \|.*\| (\d+) s \| (\d+) s \|", docs, re.M)}
bad = [f"{k}: script {want.get(k)}, docs {got.get(k)}" for k in sorted(set(want) | set(got)) if want.get(k) != got.get(k)]
print("; ".join(bad) or f"{len(want)} steps agree")
sys.exit(1 if bad else 0)
PY
); then
  say "docs/gpu.md's step table matches the script: $why"
else
  say "docs/gpu.md's step table differs from the script's estimates and budgets: $why"
  bad=1
fi
exit $bad
