#!/usr/bin/env python3
"""The headline set's figures, read off the JSON its steps wrote (scripts/gpu-check.sh --set headline):

  gpu_headline.py WORK_DIR

Prints one line per figure: the H2D bandwidth (htp-bandwidth, pinned), the wait per 64 MiB page of
on-demand paging raw and compressed (htp-stream-bench --compress), the decode kernel's GB/s on 1 GiB
of bf16 and whether it was bit-exact (htp-codec-bench), and tokens/s of the Hugging Face 8B-shaped
decode at 30% per mode (bench/python/hf_offload_bench.py). Exits 1 when a figure is missing, the
decode was not bit-exact, or a mode gave other tokens than the resident model.
"""
import argparse
import json
import os
import sys


def load(work, name):
    try:
        with open(os.path.join(work, name)) as f:
            return json.load(f)
    except (OSError, ValueError):
        return None


def main():
    a = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    a.add_argument("work", help="gpu-check's working folder (the JSON of the headline's steps)")
    work = a.parse_args().work
    lines, bad = [], []
    bw = load(work, "bandwidth.json")
    try:
        fit = bw["fits"]["pinned_H2D"]["peak_gb_per_s"]
        best = max(s["gb_per_s"] for s in bw["samples"] if s["memory"] == "pinned" and s["direction"] == "H2D")
        lines.append(f"H2D bandwidth, pinned: {best:.1f} GB/s best, {fit:.1f} GB/s fitted peak")
    except (TypeError, KeyError, ValueError):
        bad.append("H2D bandwidth: no bandwidth.json figure")
    pl = load(work, "page-latency.json")
    for compressed, label in ((False, "raw"), (True, "compressed")):
        try:
            r = next(p for p in pl["policies"] if p["name"].split("+")[0] == "on-demand" and bool(p.get("compressed")) == compressed)
            w = r["fault_wait"]
            lines.append(f"64 MiB page, on-demand {label}: {w['ms_per_64mib_page']:.2f} ms per 64 MiB "
                         f"(fault wait p50 {w['p50_ms']:.2f} ms, p99 {w['p99_ms']:.2f} ms; wire ratio {r['wire_ratio']:.2f})")
        except (TypeError, KeyError, StopIteration):
            bad.append(f"64 MiB page latency ({label}): no page-latency.json figure")
    codec = load(work, "codec.json")
    try:
        d = codec["device_decode"]
        lines.append(f"decode kernel, 1 GiB bf16: {d['decode_gb_per_s']:.1f} GB/s of output, "
                     f"bit-exact {d['bit_exact']}")
        if not d["bit_exact"]:
            bad.append("the decode kernel's output was not bit-exact")
    except (TypeError, KeyError):
        bad.append("decode GB/s: no codec.json device_decode figure")
    hf = load(work, os.path.join("hf-headline", "hf-offload.json"))
    want = ["resident", "htp", "htp-compress", "accelerate"]
    rows = {r.get("mode"): r for r in (hf or {}).get("rows", []) if r.get("batch") == 1}
    for mode in want:
        r = rows.get(mode)
        if r is not None and "error" in r:
            bad.append(f"Hugging Face 8B-shaped at 30%: {mode} failed: {str(r['error'])[:160]}")
            continue
        if r is None or "tokens_per_second" not in r:
            bad.append(f"Hugging Face 8B-shaped at 30%: no {mode} row")
            continue
        lines.append(f"Hugging Face 8B-shaped, 30%, batch 1, {mode}: {r['tokens_per_second']:.2f} tokens/s"
                     f"{'' if r.get('identical', False) else ' (OTHER TOKENS than resident)'}")
        if not r.get("identical", False):
            bad.append(f"{mode} gave other tokens than the resident model")
    for ln in lines:
        print(ln)
    for b in bad:
        print(f"missing or wrong: {b}")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
