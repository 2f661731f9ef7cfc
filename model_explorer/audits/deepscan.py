"""`mx.scan(source, client=None)`: exact statistics of every tensor, dequantized and streamed.

Locally it walks the tensors in order; with a Dask client (or `workers=`/`scheduler=`) the
tensors are cut into ranges of about `part_bytes` and each range is one task on a worker that
opens the model itself (headers once per worker) and returns only the rows. Each tensor's
numbers come from the same `tensors.stats.stats(..., exact=True)` either way, so the Dask table
equals the local one exactly.
"""

from __future__ import annotations

import math
import sys
from typing import Any

from ..safe_text import escape_deep
from ..tensors.stats import stats

COLUMNS = ["name", "dtype", "shape", "numel", "min", "max", "mean", "std", "zeros", "nan", "inf",
           "exact", "sample", "error", "norm", "absmax", "hist_edges", "hist_counts", "file", "offset",
           "length"]
PART_BYTES = 64 * 2**20
BINS = 32


def tensor_row(ckpt, name: str, bins: int = BINS) -> dict[str, Any]:
    info = ckpt.tensors[name]
    row: dict[str, Any] = {"name": name, "dtype": info.label,
                           "shape": "x".join(map(str, info.shape)) or "scalar", "numel": info.numel,
                           "file": info.file, "offset": info.offset, "length": info.length}
    try:
        s = stats(ckpt, name, bins=bins, exact=True)
    except (ValueError, KeyError) as e:
        row["error"] = str(e)
        return row
    finite = s.count - s.nan - s.inf
    norm = None
    if s.mean is not None and s.std is not None:
        norm = math.sqrt(max(0.0, finite * (s.std ** 2 + s.mean ** 2)))
    absmax = None if s.min is None else max(abs(s.min), abs(s.max))
    row.update(min=s.min, max=s.max, mean=s.mean, std=s.std, zeros=s.zeros, nan=s.nan, inf=s.inf,
               exact=s.exact, sample=s.sample, error=None, norm=norm, absmax=absmax,
               hist_edges=s.hist["edges"], hist_counts=s.hist["counts"])
    return row


def scan_part(source: str, key: str | None, names: list[str], bins: int) -> list[dict]:
    """A worker's task: the rows of one tensor range."""
    from .task import cached_open

    ckpt = cached_open(source, key)
    return [tensor_row(ckpt, n, bins) for n in names]


def _frame(rows: list[dict]):
    import pandas as pd

    return pd.DataFrame(escape_deep(rows), columns=COLUMNS)  # names a file gave, made writable


def _parts(items: list[tuple[str, int]], part_bytes: int, min_parts: int = 1) -> list[list[str]]:
    """(name, bytes) in file order cut into ranges of about equal bytes: at most `part_bytes`
    each and at least `min_parts` of them (when there are that many tensors), so every worker
    gets an even share and the last range does not leave the others idle."""
    items = [(name, max(1, size)) for name, size in items]
    total = sum(size for _, size in items)
    count = max(math.ceil(total / part_bytes), min(min_parts, len(items)), 1)
    target = total / count
    parts, cur, size = [], [], 0
    for name, nbytes in items:
        cur.append(name)
        size += nbytes
        if size >= target * (len(parts) + 1) - nbytes / 2 and len(parts) < count - 1:
            parts.append(cur)
            cur = []
    if cur:
        parts.append(cur)
    return parts


def _slots(client) -> int:
    """Threads across the cluster's workers (1 when the scheduler cannot say)."""
    try:
        return max(1, sum(client.nthreads().values()))
    except Exception:  # noqa: BLE001 - a scheduler that does not answer still runs the scan
        return 1


def scan(source: Any, client=None, bins: int = BINS, part_bytes: int = PART_BYTES,
         scheduler: str | None = None, workers: int | None = None, threads: int = 1,
         progress: bool | None = None):
    """Exact statistics of every tensor as a DataFrame (the columns of `stats_table` with
    `exact` True, plus `norm`, `absmax`, the histogram, and where each tensor lives).
    `threads` > 1 keeps several range reads in flight per worker (remote storage)."""
    from ..opener import opened

    show = sys.stderr.isatty() if progress is None else progress
    distributed = client is not None or scheduler is not None or workers is not None
    with opened(source) as ckpt:
        if not distributed:
            names = list(ckpt.tensors)
            if show:
                from tqdm.auto import tqdm

                names = tqdm(names, desc="scan", unit="tensor", file=sys.stderr)
            return _frame([tensor_row(ckpt, n, bins) for n in names])
        src = ckpt.source
        sizes = [(name, info.stored_bytes) for name, info in ckpt.tensors.items()]
    from .runner import close_client, make_client
    from .task import fingerprint

    try:
        key = fingerprint(src)["key"]
    except (OSError, ValueError):
        key = None
    client, owned = make_client(client, scheduler, workers, threads)
    try:
        from dask.distributed import as_completed

        # Four ranges per worker thread at least: even shares, and a slow worker's last range
        # is a small one. Each range is one task; fewer, larger tasks cost less scheduling.
        parts = _parts(sizes, part_bytes, 4 * _slots(client))

        futures = {client.submit(scan_part, src, key, names, bins, pure=False): i
                   for i, names in enumerate(parts)}
        results: list[list[dict] | None] = [None] * len(parts)
        bar = None
        if show:
            from tqdm.auto import tqdm

            bar = tqdm(total=len(parts), desc="scan", unit="range", file=sys.stderr)
        for fut in as_completed(futures):
            results[futures[fut]] = fut.result()
            fut.release()
            if bar is not None:
                bar.update(1)
        if bar is not None:
            bar.close()
    finally:
        close_client(client, owned)
    return _frame([row for part in results for row in part or []])
