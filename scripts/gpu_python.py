#!/usr/bin/env python3
"""gpu-check's Python steps, around the htp wheel that scripts/gpu-build.sh makes for the GPU
machine (CPython 3.12, x86_64 Linux). Four commands:

  check-wheel --wheels DIR [--python 3.12]   the dry run's check: exactly one htp wheel for that
      Python and the GPU machine's platform (cp312 or abi3, linux/manylinux x86_64, its extension
      named for 3.12 and needing no newer glibc or libstdc++ than that machine has); exit 1 if not
  install --wheels DIR --site SITE --gpus N   the `wheel` step: checks the wheel as above against
      this interpreter, pip-installs it into SITE (no registry there: --no-index --no-deps), then
      imports htp from SITE in a fresh interpreter; with N > 0 GPUs listed, htp must see one
  test --site SITE --junit FILE --gpus N [TESTS...]   the `python-tests` step: pytest on TESTS
      (default python/tests/test_cuda.py) with the installed wheel, then the verdict on its JUnit
      report (as check-junit)
  check-junit FILE --gpus N   the verdict alone: a test failed, or N > 0 and a cuda test skipped
      (a module-level skip included) or none ran: exit 1

Exit 77 ("cannot run here") without torch or pytest; gpu-check turns that into a FAIL when a GPU is
present."""
from __future__ import annotations

import argparse
import glob
import os
import pathlib
import re
import subprocess
import sys
import xml.etree.ElementTree as ET
import zipfile

ROOT = pathlib.Path(__file__).resolve().parents[1]
# The GPU machine (/work/.library/device/KINDS.md): python3 is CPython 3.12.3, x86_64. Its glibc and
# libstdc++ are not recorded; 3.12.3 is Ubuntu 24.04's (glibc 2.39). The floor below is Ubuntu
# 22.04's (glibc 2.35, GCC 12's libstdc++ GLIBCXX_3.4.30), so a wheel that passes runs on either.
GPU_PYTHON = (3, 12)
GLIBC_MAX = (2, 35)
GLIBCXX_MAX = (3, 4, 30)
PLATFORM = re.compile(r"^(linux|manylinux1|manylinux2010|manylinux2014|manylinux_(\d+)_(\d+))_x86_64$")


def version(text: str) -> tuple[int, ...]:
    return tuple(int(x) for x in text.split("."))


def wheel_problems(path: str, py: tuple[int, int]) -> list[str]:
    """Why the wheel at `path` would not install and import on CPython `py` on the GPU machine."""
    name = os.path.basename(path)
    parts = name[:-4].split("-")
    if len(parts) not in (5, 6):
        return [f"{name}: not a wheel file name"]
    pys, abis, plats = (p.split(".") for p in parts[-3:])
    cp = f"cp{py[0]}{py[1]}"
    bad = []
    abi3 = "abi3" in abis and any(re.fullmatch(r"cp3(\d+)", p) and int(p[3:]) <= py[1] for p in pys)
    if not ((cp in pys and cp in abis) or abi3):
        bad.append(f"{name}: tags {parts[-3]}-{parts[-2]} are not for CPython {py[0]}.{py[1]}")
    for p in plats:
        m = PLATFORM.match(p)
        if not m:
            bad.append(f"{name}: platform {p} is not x86_64 Linux")
        elif m.group(2) and (int(m.group(2)), int(m.group(3))) > GLIBC_MAX:
            bad.append(f"{name}: platform {p} needs glibc newer than {'.'.join(map(str, GLIBC_MAX))}")
    try:
        with zipfile.ZipFile(path) as z:
            exts = [n for n in z.namelist() if re.fullmatch(r"htp/_htp\..*so", n)]
            if not exts:
                bad.append(f"{name}: no extension htp/_htp*.so inside")
            suffix = f".cpython-{py[0]}{py[1]}-x86_64-linux-gnu.so"
            for n in exts:
                if not (n.endswith(suffix) or n.endswith(".abi3.so")):
                    bad.append(f"{name}: {n} is not built for CPython {py[0]}.{py[1]} (want *{suffix})")
                data = z.read(n)
                for sym, cap in ((rb"GLIBC_(\d+(?:\.\d+)+)", GLIBC_MAX), (rb"GLIBCXX_(\d+(?:\.\d+)+)", GLIBCXX_MAX)):
                    need = max((version(v.decode()) for v in re.findall(sym, data)), default=())
                    if need > cap:
                        bad.append(f"{name}: {n} needs {sym[:sym.index(b'_')].decode()}_"
                                   f"{'.'.join(map(str, need))}, newer than the GPU machine's "
                                   f"{'.'.join(map(str, cap))}")
    except (OSError, zipfile.BadZipFile) as e:
        bad.append(f"{name}: unreadable ({e})")
    return bad


def the_wheel(wheels: str, py: tuple[int, int]) -> tuple[str | None, list[str]]:
    """The one htp wheel in `wheels` for CPython `py` on the GPU machine, or None and why not."""
    found = sorted(glob.glob(os.path.join(wheels, "htp-*.whl")))
    if not found:
        return None, [f"no htp wheel in {wheels} (scripts/gpu-build.sh builds one for the GPU machine's "
                      f"Python {py[0]}.{py[1]}; it must fail when it cannot)"]
    good = [w for w in found if not wheel_problems(w, py)]
    if len(good) == 1:
        return good[0], []
    if len(good) > 1:
        return None, [f"{len(good)} htp wheels for CPython {py[0]}.{py[1]} in {wheels}: keep one"]
    return None, [p for w in found for p in wheel_problems(w, py)]


