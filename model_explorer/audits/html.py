"""The offline audit dashboard: one HTML file, no network requests (a strict CSP says so).

Totals by verdict, then every model worst first, each linking to its own saved Explorer report,
then every file not audited as a model with its reason (side files folded away).
The data travels as JSON inside `<script type="application/json">` with `<`, `>` and `&`
escaped, and the page draws it with `textContent`: no file string ever becomes markup.
"""

from __future__ import annotations

import json
import os
from typing import Any

MAX_FINDINGS_PER_MODEL = 30


def verdict(row: dict) -> str:
    if row["status"] != "ok":
        return "unreadable"
    if row.get("pickle_verdict") == "dangerous":
        return "dangerous"
    if row["errors"]:
        return "errors"
    if row["warnings"] or row.get("pickle_verdict") in ("suspicious", "needs_classes"):
        return "warnings"
    return "clean"


ORDER = ["dangerous", "unreadable", "errors", "warnings", "clean"]


MAX_SKIPPED_ROWS = 20_000


def _str(value) -> str:
    """A text cell, "" where the table holds no text (None, or NaN: pandas 3 strings)."""
    return value if isinstance(value, str) else ""


def _skipped_rows(skipped) -> list[list]:
    from .inventory import NOT_SKIPPED

    rows = [] if skipped is None else skipped.to_dict("records")
    rows.sort(key=lambda r: (r["reason"] in NOT_SKIPPED, r["reason"], r["path"]))
    return [[r["path"], r["reason"], _str(r["label"]), _str(r["detail"]), _str(r.get("model")),
             r["reason"] in NOT_SKIPPED] for r in rows[:MAX_SKIPPED_ROWS]]


def dashboard_data(models, findings, seconds: float, skipped=None) -> dict[str, Any]:
    by_source: dict[str, list] = {}
    for f in findings.to_dict("records"):
        lst = by_source.setdefault(f["source"], [])
        if len(lst) < MAX_FINDINGS_PER_MODEL:
            lst.append([f["severity"], f["code"], f["message"], _str(f.get("tensor")),
                        None if f.get("offset") is None or f["offset"] != f["offset"] else int(f["offset"])])
    rows = []
    for r in models.to_dict("records"):
        v = verdict(r)
        rows.append({"source": r["source"], "verdict": v, "status": r["status"], "error": _str(r["error"]),
                     "format": _str(r["format"]), "bytes": int(r["bytes"]), "parameters": int(r["parameters"]),
                     "quant": _str(r["quant_scheme"]), "pickle": _str(r["pickle_verdict"]),
                     "dangerous": list(r["dangerous_imports"]), "errors": int(r["errors"]),
                     "warnings": int(r["warnings"]), "infos": int(r["infos"]), "codes": list(r["top_codes"]),
                     "seconds": float(r["seconds"]), "report": _str(r["report"]),
                     "findings": by_source.get(r["source"], [])})
    rows.sort(key=lambda r: (ORDER.index(r["verdict"]), -r["errors"], -r["warnings"], r["source"]))
    totals = {v: sum(1 for r in rows if r["verdict"] == v) for v in ORDER}
    from .tables import skipped_counts, summary_line

    return {"totals": totals, "models": rows, "seconds": seconds,
            "bytes": int(models["bytes"].sum()) if len(models) else 0,
            "bytes_read": int(models["bytes_read"].sum()) if len(models) else 0,
            "summary": summary_line(models, findings, skipped),
            "not_audited": [[n, words] for n, words in skipped_counts(skipped)],
            "skipped": _skipped_rows(skipped),
            "skipped_total": 0 if skipped is None else len(skipped)}


def _script_json(data: Any) -> str:
    text = json.dumps(data, ensure_ascii=True, default=str, allow_nan=False)  # the browser's JSON has no NaN
    return text.replace("<", "\\u003c").replace(">", "\\u003e").replace("&", "\\u0026")


_CSS = """
body{font-family:system-ui,sans-serif;margin:16px;color:#222}
h1{font-size:20px;margin:0 0 8px}
.totals{display:flex;gap:10px;margin:10px 0}
.tot{padding:8px 12px;border-radius:6px;min-width:90px;cursor:pointer;border:2px solid transparent}
.tot b{display:block;font-size:22px}
.tot.on{border-color:#333}
.dangerous{background:#f8d0d0}.unreadable{background:#e6d5f5}.errors{background:#fde2c8}
.warnings{background:#fff4c2}.clean{background:#d7f2d7}
table{border-collapse:collapse;width:100%;font-size:13px}
th,td{border-bottom:1px solid #ddd;padding:4px 6px;text-align:left;vertical-align:top}
th{background:#f4f4f4;position:sticky;top:0}
td.num{text-align:right;font-variant-numeric:tabular-nums}
.badge{padding:1px 6px;border-radius:4px;font-size:12px}
details summary{cursor:pointer}
.f{font-size:12px;margin:2px 0}.f code{background:#eee;padding:0 3px}
#filter{width:320px;padding:4px;margin:6px 0}
h2{font-size:16px;margin:18px 0 6px}
.skips{display:flex;gap:8px;flex-wrap:wrap;margin:6px 0}
.skip{padding:4px 8px;border-radius:6px;background:#eee}
"""

