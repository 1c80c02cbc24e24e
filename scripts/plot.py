#!/usr/bin/env python3
"""Turn htp benchmark JSON into PNGs.

  scripts/plot.py --bench stream.json --out DIR   # step latency vs HBM budget, one line per policy
  scripts/plot.py --trace trace.json --out DIR    # compute / prefetch / reduction timeline
  scripts/plot.py --matrix plan.json --out DIR    # htp-plan --matrix: step latency per strategy and batch

Inputs (contracts in docs/planner.md):
  stream bench: {"policies": [{"name", "hbm_budget_bytes", "step_ms": {"p50", "p99", "max"}}],
                 "sweep": [{"hbm_budget_bytes", "policies": [...]}]}   (sweep optional)
  Chrome trace: {"traceEvents": [{"ph": "X", "tid": 1|2|3, "ts": us, "dur": us, "name", "cat"},
                                 {"ph": "M", "name": "thread_name", "tid", "args": {"name"}}]}
  htp-plan --matrix --json: {"matrix": {"budget_ms", "context", "rows": [{"strategy", "cells":
                 [{"batch", "feasible", "step_ms", "tokens_per_second", "meets_budget"}]}]}}
Missing optional fields are skipped, not fatal. Needs matplotlib (Debian: python3-matplotlib); if
the python3 on PATH lacks it, the script re-runs itself under /usr/bin/python3.
"""
import argparse
import json
import os
import sys

BUDGET_MS = 200.0
STREAMS = {1: "compute", 2: "prefetch", 3: "reduction"}


def import_pyplot():
    try:
        import matplotlib
    except ImportError:
        system = "/usr/bin/python3"
        if os.path.exists(system) and os.path.realpath(sys.executable) != os.path.realpath(system) \
                and not os.environ.get("HTP_PLOT_REEXEC"):
            os.environ["HTP_PLOT_REEXEC"] = "1"
            os.execv(system, [system] + sys.argv)
        sys.exit("plot.py: matplotlib is missing; install python3-matplotlib (scripts/setup.sh)")
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    return plt


def save(fig, plt, out_dir, name):
    """Writes `fig` as out_dir/name (PNG, 120 dpi), closes it, and returns the path."""
    out = os.path.join(out_dir, name)
    fig.tight_layout()
    fig.savefig(out, dpi=120)
    plt.close(fig)
    return out


def load(path):
    try:
        with open(path) as f:
            return json.load(f)
    except OSError as e:
        sys.exit(f"plot.py: cannot read '{path}': {e.strerror}")
    except json.JSONDecodeError as e:
        sys.exit(f"plot.py: '{path}' is not valid JSON: {e}")


def number(x):
    return x if isinstance(x, (int, float)) and not isinstance(x, bool) else None


def budget_points(doc):
    """{policy: {budget_bytes: {"p50": ms, ...}}} from the sweep, else from top-level policies."""
    points = {}

    def add(budget, policy):
        if not isinstance(policy, dict):
            return
        budget = number(policy.get("hbm_budget_bytes", budget))
        step = policy.get("step_ms")
        if budget is None or not isinstance(step, dict):
            return
        stats = {k: v for k, v in step.items() if number(v) is not None}
        if stats:
            points.setdefault(str(policy.get("name", "?")), {})[budget] = stats

    sweep = doc.get("sweep")
    if isinstance(sweep, list) and sweep:
        for entry in sweep:
            if isinstance(entry, dict):
                for policy in entry.get("policies") or []:
                    add(entry.get("hbm_budget_bytes"), policy)
    if not points:
        for policy in doc.get("policies") or []:
            add(None, policy)
    return points


def plot_bench(path, out_dir, plt):
    doc = load(path)
    if not isinstance(doc, dict):
        sys.exit(f"plot.py: '{path}' is not a JSON object")
    points = budget_points(doc)
    if not points:
        sys.exit(f"plot.py: '{path}' has no policies with hbm_budget_bytes and step_ms")
    fig, ax = plt.subplots(figsize=(8, 5))
    for i, (name, by_budget) in enumerate(sorted(points.items())):
        color = f"C{i}"
        budgets = sorted(by_budget)
        xs = [b / 2**30 for b in budgets]
        for stat, style in (("p50", "-o"), ("p99", "--^"), ("max", ":x")):
            ys = [(x, by_budget[b][stat]) for x, b in zip(xs, budgets) if stat in by_budget[b]]
            if ys:
                ax.plot([p[0] for p in ys], [p[1] for p in ys], style, color=color,
                        label=f"{name} {stat}")
    ax.axhline(BUDGET_MS, color="red", linewidth=1, label=f"{BUDGET_MS:.0f} ms budget")
    ax.set_xlabel("HBM budget (GiB)")
    ax.set_ylabel("step latency (ms)")
    title = doc.get("model") if isinstance(doc.get("model"), str) else doc.get("benchmark", "")
    ax.set_title(f"step latency vs HBM budget {title}".strip())
    ax.set_ylim(bottom=0)
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize="small")
    return save(fig, plt, out_dir, "latency_vs_budget.png")


