#!/usr/bin/env python3
"""The verdict on one GoogleTest JSON report (--gtest_output=json:FILE), for scripts/gpu-check.sh.

  gtest_verdict.py REPORT --gpus N --require REGEX [--require REGEX ...]

Prints one line: how many tests passed, failed and skipped, and how many of the required ones (full
names "suite.test" that match a REGEX) ran. Exits 1 when a test failed, or when N > 0 and a
required test skipped (it names the test and its skip message) or none of them ran at all: a GPU
that is present but unused by the tests that exist for it is a failure, not a pass. Tests that skip
by design on a machine with a GPU (e.g. "cuda without a GPU throws") are simply not required.
Exits 2 when the report is missing or unreadable (the binary crashed or was killed).
"""
import argparse
import json
import re
import sys


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("report")
    p.add_argument("--gpus", type=int, default=0)
    p.add_argument("--require", action="append", default=[], help="regex over suite.test names")
    a = p.parse_args()
    try:
        with open(a.report) as f:
            doc = json.load(f)
    except (OSError, ValueError) as e:
        print(f"no readable report {a.report}: {e} (the binary crashed or was killed)")
        return 2
    passed, failed, skipped = [], [], []
    required_ran, required_skipped = [], []
    for suite in doc.get("testsuites", []):
        for t in suite.get("testsuite", []):
            name = f"{suite['name']}.{t['name']}"
            is_skip = t.get("result") == "SKIPPED" or t.get("status") == "NOTRUN"
            if t.get("failures"):
                failed.append(name)
            elif is_skip:
                skipped.append(name)
            else:
                passed.append(name)
            if any(re.search(r, name) for r in a.require):
                if is_skip:
                    msg = " ".join(x.get("message", "") for x in t.get("skipped", []) or t.get("failures", []))
                    required_skipped.append(f"{name} ({msg.strip()[:160] or 'no message'})")
                else:
                    required_ran.append(name)
    line = (f"{len(passed)} passed, {len(failed)} failed, {len(skipped)} skipped; "
            f"{len(required_ran)} required test(s) ran")
    bad = []
    if failed:
        bad.append("failed: " + ", ".join(failed[:5]))
    if a.gpus > 0 and required_skipped:
        bad.append("skipped on a machine with a GPU: " + "; ".join(required_skipped[:3]))
    if a.gpus > 0 and a.require and not required_ran:
        bad.append("a GPU is present but no required test ran on it")
    print(line + ("; " + "; ".join(bad) if bad else ""))
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
