"""The time to match one path pattern against long names that split many ways.

A pattern of ten fields separated by ``_`` and one ``-``, against a 240-character name
with over 100 ``_``: a backtracking regex tried every split of the name among the fields (the
name without its ``-`` never finished); :mod:`windpipe.catalog.pattern_syntax` scans each literal
once from the end. Prints the median per match, for a name that matches and one that
does not::

    python bench/pattern_match.py
"""

from __future__ import annotations

import statistics
import time

from windpipe.catalog.pattern_syntax import parse_pattern

__all__ = ["main"]

PATTERN = "{cell_id}_{cidx}_{a}_{b}_{c}_{d}_{e}_{f}_{g}-{h}.parquet"
CELL = "_".join(["c"] * 107)
NAMES = {"matches": f"{CELL}_17_a_b_c_d_e_f_g-h.parquet",
         "does not match": f"{CELL}_17_a_b_c_d_e_f_g_h.parquet"}


def main(repeats: int = 2000) -> None:
    """Print the median time of one match of each name."""
    last = parse_pattern(PATTERN).components[-1]
    for what, name in NAMES.items():
        times = []
        for _ in range(repeats):
            start = time.perf_counter()
            last.match(name)
            times.append(time.perf_counter() - start)
        print(f"{len(last.fields)} fields, {len(name)}-character name that {what}: "
              f"{statistics.median(times) * 1e6:.1f} us")


if __name__ == "__main__":
    main()
