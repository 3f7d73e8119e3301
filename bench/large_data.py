"""The large-data rows of ``python -m bench`` (``windpipe bench``): a ``block_shuffled``
pass over data larger than the Flight server's cache, and a first epoch from the
latency-injected object store, each reported as one ratio of the record's ``ratios``.

* :data:`BLOCK_RATIO`: ``block_shuffled`` epochs 1-2 (data 4x the cache, no tier) over
  warm ``shuffled`` epochs bracketing them (``bench.larger_than_memory``, its ``block``
  process set; ``--quick``: its tiny shape);
* :data:`BLOCK_FIRST_RATIO`: the same plan's epoch 0 over a bare pyarrow decode of the
  same files on the same cores (a first pass decodes the data once);
* :data:`STORE_RATIO`: windpipe's first epoch from moto behind ``bench.latency_proxy``
  over the proxy's limit (``bench.object_store``, rows ``ceiling`` and ``windpipe``).

Both run whole processes of their own (servers, moto, the proxy); the records they make
(peak RSS of every process included) go under the bench record's ``large_data``.
"""

from __future__ import annotations

import tempfile
from pathlib import Path
from typing import Any

__all__ = ["BLOCK_FIRST_RATIO", "BLOCK_RATIO", "STORE_RATIO", "large_data"]

BLOCK_RATIO = "block_shuffled_warm/shuffled_warm"
BLOCK_FIRST_RATIO = "block_shuffled_first_epoch/bare_decode"
STORE_RATIO = "store_first_epoch/proxy_limit"
_STORE_ROWS = {True: 2_000_000, False: 12_000_000}  # cycling rows: --quick, else


def large_data(out: Path, *, quick: bool) -> tuple[dict[str, Any], dict[str, float]]:
    """Run both (``quick``: small data, a smoke figure); their records and the ratios
    they give (a ratio is left out when its run failed)."""
    from bench import larger_than_memory as ltm  # noqa: PLC0415
    from bench import object_store  # noqa: PLC0415
    from bench.data import ensure_dataset  # noqa: PLC0415

    ratios: dict[str, float] = {}
    if quick:
        rows, group = ltm.QUICK["rows"], ltm.QUICK["row_group_rows"]
        batch, seq = ltm.QUICK["batch_size"], ltm.QUICK["seq_len"]
    else:
        rows, group, batch, seq = 36_000_000, 131_072, 64, 1024
    name = f"data-{rows}" if group == 131_072 else f"data-{rows}-rg{group}"
    root = ensure_dataset(out / name, cycling_rows=rows, row_group_rows=group)
    with tempfile.TemporaryDirectory(prefix="wp-bench-ltm-") as tmp:
        block = ltm.run(root, work=Path(tmp), batch_size=batch, seq_len=seq,
                        row_group_rows=group, kinds=("block",), verbose=False)
    for row, key in (("block_shuffled_warm", BLOCK_RATIO),
                     ("block_shuffled_cold", BLOCK_FIRST_RATIO)):
        median = block["summary"].get(row, {}).get("median_ratio")
        if median is not None:
            ratios[key] = median
    store = object_store.run(rows=_STORE_ROWS[quick], latency_ms=20.0, bandwidth_mbps=200.0,
                             out=out, only=("ceiling", "windpipe"), verbose=False)
    if store["summary"].get("windpipe/limit"):
        ratios[STORE_RATIO] = store["summary"]["windpipe/limit"]
    return {"larger_than_memory": block, "object_store": store}, ratios
