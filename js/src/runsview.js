// The "Compare runs" view (runs/state.py): a RunDiff or a Trace as a heatmap of layers
// (rows) x modules (columns, the decoder's order). A comparison is coloured by log10 relative
// L2 from float noise up, its verdict (agree, drift, jump) said in its colour, the first
// divergence or the start of a drift outlined and explained, the configuration differences
// listed; a trace by absmax / median |x|, massive activations and the first NaN/Inf marked. Hover or focus: the numbers (title + aria-label);
// click or Enter: `onPick(layer, module)` (the kernel names the weight and the Explorer selects
// it). Everything from a file or a model is set with textContent.
import { h, clear } from "./dom.js";
import { gridKeys } from "./gridkeys.js";

export const GLYPHS = { divergence: "!", drift: "~", massive: "M", nonfinite: "N" };
const MARK_WORDS = { divergence: "first divergence (outlined)", drift: "the drift starts here (outlined)",
  massive: "massive activation", nonfinite: "first NaN/Inf" };

/**
 * A cell's background for value v on the scale [lo, hi]: yellow and nearly clear at the low
 * end, opaque red at the top; translucent, so light and dark themes both show through.
 * "" for a cell without a value.
 * @param {number|null|undefined} v @param {number} lo @param {number} hi
 */
export function cellColor(v, lo, hi) {
  if (v === null || v === undefined || !Number.isFinite(v)) return "";
  const t = hi > lo ? Math.min(1, Math.max(0, (v - lo) / (hi - lo))) : 0;
  return `hsla(${(48 - 48 * t).toFixed(0)}, 90%, 50%, ${(0.06 + 0.86 * t).toFixed(3)})`;
}

/** A number for people: 4 significant digits, exponent form for the very large or small. */
export function num(x) {
  if (x === null || x === undefined) return "n/a";
  if (typeof x !== "number") return String(x);
  if (x === 0) return "0";
  const a = Math.abs(x);
  return a >= 1e5 || a < 1e-3 ? x.toExponential(2) : String(Number(x.toPrecision(4)));
}

/** The marks of the state by "layer,module" (the first of each cell wins). @param {any} s */
export function markIndex(s) {
  const out = new Map();
  for (const m of (s && s.marks) || []) {
    const key = `${m.layer},${m.module}`;
    if (!out.has(key)) out.set(key, m);
  }
  return out;
}

/**
 * What hovering cell (i, j) says: layer, module, the numbers, the weight, the mark.
 * @param {any} s the state @param {number} i @param {number} j @param {any} [mark]
 */
export function cellText(s, i, j, mark) {
  const m = s.metrics || {};
  const at = (k) => (m[k] && m[k][i] ? m[k][i][j] : null);
  const parts = [`layer ${s.layers[i]}`, s.modules[j]];
  if (s.kind === "diff") {
    parts.push(`cosine ${num(at("cosine"))}`, `relative L2 ${num(at("rel_l2"))}`, `max |a−b| ${num(at("max_abs"))}`);
  } else {
    parts.push(`norm ${num(at("norm"))}`, `absmax ${num(at("absmax"))}`, `mean ${num(at("mean"))}`, `std ${num(at("std"))}`);
    const r = s.color.values[i][j];
    if (r !== null && r !== undefined) parts.push(`absmax ${num(10 ** r)}x the median |x|`);
    if (at("nan") || at("inf")) parts.push(`${at("nan")} NaN, ${at("inf")} Inf`);
  }
  const a = s.cell_tensors && s.cell_tensors[i] ? s.cell_tensors[i][j] : null;
  const b = s.tensors_b && s.tensors_b[i] ? s.tensors_b[i][j] : null;
  if (a) parts.push(b && b !== a ? `${a} (b: ${b})` : a);
  const al = s.aligned && s.aligned[i] ? s.aligned[i][j] : null;
  if (al) parts.push(al);
  if (mark) parts.push(mark.text);
  return parts.join(" · ");
}

/**
 * The verdict line: its text and its kind (agree, drift, jump: the colour), from the state.
 * A trace has no verdict: its first NaN/Inf reads as a jump.
 * @param {any} s @returns {{kind: string, text: string}|null}
 */
export function verdictLine(s) {
  if (s && s.verdict && s.verdict.sentence) return { kind: s.verdict.kind, text: s.verdict.sentence };
  if (s && s.first && s.first.sentence) return { kind: "jump", text: s.first.sentence };
  const note = s && s.figures && s.figures.note;
  return note ? { kind: "agree", text: note } : null;
}

