#!/usr/bin/env python3
"""Runs htp-stream-bench --train briefly on a tiny config (timing-only sim, two data-parallel GPUs)
and checks its JSON: every budget ran, the step's schedule holds each weight twice, bytes paged per
step are at least Belady's on the same sequence and within a sane factor of it, and the fields the
report reads are present. Then --train --zero2 (check_zero2) and --page-activations
(check_paged_activations). No timing thresholds.
Usage: stream_bench_train_check.py BENCH CONFIG_JSON WORKDIR"""
import json
import os
import subprocess
import sys

bench, config, work = sys.argv[1:4]
os.makedirs(work, exist_ok=True)
out_json = os.path.join(work, "train.json")
budgets = [0.3, 0.5, 0.75]
args = [bench, "--backend", "sim", "--timing-only", "--config", config, "--train",
        "--batch", "1", "--seq-len", "64", "--gpus", "2", "--steps", "2", "--warmup", "1",
        "--sweep", ",".join(str(b) for b in budgets), "--slab-mib", "1", "--chunk-mib", "1",
        "--sim-link-gbps", "8", "--json", out_json]
run = subprocess.run(args, capture_output=True, text=True, timeout=600)
print(run.stdout)
if run.returncode != 0:
    sys.exit(f"htp-stream-bench --train exited {run.returncode}\n{run.stderr}")

j = json.load(open(out_json))
failures = []
train = j.get("train")
if train is None:
    sys.exit("no 'train' section in the JSON")
for key in ["batch", "seq_len", "tokens_per_step", "gpus", "granularity", "compute", "activations",
            "activation_bytes_per_layer", "reduction", "budgets"]:
    if key not in train:
        failures.append(f"train.{key} missing")
if train.get("activations") != "resident, reserved":
    failures.append(f"activations: {train.get('activations')}")
if train.get("gpus") != 2:
    failures.append(f"gpus {train.get('gpus')}, want 2")
rows = train.get("budgets", [])
got = [round(r["budget_fraction"], 2) for r in rows]
if got != budgets:
    failures.append(f"budgets {got}, want {budgets}")
layers = j["model"]["layers_run"]
for r in rows:
    b = r["budget_fraction"]
    if r.get("skipped"):
        failures.append(f"{b}: skipped: {r.get('reason')}")
        continue
    for key in ["steps_ms", "step_ms", "compute_ms_per_step", "bytes_per_step",
                "belady_bytes_per_step", "bytes_over_belady", "link_ms_per_step", "bound_ms",
                "belady_bound_ms", "step_over_bound", "schedule", "faults_per_step",
                "prefetch_timely_share", "reduction", "activation_bytes", "paged_budget_bytes"]:
        if key not in r:
            failures.append(f"{b}: {key} missing")
    if failures:
        continue
    s = r["schedule"]
    if s["uses_per_weight_min"] != 2 or s["uses_per_weight_max"] != 2:
        failures.append(f"{b}: each weight used {s['uses_per_weight_min']}.."
                        f"{s['uses_per_weight_max']} times per step, want 2")
    if s["length"] != 2 * s["weights"] or s["weights"] % layers != 0:
        failures.append(f"{b}: schedule of {s['length']} for {s['weights']} weights")
    if len(r["steps_ms"]) != 2:
        failures.append(f"{b}: {len(r['steps_ms'])} timed steps, want 2")
    paged, belady = r["bytes_per_step"], r["belady_bytes_per_step"]
    if belady <= 0:
        failures.append(f"{b}: Belady's bytes {belady}: the weights should not fit")
    elif not belady * 0.999 <= paged <= belady * 3:
        failures.append(f"{b}: {paged} bytes paged per step against Belady's {belady}")
    if r["activation_bytes"] != train["activation_bytes_per_layer"] * layers:
        failures.append(f"{b}: activations {r['activation_bytes']} reserved")
    if r["paged_budget_bytes"] > r["hbm_budget_bytes"] - r["activation_bytes"]:
        failures.append(f"{b}: the pager got more than the budget less the activations")
    red = r["reduction"]
    for key in ["ms_per_step", "hidden_ms", "exposed_ms", "exposed_share"]:
        if key not in red:
            failures.append(f"{b}: reduction.{key} missing")
    if red.get("exposed_share", 0) < 0 or red.get("exposed_share", 0) > 1:
        failures.append(f"{b}: exposed share {red.get('exposed_share')}")
if "training step (forward then backward" not in run.stdout:
    failures.append("the training table was not printed")


