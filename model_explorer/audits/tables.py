"""The audit's tables (models, findings, and the files not audited), their parquet files, the
summary line, and resuming from them."""

from __future__ import annotations

import hashlib
import os
from typing import Any, NamedTuple

MODEL_COLUMNS = ["source", "status", "error", "format", "files", "bytes", "tensors", "parameters",
                 "quant_scheme", "bits_per_weight", "pickle_verdict", "dangerous_imports", "errors",
                 "warnings", "infos", "top_codes", "seconds", "bytes_read", "fingerprint", "deep", "report", "paths"]
FINDING_COLUMNS = ["source", "code", "severity", "file", "offset", "length", "tensor", "message", "fix"]
SKIPPED_COLUMNS = ["path", "reason", "kind", "label", "detail", "bytes", "model"]
LIST_COLUMNS = ("dangerous_imports", "top_codes", "paths")
STATUS_OK = "ok"


class Tables(NamedTuple):
    models: Any
    findings: Any
    skipped: Any = None


def short(text: str) -> str:
    return hashlib.sha1(text.encode()).hexdigest()[:12]


def human(n: float) -> str:
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if abs(n) < 1024 or unit == "TiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n} B"


def crash_finding(source: str, error: BaseException) -> dict:
    from ..spans import Finding
    from .task import finding_dict

    return finding_dict(Finding.of("audit_crashed", "The worker auditing this model died every time it "
                                   f"was tried ({type(error).__name__}: {error}).", file=source), source)


def findings_path(out: str | os.PathLike, table: str = "findings") -> str:
    """Where a table beside the models' parquet goes: NAME.findings.parquet, NAME.skipped.parquet."""
    out = os.fspath(out)
    stem = out[:-len(".parquet")] if out.endswith(".parquet") else out
    return f"{stem}.{table}.parquet"


def skipped_frame(entries: list[dict]):
    """The files not audited as models, one row each (inventory.FileEntry as dicts)."""
    import pandas as pd

    df = pd.DataFrame(entries, columns=SKIPPED_COLUMNS)
    df["bytes"] = df["bytes"].astype("Int64")
    return df


def skipped_counts(skipped) -> list[tuple[int, str]]:
    """(count, words) per reason a file was not audited, most first; the files that are part of
    a model (side files, links audited through) are not counted."""
    from collections import Counter

    from .inventory import NOT_SKIPPED, REASONS

    if skipped is None or not len(skipped):
        return []
    counts: Counter = Counter()
    for r in skipped.to_dict("records"):
        if r["reason"] in NOT_SKIPPED:
            continue
        counts[(r["reason"], r["label"] if r["reason"] == "format_not_read" else "")] += 1
    out = []
    for (reason, label), n in counts.most_common():
        one, many = REASONS.get(reason, (reason, reason))
        out.append((n, (one if n == 1 else many).format(label=label)))
    return out


def _count(n: int, noun: str) -> str:
    return f"{n} {noun}" if n == 1 else f"{n} {noun}s"


def summary_line(models, findings, skipped=None) -> str:
    """'9 models: 0 unreadable, 1 with errors, 2 dangerous pickles, 40 findings; 7 files not
    audited: 2 ExecuTorch (format not read yet), 1 unreadable'."""
    line = (f"{len(models)} {'model' if len(models) == 1 else 'models'}: "
            f"{int((models['status'] != STATUS_OK).sum())} unreadable, "
            f"{int(((models['status'] == STATUS_OK) & (models['errors'] > 0)).sum())} with errors, "
            f"{_count(int((models['pickle_verdict'] == 'dangerous').sum()), 'dangerous pickle')}, "
            f"{_count(len(findings), 'finding')}")
    counts = skipped_counts(skipped)
    total = sum(n for n, _ in counts)
    if total:
        line += (f"; {total} {'file' if total == 1 else 'files'} not audited: "
                 + ", ".join(f"{n} {words}" for n, words in counts))
    return line


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


def build(models: list[str], rows: dict, findings: dict, skipped: set, previous: Tables | None,
          files: list[dict] | None = None) -> Tables:
    """Rows in discovery order; a model unchanged since `previous` keeps its previous row and
    findings. `files`: the files not audited (inventory.FileEntry dicts)."""
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
    return normalize(Tables(_models_frame(out_rows), _findings_frame(out_findings), skipped_frame(files or [])))


