"""Every value a file can hold, made a cell the audit's tables can write (issue 45).

A hostile header gives offsets of 2**64 and shapes of 10**30 (no int64 holds them), names with
lone surrogates (no UTF-8 encoder writes them) or bidi controls, and side files give values of
any JSON type. Before a row reaches pandas and Arrow, each cell is fitted to its column's type
(tables.py's schemas): an integer beyond int64 becomes null there and its exact decimal text
goes into the row's `big_ints` (a JSON object, column -> text); strings are escaped as
safe_text does everywhere; anything else in a text column is its JSON text. A row that still
cannot be converted becomes an error row naming the file and why, and the batch goes on.
"""

from __future__ import annotations

import json
import math
from typing import Any

from ..safe_text import escape

INT64_MIN, INT64_MAX = -(1 << 63), (1 << 63) - 1
UNWRITABLE = "unwritable"  # the status of a row that could not be written as it was
MAX_TEXT = 1 << 20  # characters kept of one text cell


def _text(value: Any) -> str:
    if isinstance(value, str):
        text = value
    else:
        try:
            text = json.dumps(value, ensure_ascii=False, default=str, allow_nan=True)
        except (ValueError, TypeError, RecursionError):
            text = repr(value)
    return escape(text[:MAX_TEXT])


def _int(value: Any, column: str, big: dict[str, str]) -> int | None:
    if value is None or isinstance(value, float) and math.isnan(value):
        return None
    if isinstance(value, bool):
        return int(value)
    try:
        n = int(value)
    except (TypeError, ValueError, OverflowError):
        big[column] = _text(value)[:200]
        return None
    if INT64_MIN <= n <= INT64_MAX:
        return n
    big[column] = str(n) if n.bit_length() < 4000 else f"an integer of {n.bit_length():,} bits"
    return None


def _float(value: Any) -> float | None:
    if value is None:
        return None
    try:
        return float(value)
    except (TypeError, ValueError, OverflowError):
        return None


def clean_row(row: dict, schema) -> dict:
    """`row` with each column of `schema` ((name, type) pairs) fitted to its type."""
    out: dict[str, Any] = {}
    big: dict[str, str] = {}
    for column, kind in schema:
        if column == "big_ints":
            continue
        value = row.get(column)
        if kind == "int":
            out[column] = _int(value, column, big)
        elif kind == "float":
            out[column] = _float(value)
        elif kind == "bool":
            out[column] = bool(value) if value is not None else False
        elif kind == "list":
            out[column] = [] if value is None or isinstance(value, float) else \
                [_text(v) for v in (value if isinstance(value, (list, tuple)) else [value])]
        else:
            out[column] = None if value is None else _text(value)
    known = row.get("big_ints")
    if isinstance(known, str) and known:  # a row cleaned before (a previous run's)
        try:
            big = {**json.loads(known), **big}
        except ValueError:
            pass
    out["big_ints"] = json.dumps(big) if big else None
    return out


def clean_rows(rows: list[dict], schema) -> list[dict]:
    return [clean_row(r, schema) for r in rows]


def writable(models: list[tuple[dict, list[dict]]], model_schema, finding_schema,
             schemas=None) -> list[tuple[dict, list[dict]]]:
    """(model row, its findings) pairs as Arrow takes them: converted whole first (one call), and
    only when that fails one model at a time, where a row Arrow refuses becomes an UNWRITABLE row
    saying why and a finding it refuses one saying so. `model_schema` and `finding_schema` are the
    (name, type) specs; `schemas` their Arrow schemas (None: no pyarrow, nothing to check)."""
    if schemas is None or not models:
        return models
    arrow_models, arrow_findings = schemas
    if not _refused([m for m, _ in models], arrow_models) and \
            not _refused([f for _, found in models for f in found], arrow_findings):
        return models
    return [_one_writable(row, found, model_schema, finding_schema, schemas) for row, found in models]


def _one_writable(row: dict, findings: list[dict], model_schema, finding_schema,
                  schemas) -> tuple[dict, list[dict]]:
    arrow_models, arrow_findings = schemas
    why = _refused([row], arrow_models)
    if why:
        source = row.get("source") or "?"
        row = clean_row({"source": source, "status": UNWRITABLE, "deep": row.get("deep"),
                         "error": f"The audit's row for this model could not be written: {why}"},
                        model_schema)
    if findings and _refused(findings, arrow_findings):
        kept = []
        for f in findings:
            reason = _refused([f], arrow_findings)
            kept.append(f if not reason else clean_row(
                {"source": f.get("source"), "code": "audit_row_unwritable", "severity": "error",
                 "file": f.get("file"), "message": f"A finding ({f.get('code')}) could not be "
                 f"written to the tables: {reason}"}, finding_schema))
        findings = kept
    return row, findings


def _refused(rows: list[dict], schema) -> str:
    import pyarrow as pa

    try:
        pa.Table.from_pylist(rows, schema=schema)
    except Exception as e:  # noqa: BLE001 - any conversion failure is the row's, not the batch's
        return f"{type(e).__name__}: {escape(str(e))[:200]}"
    return ""
