#!/usr/bin/env python3
"""Runs htp-stream-bench briefly on sim and checks its JSON and trace: every field present, the
numbers consistent with each other (faults equal the fault spans of the trace, percentiles ordered,
the budget verdict matching p99), and no corrupt weight read. Usage: stream_bench_check.py BENCH
CONFIG_JSON WORKDIR"""
import json
import os
import subprocess
import sys

bench, config, work = sys.argv[1:4]
os.makedirs(work, exist_ok=True)
out_json = os.path.join(work, "stream.json")
out_trace = os.path.join(work, "trace.json")
args = [bench, "--backend", "sim", "--config", config, "--layers", "6", "--steps", "3", "--warmup", "1",
        "--hbm-budget", "0.5", "--slab-mib", "1", "--chunk-mib", "1", "--kv-context", "64", "--kv-block", "32",
        "--sim-link-gbps", "2", "--json", out_json, "--trace", out_trace, "--trace-policy", "schedule-k2"]
run = subprocess.run(args, capture_output=True, text=True, timeout=600)
print(run.stdout)
if run.returncode != 0:
    sys.exit(f"htp-stream-bench exited {run.returncode}\n{run.stderr}")

j = json.load(open(out_json))
failures = []
def check(cond, what):
    if not cond:
        failures.append(what)

for key in ["benchmark", "device", "model", "config", "policies", "sweep", "measured", "sim"]:
    check(key in j, f"top-level field '{key}' missing")
check(j["model"]["layers_run"] == 6, "layers_run")
check(j["model"]["parameters"] > j["model"]["layer_parameters"] * 6, "parameter counts")
names = [p["name"] for p in j["policies"]]
check(names == ["all-resident", "on-demand", "lru+lookahead2", "schedule-k1", "schedule-k2", "schedule-auto"],
      f"policies {names}")
budget = j["config"]["latency_budget_ms"]

def check_bound_fields(p, n):
    """The step / bound fields and prefetch timeliness: present and sane (no timing thresholds)."""
    for key in ["bound_ms", "step_over_bound", "bound_lower_ms", "step_over_lower_bound", "granularity",
                "lookahead", "prefetch_timely_share", "prefetch_lateness", "belady_bytes_per_step"]:
        check(key in p, f"{n}: field '{key}' missing")
    if any(key not in p for key in ["bound_ms", "prefetch_lateness", "prefetch_timely_share"]):
        return
    if p["bound_ms"] > 0:
        check(abs(p["step_over_bound"] - p["step_ms"]["p50"] / p["bound_ms"]) < 1e-6 * p["step_over_bound"] + 1e-9,
              f"{n}: step_over_bound != p50 / bound")
        check(p["bound_ms"] >= p["compute_ms_per_step"] - 1e-9, f"{n}: bound below the compute")
        # The lower bound's bytes (total - capacity) never exceed Belady's simulated bytes.
        check(p["bound_lower_ms"] <= p["bound_ms"] + 1e-9, f"{n}: lower bound above the bound")
    check(0 <= p["prefetch_timely_share"] <= 1, f"{n}: timely share {p['prefetch_timely_share']}")
    late = p["prefetch_lateness"]
    check(late["count"] >= 0 and 0 <= late["p50_ms"] <= late["p99_ms"] + 1e-9 <= late["max_ms"] + 2e-9,
          f"{n}: lateness out of order {late}")

