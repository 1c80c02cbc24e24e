#!/usr/bin/env python3
"""Runs htp-moe-bench tiny on timing-only sim (2 layers of Mixtral-8x7B, a few steps) and checks its
JSON: every field present, the counts consistent, every policy run at every budget beside the
oracle, and the routing trace replayed from its file giving the same oracle. Structure and counts,
no timing thresholds. The oracle is Belady's rule on the realised trace; with unequal tensor sizes
that is a reference, not a proven minimum, so oracle <= policy is not asserted.
Usage: moe_bench_check.py BENCH WORKDIR"""
import json
import os
import subprocess
import sys

bench, work = sys.argv[1:3]
os.makedirs(work, exist_ok=True)
out_json = os.path.join(work, "moe.json")
trace = os.path.join(work, "routing.txt")
common = ["--layers", "2", "--steps", "6", "--warmup", "3", "--sweep", "0.4,0.7", "--sim-link-gbps", "50"]
run = subprocess.run([bench, *common, "--json", out_json, "--trace-out", trace], capture_output=True, text=True,
                     timeout=600)
print(run.stdout)
if run.returncode != 0:
    sys.exit(f"htp-moe-bench exited {run.returncode}\n{run.stderr}")
failures = []
def check(cond, what):
    if not cond:
        failures.append(what)

j = json.load(open(out_json))
for key in ["benchmark", "device", "model", "routing", "config", "sweep"]:
    check(key in j, f"top-level field '{key}' missing")
check(j["model"]["name"] == "mixtral-8x7b" and j["model"]["experts"] == 8 and j["model"]["layers_run"] == 2,
      f"model {j['model']}")
shares = j["routing"]["rank_shares"]
check(len(shares) == 8 and abs(sum(shares) - 1) < 1e-9 and shares == sorted(shares, reverse=True),
      f"rank shares {shares}")
check([round(e["budget_fraction"], 3) for e in j["sweep"]] == [0.4, 0.7], "budgets")
steps = j["config"]["steps"]
check(steps == 6, f"steps {steps}")
# Each timed step acquires per layer the 7 shared tensors and 3 matrices of each routed expert
# (top-2 of one token: 2 experts): 2 x (7 + 6) acquires.
acquires = 2 * (7 + 6) * steps
for e in j["sweep"]:
    names = [p["name"] for p in e["policies"]]
    check(names == ["today", "lru", "popularity"], f"policies {names}")
    o = e["oracle"]
    check(o["page_in_bytes"] >= 0 and abs(o["bytes_per_step"] - o["page_in_bytes"] / steps) < 1e-6, f"oracle {o}")
    for p in e["policies"]:
        n = f"{e['budget_fraction']}: {p['name']}"
        if p.get("skipped"):
            failures.append(f"{n} skipped: {p.get('reason')}")
            continue
        for key in ["page_in_bytes", "bytes_per_step", "bytes_over_oracle", "faults", "late_prefetches", "step_ms",
                    "steps_ms", "prefetch_timely_share", "prefetch_lateness", "pager_metrics", "evictions"]:
            check(key in p, f"{n}: field '{key}' missing")
        m = p["pager_metrics"]
        check(p["acquires"] == acquires, f"{n}: {p['acquires']} acquires, expected {acquires}")
        check(m["acquires"] >= m["hits"] + m["faults"], f"{n}: acquires < hits + faults")
        check(len(p["steps_ms"]) == steps, f"{n}: {len(p['steps_ms'])} timed steps")
        check(0 < p["step_ms"]["p50"] <= p["step_ms"]["p99"], f"{n}: step {p['step_ms']}")
        check(0 <= p["prefetch_timely_share"] <= 1, f"{n}: timely share")
        late = p["prefetch_lateness"]
        check(0 <= late["p50_ms"] <= late["p99_ms"] + 1e-9, f"{n}: lateness {late}")
        if o["page_in_bytes"] > 0:
            check(abs(p["bytes_over_oracle"] - p["page_in_bytes"] / o["page_in_bytes"]) < 1e-9, f"{n}: ratio")

# The trace replayed: the same accesses, so the same oracle at each budget.
out2 = os.path.join(work, "moe-replay.json")
run2 = subprocess.run([bench, *common, "--trace-in", trace, "--policies", "today", "--json", out2],
                      capture_output=True, text=True, timeout=600)
if run2.returncode != 0:
    failures.append(f"--trace-in run exited {run2.returncode}: {run2.stderr}")
else:
    j2 = json.load(open(out2))
    check([e["oracle"]["page_in_bytes"] for e in j2["sweep"]] == [e["oracle"]["page_in_bytes"] for e in j["sweep"]],
          "the replayed trace gives another oracle")
    check(j2["routing"]["rank_shares"] == shares, "the replayed trace has other rank shares")
bad = subprocess.run([bench, "--model", "llama-3.1-8b", "--layers", "1"], capture_output=True, text=True)
check(bad.returncode == 2 and "no experts" in bad.stderr, f"a dense model: rc {bad.returncode} {bad.stderr}")

if failures:
    print("\n".join("FAIL: " + f for f in failures))
    sys.exit(1)
print(f"moe bench JSON consistent ({len(j['sweep'])} budgets)")
