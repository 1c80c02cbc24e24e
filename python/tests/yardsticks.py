"""Yardsticks the tests measure htp against (not part of the package)."""
from __future__ import annotations


def belady_page_in_bytes(schedule: list, capacity: int, steps: int) -> int:
    """Bytes Belady's rule pages in over ``steps`` repetitions of ``schedule`` after the first (a
    warm cache), with ``capacity`` bytes of HBM and no page rounding: the yardstick the bench
    reports htp's page-in bytes against (for equal sizes it is the minimum)."""
    seq = schedule * (steps + 1)
    n = len(schedule)
    next_use: list[int] = [0] * len(seq)
    last: dict[object, int] = {}
    for i in range(len(seq) - 1, -1, -1):
        next_use[i] = last.get(seq[i], 1 << 62)
        last[seq[i]] = i
    resident: dict[object, int] = {}  # tensor -> its next use
    used, paged = 0, 0
    for i, t in enumerate(seq):
        if t not in resident:
            while used + t.nbytes > capacity and resident:
                victim = max(resident, key=resident.get)
                used -= victim.nbytes
                del resident[victim]
            if i >= n:
                paged += t.nbytes
            used += t.nbytes
        resident[t] = next_use[i]
    return paged
