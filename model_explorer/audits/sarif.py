"""SARIF 2.1.0 for code-scanning tools: one rule per finding code, one result per finding,
located by the file's URI and the byte region (byteOffset / byteLength) the finding points at."""

from __future__ import annotations

import json
import math
import os
import pathlib
from typing import Any

from .. import sources
from ..codes import CATALOG

SCHEMA_URI = "https://docs.oasis-open.org/sarif/sarif/v2.1.0/errata01/os/schemas/sarif-schema-2.1.0.json"
LEVEL = {"error": "error", "warning": "warning", "info": "note"}


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
        rule["help"] = {"text": c.fix}
    return rule


def sarif_log(models, findings, version: str | None = None) -> dict[str, Any]:
    """The SARIF log as a dict."""
    from .. import __version__

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
    bad = [r for r in models.to_dict("records") if r["status"] != "ok"]
    return {
        "$schema": SCHEMA_URI,
        "version": "2.1.0",
        "runs": [{
            "tool": {"driver": {"name": "model_explorer", "version": version or __version__,
                                "rules": rules}},
            "invocations": [{
                "executionSuccessful": not bad,
                "toolExecutionNotifications": [
                    {"level": "error", "message": {"text": f"{r['source']}: {r['status']}: {r['error']}"}}
                    for r in bad[:1000]],
            }],
            "results": results,
            "properties": {"models": len(models)},
        }],
    }


def write_sarif(models, findings, path) -> str:
    path = os.fspath(path)
    with open(path, "w", encoding="utf-8") as f:
        json.dump(sarif_log(models, findings), f, indent=1)
    return path