def check_wheel(args) -> int:
    wheel, why = the_wheel(args.wheels, version(args.python))
    for w in why:
        print(w)
    if wheel:
        print(f"wheel {os.path.basename(wheel)}: for CPython {args.python} on x86_64 Linux "
              f"(glibc <= {'.'.join(map(str, GLIBC_MAX))})")
    return 0 if wheel else 1


def install(args) -> int:
    wheel, why = the_wheel(args.wheels, sys.version_info[:2])
    if not wheel:
        print(f"this is CPython {sys.version.split()[0]}:", *why, sep="\n  ")
        return 1
    subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-index", "--no-deps",
                    "--no-compile", "--upgrade", "--target", args.site, wheel], check=True)
    probe = ("import htp, sys; n = htp.cuda_device_count(); "
             "print(f'htp from {htp.__file__}: {n} cuda device(s)'); sys.exit(0 if n or not " +
             str(args.gpus) + " else 3)")
    env = dict(os.environ, PYTHONPATH=args.site + os.pathsep + os.environ.get("PYTHONPATH", ""))
    rc = subprocess.run([sys.executable, "-c", probe], env=env, cwd=args.site).returncode
    if rc == 3:
        print(f"nvidia-smi lists {args.gpus} GPU(s) but htp's wheel sees none")
    return rc


def junit_verdict(report: str, gpus: int) -> tuple[int, str]:
    """pytest's JUnit XML: (exit, line). The cuda tests are those of test_cuda.py; a module-level
    skip shows as one skipped case named after the module."""
    try:
        cases = ET.parse(report).getroot().iter("testcase")
    except (OSError, ET.ParseError) as e:
        return 1, f"no readable pytest report {report}: {e} (pytest crashed or was killed)"
    passed = failed = skipped = 0
    cuda_ran, cuda_skipped = 0, []
    for c in cases:
        name = f"{c.get('classname', '')}.{c.get('name', '')}".strip(".")
        is_cuda = re.search(r"(^|[./])test_cuda($|[./])", name) is not None
        if c.find("failure") is not None or c.find("error") is not None:
            failed += 1
        elif c.find("skipped") is not None:
            skipped += 1
            if is_cuda:
                s = c.find("skipped")
                cuda_skipped.append(f"{name} ({(s.text or s.get('message') or '').strip()[:120]})")
            continue
        else:
            passed += 1
        if is_cuda:
            cuda_ran += 1
    line = f"{passed} passed, {failed} failed, {skipped} skipped; {cuda_ran} cuda test(s) ran"
    bad = []
    if failed:
        bad.append("a test failed")
    if gpus > 0 and cuda_skipped:
        bad.append("skipped on a machine with a GPU: " + "; ".join(cuda_skipped[:3]))
    if gpus > 0 and not cuda_ran:
        bad.append("a GPU is present but no cuda test ran")
    return (1 if bad else 0), line + ("; " + "; ".join(bad) if bad else "")


def check_junit(args) -> int:
    rc, line = junit_verdict(args.report, args.gpus)
    print(line)
    return rc


def test(args) -> int:
    try:
        import pytest  # noqa: F401
        import torch  # noqa: F401
    except ImportError as e:
        print(f"SKIP: {e}")
        return 77
    tests = args.tests or [str(ROOT / "python" / "tests" / "test_cuda.py")]
    env = dict(os.environ, PYTHONPATH=args.site + os.pathsep + os.environ.get("PYTHONPATH", ""))
    rc = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
                         f"--junitxml={args.junit}", *tests], env=env, cwd=args.site).returncode
    verdict, line = junit_verdict(args.junit, args.gpus)
    print(f"pytest exit {rc}; {line}")
    return verdict or (rc if rc not in (0, 5) else 0)


def main() -> int:
    a = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    sub = a.add_subparsers(dest="command", required=True)
    c = sub.add_parser("check-wheel", help="the dry run's check of the carried wheel")
    c.add_argument("--wheels", required=True, help="folder with htp-*.whl (build-gpu/wheels)")
    c.add_argument("--python", default="%d.%d" % GPU_PYTHON, help="the GPU machine's Python")
    c.set_defaults(run=check_wheel)
    c = sub.add_parser("install", help="the wheel step: install the wheel, import htp")
    c.add_argument("--wheels", required=True, help="folder with htp-*.whl (build-gpu/wheels)")
    c.add_argument("--site", required=True, help="folder to install the wheel into")
    c.add_argument("--gpus", type=int, default=0, help="GPUs nvidia-smi lists")
    c.set_defaults(run=install)
    c = sub.add_parser("test", help="the python-tests step: pytest and its verdict")
    c.add_argument("--site", required=True, help="folder the wheel was installed into")
    c.add_argument("--junit", required=True, help="pytest's JUnit XML report")
    c.add_argument("--gpus", type=int, default=0, help="GPUs nvidia-smi lists")
    c.add_argument("tests", nargs="*", help="test files (default: python/tests/test_cuda.py)")
    c.set_defaults(run=test)
    c = sub.add_parser("check-junit", help="the verdict on a pytest JUnit report")
    c.add_argument("report")
    c.add_argument("--gpus", type=int, default=0)
    c.set_defaults(run=check_junit)
    args = a.parse_args()
    return args.run(args)


if __name__ == "__main__":
    sys.exit(main())
