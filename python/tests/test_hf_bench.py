"""The Hugging Face comparison (bench/python/hf_offload_bench.py) on sim: every mode's rows are
written as it ends, and an error in one mode is that mode's rows while the others still run."""
from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

pytest.importorskip("torch")
pytest.importorskip("transformers")
pytest.importorskip("accelerate")

BENCH = os.path.join(os.path.dirname(__file__), "..", "..", "bench", "python", "hf_offload_bench.py")


def test_a_failing_mode_is_reported_in_its_rows_and_the_others_still_run(tmp_path):
    r = subprocess.run([sys.executable, BENCH, "--dry-run", "--out", str(tmp_path),
                        "--modes", "resident,htp,htp-compress,accelerate", "--fractions", "0.3",
                        "--inject-failure", "htp"], capture_output=True, text=True, timeout=600)
    assert r.returncode == 1, r.stdout + r.stderr
    rows = json.load(open(tmp_path / "hf-offload.json"))["rows"]
    by_mode: dict[str, list] = {}
    for row in rows:
        by_mode.setdefault(row["mode"], []).append(row)
    assert set(by_mode) == {"resident", "htp", "htp-compress", "accelerate"}
    assert all("injected failure" in row["error"] and not row["identical"] for row in by_mode["htp"])
    for mode in ("htp-compress", "accelerate"):  # after the failure, from the same weights
        assert all(row["identical"] and "error" not in row and row["tokens_per_second"] > 0
                   for row in by_mode[mode]), by_mode[mode]
    assert "error: RuntimeError: injected failure" in open(tmp_path / "hf-offload.md").read()
