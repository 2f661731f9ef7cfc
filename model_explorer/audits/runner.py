"""`mx.audit(...)`: audit many models on a Dask cluster and collect one row per model.

Discovery (discover.py) identifies every file by its first bytes and groups the weight files into
models. The client submits one task per few models (`task.audit_batch`: fingerprint, then the
headers read in an isolated child); with `deep=True` each model's answer names its tensor ranges,
and one task per range runs the value checks, so a 163-shard model spreads over every worker.
Only rows and findings come back, each row naming the files its model read: a weight file that no
model read (a TorchScript archive beside a safetensors model, a second GGUF, pytorch_model.bin
beside model.safetensors) is then audited on its own, in a second round. Dask reschedules the
tasks of a worker that dies; each model is one future, so its row is counted once whichever
worker finally ran it.
"""

from __future__ import annotations

import os
import sys
import time
from typing import Any, NamedTuple

from ..safe_text import escape_deep
from . import tables
from .discover import plan
from .task import audit_batch, count_findings, deep_part

DEFAULT_TIMEOUT = 300.0
DEFAULT_MEMORY = "4GiB"
MAX_BATCH = 32


class _Pair(NamedTuple):
    models: Any  # pandas.DataFrame, one row per model
    findings: Any  # pandas.DataFrame, one row per finding


class AuditResult(_Pair):
    """The two tables, `models, findings = mx.audit(...)`; `skipped`: the files not audited as
    models, one row each with its reason (a DataFrame); `summary`: the line that counts them."""

    def __new__(cls, models, findings, skipped=None):
        self = super().__new__(cls, models, findings)
        self.skipped = skipped if skipped is not None else tables.skipped_frame([])
        return self

    @property
    def exit_code(self) -> int:
        return tables.exit_code(self.models, self.skipped)

    @property
    def summary(self) -> str:
        return tables.summary_line(self.models, self.findings, self.skipped)


def parse_bytes(value: int | str | None) -> int | None:
    if value is None or isinstance(value, int):
        return value
    from dask.utils import parse_bytes as dask_parse

    return int(dask_parse(value))


def make_client(client=None, scheduler: str | None = None, workers: int | None = None,
                threads: int = 1):
    """(client, owned): the given client, one connected to `scheduler`, or a LocalCluster of
    `workers` processes (the machine's cores by default) that the caller must close; with
    `workers=0`, no Dask: every task runs in this process."""
    if client is None and not scheduler and workers == 0:
        from .inprocess import InProcess

        return InProcess(), False
    try:
        from dask.distributed import Client, LocalCluster
    except ImportError as e:  # pragma: no cover - the optional extra
        raise ImportError("mx.audit and mx.scan run on Dask: pip install 'checkpoint-model-explorer[audit]'") from e
    if client is not None:
        return client, False
    if scheduler:
        return Client(scheduler), True
    n = workers or os.cpu_count() or 1
    cluster = LocalCluster(n_workers=n, threads_per_worker=threads, processes=True,
                           dashboard_address=":0", silence_logs=40)
    return Client(cluster), True


def close_client(client, owned: bool) -> None:
    if not owned:
        return
    cluster = getattr(client, "cluster", None)
    client.close()
    if cluster is not None:
        cluster.close()


class _Progress:
    """Models done, bytes read, errors, rate: tqdm in a terminal or a notebook."""

    def __init__(self, total: int, enabled: bool, client) -> None:
        self.bar = None
        self.bytes = self.errors = self.unreadable = 0
        if not enabled:
            return
        from tqdm.auto import tqdm

        link = getattr(client, "dashboard_link", None)
        if link and _has_dashboard(client):
            print(f"Dask dashboard: {link}", file=sys.stderr)
        self.bar = tqdm(total=total, desc="audit", unit="model", file=sys.stderr, smoothing=0.05)

    def grow(self, n: int) -> None:
        if self.bar is not None:
            self.bar.total += n
            self.bar.refresh()

    def done(self, row: dict, n: int = 1) -> None:
        self.bytes += int(row.get("bytes_read") or 0)
        self.errors += 1 if row.get("errors") else 0
        self.unreadable += 1 if row.get("status") != "ok" else 0
        if self.bar is not None:
            self.bar.update(n)
            self.bar.set_postfix_str(f"read {tables.human(self.bytes)}, {self.errors} with errors, "
                                     f"{self.unreadable} unreadable", refresh=False)

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()


def _has_dashboard(client) -> bool:
    try:
        import bokeh  # noqa: F401
    except ImportError:
        return False
    return True


