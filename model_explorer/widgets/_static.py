"""Renderings that need no kernel: the mimebundle's text/HTML summary and the offline report.

Every string that comes from a file goes through `html.escape` here; in the report, the data
travels as JSON inside `<script type="application/json">` (with `<` escaped so no file string
can close the tag) and is drawn with `textContent`.
"""

from __future__ import annotations

import html
import json
import os
from typing import Any

from ..checkpoint import Checkpoint
from ..safe_text import escape, escape_deep
from ..units import format_bytes

MAX_HTML_FINDINGS = 50


def _files_line(ckpt: Checkpoint) -> str:
    names = [os.path.basename(f) for f in ckpt.files[:3]]
    more = f" and {len(ckpt.files) - 3} more" if len(ckpt.files) > 3 else ""
    return ", ".join(names) + more if names else os.path.basename(ckpt.source)


def indexed_line(ckpt: Checkpoint) -> str | None:
    """"19,600 of 20,000 indexed tensors readable" when a shard index promises more."""
    counts = ckpt.indexed_counts()
    if counts is None or counts[0] >= counts[1]:
        return None
    return f"{counts[0]:,} of {counts[1]:,} indexed tensors readable"


def summary_text(ckpt: Checkpoint) -> str:
    c = ckpt.finding_counts()
    mix = ", ".join(f"{k} x{v}" for k, v in list(ckpt.dtype_mix().items())[:6])
    lines = [f"model_explorer: {ckpt.format} checkpoint {_files_line(ckpt)}",
             f"{len(ckpt.files)} file(s), {format_bytes(ckpt.total_size)}, {len(ckpt.tensors)} tensors, "
             f"{ckpt.parameter_count:,} parameters" + (f" ({mix})" if mix else ""),
             f"findings: {c['error']} errors, {c['warning']} warnings, {c['info']} info"]
    if indexed_line(ckpt):
        lines.insert(2, indexed_line(ckpt))
    lines += [f"  {f}" for f in ckpt.findings[:10]]
    return "\n".join(lines)


def summary_html(ckpt: Checkpoint) -> str:
    e = html.escape
    c = ckpt.finding_counts()
    mix = ", ".join(f"{e(str(k))} &times;{v}" for k, v in list(ckpt.dtype_mix().items())[:8])
    rows = "".join(
        f"<li><b>{e(f.severity)}</b> <code>{e(f.code)}</code>: {e(escape(f.message))}"
        + (f" <small>(byte {f.offset})</small>" if f.offset is not None else "") + "</li>"
        for f in ckpt.findings[:MAX_HTML_FINDINGS])
    more = (f"<li>… {len(ckpt.findings) - MAX_HTML_FINDINGS} more</li>"
            if len(ckpt.findings) > MAX_HTML_FINDINGS else "")
    return (
        '<div class="me-static-summary">'
        f"<p><b>model_explorer</b>: {e(ckpt.format)} checkpoint <code>{e(_files_line(ckpt))}</code></p>"
        f"<p>{len(ckpt.files)} file(s), {format_bytes(ckpt.total_size)}, {len(ckpt.tensors)} tensors, "
        f"{ckpt.parameter_count:,} parameters{' (' + mix + ')' if mix else ''}</p>"
        + (f"<p><b>{indexed_line(ckpt)}</b></p>" if indexed_line(ckpt) else "")
        + f"<p>Findings: {c['error']} errors, {c['warning']} warnings, {c['info']} info</p>"
        f"<ul>{rows}{more}</ul></div>")


def _script_json(data: Any) -> str:
    """JSON that is safe inside a <script> element: no `<`, `>` or `&` appear literally."""
    text = json.dumps(data, ensure_ascii=True, default=str, separators=(",", ":"))
    return text.replace("<", "\\u003c").replace(">", "\\u003e").replace("&", "\\u0026")


def report_data(view) -> dict[str, Any]:
    """What the offline report embeds (packed small: see _report.py)."""
    from ._report import report_data as packed

    return packed(view)


def report_html(view) -> str:
    from ..assets import STATIC

    js_path, css_path = STATIC / "report_widget.js", STATIC / "explorer_widget.css"
    if not js_path.is_file():
        raise FileNotFoundError("The widget JavaScript is not built (static/report_widget.js); "
                                "run `make js` first.")
    js = js_path.read_text(encoding="utf-8").replace("</script", "<\\/script")
    css = css_path.read_text(encoding="utf-8") if css_path.is_file() else ""
    title = html.escape(f"model_explorer report: {_files_line(view.checkpoint)}")
    return f"""<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8">
<meta http-equiv="Content-Security-Policy" content="default-src 'none'; script-src 'unsafe-inline'; style-src 'unsafe-inline'; img-src data:">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>{title}</title>
<style>body{{margin:0;padding:12px;font-family:system-ui,sans-serif}}{css}</style>
</head><body>
<noscript>{summary_html(view.checkpoint)}</noscript>
<div id="me-report"></div>
<script type="application/json" id="me-report-data">{_script_json(escape_deep(report_data(view)))}</script>
<script type="module">{js}</script>
</body></html>
"""