def check_zero2():
    """--train --zero2: both variants ran; htp's double buffering waits once per two visits and
    the per-layer barrier once per visit; gradients were reduce-scattered; nothing paged (the
    shards fit)."""
    z_json = os.path.join(work, "zero2.json")
    zargs = [bench, "--backend", "sim", "--timing-only", "--config", config, "--train", "--zero2",
             "--batch", "1", "--seq-len", "64", "--gpus", "2", "--steps", "2", "--warmup", "1",
             "--sweep", "6", "--slab-mib", "1", "--chunk-mib", "1", "--sim-link-gbps", "8",
             "--json", z_json]
    zrun = subprocess.run(zargs, capture_output=True, text=True, timeout=600)
    print(zrun.stdout)
    if zrun.returncode != 0:
        return [f"htp-stream-bench --train --zero2 exited {zrun.returncode}\n{zrun.stderr}"]
    out = []
    z = json.load(open(z_json)).get("zero2")
    if z is None:
        return ["no 'zero2' section in the JSON"]
    rows = {r["variant"]: r for r in z.get("rows", [])}
    if sorted(rows) != ["htp", "per-layer"]:
        return [f"variants {sorted(rows)}, want htp and per-layer"]
    for name, r in rows.items():
        if r.get("skipped"):
            out.append(f"{name}: skipped: {r.get('reason')}")
            continue
        visits = 2 * r["layers"]
        want_waits = visits / r["layers_per_sync"]
        if r["sync"]["waits_per_step"] != want_waits:
            out.append(f"{name}: {r['sync']['waits_per_step']} compute waits per step, want "
                       f"{want_waits} ({visits} visits, {r['layers_per_sync']} per sync)")
        if r["layer_source"] != "peers" or r["page_in_bytes_per_step"] != 0:
            out.append(f"{name}: layers from {r['layer_source']}, "
                       f"{r['page_in_bytes_per_step']} bytes paged per step; the shards fit")
        red = r["reduction"]
        if red["kind"] != "reduce_scatter" or not 0 <= red["exposed_share"] <= 1:
            out.append(f"{name}: reduction {red}")
        if abs(red["hidden_ms"] + red["exposed_ms"] - red["ms_per_step"]) > 1e-6:
            out.append(f"{name}: hidden + exposed != reduction time: {red}")
        if r["reserved_bytes"] + r["paged_budget_bytes"] > r["hbm_budget_bytes"]:
            out.append(f"{name}: reserved + paged over the budget")
    if "ZeRO-2 + swap-and-shard" not in zrun.stdout:
        out.append("the ZeRO-2 table was not printed")
    return out


def check_paged_activations():
    """--train --page-activations at a budget the activations alone overflow: the reserved run is
    skipped, the paged one runs; every activation is used twice per step (written, then read and
    dead); live activations that do not fit are written back, each at most once per step; no
    Belady figure (it prices reads only)."""
    common = [bench, "--backend", "sim", "--timing-only", "--config", config, "--train",
              "--batch", "16", "--seq-len", "1024", "--steps", "2", "--warmup", "1",
              "--sweep", "0.5", "--slab-mib", "1", "--chunk-mib", "1", "--sim-link-gbps", "8"]
    out, rows = [], {}
    for mode in ["reserved", "paged"]:
        path = os.path.join(work, f"acts-{mode}.json")
        extra = ["--page-activations"] if mode == "paged" else []
        p = subprocess.run(common + extra + ["--json", path], capture_output=True, text=True,
                           timeout=600)
        if p.returncode != 0:
            return [f"--train ({mode} activations) exited {p.returncode}\n{p.stderr}"]
        t = json.load(open(path))["train"]
        rows[mode] = (t, t["budgets"][0])
    t, reserved = rows["reserved"]
    if not reserved.get("skipped"):
        out.append("reserved activations fit a budget they should overflow; pick a larger batch")
    t, r = rows["paged"]
    if r.get("skipped"):
        return out + [f"paged activations: skipped: {r.get('reason')}"]
    per_layer, layers = t["activation_bytes_per_layer"], j["model"]["layers_run"]
    s = r["schedule"]
    if r["activations"] != "paged" or s["activation_uses"] != 2 * layers:
        out.append(f"paged: {r['activations']}, {s['activation_uses']} activation uses per step")
    if s["length"] != 2 * s["weights"] + s["activation_uses"]:
        out.append(f"paged: a schedule of {s['length']} for {s['weights']} weights")
    if r["belady_bytes_per_step"] is not None:
        out.append("paged: a Belady figure for a sequence with writes in it")
    wb = r["write_back_bytes_per_step"]
    if not 0 < wb <= layers * per_layer:
        out.append(f"paged: {wb} bytes written back per step; want some (the activations do not "
                   f"fit) and at most each activation once ({layers * per_layer})")
    if r["hbm_budget_bytes"] >= layers * per_layer:
        out.append("paged: the budget holds every activation; the check needs one it does not")
    return out


failures += check_zero2()
failures += check_paged_activations()
if failures:
    sys.exit("\n".join(failures))
print("stream bench --train, --train --zero2 and --page-activations: OK")
