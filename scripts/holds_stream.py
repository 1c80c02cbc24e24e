#!/usr/bin/env python3
"""The naming convention gpu-check's memcheck filter relies on (docs/gpu.md, "Under the sanitizer").

  holds_stream.py SOURCE [--listed FILE]

compute-sanitizer may make a launch wait for its kernel, so a test that holds a stream on the host
never returns under it. Such a test is recognised here by what holds the stream, not by a list:

  - a host function that waits (`launch_host_func(... { ... .wait(); ...})`: the stream is held
    until the test opens the gate, after queuing more work), or
  - a stream made to wait on a value written later (`wait_value_async`).

Every TYPED_TEST in SOURCE that does either must have `holds_stream` in its name, which the memcheck
filter `-*holds_stream*` leaves out. With --listed (the test binary's --gtest_list_tests under the
memcheck filter), none of those tests may be listed either, nor any test the source lacks (a binary
built from an older source could hold a stream under an old name).
Prints each breach; exits 1 on any.
"""
import argparse
import re
import sys

HOLDS = [
    (re.compile(r"launch_host_func\(\s*\[[^\]]*\]\s*(?:\([^)]*\))?\s*\{[^}]*\.wait\(\)"),
     "a host function that waits"),
    (re.compile(r"\bwait_value_async\("), "a stream waiting on a value written later"),
]


def tests_of(source: str):
    """(name, body) of every TYPED_TEST / TEST in the source, the body up to the next test."""
    heads = list(re.finditer(r"^(?:TYPED_)?TEST(?:_P|_F)?\(\s*\w+\s*,\s*(\w+)\s*\)", source, re.M))
    for i, m in enumerate(heads):
        end = heads[i + 1].start() if i + 1 < len(heads) else len(source)
        yield m.group(1), source[m.end():end]


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("source")
    p.add_argument("--listed", help="--gtest_list_tests output under the memcheck filter")
    a = p.parse_args()
    with open(a.source) as f:
        source = f.read()
    holding, bad = [], []
    tests = dict(tests_of(source))
    for name, body in tests.items():
        why = [w for rx, w in HOLDS if rx.search(body)]
        if not why:
            continue
        holding.append(name)
        if "holds_stream" not in name:
            bad.append(f"{name} holds a stream ({', '.join(why)}) but its name lacks holds_stream: "
                       f"memcheck would run it and hang")
    if a.listed:
        with open(a.listed) as f:
            listed = {ln.strip().split()[0] for ln in f if ln.startswith("  ") and ln.strip()}
        bad += [f"{n} holds a stream yet the memcheck filter selects it" for n in holding if n in listed]
        # A binary older than the source could still hold a stream under an old, untagged name.
        bad += [f"{n}: the binary lists it under the memcheck filter but the source has no such test "
                f"(a stale build? rebuild the tree)" for n in sorted(listed - set(tests))]
    for b in bad:
        print(b)
    print(f"{len(holding)} test(s) hold a stream, every one named *holds_stream*" if not bad else
          f"{len(bad)} breach(es) of the holds_stream convention")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
