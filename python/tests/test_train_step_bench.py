"""The training-step benchmark (bench/python/train_step_bench.py) on sim with a tiny Llama: every
mode's row, htp's gradients equal to the resident model's, htp paging at 30% and moving fewer bytes
per step than save_on_cpu, every gradient reduced once per step; a gradient that differs fails the
run while the other modes still run; a bad budget is refused."""
from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

BENCH = os.path.join(os.path.dirname(__file__), "..", "..", "bench", "python", "train_step_bench.py")


def run_bench(out, *args):
    return subprocess.run([sys.executable, BENCH, "--device", "sim", "--steps", "1", "--out",
                           str(out), *args], capture_output=True, text=True, timeout=600)


def rows_by_mode(out):
    result = json.load(open(out))
    return result, {(r["mode"], r.get("budget_fraction")): r for r in result["rows"]}


def test_every_mode_reports_its_step_and_htp_gives_the_resident_gradients(tmp_path):
    out = tmp_path / "train-step.json"
    r = run_bench(out)
    assert r.returncode == 0, r.stdout + r.stderr
    result, rows = rows_by_mode(out)
    assert set(rows) == {("resident", None), ("save_on_cpu", None), ("htp", 0.3), ("htp", 0.5)}
    assert result["grads_equal"] is True and result["backend"] == "sim"
    for key, row in rows.items():
        assert "error" not in row, (key, row)
        assert row["grads_equal"] is True and row["grads_differ"] == [], key
        assert row["step_ms_p50"] > 0 and len(row["step_ms"]) == 1, key
    want = rows[("resident", None)]
    for key, row in rows.items():
        assert row["grad_checksums"] == want["grad_checksums"], key
        assert row["loss"] == want["loss"], key

    assert want["bytes_paged_per_step"] == 0
    anchor = rows[("save_on_cpu", None)]
    assert 0 < anchor["param_bytes_per_step"] < anchor["bytes_paged_per_step"]
    for f in (0.3, 0.5):
        htp_row = rows[("htp", f)]
        assert htp_row["budget_bytes"] == int(result["decoder_layer_bytes"] * f)
        assert htp_row["page_in_bytes_per_step"] > 0 and htp_row["faults"] > 0, f
        assert 0 < htp_row["bytes_paged_per_step"] < anchor["bytes_paged_per_step"], (f, htp_row, anchor)
    assert rows[("htp", 0.5)]["page_in_bytes_per_step"] < rows[("htp", 0.3)]["page_in_bytes_per_step"]

    # Every parameter's gradient reduced once per step, on gloo (sim: counted, not timed).
    n_params = 9 * result["layers"] + 3   # 7 linears and 2 norms a layer; embedding, norm, lm_head
    for key, row in rows.items():
        red = row["reduction"]
        assert red["backend"] == "gloo" and red["reductions_per_step"] == n_params, (key, red)
        assert red["bytes_per_step"] == want["reduction"]["bytes_per_step"] > 0, key
        assert red["exposed_ms"] is None and "sim" in red["reason"], key
        # htp: the paged weights' gradients reduced from the hook that runs before htp's own.
        paged = 9 * result["layers"] if key[0] == "htp" else 0
        assert red["serial_reductions"] == paged, (key, red)


def test_a_gradient_that_differs_fails_the_run_and_the_other_modes_still_run(tmp_path):
    out = tmp_path / "train-step.json"
    r = run_bench(out, "--budgets", "0.5", "--inject-difference", "save_on_cpu")
    assert r.returncode == 1, r.stdout + r.stderr
    result, rows = rows_by_mode(out)
    assert result["grads_equal"] is False
    assert rows[("save_on_cpu", None)]["grads_equal"] is False
    assert rows[("save_on_cpu", None)]["grads_differ"] == ["model.embed_tokens.weight"]
    assert rows[("htp", 0.5)]["grads_equal"] is True
    assert "FAIL: save_on_cpu" in r.stdout and "gradients differ" in r.stdout


@pytest.mark.parametrize("budgets", ["1.5", "0.3,x", "0"])
def test_a_bad_budget_is_refused_saying_what_to_give(tmp_path, budgets):
    r = run_bench(tmp_path / "x.json", "--budgets", budgets)
    assert r.returncode == 2 and "--budgets" in r.stderr, r.stderr
    assert not (tmp_path / "x.json").exists()
