#!/usr/bin/env python3
"""Lists C++/CUDA function bodies longer than a limit (default 120 lines) under the given folders.

A heuristic that suits this tree's style (one formatter): a definition starts on a line that
closes a parameter list and opens a brace at the line's indentation of a namespace member or
class member, and ends at the matching brace. Lambdas count toward the function around them.
Exit status 1 when any function is over the limit. Usage: function_lengths.py [--limit N] DIR...
"""
import argparse
import pathlib
import re
import sys

SIGNATURE_END = re.compile(r"\)\s*(const)?\s*(noexcept)?\s*(override)?\s*(->\s*[\w:<>&*\s,]+)?\s*\{\s*(//.*)?$")
CONTROL = re.compile(r"^\s*(if|for|while|switch|catch|do|else)\b|^\s*\}?\s*else\b")


def strip_strings(line):
    line = re.sub(r'"(\\.|[^"\\])*"', '""', line)
    return re.sub(r"'(\\.|[^'\\])*'", "''", line)


def functions(path):
    lines = path.read_text(errors="replace").splitlines()
    i = 0
    while i < len(lines):
        code = strip_strings(lines[i].split("//")[0] if "//" in lines[i] and '"' not in lines[i] else lines[i])
        if SIGNATURE_END.search(code) and not CONTROL.search(code):
            # Find the start of the signature (for the name and its indentation).
            start = i
            while start > 0 and "(" not in lines[start] and i - start < 8:
                start -= 1
            head = lines[start]
            indent = len(head) - len(head.lstrip())
            if indent > 2 or CONTROL.search(head) or "=" in head.split("(")[0] or head.lstrip().startswith(("return", ":", ",")):
                i += 1
                continue
            name = re.findall(r"([~\w:]+)\s*\(", lines[start])
            depth = 0
            j = i
            while j < len(lines):
                depth += strip_strings(lines[j]).count("{") - strip_strings(lines[j]).count("}")
                if depth <= 0:
                    break
                j += 1
            yield (name[0] if name else "?", start + 1, j - start + 1)
            i = j + 1
            continue
        i += 1


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--limit", type=int, default=120)
    ap.add_argument("dirs", nargs="+")
    args = ap.parse_args()
    over = []
    for d in args.dirs:
        for p in sorted(pathlib.Path(d).rglob("*")):
            if p.suffix in (".cpp", ".cu", ".hpp", ".cuh") and p.is_file():
                for name, line, n in functions(p):
                    if n > args.limit:
                        over.append((n, f"{p}:{line}", name))
    for n, where, name in sorted(over, reverse=True):
        print(f"{n:5d} {where} {name}")
    return 1 if over else 0


if __name__ == "__main__":
    sys.exit(main())
