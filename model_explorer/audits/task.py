"""What a worker does for one model: fingerprint it, open it (headers only) in an isolated child,
and turn the Checkpoint into one small row and a list of findings; for deep audits, run the value
checks over one range of its tensors.

Everything returned is plain Python (str, int, float, lists, dicts): it crosses to the client.
"""

from __future__ import annotations

import hashlib
import json
import os
import threading
import time
from collections import Counter, OrderedDict
from typing import Any

from .. import sources
from ..spans import Finding
from .inventory import error_text
from .isolate import Failed, run_isolated_batch

MAX_FINDINGS = 1000  # per model returned to the client; the counts cover all of them
PART_BYTES = 256 * 2**20  # a deep task's tensor range, in stored bytes
PART_TENSORS = 4096
TOP_CODES = 5


# -- fingerprints ------------------------------------------------------------------------------

def _remote_entries(url: str) -> list[tuple]:
    import fsspec

    fs, path = fsspec.core.url_to_fs(url)
    info = fs.info(path)
    infos = fs.ls(path, detail=True) if info.get("type") == "directory" else [info]
    out = []
    for i in infos:
        if i.get("type") == "directory":
            continue
        tag = i.get("ETag") or i.get("etag") or i.get("LastModified") or i.get("mtime") or i.get("last_modified")
        out.append((posixbase(i.get("name", "")), int(i.get("size") or 0), str(tag)))
    return out


def posixbase(p: str) -> str:
    return p.rstrip("/").rsplit("/", 1)[-1]


def fingerprint(source: str) -> dict[str, Any]:
    """Size and mtime (local) or size and ETag (remote) of every file the model spans, hashed.
    Raises OSError when the source cannot be reached."""
    if source.startswith("hf://"):
        from .. import hub

        try:
            repo = hub.HubRepo(source)  # its listing: names and sizes at this revision
            entries = sorted((rel, size, repo.revision) for rel, size in repo.files.items())
        except hub.HubError:
            entries = []  # the open says what the Hub refused, as a finding
    elif sources.is_remote(source):
        entries = _remote_entries(source)
    else:
        given = source[7:] if source.startswith("file://") else source
        path = sources.container(given)  # a member of an archive (pkg.whl!/m.pt): the archive's
        if path.endswith(".index.json"):
            path = os.path.dirname(os.path.abspath(path))
        if os.path.isdir(path):
            entries = []
            for e in sorted(os.scandir(path), key=lambda e: e.name):
                if e.is_file():
                    st = e.stat()
                    entries.append((e.name, st.st_size, st.st_mtime_ns))
        else:
            st = os.stat(path)
            entries = [(os.path.basename(path) if path == given else given, st.st_size, st.st_mtime_ns)]
    key = hashlib.sha1(json.dumps(entries).encode()).hexdigest()[:20]
    return {"key": key, "files": len(entries), "bytes": sum(e[1] for e in entries)}


# -- rows and findings -------------------------------------------------------------------------

def finding_dict(f: Finding, source: str) -> dict[str, Any]:
    return {"source": source, "code": f.code, "severity": f.severity, "file": f.file,
            "offset": f.offset, "length": f.length, "tensor": f.tensor, "message": f.message,
            "fix": f.fix}


def bytes_read(ckpt) -> int:
    return sum(int(getattr(s, "bytes_read", 0)) for s in getattr(ckpt.sources, "_open", {}).values())


def _quant(summary: dict) -> tuple[str | None, float | None]:
    q = summary.get("quantization") or {}
    if not isinstance(q, dict) or not q:
        return None, None
    scheme = q.get("label") or q.get("file_type") or q.get("scheme")
    bits = q.get("overall_bits_per_weight") or q.get("bits_per_weight") or q.get("bits")
    try:
        bits = float(bits) if bits is not None else None
    except (TypeError, ValueError):
        bits = None
    return (str(scheme) if scheme is not None else None), bits


def _pickle(ckpt) -> tuple[str | None, list[str]]:
    p = ckpt.details.get("pickle")
    verdicts = [p] if isinstance(p, dict) else []
    for d in (ckpt.details.get("files") or {}).values():  # every .bin shard, not just the first
        if isinstance(d, dict) and isinstance(d.get("pickle"), dict):
            verdicts.append(d["pickle"])
    if not verdicts:
        return None, []
    order = ["safe", "needs_classes", "suspicious", "dangerous"]
    worst = max((v.get("verdict", "safe") for v in verdicts), key=lambda v: order.index(v) if v in order else 0)
    dangerous = sorted({f"{i.get('module')}.{i.get('name')}" for v in verdicts for i in v.get("imports", [])
                        if i.get("severity") == "error"})
    return worst, dangerous


def base_row(source: str) -> dict[str, Any]:
    return {"source": source, "status": "ok", "error": None, "format": None, "files": 0, "bytes": 0,
            "tensors": 0, "parameters": 0, "quant_scheme": None, "bits_per_weight": None,
            "pickle_verdict": None, "dangerous_imports": [], "errors": 0, "warnings": 0, "infos": 0,
            "top_codes": [], "seconds": 0.0, "bytes_read": 0, "fingerprint": None, "deep": False,
            "report": None, "paths": [], "retries": 0}


