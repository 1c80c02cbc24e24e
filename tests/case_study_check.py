#!/usr/bin/env python3
"""Runs htp-stream-bench --case-study briefly (OPT-175B in fp16 on 8 timing-only sim GPUs of 40 GB
with a 256 GB host tier) and checks what the scale simulator promises: it runs in little memory,
checksums are off and say so, tensor parallelism keeps whole layers device-resident so the host
tier holds exactly the paged layers' bytes (within 256 GB), and swap-and-shard is skipped saying
why. Usage: case_study_check.py BENCH WORKDIR"""
import json
import os
import resource
import subprocess
import sys

bench, work = sys.argv[1:3]
os.makedirs(work, exist_ok=True)
out_json = os.path.join(work, "case-study.json")
run = subprocess.run([bench, "--case-study", "--sim-time-scale", "1", "--steps", "1", "--warmup", "1", "--json", out_json],
                     capture_output=True, text=True, timeout=600)
print(run.stdout)
if run.returncode != 0:
    sys.exit(f"htp-stream-bench --case-study exited {run.returncode}\n{run.stderr}")
peak_rss = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss * 1024
j = json.load(open(out_json))
failures = []
if j.get("preset") != "case-study":
    failures.append("the JSON does not name the preset")
sim = j.get("sim", {})
if sim.get("timing_only") is not True or not str(sim.get("checksums", "")).startswith("off"):
    failures.append(f"timing-only / checksums not reported as off: {sim}")
if j["model"]["name"] != "opt-175b" or j["model"]["dtype"] != "fp16":
    failures.append(f"model {j['model']['name']} {j['model']['dtype']}, not opt-175b fp16")
node = {r["mode"]: r for r in j.get("node", [])}
tp, ss = node.get("tensor-parallel"), node.get("swap-and-shard")
weights, layers = j["model"]["streamed_weight_bytes"], j["model"]["layers_run"]
if not tp or tp.get("skipped"):
    failures.append(f"tensor-parallel did not run: {tp}")
else:
    r = tp["resident_layers"]
    if not 0 < r < layers:
        failures.append(f"resident layers {r} of {layers}: expected some resident and some paged")
    expect_host = weights // layers * (layers - r)
    if tp["host_tier_bytes"] != expect_host:
        failures.append(f"host tier holds {tp['host_tier_bytes']} bytes, not the {layers - r} paged layers ({expect_host})")
    if tp["host_budget_bytes"] > 256e9:
        failures.append(f"host tier of {tp['host_budget_bytes']} bytes exceeds 256 GB")
    if not tp["bytes_per_step_per_gpu"] > 0 or not tp["step_ms_p50"] > 0:
        failures.append("tensor-parallel paged nothing or took no time")
    if tp.get("timing_only") is not True or tp["verification_mismatches"] != 0:
        failures.append("tensor-parallel result not marked timing-only")
# The out-of-memory fallback: HBM forced short, the largest shards served from host memory (degraded),
# every step done, the p99.9 reported against the 2 s tail budget.
short = node.get("tensor-parallel, HBM short")
if not short or short.get("skipped"):
    failures.append(f"the HBM-short tensor-parallel run did not run: {short}")
else:
    if not short["degraded_acquires_per_step"] > 0:
        failures.append("HBM forced short, yet no acquire was served degraded")
    # The preset leaves 128 MiB (less than the 151 MB fc1/fc2 shards), give or take rounding.
    if not 120 << 20 <= short["squeeze_leave_bytes"] <= 130 << 20 or not short["squeeze_block_bytes"] > 0:
        failures.append(f"squeeze not as the preset sets it: {short['squeeze_leave_bytes']} left, block {short['squeeze_block_bytes']}")
    steps = short["step_ms"]
    # Nearest rank: with fewer than 1000 steps the p99.9 is the slowest step.
    if not steps or short["step_ms_p999"] != max(steps) or short["verification_mismatches"] != 0:
        failures.append(f"HBM-short run: p99.9 {short['step_ms_p999']} is not the slowest of {steps}")
    if "tail budget" not in run.stdout:
        failures.append("the report does not hold the p99.9 against the tail budget")
if not ss or not ss.get("skipped") or "256 GB" not in ss.get("skip_reason", ""):
    failures.append(f"swap-and-shard should be skipped for lack of host memory, naming it: {ss}")
if peak_rss > 4 << 30:
    failures.append(f"the run took {peak_rss / 2**30:.1f} GiB of RAM; timing-only should need well under 4 GiB")
print(f"peak RSS {peak_rss / 2**20:.0f} MiB")
if failures:
    sys.exit("case study check failed:\n  " + "\n  ".join(failures))
print("case study check passed")
