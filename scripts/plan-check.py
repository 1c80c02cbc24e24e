#!/usr/bin/env python3
"""Does htp-plan predict what htp does? Runs the timing-only simulation of seven configurations
(Llama-3.1-8B and 70B on one GPU at HBM budgets of 30, 50 and 75% of the weights, and the design's
case study: OPT-175B in fp16 on 8 GPUs of 40 GB with 256 GB of host RAM), asks htp-plan's htp model
the same questions with --bench-json, and prints the two step times side by side with the design
arithmetic's. Exits 1 when a prediction is off by more than --tolerance percent.

  scripts/plan-check.py [--build DIR] [--out DIR]        run the simulations (about 5 minutes)
  scripts/plan-check.py --from DIR                       re-plan against bench JSONs already made

The ctest planner_predicts_sim runs the second form on the JSONs committed in docs/results/2026-12-03-sim-plan-check,
so a change to the model that breaks the agreement fails CI without re-running the simulation.
"""
import argparse
import json
import os
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))

# The single-GPU runs: the stream bench's schedule-aware policy over every layer, uncapped as the
# bench runs it, 2 MiB chunks, an H200's HBM rate (4.8 TB/s) against a 55 GB/s PCIe Gen5 link.
SINGLE = ["--backend", "sim", "--timing-only", "--sim-link-gbps", "55", "--sim-latency-us", "5",
          "--sim-compute-gbps", "4800", "--sim-time-scale", "20", "--policies", "schedule-k2",
          "--steps", "3", "--warmup", "1"]
SINGLE_PLAN = ["--gpus", "1", "--gpu", "H200", "--hbm-gbps", "4800", "--placement", "paged",
               "--link-cap", "1", "--link-gbps", "55", "--copy-latency-us", "5", "--chunk-mib", "2",
               "--layers-only", "--lookahead", "2"]
CONFIGS = []
for model in ("llama-3.1-8b", "llama-3.1-70b"):
    for frac in ("0.3", "0.5", "0.75"):
        CONFIGS.append({"name": f"{model} 1 GPU, HBM {int(float(frac) * 100)}%",
                        "file": f"{model}-{frac}.json",
                        "bench": SINGLE + ["--model", model, "--hbm-budget", frac],
                        "plan": SINGLE_PLAN + ["--model", model]})
# The case study as htp-stream-bench --case-study runs it (tensor-parallel, resident layers, the
# default 80% cap, 64 MiB chunks, an H100's 3.35 TB/s).
CONFIGS.append({"name": "case study: opt-175b TP8, 8 x 40 GB",
                "file": "case-study.json",
                "bench": ["--case-study", "--node-modes", "tensor-parallel", "--steps", "6", "--warmup", "2",
                          "--sim-time-scale", "20", "--hbm-squeeze-mib", "0"],
                "plan": ["--model", "opt-175b", "--dtype", "fp16", "--gpus", "8", "--gpu", "H100-SXM",
                         "--hbm-gbps", "3350", "--host-gb", "256", "--placement", "resident",
                         "--link-gbps", "55", "--link-cap", "0.8", "--copy-latency-us", "5",
                         "--chunk-mib", "64", "--layers-only"]})


