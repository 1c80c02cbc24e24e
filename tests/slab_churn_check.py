#!/usr/bin/env python3
"""Runs htp-slab-bench's churn trace (100,000 operations, sizes log-uniform 4 KiB..48 MiB, a 16 GiB
tier kept ~85% full) and checks the allocator's promises on it: no request fails while the free
bytes and a compaction would serve it, and after compaction at most ~2% of the tier is waste of any
kind (rounding, bin pages, free space outside the largest free extent); the goal is 2%, the check
allows 2.5%. Also checks that the JSON
has the run with slab-sized pages next to it. Usage: slab_churn_check.py BENCH WORKDIR"""
import json
import os
import subprocess
import sys

bench, work = sys.argv[1:3]
os.makedirs(work, exist_ok=True)
out = os.path.join(work, "slab_churn.json")
run = subprocess.run([bench, "--benchmark_filter=none", "--json_out=" + os.path.join(work, "slab_bench.json"),
                      "--churn_out=" + out], capture_output=True, text=True, timeout=600)
print(run.stdout)
if run.returncode != 0:
    sys.exit(f"htp-slab-bench exited {run.returncode}\n{run.stderr}")
j = json.load(open(out))
failures = []
pages, slabs = j.get("pages", {}), j.get("slab_pages", {})
if pages.get("failed_with_room") != 0:
    failures.append(f"{pages.get('failed_with_room')} requests failed although free bytes and compaction would serve them")
# The goal is 2%; runs measure 1.7-2.0% depending on the trace's trajectory, so the check allows
# 2.5% and prints the figure (docs/benchmarks.md quotes it).
waste = pages.get("after_compaction", {}).get("waste", 1)
if waste > 0.025:
    failures.append(f"waste after compaction {waste:.4f} > 0.025")
if pages.get("requests", 0) < 40000:
    failures.append("the trace made too few requests")
if "after_compaction" not in slabs:
    failures.append("the slab-sized-pages run is missing")
if failures:
    sys.exit("\n".join(failures))
print(f"ok: waste after compaction {waste:.4f}, no request failed with room")
