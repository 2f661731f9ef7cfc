"""The audit's tables (models, findings, and the files not audited), their parquet files, the
summary line, and resuming from them."""

from __future__ import annotations

import hashlib
import os
from typing import Any, NamedTuple

from .cells import UNWRITABLE, clean_row, clean_rows, writable

# Each table's columns and their types, once: the frames, the parquet schema and the cleaning of
# cells (cells.py) all read these. "big_ints": a JSON object of the integer cells too large for
# int64 (a header's offset of 2**64, a shape of 10**30), column -> exact decimal text; the int64
# cell is then null.
MODEL_SCHEMA = (("source", "str"), ("status", "str"), ("error", "str"), ("format", "str"),
                ("files", "int"), ("bytes", "int"), ("tensors", "int"), ("parameters", "int"),
                ("quant_scheme", "str"), ("bits_per_weight", "float"), ("pickle_verdict", "str"),
                ("dangerous_imports", "list"), ("errors", "int"), ("warnings", "int"),
                ("infos", "int"), ("top_codes", "list"), ("seconds", "float"), ("bytes_read", "int"),
                ("fingerprint", "str"), ("deep", "bool"), ("report", "str"), ("paths", "list"),
                ("retries", "int"), ("big_ints", "str"))
FINDING_SCHEMA = (("source", "str"), ("code", "str"), ("severity", "str"), ("file", "str"),
                  ("offset", "int"), ("length", "int"), ("tensor", "str"), ("message", "str"),
                  ("fix", "str"), ("big_ints", "str"))
SKIPPED_SCHEMA = (("path", "str"), ("reason", "str"), ("kind", "str"), ("label", "str"),
                  ("detail", "str"), ("bytes", "int"), ("model", "str"), ("big_ints", "str"))
MODEL_COLUMNS = [c for c, _ in MODEL_SCHEMA]
FINDING_COLUMNS = [c for c, _ in FINDING_SCHEMA]
SKIPPED_COLUMNS = [c for c, _ in SKIPPED_SCHEMA]
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


def step_failed(source: str, step: str, error: BaseException) -> dict:
    from ..spans import Finding
    from .task import finding_dict

    return finding_dict(Finding.of("audit_step_failed", f"{step[:1].upper()}{step[1:]} of this model "
                                   f"failed ({type(error).__name__}: {error}); the rest of its "
                                   "audit is kept.", file=source), source)


def findings_path(out: str | os.PathLike, table: str = "findings") -> str:
    """Where a table beside the models' parquet goes: NAME.findings.parquet, NAME.skipped.parquet."""
    out = os.fspath(out)
    stem = out[:-len(".parquet")] if out.endswith(".parquet") else out
    return f"{stem}.{table}.parquet"


def skipped_frame(entries: list[dict]):
    """The files not audited as models, one row each (inventory.FileEntry as dicts)."""
    import pandas as pd

    df = pd.DataFrame(clean_rows(entries, SKIPPED_SCHEMA), columns=SKIPPED_COLUMNS)
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
    unwritable = int((models["status"] == UNWRITABLE).sum()) if len(models) else 0
    line = (f"{len(models)} {'model' if len(models) == 1 else 'models'}: "
            f"{int(((models['status'] != STATUS_OK) & (models['status'] != UNWRITABLE)).sum())} unreadable, "
            + (f"{unwritable} whose rows could not be written, " if unwritable else "") +
            f"{int(((models['status'] == STATUS_OK) & (models['errors'] > 0)).sum())} with errors, "
            f"{_count(int((models['pickle_verdict'] == 'dangerous').sum()), 'dangerous pickle')}, "
            f"{_count(len(findings), 'finding')}")
    retried = models["retries"].fillna(0) if "retries" in models.columns else None
    if retried is not None and (retried > 0).any():
        line += (f"; {_count(int((retried > 0).sum()), 'model')} retried after a worker died "
                 f"({int(retried.sum())} restarts, no row lost)")
    counts = skipped_counts(skipped)
    total = sum(n for n, _ in counts)
    if total:
        line += (f"; {total} {'file' if total == 1 else 'files'} not audited: "
                 + ", ".join(f"{n} {words}" for n, words in counts))
    return line


def _models_frame(rows: list[dict]):
    import pandas as pd

    df = pd.DataFrame(rows, columns=MODEL_COLUMNS)  # (cleaned by build)
    for c in ("files", "bytes", "tensors", "parameters", "errors", "warnings", "infos", "bytes_read",
              "retries"):
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
    fresh = [(clean_row(rows[src], MODEL_SCHEMA), clean_rows(findings.get(src, []), FINDING_SCHEMA))
             for src in models if src in rows and not (src in skipped and src in prev_rows)]
    fresh_iter = iter(writable(fresh, MODEL_SCHEMA, FINDING_SCHEMA, _arrow_schemas()))
    out_rows, out_findings = [], []
    for src in models:
        if src in skipped and src in prev_rows:
            out_rows.append(prev_rows[src])
            out_findings.extend(prev_findings.get(src, []))
        elif src in rows:
            row, found = next(fresh_iter)
            out_rows.append(row)
            out_findings.extend(found)
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


def _arrow_schemas():
    """(models, findings) Arrow schemas, or None without pyarrow."""
    try:
        return _schemas()[:2]
    except ImportError:  # pragma: no cover - the audit extra brings it
        return None


def _schemas():
    import pyarrow as pa

    types = {"str": pa.string(), "int": pa.int64(), "float": pa.float64(), "bool": pa.bool_(),
             "list": pa.list_(pa.string())}
    return tuple(pa.schema([(c, types[t]) for c, t in spec])
                 for spec in (MODEL_SCHEMA, FINDING_SCHEMA, SKIPPED_SCHEMA))


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
    for df in (models, findings, skipped):  # (a file an older version wrote has none)
        if "big_ints" not in df.columns:
            df["big_ints"] = None
    if "retries" not in models.columns:
        models["retries"] = 0
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