def budget_gb(bench):
    """The per-GPU HBM budget the bench ran with, in GB."""
    if bench.get("node"):
        return None  # the case study's 40 GB, given on the command line
    return bench["policies"][0]["hbm_budget_bytes"] / 1e9


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--build", default=os.path.join(HERE, "..", "build"), help="build dir with tools/htp-plan")
    ap.add_argument("--plan", default=None, help="the htp-plan binary (default: BUILD/tools/htp-plan)")
    ap.add_argument("--out", default=None, help="where the bench and plan JSONs go")
    ap.add_argument("--from", dest="src", default=None, help="use the bench JSONs in this folder; run no simulation")
    ap.add_argument("--tolerance", type=float, default=10.0, help="largest |error| in percent")
    ap.add_argument("--only", default=None, help="run only configurations whose name contains this")
    a = ap.parse_args()
    bench_bin = os.path.join(a.build, "bench", "htp-stream-bench")
    plan_bin = a.plan or os.path.join(a.build, "tools", "htp-plan")
    out = a.out or (a.src if a.src else os.path.join(a.build, "plan-check"))
    os.makedirs(out, exist_ok=True)
    rows, failed = [], []
    for c in CONFIGS:
        if a.only and a.only not in c["name"]:
            continue
        bench_json = os.path.join(a.src or out, c["file"])
        if not a.src:
            run = subprocess.run([bench_bin] + c["bench"] + ["--json", bench_json], capture_output=True, text=True)
            if run.returncode != 0:
                sys.exit(f"{c['name']}: htp-stream-bench exited {run.returncode}\n{run.stdout[-3000:]}\n{run.stderr}")
        bench = json.load(open(bench_json))
        plan_json = os.path.join(out, c["file"].replace(".json", ".plan.json"))
        args = [plan_bin] + c["plan"] + ["--bench-json", bench_json, "--json", plan_json]
        gb = budget_gb(bench) or 40.0
        # The design arithmetic gets the same HBM, all of it for weights.
        args += ["--hbm-budget-gb", f"{gb:.6f}", "--hbm-gb", f"{gb:.6f}", "--headroom", "0"]
        if bench.get("node"):
            # The collective's cost as the run measured it on its compute streams: the sim's
            # rendezvous of eight stream threads (30-140 us), where an NVLink ring takes 10-20 us.
            args += ["--collective-latency-us", f"{bench['node'][0]['collective_ms_per_layer'] * 1e3:.3f}"]
        run = subprocess.run(args, capture_output=True, text=True)
        if run.returncode != 0:
            sys.exit(f"{c['name']}: htp-plan exited {run.returncode}\n{' '.join(args)}\n{run.stdout}\n{run.stderr}")
        plan = json.load(open(plan_json))
        h = plan["htp"]
        measured = h["measured_step_ms_p50"]
        design = plan.get("step", {}).get("step_ms")
        row = {"config": c["name"], "sim_step_ms_p50": measured, "htp_model_step_ms": h["step_ms"],
               "error_pct": h["prediction_error_pct"], "design_step_ms": design,
               "design_error_pct": (design - measured) / measured * 100 if design else None,
               "paged_gb_sim": None, "paged_gb_model": h["paged_bytes_per_step"] / 1e9}
        if bench.get("node"):
            row["paged_gb_sim"] = bench["node"][0]["bytes_per_step_per_gpu"] / 1e9
        else:
            row["paged_gb_sim"] = bench["policies"][0]["bytes_per_step"] / 1e9
        rows.append(row)
        if abs(row["error_pct"]) > a.tolerance:
            failed.append(row["config"])
    print(f"{'configuration':40} {'sim p50 ms':>11} {'htp model':>10} {'error':>7} {'design':>9} {'error':>8}"
          f" {'paged GB sim':>12} {'model':>7}")
    for r in rows:
        d = f"{r['design_step_ms']:9.1f} {r['design_error_pct']:+7.1f}%" if r["design_step_ms"] else f"{'-':>9} {'-':>8}"
        print(f"{r['config']:40} {r['sim_step_ms_p50']:11.1f} {r['htp_model_step_ms']:10.1f} {r['error_pct']:+6.1f}% {d}"
              f" {r['paged_gb_sim']:12.2f} {r['paged_gb_model']:7.2f}")
    summary = os.path.join(out, "plan-check.json")
    json.dump({"tolerance_pct": a.tolerance, "rows": rows}, open(summary, "w"), indent=2)
    print(f"wrote {summary}")
    if failed:
        sys.exit(f"htp model off by more than {a.tolerance}% for: {', '.join(failed)}")
    print(f"plan check passed: every prediction within {a.tolerance}% of the simulation")


if __name__ == "__main__":
    main()
