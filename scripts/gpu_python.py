#!/usr/bin/env python3
"""gpu-check's python-tests step: installs the htp wheel that scripts/gpu-build.sh made for this
Python (no registry: pip --no-index --no-deps --target SITE), then runs the pytest suite with it,
the cuda tests included (python/tests/test_cuda.py). Exit 77 (SKIP) without torch or pytest; 1
when no wheel matches this Python or a test fails."""
from __future__ import annotations

import argparse
import glob
import os
import pathlib
import subprocess
import sys
import sysconfig

ROOT = pathlib.Path(__file__).resolve().parents[1]


def main() -> int:
    a = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    a.add_argument("--wheels", required=True, help="folder with htp-*.whl (build-gpu/wheels)")
    a.add_argument("--site", required=True, help="folder to install the wheel into")
    a.add_argument("--junit", required=True, help="pytest's JUnit XML report")
    args = a.parse_args()
    try:
        import pytest  # noqa: F401
        import torch  # noqa: F401
    except ImportError as e:
        print(f"SKIP: {e}")
        return 77
    tag = f"cp{sys.version_info.major}{sys.version_info.minor}"
    wheels = sorted(glob.glob(os.path.join(args.wheels, f"htp-*-{tag}-*.whl")))
    if not wheels:
        print(f"no htp wheel for {tag} in {args.wheels} (scripts/gpu-build.sh builds one for the "
              f"GPU machine's Python; this is {sysconfig.get_python_version()})")
        return 1
    subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-index", "--no-deps",
                    "--target", args.site, wheels[-1]], check=True)
    env = dict(os.environ, PYTHONPATH=args.site + os.pathsep + os.environ.get("PYTHONPATH", ""))
    return subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
                           f"--junitxml={args.junit}", str(ROOT / "python" / "tests")],
                          env=env, cwd=args.site).returncode


if __name__ == "__main__":
    sys.exit(main())
