#!/usr/bin/env python3
"""Runs htp-tier-bench briefly on sim: 4 processes page one model (64 MiB in 16 layers) and check
every page-in on the device. Checks, per case:
  tier:    the node holds the weights once (shared tier, no page cache left, small private memory);
  file:    the ranks' mapping of one file: the page cache holds it once;
  private: the baseline holds one copy per rank (so the check above can fail);
  kill:    rank 1 is SIGKILLed mid-run; the other 3 finish with every checksum intact, and the tier
           reclaims its slot and its holds (no dead rank, no entry left once the ranks are gone).
No timing is asserted. Usage: tier_bench_check.py BENCH WORKDIR"""
import json
import os
import subprocess
import sys

bench, work = sys.argv[1:3]
os.makedirs(work, exist_ok=True)
base = ["--backend", "sim", "--processes", "4", "--weights-mib", "64", "--layer-mib", "4",
        "--steps", "3", "--sim-link-gbps", "4", "--shared-link-gbps", "4", "--timeout-s", "240"]
failures = []


def run(name, extra):
    out = os.path.join(work, f"{name}.json")
    args = [bench, *base, *extra, "--tier-name", f"htp-check-{os.getpid()}-{name}", "--out", out]
    r = subprocess.run(args, capture_output=True, text=True, timeout=300)
    if r.returncode != 0:
        failures.append(f"{name}: exit {r.returncode}\n{r.stdout}\n{r.stderr}")
        return None
    j = json.load(open(out))
    print(name, {k: v for k, v in j.items() if k != "ranks"})
    return j


def check(name, cond, what):
    if not cond:
        failures.append(f"{name}: {what}")


def complete(name, j, ranks):
    check(name, j["checksum_mismatches"] == 0, f"{j['checksum_mismatches']} page-ins differ")
    check(name, j["page_ins_checked"] == ranks * 16 * 4, f"{j['page_ins_checked']} page-ins checked")


for source in ["tier", "file", "private"]:
    j = run(source, ["--source", source])
    if j is None:
        continue
    complete(source, j, 4)
    over = j["node_host_bytes_over_weights"]
    if source == "private":
        check(source, over > 4, f"4 private copies should hold > 4x the weights, got {over:.2f}x")
    else:
        check(source, over < 1.5, f"the node holds {over:.2f}x the weights, not once")
        check(source, j["ranks_private_host_bytes"] < 4 * 16 << 20,
              f"ranks' private memory {j['ranks_private_host_bytes']} B: a private copy?")
    if source == "tier":
        check(source, j["file_page_cache_bytes"] < 8 << 20, "the file's pages stayed cached")

j = run("kill", ["--source", "tier", "--kill-rank", "1", "--kill-at-step", "2"])
if j is not None:
    complete("kill", j, 3)
    killed = [r for r in j["ranks"] if r["killed"]]
    check("kill", len(killed) == 1 and killed[0]["rank"] == 1, "rank 1 was not killed")
    check("kill", all(r["exit_status"] == 0 for r in j["ranks"] if not r["killed"]),
          "a surviving rank failed")
    check("kill", j["tier_dead_ranks"] == 0, f"{j['tier_dead_ranks']} dead rank slots left")
    check("kill", j["tier_entries"] == 0, f"{j['tier_entries']} entries still held")

if failures:
    sys.exit("\n".join(failures))
print("tier bench: OK")
