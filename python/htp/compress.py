"""python -m htp.compress model.safetensors model.htpz: the compressed companion of a safetensors
file (htp.write_companion), as the htp-compress tool writes it."""
from __future__ import annotations

import argparse
import sys

from ._htp import Error, write_companion


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m htp.compress", description=__doc__.splitlines()[0])
    ap.add_argument("source", help="the safetensors file")
    ap.add_argument("out", help="the companion to write")
    ap.add_argument("--pager-chunk-bytes", default=None,
                    help="chunk_bytes of the pager that will read it (default: PagerConfig's)")
    ap.add_argument("--threads", type=int, default=1, help="encoding threads")
    a = ap.parse_args(argv)
    try:
        r = write_companion(a.source, a.out, a.pager_chunk_bytes, a.threads)
    except Error as e:
        print(f"htp.compress: {e}", file=sys.stderr)
        return 1
    ratio = r["wire_bytes"] / r["logical_bytes"] if r["logical_bytes"] else 0.0
    print(f"{r['tensors']} tensors compressed ({len(r['skipped'])} skipped): "
          f"{r['logical_bytes']} -> {r['wire_bytes']} bytes (ratio {ratio:.4f})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