for p in j["policies"]:
    if p.get("skipped"):
        failures.append(f"{p['name']} skipped: {p.get('reason')}")
        continue
    n = p["name"]
    for key in ["step_ms", "fault_ms", "faults", "fault_rate_per_ms", "hbm_peak_pct", "hbm_mean_pct",
                "h2d_gbps", "link_utilization", "overlap_efficiency", "speedup_over_on_demand",
                "pager_metrics", "steps_ms", "meets_budget", "page_ins", "prefetch_hits"]:
        check(key in p, f"{n}: field '{key}' missing")
    s = p["step_ms"]
    check(len(p["steps_ms"]) == 3, f"{n}: {len(p['steps_ms'])} timed steps, expected 3")
    check(0 < s["p50"] <= s["p99"] <= s["max"], f"{n}: step percentiles out of order {s}")
    check(p["meets_budget"] == (s["p99"] <= budget), f"{n}: budget verdict disagrees with p99")
    check(p["verification_mismatches"] == 0, f"{n}: read corrupt weights")
    check(0 <= p["hbm_peak_pct"] <= 100.0001 and 0 <= p["hbm_mean_pct"] <= p["hbm_peak_pct"] + 1e-9,
          f"{n}: occupancy {p['hbm_peak_pct']} / {p['hbm_mean_pct']}")
    m = p["pager_metrics"]
    check(m["fault_latency"]["count"] == m["faults"], f"{n}: fault latency samples != faults")
    check(m["acquires"] >= m["hits"] + m["faults"], f"{n}: acquires < hits + faults")
    if n == "on-demand":
        check(abs(p["speedup_over_on_demand"] - 1.0) < 1e-9, "on-demand speed-up over itself != 1")
    if n == "all-resident":  # only the KV blocks the growing context adds may fault
        check(p["evictions"] == 0, "all-resident evicted")
        check(p["faults"] <= 6 * 3, f"all-resident faulted {p['faults']} times in the timed steps")
    if n in ("schedule-k1", "schedule-k2", "schedule-auto", "lru+lookahead2"):
        check(m["prefetches"] > 0, f"{n}: no prefetch issued")
    check_bound_fields(p, n)
    check(p["granularity"] == "module", f"{n}: granularity {p['granularity']}")
    check(p["lookahead"] == ("automatic" if n == "schedule-auto" else "count"), f"{n}: lookahead {p['lookahead']}")

# The trace: one track per stream, and exactly one 'fault' span per fault of the traced policy.
t = json.load(open(out_trace))
events = t["traceEvents"]
tids = {e["tid"] for e in events if e.get("ph") == "X"}
check({1, 2} <= tids, f"trace tracks {tids}: compute and prefetch expected")
faults_in_trace = sum(1 for e in events if e.get("ph") == "X" and e.get("cat") == "fault")
traced = next(p for p in j["policies"] if p["name"] == "schedule-k2")
check(faults_in_trace == traced["pager_metrics"]["faults"],
      f"trace has {faults_in_trace} fault spans, metrics say {traced['pager_metrics']['faults']}")
check(all(e["dur"] >= 0 for e in events if e.get("ph") == "X"), "negative span")

check("bound_table" in j, "bound_table missing")  # empty here: a growing KV cache has no fixed MIN

# Two models and both granularities in one run: one JSON per model under 'runs', each budget at
# module and at layer granularity, both lookahead modes, and the bound table covering them all.
out2 = os.path.join(work, "models.json")
args2 = [bench, "--backend", "sim", "--timing-only", "--models", f"{config}:4,{config}:3", "--sweep", "0.6,0.8",
         "--granularity", "both", "--policies", "schedule-k2,schedule-auto", "--steps", "2", "--warmup", "1",
         "--slab-mib", "1", "--chunk-mib", "1", "--sim-link-gbps", "8", "--json", out2]
run2 = subprocess.run(args2, capture_output=True, text=True, timeout=600)
print(run2.stdout)
if run2.returncode != 0:
    failures.append(f"--models run exited {run2.returncode}: {run2.stderr}")
else:
    j2 = json.load(open(out2))
    check(j2.get("benchmark") == "htp-stream-bench" and len(j2.get("runs", [])) == 2, "--models: two runs expected")
    for run in j2.get("runs", []):
        entries = [(round(e["budget_fraction"], 3), e["granularity"]) for e in run["sweep"]]
        check(entries == [(0.6, "module"), (0.6, "layer"), (0.8, "module"), (0.8, "layer")],
              f"--models: sweep entries {entries}")
        for e in run["sweep"]:
            for p in e["policies"]:
                n = f"{run['model']['layers_run']} layers, {e['granularity']}, {p['name']}"
                check(not p.get("skipped"), f"{n}: skipped {p.get('reason')}")
                if p.get("skipped"):
                    continue
                check(p["granularity"] == e["granularity"], f"{n}: granularity")
                check_bound_fields(p, n)
                # One step acquires the same weights at either granularity: the same Belady bytes.
            bel = {p["name"]: p["belady_bytes_per_step"] for p in e["policies"] if not p.get("skipped")}
            check(len(set(bel.values())) <= 1, f"Belady bytes differ between policies of one entry: {bel}")
    rows = j2.get("bound_table", [])
    check(len(rows) == 2 * 2 * 2 * 2, f"bound_table has {len(rows)} rows, expected 16")

if failures:
    print("\n".join("FAIL: " + f for f in failures))
    sys.exit(1)
print(f"stream bench JSON and trace consistent ({len(j['policies'])} policies, {faults_in_trace} fault spans)")
