#!/usr/bin/env python3
"""Runs htp-stream-bench --gpus 2 briefly on sim (a tiny Llama) and checks the node modes: all three
ran, no weight byte read differs from the registered patterns (the single-GPU run's), the host
tier holds the weights once in every mode, tensor parallelism pages in about half of what data
parallelism does per GPU, and the all-reduce was timed. Usage: stream_bench_node_check.py BENCH
CONFIG_JSON WORKDIR"""
import json
import os
import subprocess
import sys

bench, config, work = sys.argv[1:4]
os.makedirs(work, exist_ok=True)
out_json = os.path.join(work, "stream-node.json")
args = [bench, "--backend", "sim", "--config", config, "--layers", "4", "--steps", "2", "--warmup", "1",
        "--hbm-budget", "0.75", "--slab-mib", "1", "--chunk-mib", "1", "--sim-link-gbps", "2",
        "--policies", "schedule-k2", "--gpus", "2", "--json", out_json]
run = subprocess.run(args, capture_output=True, text=True, timeout=600)
print(run.stdout)
if run.returncode != 0:
    sys.exit(f"htp-stream-bench exited {run.returncode}\n{run.stderr}")
j = json.load(open(out_json))
failures = []
node = {r["mode"]: r for r in j.get("node", [])}
for mode in ["data-parallel", "tensor-parallel", "swap-and-shard"]:
    if mode not in node:
        failures.append(f"mode {mode} missing")
    elif node[mode].get("skipped"):
        failures.append(f"mode {mode} skipped: {node[mode].get('skip_reason')}")
    elif node[mode]["verification_mismatches"] != 0:
        failures.append(f"mode {mode} read {node[mode]['verification_mismatches']} corrupt weights")
weights = j["model"]["streamed_weight_bytes"]
for mode in ["data-parallel", "tensor-parallel"]:
    if mode in node and node[mode].get("host_tier_bytes") != weights:
        failures.append(f"{mode}: host tier holds {node[mode].get('host_tier_bytes')} bytes, not the weights once ({weights})")
dp, tp = node.get("data-parallel", {}), node.get("tensor-parallel", {})
if dp and tp and dp.get("bytes_per_step_per_gpu", 0) > 0 and tp["bytes_per_step_per_gpu"] > 0.75 * dp["bytes_per_step_per_gpu"]:
    failures.append(f"tensor-parallel pages in {tp['bytes_per_step_per_gpu']} bytes per GPU per step, "
                    f"not about half of data-parallel's {dp['bytes_per_step_per_gpu']}")
if tp and not tp.get("collective_ms_per_layer", 0) > 0:
    failures.append("tensor-parallel: no all-reduce time measured")
ss = node.get("swap-and-shard", {})
if ss and not ss.get("skipped"):
    k = ss.get("layers_per_sync", 0)
    if k not in (1, 2) or abs(ss.get("barriers_per_layer", 0) - 1.0 / k) > 1e-9:
        failures.append(f"swap-and-shard: {ss.get('barriers_per_layer')} compute-stream waits per layer with "
                        f"layers_per_sync = {k}; expected exactly 1 / layers_per_sync")
    # Staging buffers are device-resident: the host tier holds the layers once (shards padded to N).
    if not weights <= ss.get("host_tier_bytes", 0) <= weights * 1.001:
        failures.append(f"swap-and-shard: host tier holds {ss.get('host_tier_bytes')} bytes, not the weights once ({weights})")
if failures:
    sys.exit("\n".join(failures))
print("ok: node modes consistent")