def audit(sources, out=None, sarif=None, html=None, deep: bool = False, client=None,
          timeout: float | None = DEFAULT_TIMEOUT, memory_limit: int | str | None = DEFAULT_MEMORY,
          scheduler: str | None = None, workers: int | None = None, threads: int = 1,
          progress: bool | None = None, isolate: bool = True, part_bytes: int | None = None,
          layer_stat: str = "mean_abs", max_file_bytes: int | str | None = None,
          _delay: float | None = None, _on_result=None) -> AuditResult:
    """Audit every model in `sources` (paths, folders, globs, URLs, hf:// repos, text files of
    sources).

    Returns (models, findings) DataFrames, and `.skipped`: every file not audited as a model with
    its reason (side files of a model, formats not read yet, unreadable files, files over
    `max_file_bytes`, links leaving a folder). Writes them to `out` (parquet; the findings and
    the skipped files beside it as NAME.findings.parquet and NAME.skipped.parquet), `sarif` and
    `html` when given. A rerun with the same `out` skips models whose files are unchanged (size
    and mtime, or ETag). `timeout` (seconds) and `memory_limit` apply to each model; a model
    that exceeds them, or crashes, is a row with its error and the batch goes on. `workers=0`
    runs every task in this process, without Dask.
    """
    t_start = time.perf_counter()
    found = plan(sources, parse_bytes(max_file_bytes))
    models = list(found.models)
    previous = tables.read_previous(out) if out else None
    done_keys = tables.done_fingerprints(previous, deep) if previous is not None else {}
    reports = None
    if html:
        reports = os.path.join(os.path.dirname(os.path.abspath(os.fspath(html))),
                               os.path.splitext(os.path.basename(os.fspath(html)))[0] + "_reports")
        os.makedirs(reports, exist_ok=True)
    opts = {"deep": deep, "timeout": timeout, "memory_limit": parse_bytes(memory_limit),
            "previous": done_keys, "reports": reports, "isolate": isolate, "part_bytes": part_bytes,
            "delay": _delay}
    client, owned = make_client(client, scheduler, workers, threads)
    rows: dict[str, dict] = {}
    findings: dict[str, list[dict]] = {}
    skipped: set[str] = set()
    bar = _Progress(len(models), sys.stderr.isatty() if progress is None else progress, client)
    keys: dict[str, list[str]] = {}  # task key -> the models it audits, to name the retried
    started = time.time() - 1.0  # (the scheduler stamps its events with its own clock)
    opts["keys"] = keys
    try:
        _run(client, models, opts, rows, findings, skipped, bar, layer_stat, _on_result)
        # Weight files no model read: each is a model of its own (a second round).
        read = files_read(models, rows, skipped, previous)
        more = [w for w in found.weights if normal(w) not in read]
        if more:
            bar.grow(len(more))
            models += more
            _run(client, more, opts, rows, findings, skipped, bar, layer_stat, _on_result)
            read = files_read(models, rows, skipped, previous)
        for src, n in retried(client, keys, started).items():
            if src in rows:
                rows[src]["retries"] = n
    finally:
        bar.close()
        close_client(client, owned)
    files = [e.to_dict() for e in found.files if normal(e.path) not in read]
    result = tables.build(models, rows, findings, skipped, previous, files)
    if out:
        tables.write_parquet(result.models, result.findings, out, result.skipped)
    if sarif:
        from .sarif import write_sarif

        write_sarif(result.models, result.findings, sarif, result.skipped)
    if html:
        from .html import write_html

        write_html(result.models, result.findings, html, time.perf_counter() - t_start, result.skipped)
    return AuditResult(result.models, result.findings, result.skipped)


def normal(path: str) -> str:
    """One spelling per file, to compare what discovery found with what a model's open read (a
    file a link points at is listed as audited through the link: discover.py)."""
    if "://" in path and not path.startswith("file://"):
        return path
    return os.path.abspath(path.removeprefix("file://"))


def files_read(models: list[str], rows: dict, skipped: set, previous) -> set[str]:
    """Every file some model's open read (its row's paths), and the model sources themselves
    (a model whose audit failed is a row already: not audited again)."""
    prev = {}
    if previous is not None:
        prev = {r["source"]: r.get("paths") or [] for r in previous.models.to_dict("records")}
    out = {normal(m) for m in models}
    for src in models:
        paths = rows[src].get("paths") if src in rows else prev.get(src) if src in skipped else None
        out.update(normal(p) for p in paths or [])
    return out


