"""The audit's two tables (models, findings), their parquet files, and resuming from them."""

from __future__ import annotations

import hashlib
import os
from typing import Any, NamedTuple

MODEL_COLUMNS = ["source", "status", "error", "format", "files", "bytes", "tensors", "parameters",
                 "quant_scheme", "bits_per_weight", "pickle_verdict", "dangerous_imports", "errors",
                 "warnings", "infos", "top_codes", "seconds", "bytes_read", "fingerprint", "deep", "report"]
FINDING_COLUMNS = ["source", "code", "severity", "file", "offset", "length", "tensor", "message", "fix"]
LIST_COLUMNS = ("dangerous_imports", "top_codes")
STATUS_OK = "ok"


class Tables(NamedTuple):
    models: Any
    findings: Any


def short(text: str) -> str:
    return hashlib.sha1(text.encode()).hexdigest()[:12]


def human(n: float) -> str:
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if abs(n) < 1024 or unit == "TiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n} B"


def crash_finding(source: str, error: BaseException) -> dict:
    from ..codes import CATALOG

    return {"source": source, "code": "audit_crashed", "severity": "error", "file": source,
            "offset": None, "length": None, "tensor": None,
            "message": f"The worker auditing this model died every time it was tried "
                       f"({type(error).__name__}: {error}).", "fix": CATALOG["audit_crashed"].fix}


def findings_path(out: str | os.PathLike) -> str:
    out = os.fspath(out)
    stem = out[:-len(".parquet")] if out.endswith(".parquet") else out
    return stem + ".findings.parquet"


def _models_frame(rows: list[dict]):
    import pandas as pd

    df = pd.DataFrame(rows, columns=MODEL_COLUMNS)
    for c in ("files", "bytes", "tensors", "parameters", "errors", "warnings", "infos", "bytes_read"):
        df[c] = df[c].fillna(0).astype("int64")
    df["seconds"] = df["seconds"].astype("float64")
    df["bits_per_weight"] = df["bits_per_weight"].astype("float64")
    df["deep"] = df["deep"].astype(bool)
    for c in LIST_COLUMNS:
        df[c] = [list(v) if v is not None and not isinstance(v, float) else [] for v in df[c]]
    return df


def _findings_frame(rows: list[dict]):
    import pandas as pd

    df = pd.DataFrame(rows, columns=FINDING_COLUMNS)
    for c in ("offset", "length"):
        df[c] = df[c].astype("Int64")
    return df


def build(models: list[str], rows: dict, findings: dict, skipped: set, previous: Tables | None) -> Tables:
    """Rows in discovery order; a skipped model keeps its previous row and findings."""
    prev_rows, prev_findings = {}, {}
    if previous is not None:
        prev_rows = {r["source"]: r for r in previous.models.to_dict("records")}
        for r in previous.findings.to_dict("records"):
            prev_findings.setdefault(r["source"], []).append(r)
    out_rows, out_findings = [], []
    for src in models:
        if src in skipped and src in prev_rows:
            out_rows.append(prev_rows[src])
            out_findings.extend(prev_findings.get(src, []))
        elif src in rows:
            out_rows.append(rows[src])
            out_findings.extend(findings.get(src, []))
    return normalize(Tables(_models_frame(out_rows), _findings_frame(out_findings)))


def normalize(t: Tables) -> Tables:
    """Through Arrow and back: the frames `mx.audit` returns are the ones its parquet gives."""
    try:
        import pyarrow as pa
    except ImportError:  # pragma: no cover - the audit extra brings it
        return t
    ms, fs = _schemas()
    models = pa.Table.from_pandas(t.models, schema=ms, preserve_index=False).to_pandas()
    findings = pa.Table.from_pandas(t.findings, schema=fs, preserve_index=False).to_pandas()
    return _lists(Tables(models, findings))


def _lists(t: Tables) -> Tables:
    for c in LIST_COLUMNS:
        t.models[c] = [list(v) if v is not None else [] for v in t.models[c]]
    for c in ("offset", "length"):
        t.findings[c] = t.findings[c].astype("Int64")
    return t


def _schemas():
    import pyarrow as pa

    s, i, f = pa.string(), pa.int64(), pa.float64()
    models = pa.schema([("source", s), ("status", s), ("error", s), ("format", s), ("files", i),
                        ("bytes", i), ("tensors", i), ("parameters", i), ("quant_scheme", s),
                        ("bits_per_weight", f), ("pickle_verdict", s), ("dangerous_imports", pa.list_(s)),
                        ("errors", i), ("warnings", i), ("infos", i), ("top_codes", pa.list_(s)),
                        ("seconds", f), ("bytes_read", i), ("fingerprint", s), ("deep", pa.bool_()),
                        ("report", s)])
    findings = pa.schema([("source", s), ("code", s), ("severity", s), ("file", s), ("offset", i),
                          ("length", i), ("tensor", s), ("message", s), ("fix", s)])
    return models, findings


def write_parquet(models, findings, out) -> tuple[str, str]:
    """`out` gets the models, NAME.findings.parquet the findings (written to temp files first,
    so an interrupted write never leaves half a table to resume from)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    ms, fs = _schemas()
    out = os.fspath(out)
    paths = []
    for df, schema, path in ((models, ms, out), (findings, fs, findings_path(out))):
        table = pa.Table.from_pandas(df, schema=schema, preserve_index=False)
        tmp = path + ".tmp"
        pq.write_table(table, tmp)
        os.replace(tmp, path)
        paths.append(path)
    return paths[0], paths[1]


def read_parquet(out) -> Tables:
    """Both tables as written, list columns back as Python lists."""
    import pandas as pd

    models = pd.read_parquet(os.fspath(out))
    fpath = findings_path(out)
    findings = pd.read_parquet(fpath) if os.path.exists(fpath) else _findings_frame([])
    return _lists(Tables(models, findings))


def read_previous(out) -> Tables | None:
    if not os.path.exists(os.fspath(out)):
        return None
    try:
        return read_parquet(out)
    except Exception:  # noqa: BLE001 - an unreadable previous file: audit everything again
        return None


def done_fingerprints(previous: Tables, deep: bool = False) -> dict[str, str]:
    """source -> fingerprint of the models a rerun may skip (read fully last time, and deeply
    when this run is deep)."""
    m = previous.models
    ok = m[(m["status"] == STATUS_OK) & m["fingerprint"].notna() & (m["deep"] | (not deep))]
    return dict(zip(ok["source"], ok["fingerprint"]))


def exit_code(models) -> int:
    """0 when no model has an error finding, 1 when some do, 2 when some could not be read."""
    if len(models) and (models["status"] != STATUS_OK).any():
        return 2
    if len(models) and (models["errors"] > 0).any():
        return 1
    return 0
