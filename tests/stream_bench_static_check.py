#!/usr/bin/env python3
"""Runs htp-stream-bench --static briefly on sim (real bytes, every weight's ends verified by the
compute) and checks its JSON: the five static schemes beside the dynamic policy, none skipped, no
corrupt weight read, the plan's fields present and consistent (no timing thresholds: a replayed
step is compared with nothing but its own plan's numbers). Usage: stream_bench_static_check.py
BENCH CONFIG_JSON WORKDIR"""
import json
import os
import subprocess
import sys

bench, config, work = sys.argv[1:4]
os.makedirs(work, exist_ok=True)
out_json = os.path.join(work, "stream.json")
args = [bench, "--backend", "sim", "--config", config, "--layers", "6", "--steps", "3",
        "--warmup", "1", "--hbm-budget", "0.6", "--slab-mib", "1", "--chunk-mib", "1",
        "--sim-link-gbps", "2", "--policies",
        "schedule-auto", "--static", "--json", out_json]
run = subprocess.run(args, capture_output=True, text=True, timeout=600)
print(run.stdout)
if run.returncode != 0:
    sys.exit(f"htp-stream-bench --static exited {run.returncode}\n{run.stderr}")

j = json.load(open(out_json))
failures = []
names = [p["name"] for p in j["policies"]]
want = ["schedule-auto", "static", "static+z", "round-robin-k1", "round-robin-k2", "round-robin-k4"]
if names != want:
    failures.append(f"policies {names}, want {want}")
for p in j["policies"]:
    if p["name"] == "schedule-auto":
        continue
    n = p["name"]
    if p.get("skipped"):  # only a baseline without room may be skipped
        if not (n.startswith("round-robin") and "the arena needs" in p.get("reason", "")):
            failures.append(f"{n} skipped: {p.get('reason')}")
        continue
    if p["verification_mismatches"] != 0:
        failures.append(f"{n}: {p['verification_mismatches']} corrupt weight reads")
    plan = p.get("pager_metrics", {})
    for key in ["predicted_step_ms", "plan_bound_ms", "arena_bytes", "ring_bytes", "resident_bytes",
                "streamed_wire_bytes", "uses"]:
        if key not in plan:
            failures.append(f"{n}: plan field {key} missing")
    if plan and plan.get("arena_bytes", 0) > p["hbm_budget_bytes"]:
        failures.append(f"{n}: arena {plan['arena_bytes']} over the budget {p['hbm_budget_bytes']}")
    if plan and plan.get("predicted_step_ms", 0) < plan.get("plan_bound_ms", 0) * (1 - 1e-9):
        failures.append(f"{n}: predicted step under its own bound")
    if len(p["steps_ms"]) != 3:
        failures.append(f"{n}: {len(p['steps_ms'])} timed steps")
if "static plans (captured once, replayed)" not in run.stdout:
    failures.append("the static table was not printed")
if failures:
    sys.exit("\n".join(failures))
print("stream bench --static: OK")