def _run(client, models, opts, rows, findings, skipped, bar, layer_stat, on_result) -> None:
    from .inprocess import as_completed

    size = batch_size(len(models), sum(client.nthreads().values()) or 1)
    task_opts = {k: v for k, v in opts.items() if k != "keys"}
    keys = opts.get("keys", {})
    shallow = {}
    for i in range(0, len(models), size):
        key = f"audit-{i}-{tables.short(models[i])}"
        keys[key] = models[i:i + size]
        shallow[client.submit(audit_batch, models[i:i + size], task_opts, pure=False, key=key)] = keys[key]
    deep_of: dict[Any, tuple[str, int]] = {}
    pending: dict[str, int] = {}
    layer_rows: dict[str, list[dict]] = {}
    ac = as_completed(client, list(shallow))

    def finish(src: str) -> None:
        if opts["deep"] and src in layer_rows:
            try:
                _layer_findings(src, layer_rows.pop(src), findings, layer_stat)
            except Exception as e:  # noqa: BLE001 - one model's step, never the batch
                findings[src].append(tables.step_failed(src, "the layer profile", e))
        count_findings(rows[src], findings[src])
        bar.done(rows[src])
        if on_result is not None:
            on_result(src, rows[src])

    for fut in ac:
        if fut in shallow:
            batch = shallow.pop(fut)
            for src, res in zip(batch, _results_or_crash(fut, batch)):
                if res.get("skipped"):
                    skipped.add(src)
                    bar.done({})
                    continue
                rows[src] = res["row"]
                findings[src] = res["findings"]
                parts = res.get("parts") or []
                if not parts:
                    finish(src)
                    continue
                pending[src] = len(parts)
                for j, names in enumerate(parts):
                    key = f"deep-{j}-{tables.short(src)}"
                    keys[key] = [src]
                    f = client.submit(deep_part, src, res["row"]["fingerprint"], names, j == 0,
                                      task_opts, pure=False, key=key)
                    deep_of[f] = (src, j)
                    ac.add(f)
        else:
            src, _ = deep_of.pop(fut)
            try:
                part = fut.result()
            except Exception as e:  # noqa: BLE001 - a worker killed again and again (KilledWorker)
                part = {"status": "crashed", "error": f"{type(e).__name__}: {e}", "tensors": [],
                        "findings": [tables.crash_finding(src, e)], "bytes_read": 0, "seconds": 0.0}
            row = rows[src]
            findings[src].extend(part["findings"])
            layer_rows.setdefault(src, []).extend(part["tensors"])
            row["bytes_read"] += part["bytes_read"]
            row["seconds"] += part["seconds"]
            if part["status"] != "ok" and row["status"] == "ok":
                row["status"], row["error"] = part["status"], part["error"]
            pending[src] -= 1
            if not pending[src]:
                finish(src)
        fut.release()


def retried(client, keys: dict[str, list[str]], since: float) -> dict[str, int]:
    """source -> how many times a task auditing it was started again because its worker died
    (the scheduler's remove-worker events since `since` list the tasks it was processing; Dask
    reschedules them). The scheduler logs each such event under the worker's topic and under
    "all": only "all" is read. Nothing on the in-process runner."""
    get_events = getattr(client, "get_events", None)
    if get_events is None or not keys:
        return {}
    try:
        events = get_events("all")
    except Exception:  # noqa: BLE001 - a scheduler that cannot say: nothing is claimed
        return {}
    out: dict[str, int] = {}
    for stamp, msg in events or ():
        if stamp < since or not isinstance(msg, dict) or msg.get("action") != "remove-worker":
            continue  # (an earlier audit on this cluster used the same keys)
        for key in msg.get("processing-tasks") or ():
            for src in keys.get(key, ()):
                out[src] = out.get(src, 0) + 1
    return out


def batch_size(models: int, threads: int) -> int:
    """Models per task: enough to amortise a task and a fork (~10 ms), while leaving at least
    eight tasks per thread so the cluster stays balanced to the end."""
    return max(1, min(MAX_BATCH, models // (8 * threads)))


def _results_or_crash(fut, batch: list[str]) -> list[dict]:
    from .task import base_row

    try:
        return fut.result()
    except Exception as e:  # noqa: BLE001 - the task's worker died each time it was tried
        out = []
        for src in batch:
            row = base_row(src)
            row.update(status="crashed", error=f"{type(e).__name__}: {e}", errors=1, top_codes=["audit_crashed"])
            out.append({"row": row, "findings": [tables.crash_finding(src, e)], "parts": []})
        return out


def _layer_findings(src: str, tensor_rows: list[dict], findings: dict, stat: str) -> None:
    """The layer profile over the deep parts' per-tensor values (on the client: small tables)."""
    import pandas as pd

    from ..checks.layers import layer_findings
    from .task import finding_dict

    if not tensor_rows:
        return
    table = pd.DataFrame(escape_deep(tensor_rows))  # names a file gave: no lone surrogates
    findings[src].extend(finding_dict(f, src) for f in layer_findings(table, stat))