def normalize(t: Tables) -> Tables:
    """Through Arrow and back: the frames `mx.audit` returns are the ones its parquet gives."""
    try:
        import pyarrow as pa
    except ImportError:  # pragma: no cover - the audit extra brings it
        return t
    ms, fs, ss = _schemas()
    models = pa.Table.from_pandas(t.models, schema=ms, preserve_index=False).to_pandas()
    findings = pa.Table.from_pandas(t.findings, schema=fs, preserve_index=False).to_pandas()
    skipped = pa.Table.from_pandas(skipped_frame([]) if t.skipped is None else t.skipped, schema=ss,
                                   preserve_index=False).to_pandas()
    return _lists(Tables(models, findings, skipped))


def _lists(t: Tables) -> Tables:
    for c in LIST_COLUMNS:
        t.models[c] = [list(v) if v is not None else [] for v in t.models[c]]
    for c in ("offset", "length"):
        t.findings[c] = t.findings[c].astype("Int64")
    if t.skipped is not None:
        t.skipped["bytes"] = t.skipped["bytes"].astype("Int64")
    return t


def _schemas():
    import pyarrow as pa

    s, i, f = pa.string(), pa.int64(), pa.float64()
    models = pa.schema([("source", s), ("status", s), ("error", s), ("format", s), ("files", i),
                        ("bytes", i), ("tensors", i), ("parameters", i), ("quant_scheme", s),
                        ("bits_per_weight", f), ("pickle_verdict", s), ("dangerous_imports", pa.list_(s)),
                        ("errors", i), ("warnings", i), ("infos", i), ("top_codes", pa.list_(s)),
                        ("seconds", f), ("bytes_read", i), ("fingerprint", s), ("deep", pa.bool_()),
                        ("report", s), ("paths", pa.list_(s))])
    findings = pa.schema([("source", s), ("code", s), ("severity", s), ("file", s), ("offset", i),
                          ("length", i), ("tensor", s), ("message", s), ("fix", s)])
    skipped = pa.schema([("path", s), ("reason", s), ("kind", s), ("label", s), ("detail", s),
                         ("bytes", i), ("model", s)])
    return models, findings, skipped


def write_parquet(models, findings, out, skipped=None) -> tuple[str, ...]:
    """`out` gets the models, NAME.findings.parquet the findings and NAME.skipped.parquet the
    files not audited (written to temp files first, so an interrupted write never leaves half a
    table to resume from)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    ms, fs, ss = _schemas()
    out = os.fspath(out)
    paths = []
    skipped = skipped_frame([]) if skipped is None else skipped
    for df, schema, path in ((models, ms, out), (findings, fs, findings_path(out)),
                             (skipped, ss, findings_path(out, "skipped"))):
        table = pa.Table.from_pandas(df, schema=schema, preserve_index=False)
        tmp = path + ".tmp"
        pq.write_table(table, tmp)
        os.replace(tmp, path)
        paths.append(path)
    return tuple(paths)


def read_parquet(out) -> Tables:
    """The tables as written, list columns back as Python lists (a file an older version wrote
    lacks the skipped table and the models' paths: empty ones stand in)."""
    import pandas as pd

    models = pd.read_parquet(os.fspath(out))
    if "paths" not in models.columns:
        models["paths"] = [[] for _ in range(len(models))]
    fpath, spath = findings_path(out), findings_path(out, "skipped")
    findings = pd.read_parquet(fpath) if os.path.exists(fpath) else _findings_frame([])
    skipped = pd.read_parquet(spath) if os.path.exists(spath) else skipped_frame([])
    return _lists(Tables(models, findings, skipped))


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


def exit_code(models, skipped=None) -> int:
    """0 when no model has an error finding, 1 when some do, 2 when some model or file could not
    be read."""
    if len(models) and (models["status"] != STATUS_OK).any():
        return 2
    if skipped is not None and len(skipped) and (skipped["reason"] == "unreadable").any():
        return 2
    if len(models) and (models["errors"] > 0).any():
        return 1
    return 0
