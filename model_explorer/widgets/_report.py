"""What the offline report embeds, packed small enough to attach to a bug ticket.

A reader of a saved report clicks a tensor and expects what the live Explorer shows: its
statistics, its histogram and its bytes. The report carries, for every tensor (up to
MAX_STATS, then a note), the sampled statistics and a STATS_BINS-bin histogram, and the first
TENSOR_HEAD bytes of its data; plus the first pages of the first files with their spans, the
step-through of the first file, the header tree (its tensor part is rebuilt in the browser
from the table) and the file map.

Compact encodings, so a 20,000-tensor folder gives a report of about 2.3 MB:
- columns instead of one object per row; runs of equal values as [value, run, ...] (`rle`);
- tensor names front-coded (the length shared with the previous name, then a suffix taken
  from a table of distinct suffixes);
- numbers and bytes as base64 of little-endian typed arrays: min/max/mean/std as float32,
  histogram counts as uint8 relative to the largest bin (its count kept beside them, so a
  count reads back to within 1/510 of it, exactly when it is under 128).
"""

from __future__ import annotations

import base64
import math
import os
import time
from typing import Any

import numpy as np

from ._layers import report_profiles

REPORT_BYTES = 16 * 1024  # of the first file; the next files get OTHER_FILE_BYTES
OTHER_FILE_BYTES = 4 * 1024
MAX_FILES = 4
MAX_STEPS = 400
TENSOR_HEAD = 16
ENTRY_BYTES = 128  # of a missing tensor's entry in the index
STATS_BINS = 32
MAX_STATS = 50_000  # tensors with statistics; the rest say "not in this report"
STATS_SECONDS = 120.0  # and no more time than this on them
STATS_ELEMENTS = 100_000  # values sampled per tensor
MAP_SEGMENTS = 2000
MAX_TREE_ROWS = 20_000


def b64(array: np.ndarray) -> str:
    return base64.b64encode(np.ascontiguousarray(array).tobytes()).decode("ascii")


def rle(values: list) -> list:
    """[v0, n0, v1, n1, ...]: runs of equal values (columns of dtypes, files, lengths)."""
    out: list = []
    for v in values:
        if out and out[-2] == v and type(out[-2]) is type(v):
            out[-1] += 1
        else:
            out += [v, 1]
    return out


def front_code(names: list[str]) -> dict[str, Any]:
    """Each name as (characters shared with the previous name, index of the rest in `strings`)."""
    shared, suffix, strings, index = [], [], [], {}
    prev = ""
    for name in names:
        n = 0
        limit = min(len(prev), len(name))
        while n < limit and prev[n] == name[n]:
            n += 1
        rest = name[n:]
        if rest not in index:
            index[rest] = len(strings)
            strings.append(rest)
        shared.append(n)
        suffix.append(index[rest])
        prev = name
    return {"shared": rle(shared), "suffix": suffix, "strings": strings}


def pack_table(rows: list[dict]) -> dict[str, Any]:
    """The tensor table (every row, missing ones included) as columns."""
    paths: dict[str, int] = {}
    dtypes: dict[str, int] = {}
    shapes: dict[tuple, int] = {}
    col: dict[str, list] = {k: [] for k in ("file", "dtype", "shape", "offset", "length")}
    extra: dict[str, dict] = {"params": {}, "bytes": {}, "marks": {}}
    end: dict[int, int] = {}
    for i, r in enumerate(rows):
        f = paths.setdefault(r["path"] or "", len(paths))
        shape = tuple(r["shape"])
        col["file"].append(f)
        col["dtype"].append(dtypes.setdefault(r["dtype"], len(dtypes)))
        col["shape"].append(shapes.setdefault(shape, len(shapes)))
        offset = r["offset"] if r["offset"] is not None else -1
        length = r["length"] or 0
        col["offset"].append(offset - end.get(f, 0))  # 0 for tensors that follow each other
        col["length"].append(length)
        end[f] = offset + length
        if r["params"] != math.prod(shape):
            extra["params"][i] = r["params"]
        if r["bytes"] != length:
            extra["bytes"][i] = r["bytes"]
        if r.get("mark"):
            extra["marks"][i] = [r["mark"], r["note"]]
    return {"count": len(rows), "names": front_code([r["name"] for r in rows]),
            "paths": list(paths), "dtypes": list(dtypes), "shapes": [list(s) for s in shapes],
            **{k: rle(v) for k, v in col.items()}, **extra}