def plot_matrix(path, out_dir, plt):
    """Grouped bars: one group per batch size, one bar per strategy (step ms, tokens/s on top);
    strategies that do not fit are marked, the latency budget is a line."""
    doc = load(path)
    m = doc.get("matrix") if isinstance(doc, dict) else None
    if not isinstance(m, dict) or not m.get("rows"):
        sys.exit(f"plot.py: '{path}' has no matrix (run htp-plan --matrix --json FILE)")
    rows = m["rows"]
    batches = [c["batch"] for c in rows[0]["cells"]]
    budget = number(m.get("budget_ms")) or BUDGET_MS
    fig, ax = plt.subplots(figsize=(10, 5))
    width = 0.8 / len(rows)
    top = budget * 1.5
    for r in rows:
        for c in r["cells"]:
            if number(c.get("step_ms")):
                top = max(top, c["step_ms"] * 1.15)
    for i, r in enumerate(rows):
        for j, c in enumerate(r["cells"]):
            x = j + (i - (len(rows) - 1) / 2) * width
            step = number(c.get("step_ms"))
            if c.get("feasible") and step is not None:
                ax.bar(x, step, width, color=f"C{i}", label=r["strategy"] if j == 0 else None)
                tps = number(c.get("tokens_per_second")) or 0
                ax.text(x, step, f"{tps:.0f}", ha="center", va="bottom", fontsize="x-small")
            else:
                ax.bar(x, top * 0.03, width, color=f"C{i}", alpha=0.25, hatch="//",
                       label=r["strategy"] if j == 0 else None)
                ax.text(x, top * 0.04, "no fit", ha="center", va="bottom", fontsize="x-small", rotation=90)
    ax.axhline(budget, color="red", linewidth=1, label=f"{budget:.0f} ms budget")
    ax.set_xticks(range(len(batches)))
    ax.set_xticklabels([f"batch {b}" for b in batches])
    ax.set_ylabel("step latency (ms); tokens/s above each bar")
    model = doc.get("model", {}).get("name", "") if isinstance(doc.get("model"), dict) else ""
    ax.set_title(f"trade-off matrix {model} (htp model, KV context {m.get('context', '?')})".strip())
    ax.set_ylim(0, top)
    ax.grid(True, axis="y", alpha=0.3)
    ax.legend(fontsize="small")
    return save(fig, plt, out_dir, "trade_off_matrix.png")


def plot_trace(path, out_dir, plt):
    doc = load(path)
    events = doc.get("traceEvents") if isinstance(doc, dict) else doc
    if not isinstance(events, list):
        sys.exit(f"plot.py: '{path}' has no traceEvents list")
    names = dict(STREAMS)
    spans = []
    for e in events:
        if not isinstance(e, dict):
            continue
        tid = e.get("tid")
        if e.get("ph") == "M" and e.get("name") == "thread_name":
            label = (e.get("args") or {}).get("name")
            if tid is not None and label:
                names[tid] = str(label)
        elif e.get("ph") == "X" and number(e.get("ts")) is not None and tid is not None:
            spans.append((tid, float(e["ts"]), float(number(e.get("dur")) or 0.0),
                          str(e.get("cat", e.get("name", "")))))
    if not spans:
        sys.exit(f"plot.py: '{path}' has no complete (ph X) events")
    t0 = min(s[1] for s in spans)
    tids = sorted({s[0] for s in spans} | set(STREAMS), key=lambda t: (str(type(t)), t))
    row = {tid: i for i, tid in enumerate(reversed(tids))}
    cats = sorted({s[3] for s in spans})
    color = {c: f"C{i % 10}" for i, c in enumerate(cats)}
    fig, ax = plt.subplots(figsize=(11, 1.2 + 0.7 * len(tids)))
    for tid, ts, dur, cat in spans:
        ax.broken_barh([((ts - t0) / 1e3, max(dur, 0.0) / 1e3)], (row[tid] - 0.4, 0.8),
                       facecolors=color[cat], edgecolor="black", linewidth=0.2)
    ax.set_yticks([row[t] for t in tids])
    ax.set_yticklabels([names.get(t, f"tid {t}") for t in tids])
    ax.set_xlabel("time (ms)")
    ax.set_title("streams")
    ax.grid(True, axis="x", alpha=0.3)
    from matplotlib.patches import Patch
    ax.legend(handles=[Patch(color=color[c], label=c) for c in cats], fontsize="small",
              loc="upper left", bbox_to_anchor=(1.0, 1.0))
    return save(fig, plt, out_dir, "timeline.png")


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--bench", help="stream bench JSON: latency vs HBM budget per policy")
    ap.add_argument("--trace", help="Chrome trace JSON: three-stream timeline")
    ap.add_argument("--matrix", help="htp-plan --matrix --json output: step latency per strategy and batch")
    ap.add_argument("--out", required=True, help="directory for the PNGs (created)")
    args = ap.parse_args()
    if not args.bench and not args.trace and not args.matrix:
        ap.error("give --bench FILE, --trace FILE and/or --matrix FILE")
    plt = import_pyplot()
    os.makedirs(args.out, exist_ok=True)
    if args.bench:
        print("wrote", plot_bench(args.bench, args.out, plt))
    if args.trace:
        print("wrote", plot_trace(args.trace, args.out, plt))
    if args.matrix:
        print("wrote", plot_matrix(args.matrix, args.out, plt))


if __name__ == "__main__":
    main()