def count_findings(row: dict, findings: list[dict]) -> None:
    sev = Counter(f["severity"] for f in findings)
    row["errors"], row["warnings"], row["infos"] = sev["error"], sev["warning"], sev["info"]
    row["top_codes"] = [c for c, _ in Counter(f["code"] for f in findings).most_common(TOP_CODES)]


def _partitions(ckpt, part_bytes: int) -> list[list[str]]:
    """Tensor names in ranges of about `part_bytes` stored bytes, file by file."""
    parts: list[list[str]] = []
    cur: list[str] = []
    size, file = 0, None
    for name, info in ckpt.tensors.items():
        if cur and (info.file != file or size >= part_bytes or len(cur) >= PART_TENSORS):
            parts.append(cur)
            cur, size = [], 0
        cur.append(name)
        size += info.stored_bytes
        file = info.file
    if cur:
        parts.append(cur)
    return parts


def _shallow(source: str, opts: dict) -> dict[str, Any]:
    """In the isolated child: open the headers, make the row, findings, parts, report."""
    from ..opener import open as open_model

    t0 = time.perf_counter()
    row = base_row(source)
    try:
        ckpt = open_model(source, cross_check=True)  # an audit's findings are doctor's
    except (OSError, ValueError) as e:
        return {"unreadable": f"cannot read {source}: {error_text(e)}"}
    try:
        ckpt.build_all()  # as doctor does: what building the spans left for later meets is found
        s = ckpt.summary()
        row["paths"] = [str(f) for f in ckpt.files]
        row.update(format=s["format"], files=len(s["files"]), bytes=int(s["total_size"]),
                   tensors=int(s["tensor_count"]), parameters=int(s["parameter_count"]))
        row["quant_scheme"], row["bits_per_weight"] = _quant(s)
        row["pickle_verdict"], row["dangerous_imports"] = _pickle(ckpt)
        findings = [finding_dict(f, source) for f in ckpt.findings]
        parts = _partitions(ckpt, opts.get("part_bytes") or PART_BYTES) if opts.get("deep") else []
        row["bytes_read"] = bytes_read(ckpt)  # before the report, which reads pages of bytes
        if opts.get("reports"):
            row["report"] = _save_report(ckpt, opts["reports"], source)
    finally:
        ckpt.close()
    row["seconds"] = time.perf_counter() - t0
    return {"row": row, "findings": findings, "parts": parts}


def report_name(source: str) -> str:
    stem = posixbase(source.rstrip("/")) or "model"
    safe = "".join(c if c.isalnum() or c in "-_." else "_" for c in stem)[:60]
    return f"{safe}-{hashlib.sha1(source.encode()).hexdigest()[:8]}.html"


def _save_report(ckpt, folder: str, source: str) -> str | None:
    """The model's own offline Explorer report; the static summary when the JS is not built."""
    name = report_name(source)
    path = os.path.join(folder, name)
    try:
        from ..widgets.explorer import Explorer

        Explorer(ckpt).save_html(path)
    except Exception:  # noqa: BLE001 - no built widget JS, or a view that cannot render
        import html

        from ..widgets._static import summary_html

        with open(path, "w", encoding="utf-8") as f:
            f.write(f"<!DOCTYPE html><meta charset='utf-8'><title>{html.escape(name)}</title>"
                    f"{summary_html(ckpt)}")
    return name


def _warm(opts: dict) -> None:
    """Import what the child needs before forking, so each child does not import it again."""
    from .. import opener  # noqa: F401
    from ..assemble import assemble  # noqa: F401

    if opts.get("reports"):
        try:
            from ..widgets import explorer  # noqa: F401
        except Exception:  # noqa: BLE001
            pass


def audit_batch(batch: list[str], opts: dict) -> list[dict[str, Any]]:
    """The worker's task for a few models: one forked child audits them one after the other (a
    new child takes over after a hang or a crash). Never raises: failures become rows."""
    if opts.get("delay"):  # tests: keep tasks in flight long enough to kill a worker
        time.sleep(opts["delay"])
    results: dict[int, dict] = {}
    todo: list[tuple[int, str, dict, dict, float]] = []
    for k, source in enumerate(batch):
        t0 = time.perf_counter()
        row = base_row(source)
        try:
            fp = fingerprint(source)
        except (OSError, ValueError) as e:
            results[k] = _failed(row, "unreadable", f"cannot read {source}: {error_text(e)}", t0)
            continue
        if (opts.get("previous") or {}).get(source) == fp["key"]:
            results[k] = {"source": source, "skipped": True, "fingerprint": fp["key"]}
            continue
        todo.append((k, source, row, fp, t0))
    if todo:
        _warm(opts)
        sources_ = [t[1] for t in todo]
        if opts.get("isolate", True):
            outs = run_isolated_batch(lambda src: _shallow(src, opts), sources_, opts.get("timeout"),
                                      opts.get("memory_limit"))
        else:
            outs = ((i, _in_process(src, opts)) for i, src in enumerate(sources_))
        for i, out in outs:
            k, source, row, fp, t0 = todo[i]
            results[k] = _finish(out, source, row, fp, t0, opts)
    return [results[k] for k in range(len(batch))]