/** Tokens for people: each quoted, one after another, never a list. @param {string[]} tokens */
export function tokensText(tokens) {
  return (tokens || []).map((t) => JSON.stringify(String(t))).join(" ") || "none";
}

/** Whether a trace's cell (i, j) holds NaN or Inf (drawn hatched). @param {any} s */
export function nonfinite(s, i, j) {
  const m = s.metrics || {};
  return s.kind === "trace" && Boolean((m.nan && m.nan[i][j]) || (m.inf && m.inf[i][j]));
}

/** Rows of the figure table: [label, value]. @param {any} s */
export function figureRows(s) {
  const f = s.figures || {};
  const rows = [["tokens", String(f.tokens)]];
  for (const side of ["a", "b"]) if (s.engine_labels && s.engine_labels[side]) rows.push([s.kind === "diff" ? `engine of ${side}` : "engine", String(s.engine_labels[side])]);
  if (s.kind === "diff") {
    const k = f.kld || {};
    rows.push(["KLD mean / median / p99 / max (nats)", [k.mean, k.median, k.p99, k.max].map(num).join(" / ")]);
    rows.push(["top-1 agreement", typeof f.top1_agreement === "number" ? `${(100 * f.top1_agreement).toFixed(1)}%` : "n/a"]);
    if (f.perplexity) rows.push(["perplexity a / b", `${num(f.perplexity.a)} / ${num(f.perplexity.b)}`]);
    for (const o of s.outer || []) rows.push([`${o.module}: relative L2 / cosine`, `${num(o.rel_l2)} / ${num(o.cosine)}`]);
  } else {
    rows.push([`massive activations (≥ ${num(f.massive_ratio)}x the median |x|)`, String(f.massive)]);
    for (const o of s.outer || []) rows.push([`${o.module}: norm / absmax`, `${num(o.norm)} / ${num(o.absmax)}`]);
  }
  return rows;
}

function legend(s) {
  const c = s.color;
  const stops = [0, 0.25, 0.5, 0.75, 1].map((t) => cellColor(c.min + t * (c.max - c.min), c.min, c.max));
  const ramp = h("span", { className: "me-runs-ramp", style: { background: `linear-gradient(to right, ${stops.join(", ")})` } });
  const kinds = [...new Set((s.marks || []).map((m) => m.kind))];
  const bad = s.layers.some((_, i) => s.modules.some((__, j) => nonfinite(s, i, j)));
  return h("div", { className: "me-runs-legend" },
    h("span", { text: c.label }), h("span", { text: num(10 ** c.min) }), ramp, h("span", { text: num(10 ** c.max) }),
    ...kinds.map((k) => h("span", { className: "me-runs-key" },
      h("span", { className: `me-runs-glyph me-runs-${k}`, text: GLYPHS[k] || "?" }), ` ${MARK_WORDS[k] || k}`)),
    bad ? h("span", { className: "me-runs-key" }, h("span", { className: "me-runs-glyph me-runs-bad", text: "\u00a0" }), " holds NaN/Inf") : null);
}

/**
 * Draw state `s` into `box`: the colour values are log10 of the statistic (the legend's ends
 * show the statistic itself); returns {setNote(text), cells}.
 * @param {HTMLElement} box @param {any} s @param {{onPick?: (layer: number, module: string) => void}} [o]
 */