def pack_stats(ckpt, names: list[str], layer_rows: list[dict] | None = None) -> dict[str, Any]:
    """Sampled statistics of the first tensors, in table order, as typed arrays and runs; those
    of the tensors in numbered blocks also appended to `layer_rows` (the Layers tab's table)."""
    from ..checks.layers import layer_role

    t0 = time.perf_counter()
    floats, hists, peaks, zeros, nans, infs, counts, exact, samples = [], [], [], [], [], [], [], [], []
    errors, scales = {}, {}
    for i, name in enumerate(names[:MAX_STATS]):
        if time.perf_counter() - t0 > STATS_SECONDS:
            break
        try:
            st = ckpt.stats(name, bins=STATS_BINS, max_elements=STATS_ELEMENTS)
        except (ValueError, KeyError, ImportError, OSError) as e:
            errors[i] = str(e)
            st = None
        if st is None:
            floats += [math.nan] * 4
            hists.append(np.zeros(STATS_BINS, np.uint8))
            peaks.append(0), zeros.append(0), nans.append(0), infs.append(0), counts.append(0)
            exact.append(0), samples.append("")
            continue
        floats += [math.nan if v is None else v for v in (st.min, st.max, st.mean, st.std)]
        c = np.asarray(st.hist["counts"], dtype=np.float64)
        peak = int(c.max()) if c.size else 0
        hists.append(_quantize(c, peak))
        peaks.append(peak)
        zeros.append(round(float(st.zeros), 4))
        nans.append(int(st.nan)), infs.append(int(st.inf)), counts.append(int(st.count))
        exact.append(int(bool(st.exact))), samples.append(st.sample)
        if layer_rows is not None and layer_role(name):
            layer_rows.append({"name": name, "numel": ckpt.tensors[name].numel, "min": st.min, "max": st.max,
                               "mean": st.mean, "std": st.std, "nan": st.nan, "inf": st.inf})
        if st.scales and st.scales.get("counts"):
            sc = st.scales
            scales[i] = {"lo": sc["edges"][0], "hi": sc["edges"][-1], "counts": sc["counts"],
                         "count": sc.get("count")}
    n = len(peaks)
    return {
        "count": n, "of": len(names), "bins": STATS_BINS,
        "floats": b64(np.asarray(floats, dtype="<f4")),
        "hist": b64(np.concatenate(hists) if hists else np.zeros(0, np.uint8)),
        "peak": rle(peaks), "zeros": rle(zeros), "nan": rle(nans), "inf": rle(infs),
        "values": rle(counts), "exact": rle(exact), "sample": rle(samples),
        "errors": errors, "scales": scales,
        "seconds": round(time.perf_counter() - t0, 2),
    }


def _quantize(counts: np.ndarray, peak: int) -> np.ndarray:
    """Counts as 0..255 of the largest; a bin that holds anything stays at least 1."""
    if peak <= 0:
        return np.zeros(len(counts), np.uint8)
    q = np.rint(counts * (255.0 / peak))
    q[(counts > 0) & (q < 1)] = 1
    return q.astype(np.uint8)


