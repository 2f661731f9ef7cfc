"""SARIF 2.1.0 for code-scanning tools: one rule per finding code, one result per finding,
located by the file's URI and the byte region (byteOffset / byteLength) the finding points at.
Every file not audited as a model is a tool execution notification of the run, with its reason."""

from __future__ import annotations

import json
import math
import os
import pathlib
from typing import Any

from .. import sources
from ..codes import CATALOG, generic_fix

SCHEMA_URI = "https://docs.oasis-open.org/sarif/sarif/v2.1.0/errata01/os/schemas/sarif-schema-2.1.0.json"
LEVEL = {"error": "error", "warning": "warning", "info": "note"}
# How loudly each reason a file was not audited is said (inventory.REASONS).
SKIP_LEVEL = {"unreadable": "error", "format_not_read": "warning", "too_large": "warning",
              "link_outside": "warning", "not_model": "note", "not_searched": "note",
              "side_file": "none", "alias": "none"}
MAX_NOTIFICATIONS = 10_000


def file_uri(path: str) -> str:
    if sources.is_remote(path) or path.startswith("file://"):
        return path
    return pathlib.Path(os.path.abspath(path)).as_uri()


def _int(v) -> int | None:
    if v is None:
        return None
    try:
        if isinstance(v, float) and math.isnan(v):
            return None
        i = int(v)
    except (TypeError, ValueError):
        return None
    return i if i >= 0 else None


def _text(v) -> str | None:
    return v if isinstance(v, str) and v else None


def _rule(code: str, severity: str) -> dict[str, Any]:
    c = CATALOG.get(code)
    rule: dict[str, Any] = {
        "id": code,
        "name": "".join(w.capitalize() for w in code.split("_")),
        "shortDescription": {"text": c.meaning if c else code},
        "defaultConfiguration": {"level": LEVEL.get(c.severity if c else severity, "warning")},
    }
    if c and c.fix:
        rule["help"] = {"text": generic_fix(code)}
    return rule


def _skip_notification(r: dict) -> dict[str, Any]:
    out: dict[str, Any] = {
        "level": SKIP_LEVEL.get(r["reason"], "note"),
        "message": {"text": f"Not audited as a model: {r['detail']}"},
        "descriptor": {"id": r["reason"]},
        "locations": [{"physicalLocation": {"artifactLocation": {"uri": file_uri(r["path"])}}}],
        "properties": {"reason": r["reason"], "kind": r["kind"], "label": r["label"]},
    }
    if _text(r.get("model")):
        out["properties"]["model"] = r["model"]
    if _int(r.get("bytes")) is not None:
        out["properties"]["bytes"] = _int(r["bytes"])
    return out


def _notifications(models, skipped) -> list[dict[str, Any]]:
    """A model that could not be read, then each file not audited as a model."""
    bad = [r for r in models.to_dict("records") if r["status"] != "ok"]
    out = [{"level": "error", "message": {"text": f"{r['source']}: {r['status']}: {r['error']}"}}
           for r in bad[:1000]]
    rows = [] if skipped is None else skipped.to_dict("records")
    out += [_skip_notification(r) for r in rows[:MAX_NOTIFICATIONS]]
    if len(rows) > MAX_NOTIFICATIONS:
        out.append({"level": "note", "message": {"text": f"{len(rows) - MAX_NOTIFICATIONS:,} more files "
                                                         "not audited; the skipped-files table lists them all."}})
    return out


def sarif_log(models, findings, version: str | None = None, skipped=None) -> dict[str, Any]:
    """The SARIF log as a dict."""
    from .. import __version__
    from .tables import skipped_counts, summary_line

    records = findings.to_dict("records")
    codes: dict[str, int] = {}
    rules = []
    for f in records:
        if f["code"] not in codes:
            codes[f["code"]] = len(rules)
            rules.append(_rule(f["code"], f["severity"]))
    results = []
    for f in records:
        where = _text(f.get("file")) or f["source"]
        phys: dict[str, Any] = {"artifactLocation": {"uri": file_uri(where)}}
        off, ln = _int(f.get("offset")), _int(f.get("length"))
        if off is not None:
            region = {"byteOffset": off}
            if ln is not None:
                region["byteLength"] = ln
            phys["region"] = region
        result: dict[str, Any] = {
            "ruleId": f["code"], "ruleIndex": codes[f["code"]],
            "level": LEVEL.get(f["severity"], "warning"),
            "message": {"text": f["message"] or f["code"]},
            "locations": [{"physicalLocation": phys}],
            "properties": {"model": f["source"]},
        }
        if _text(f.get("tensor")):
            result["locations"][0]["logicalLocations"] = [{"name": f["tensor"], "kind": "member"}]
            result["properties"]["tensor"] = f["tensor"]
        if _text(f.get("fix")):
            result["properties"]["fix"] = f["fix"]
        results.append(result)
    bad = (models["status"] != "ok").any() if len(models) else False
    return {
        "$schema": SCHEMA_URI,
        "version": "2.1.0",
        "runs": [{
            "tool": {"driver": {"name": "model_explorer", "version": version or __version__,
                                "rules": rules}},
            "invocations": [{
                "executionSuccessful": not bad,
                "toolExecutionNotifications": _notifications(models, skipped),
            }],
            "results": results,
            "properties": {"models": len(models),
                           "filesNotAudited": sum(n for n, _ in skipped_counts(skipped)),
                           "summary": summary_line(models, findings, skipped)},
        }],
    }


def write_sarif(models, findings, path, skipped=None) -> str:
    path = os.fspath(path)
    with open(path, "w", encoding="utf-8") as f:
        json.dump(sarif_log(models, findings, skipped=skipped), f, indent=1)
    return path
