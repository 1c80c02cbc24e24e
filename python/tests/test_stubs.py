"""The committed type stubs (python/htp/_htp.pyi) are what nanobind's stubgen makes of the built
extension. Regenerate: python -m nanobind.stubgen -m htp._htp -o python/htp/_htp.pyi"""
from __future__ import annotations

import pathlib
import re
import subprocess
import sys

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]


def pinned_nanobind() -> str:
    text = (ROOT / "python" / "requirements.txt").read_text()
    return re.search(r"^nanobind==(\S+)", text, re.M).group(1)


def test_stubs_match_the_extension(tmp_path):
    nanobind = pytest.importorskip("nanobind")
    if nanobind.__version__ != pinned_nanobind():
        pytest.skip(f"stubs are made with nanobind {pinned_nanobind()}, this is {nanobind.__version__}")
    out = tmp_path / "_htp.pyi"
    subprocess.run([sys.executable, "-m", "nanobind.stubgen", "-q", "-m", "htp._htp", "-o", str(out)],
                   check=True, cwd=tmp_path)
    committed = (ROOT / "python" / "htp" / "_htp.pyi").read_text()
    assert out.read_text() == committed, (
        "python/htp/_htp.pyi is stale: regenerate it with "
        "python -m nanobind.stubgen -m htp._htp -o python/htp/_htp.pyi")