_JS = r"""
const data = JSON.parse(document.getElementById('audit-data').textContent);
const el = (tag, text, cls) => { const e = document.createElement(tag);
  if (text !== undefined && text !== null) e.textContent = String(text); if (cls) e.className = cls; return e; };
const human = n => { const u = ['B','KiB','MiB','GiB','TiB']; let i = 0;
  while (n >= 1024 && i < u.length - 1) { n /= 1024; i++; } return (i ? n.toFixed(1) : n) + ' ' + u[i]; };
let only = null;
const head = document.getElementById('head');
head.textContent = `${data.summary}. ${human(data.bytes)} on disk, ${human(data.bytes_read)} read, `
  + `${data.seconds.toFixed(1)} s`;
const tot = document.getElementById('totals');
for (const [k, n] of Object.entries(data.totals)) {
  const d = el('div', null, 'tot ' + k); d.append(el('b', n), el('span', k));
  d.onclick = () => { only = only === k ? null : k;
    for (const c of tot.children) c.classList.toggle('on', c === d && only !== null); draw(); };
  tot.append(d);
}
const filter = document.getElementById('filter');
filter.oninput = () => draw();
function draw() {
  const body = document.getElementById('rows'); body.replaceChildren();
  const q = filter.value.toLowerCase();
  let shown = 0;
  for (const m of data.models) {
    if (only && m.verdict !== only) continue;
    if (q && !(m.source.toLowerCase().includes(q) || m.codes.join(' ').includes(q))) continue;
    if (++shown > 5000) break;
    const tr = el('tr');
    const v = el('td'); v.append(el('span', m.verdict, 'badge ' + m.verdict)); tr.append(v);
    const src = el('td');
    if (m.report) { const a = el('a', m.source); a.href = encodeURI(data.reports) + encodeURIComponent(m.report); a.target = '_blank'; src.append(a); }
    else src.append(el('span', m.source));
    if (m.error) src.append(el('div', m.status + ': ' + m.error, 'f'));
    if (m.dangerous.length) src.append(el('div', 'dangerous imports: ' + m.dangerous.join(', '), 'f'));
    if (m.findings.length) {
      const det = el('details'); det.append(el('summary', m.findings.length + ' findings'));
      for (const [sev, code, msg, tensor, off] of m.findings) {
        const p = el('div', null, 'f'); p.append(el('b', sev + ' '), el('code', code),
          el('span', ' ' + msg + (tensor ? ' [' + tensor + ']' : '') + (off !== null ? ' @ byte ' + off : '')));
        det.append(p);
      }
      src.append(det);
    }
    tr.append(src, el('td', m.format), el('td', m.quant || m.pickle), el('td', human(m.bytes), 'num'),
      el('td', m.parameters.toLocaleString(), 'num'), el('td', m.errors, 'num'), el('td', m.warnings, 'num'),
      el('td', m.codes.join(', ')), el('td', m.seconds.toFixed(2), 'num'));
    body.append(tr);
  }
}
draw();
const skipHead = document.getElementById('skip-head');
skipHead.textContent = data.not_audited.length
  ? data.not_audited.reduce((n, [k]) => n + k, 0) + ' files not audited as models'
  : 'Every file found was audited, or is a side file of a model';
const skips = document.getElementById('skip-counts');
for (const [n, words] of data.not_audited) skips.append(el('span', n + ' ' + words, 'skip'));
const skipRow = ([path, reason, label, detail, model]) => {
  const tr = el('tr'); tr.append(el('td', path), el('td', reason), el('td', label), el('td', detail),
    el('td', model)); return tr; };
const notAudited = document.getElementById('skipped-rows');
const side = document.getElementById('side-rows');
let sides = 0;
for (const r of data.skipped) { if (r[5]) { sides++; side.append(skipRow(r)); } else notAudited.append(skipRow(r)); }
document.getElementById('side-summary').textContent = sides + ' side files of models (configs, tokenizers, text, images) and links audited through';
if (data.skipped.length < data.skipped_total)
  document.getElementById('skip-more').textContent = (data.skipped_total - data.skipped.length)
    + ' more rows in the skipped-files parquet table';
"""


def dashboard_html(models, findings, seconds: float = 0.0, reports: str = "", skipped=None) -> str:
    data = dashboard_data(models, findings, seconds, skipped)
    data["reports"] = reports
    return f"""<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8">
<meta http-equiv="Content-Security-Policy" content="default-src 'none'; script-src 'unsafe-inline'; style-src 'unsafe-inline'">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>model_explorer audit</title><style>{_CSS}</style></head><body>
<h1>model_explorer audit</h1><div id="head"></div>
<div class="totals" id="totals"></div>
<input id="filter" placeholder="filter by path or finding code">
<table><thead><tr><th>verdict</th><th>model</th><th>format</th><th>quantization / pickle</th><th>size</th>
<th>parameters</th><th>errors</th><th>warnings</th><th>top codes</th><th>s</th></tr></thead>
<tbody id="rows"></tbody></table>
<h2 id="skip-head"></h2><div class="skips" id="skip-counts"></div>
<table class="me-skipped"><thead><tr><th>file</th><th>reason</th><th>what it is</th><th>why</th><th>model</th></tr></thead>
<tbody id="skipped-rows"></tbody></table>
<details><summary id="side-summary"></summary>
<table><thead><tr><th>file</th><th>reason</th><th>what it is</th><th>why</th><th>model</th></tr></thead>
<tbody id="side-rows"></tbody></table></details><div id="skip-more" class="f"></div>
<noscript>This dashboard draws its table with JavaScript; the same data is in the parquet and SARIF files.</noscript>
<script type="application/json" id="audit-data">{_script_json(data)}</script>
<script>{_JS}</script>
</body></html>
"""


def write_html(models, findings, path, seconds: float = 0.0, skipped=None) -> str:
    """The page at `path`; the per-model reports are in NAME_reports/ beside it."""
    path = os.fspath(path)
    folder = os.path.splitext(os.path.basename(path))[0] + "_reports/"
    with open(path, "w", encoding="utf-8") as f:
        f.write(dashboard_html(models, findings, seconds, folder, skipped))
    return path