export function renderRuns(box, s, o = {}) {
  clear(box);
  const note = h("div", { className: "me-runs-note", attrs: { role: "status" } });
  const api = { setNote: (t) => { note.textContent = t; }, cells: [] };
  if (!s || !s.layers || !s.modules) return api;
  const root = h("div", { className: "me-runs" });
  root.dataset.kind = s.kind;
  const marks = markIndex(s);
  const cols = s.modules.length;
  const grid = h("div", { className: "me-runs-grid", attrs: { role: "grid", "aria-label": s.color.label },
    style: { gridTemplateColumns: `auto repeat(${cols}, minmax(30px, 1fr))` } });
  const head = h("div", { className: "me-runs-row", attrs: { role: "row" } }, h("span", { className: "me-runs-corner", text: "layer" }),
    ...s.modules.map((m) => h("span", { className: "me-runs-colhead", text: m, attrs: { role: "columnheader" } })));
  grid.append(head);
  let selected = null;
  let start = null;
  const pick = (cell) => {
    if (selected) selected.classList.remove("me-selected");
    selected = cell;
    cell.classList.add("me-selected");
    if (o.onPick) o.onPick(Number(cell.dataset.layer), cell.dataset.module);
  };
  s.layers.forEach((layer, i) => {
    const row = h("div", { className: "me-runs-row", attrs: { role: "row" } },
      h("span", { className: "me-runs-rowhead", text: String(layer), attrs: { role: "rowheader" } }));
    const cells = s.modules.map((module, j) => {
      const mark = marks.get(`${layer},${module}`);
      const text = cellText(s, i, j, mark);
      const bad = nonfinite(s, i, j);
      const cell = h("span", { className: "me-runs-cell" + (mark ? ` me-runs-mark me-runs-${mark.kind}` : "") + (bad ? " me-runs-bad" : ""),
        text: mark ? GLYPHS[mark.kind] || "?" : "", tabIndex: -1,
        attrs: { role: "gridcell", title: text, "aria-label": text },
        style: { background: cellColor(s.color.values[i][j], s.color.min, s.color.max) } });
      Object.assign(cell.dataset, { layer: String(layer), module, row: String(i), col: String(j) });
      cell.addEventListener("click", () => pick(cell));
      // The tab stop: the first divergence or NaN/Inf, else the first massive cell.
      if (mark && (!start || (start.kind === "massive" && mark.kind !== "massive"))) start = { i, j, kind: mark.kind };
      return cell;
    });
    api.cells.push(cells);
    row.append(...cells);
    grid.append(row);
  });
  gridKeys(grid, { rows: s.layers.length, cols, cellAt: (i, j) => api.cells[i] && api.cells[i][j],
    start: start ? [start.i, start.j] : [0, 0], onPick: pick });
  root.append(h("div", { className: "me-runs-title", text: s.title }));
  if (s.engines) {
    // Each side's engine, and how many of the points an export's graph was aligned to.
    const n = s.aligned_count;
    root.append(h("div", { className: "me-runs-engines",
      text: `a: ${s.engines[0]} · b: ${s.engines[1]}` + (n ? ` · ${n} points aligned` : "") }));
  }
  root.append(legend(s), grid);
  const verdict = verdictLine(s);
  if (verdict) {
    const line = h("div", { className: `me-runs-first me-runs-${verdict.kind}`, text: verdict.text });
    line.dataset.verdict = verdict.kind;
    root.append(line);
  }
  if (s.config && s.config.length) {
    const table = h("table", { className: "me-runs-config" },
      h("caption", { text: "The configurations differ" }),
      h("tr", {}, h("th", { text: "hyperparameter" }), h("th", { text: "a" }), h("th", { text: "b" }),
        h("th", { text: "stated at" })));
    // where each side's file states it (a GGUF's metadata entry and its bytes), the bytes a fix rewrites
    const where = s.config_where || [];
    s.config.forEach(([name, a, b], i) => table.append(h("tr", {}, h("td", { text: name }), h("td", { text: a }),
      h("td", { text: b }), h("td", { text: where[i] || "" }))));
    root.append(table);
  }
  if (s.tokenizer_mismatch) {
    const m = s.tokenizer_mismatch;
    const a = m.a_text || tokensText(m.a_tokens);
    const b = m.b_text || tokensText(m.b_tokens);
    root.append(h("div", { className: "me-runs-warn", text: `The tokenizers disagree from token ${m.position} (a ${a}, b ${b}); both runs use a's ids.` }));
  }
  const table = h("table", { className: "me-runs-figures" });
  for (const [label, value] of figureRows(s)) table.append(h("tr", {}, h("th", { text: label }), h("td", { text: value })));
  root.append(table);
  const top = (s.figures && s.figures.massive_top) || [];
  if (top.length) {
    root.append(h("ul", { className: "me-runs-massive" }, ...top.map((m) => h("li", {
      text: `${m.layer === null ? "" : `layer ${m.layer} `}${m.module}: ${num(m.value)} at token ${m.position} ${JSON.stringify(String(m.token))} channel ${m.channel}, ${num(m.ratio)}x the median |x|` }))));
  }
  root.append(note);
  box.append(root);
  return api;
}

/** The line a click leaves: what was selected, or why nothing was. @param {any} msg */
export function pickedText(msg) {
  if (msg.note) return msg.note;
  if (!msg.tensor) return `No weight feeds layer ${msg.layer} ${msg.module}.`;
  return msg.selected ? `Selected ${msg.tensor}: the tensor table, histogram and bytes show it.`
    : `layer ${msg.layer} ${msg.module}: weight ${msg.tensor}`;
}