def audit_model(source: str, opts: dict) -> dict[str, Any]:
    """One model's audit (see `audit_batch`)."""
    return audit_batch([source], opts)[0]


def _in_process(source: str, opts: dict):
    try:
        return _shallow(source, opts)
    except Exception as e:  # noqa: BLE001 - a reader's crash is this row's, not the batch's
        return Failed("crashed", f"{type(e).__name__}: {e}")


def _finish(out, source: str, row: dict, fp: dict, t0: float, opts: dict) -> dict[str, Any]:
    if isinstance(out, Failed):
        code = {"timeout": "audit_timeout", "memory": "audit_memory"}.get(out.kind, "audit_crashed")
        return _failed(row, out.kind, str(out), t0, fp, code)
    if "unreadable" in out:
        return _failed(row, "unreadable", out["unreadable"], t0, fp)
    out["row"]["fingerprint"] = fp["key"]
    out["row"]["deep"] = bool(opts.get("deep"))
    out["source"] = source
    out["findings_total"] = len(out["findings"])
    out["findings"] = out["findings"][:MAX_FINDINGS]
    return out


def _failed(row: dict, status: str, message: str, t0: float, fp: dict | None = None,
            code: str = "unreadable") -> dict[str, Any]:
    row.update(status=status, error=message, seconds=time.perf_counter() - t0)
    if fp:
        row.update(fingerprint=fp["key"], files=fp["files"], bytes=fp["bytes"])
    finding = finding_dict(Finding.of(code, message, file=row["source"]), row["source"])
    row["errors"], row["top_codes"] = 1, [code]
    return {"source": row["source"], "row": row, "findings": [finding], "parts": [], "findings_total": 1}


# -- deep: one tensor range on a worker, with the opened model kept per worker -------------------

_CACHE: OrderedDict = OrderedDict()
_CACHE_LOCK = threading.Lock()
CACHE_MODELS = 2


def cached_open(source: str, key: str | None):
    """The worker's open Checkpoint of `source` (headers read once per worker, not per task)."""
    from ..opener import open as open_model

    with _CACHE_LOCK:  # held while opening: threads of one worker read the headers once
        ckpt = _CACHE.get((source, key))
        if ckpt is not None:
            _CACHE.move_to_end((source, key))
            return ckpt
        ckpt = open_model(source)
        _CACHE[(source, key)] = ckpt
        while len(_CACHE) > CACHE_MODELS:
            _, old = _CACHE.popitem(last=False)
            old.close()
    return ckpt


class _Deadline(Exception):
    pass


def deep_part(source: str, key: str | None, names: list[str], model_checks: bool, opts: dict) -> dict:
    """Value checks over `names` (and the whole-model checks for one part of each model)."""
    from ..checks.deep import deep_check

    t0 = time.perf_counter()
    timeout = opts.get("timeout")
    tensors: list[dict] = []
    try:
        ckpt = cached_open(source, key)
        before = bytes_read(ckpt)
        info = ckpt.tensors

        def tick(i, n, name):
            if timeout and time.perf_counter() - t0 > timeout:
                raise _Deadline(name)

        def seen(name, s):
            t = info[name]
            tensors.append({"name": name, "file": t.file, "offset": t.offset, "length": t.length,
                            "min": s.lo if s.finite else None, "max": s.hi if s.finite else None,
                            "absmax": s.absmax, "mean_abs": s.abs_sum / s.finite if s.finite else None,
                            "numel": s.count, "nan": s.nan, "inf": s.inf})

        found = deep_check(_View(ckpt), progress=tick, names=names, model_checks=model_checks, seen=seen)
        findings = [finding_dict(f, source) for f in found]
        status, error = "ok", None
        read = bytes_read(ckpt) - before
    except _Deadline as e:
        findings, status, read = [], "timeout", 0
        error = f"deep checks stopped after {timeout:g} s at tensor {e.args[0]!r}"
        findings = [finding_dict(Finding.of("audit_timeout", error, tensor=e.args[0], file=source), source)]
    except (OSError, ValueError) as e:
        status, error, read = "unreadable", f"{type(e).__name__}: {e}", 0
        findings = [finding_dict(Finding.of("unreadable", error, file=source), source)]
    return {"source": source, "status": status, "error": error, "findings": findings[:MAX_FINDINGS],
            "tensors": tensors, "bytes_read": read, "seconds": time.perf_counter() - t0}


class _View:
    """The cached Checkpoint seen by one deep task: its own findings list, shared everything else,
    so tasks on one worker never append to each other's findings."""

    def __init__(self, ckpt) -> None:
        self._ckpt = ckpt
        self.findings: list = []

    def __getattr__(self, name):
        return getattr(self._ckpt, name)