def pack_heads(ckpt, rows: list[dict]) -> dict[str, Any]:
    """The first TENSOR_HEAD bytes of each table row's data in table order; for a tensor the
    index names but no shard holds, its entry in the index (up to ENTRY_BYTES)."""
    out = bytearray()
    lengths = []
    for r in rows:
        cap = ENTRY_BYTES if r.get("mark") == "missing" else TENSOR_HEAD
        n = max(0, min(cap, r["length"] or 0)) if r["offset"] is not None else 0
        try:
            data = bytes(ckpt.read_bytes(r["offset"], n, r["path"])) if n else b""
        except (OSError, ValueError, KeyError):
            data = b""
        out += data
        lengths.append(len(data))
    return {"size": TENSOR_HEAD, "lengths": rle(lengths),
            "bytes": base64.b64encode(bytes(out)).decode("ascii")}


def _page(view, file: str, length: int) -> dict:
    meta, bufs = view.answer("bytes", {"file": file, "offset": 0, "length": length})
    meta["b64"] = base64.b64encode(bufs[0]).decode("ascii")
    for s in meta["spans"]:
        s.pop("file", None)  # the page's own file
    return meta


def _lean(row: dict) -> dict:
    return {k: v for k, v in row.items() if v is not None and v is not False}


def tree_rows(view) -> list[dict]:
    """The header tree without its tensor part (the browser rebuilds that from the table)."""
    tree = view.tree
    tree.open_file_header()  # the live tree makes a shard's fields when opened; a report has them all
    skip = {n.id for n in tree.roots if n.id in tree._tensor_roots}
    rows = []
    for row in tree.all_rows(MAX_TREE_ROWS):
        if row["id"] in skip or row["parent"] in skip:
            skip.add(row["id"])
            continue
        rows.append(_lean(row))
    return rows


OFFLINE_FIX = ("This saved report cannot write fixes: open the checkpoint in a notebook "
               "(mx.explore(path), Findings, Fix…) or run `model-explorer repair SOURCE DEST`.")


def model_card(view) -> dict[str, Any]:
    """The Model tab's card as the live tab receives it; an error says why there is none."""
    try:
        return view.answer("model_card", {})[0]
    except Exception as e:  # noqa: BLE001 - a report is written even when the card is not
        return {"error": f"{type(e).__name__}: {e}"}


def fixable(view) -> dict[str, Any]:
    """Which findings have a fix (the report shows their Fix… buttons disabled, with a note)."""
    out = dict(view.fixable())
    out["note"] = OFFLINE_FIX
    return out


def report_data(view) -> dict[str, Any]:
    ckpt = view.checkpoint
    pages = [_page(view, f, REPORT_BYTES if i == 0 else OTHER_FILE_BYTES)
             for i, f in enumerate(ckpt.files[:MAX_FILES])]
    steps = []
    for file in ckpt.files[:1]:
        fs = view.file_spans(file)
        for i, s in enumerate(fs.spans):
            if s.offset >= REPORT_BYTES or i >= MAX_STEPS:
                break
            step = view.answer("step", {"file": file, "index": i})[0]
            step["span"] = _lean(step["span"])
            steps.append(step)
    table = view.table
    rows = [table.row(i) for i in range(len(table.infos))]
    real = list(ckpt.tensors.values())
    layer_rows: list[dict] = []
    return {
        "format": 2,
        "state": {"view": "explorer", "summary": view.summary, "findings": view.findings,
                  "legend": view.legend, "files": view.files, "selection": {}},
        "pages": pages,
        "steps": steps,
        "tree": tree_rows(view),
        "tree_tensors": bool(rows),
        "table": pack_table(rows),
        "tensor_stats": pack_stats(ckpt, [t.name for t in real], layer_rows),
        "layers": report_profiles(layer_rows),  # from the statistics just gathered
        "heads": pack_heads(ckpt, rows),
        "map": view.file_map.payload(MAP_SEGMENTS) if len(ckpt.files) <= 400 else None,
        "model_card": model_card(view),
        "fixable": fixable(view),
        "limits": {"first_file_bytes": REPORT_BYTES, "file_bytes": OTHER_FILE_BYTES,
                   "files": MAX_FILES, "tensor_bytes": TENSOR_HEAD,
                   "names": [os.path.basename(f) for f in ckpt.files[:MAX_FILES]]},
    }
