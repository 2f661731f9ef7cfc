// The Layers tab: the layer profile (checks/layers.py) as a heatmap of layers x tensor roles.
// Nothing is computed until the tab opens; then the kernel computes sampled statistics in
// steps (a progress bar follows them) and sends one compact summary: matrices and labels.
// Each cell is coloured relative to its role; outliers and copies carry a glyph and are
// listed under the map with their finding. Hover or focus: what the cell is; click or Enter:
// select its tensor; the arrow keys move between cells (gridkeys.js). Stop ends the computing
// after the step under way: the statistics computed so far stay in the kernel, and Continue
// goes on from them (a map is drawn only from every layer tensor, never from a part).
import { h, clear } from "./dom.js";
import { formatBytes, formatStat, groupDigits } from "./format.js";
import { gridKeys } from "./gridkeys.js";

export const STATS = ["norm", "std", "absmax"];
export const GLYPHS = { high: "▲", low: "▼", zeroed: "0", duplicate: "=", nonfinite: "N" };
const KIND_WORDS = {
  high: "far above its role's trend", low: "far below its role's trend", zeroed: "all zeros",
  duplicate: "same statistics as another layer", nonfinite: "NaN or infinite values",
};
const STEP_TIMEOUT_MS = 180_000; // one step may hold a large tensor read exactly

/**
 * A cell's background from its value relative to its role, in [-4, 4] (log2 of value / role
 * median): red above, blue below, more opaque further out; translucent, so the theme's own
 * background shows through in light and dark themes. "" for a cell with no value.
 * @param {number|null|undefined} v
 */
export function cellColor(v) {
  if (v === null || v === undefined || !Number.isFinite(v)) return "";
  const a = Math.min(1, Math.abs(v) / 4);
  const hue = v >= 0 ? 6 : 214;
  return `hsla(${hue}, 85%, 50%, ${(0.05 + 0.85 * Math.sqrt(a)).toFixed(3)})`;
}

/**
 * The first tensor of cell (i, j): its role's template with the layer number in place of
 * "{L}", or the name the kernel listed apart; null for a cell without tensors.
 * @param {any} s the summary @param {number} i @param {number} j
 */
export function cellTensor(s, i, j) {
  if (!s.counts[i][j]) return null;
  const listed = s.names.extra[`${i},${j}`];
  if (listed !== undefined) return listed;
  const t = s.names.templates[j];
  return t ? t.replace("{L}", String(s.layers[i])) : null;
}

/** The mark of cell (i, j), if the kernel flagged it. @param {any} summary */
export function markIndex(summary) {
  const marks = new Map();
  for (const m of summary.marks || []) {
    const key = `${m.row},${m.col}`;
    if (!marks.has(key)) marks.set(key, m);
  }
  return marks;
}

/**
 * What hovering cell (i, j) says: layer, role, value, tensor, z-score and the mark.
 * @param {any} s the summary @param {number} i @param {number} j @param {any} [mark]
 */
export function cellText(s, i, j, mark) {
  const parts = [`layer ${s.layers[i]}`, s.roles[j]];
  const v = s.values[i][j];
  parts.push(`${s.stat} ${v === null ? "no value" : formatStat(v)}`);
  const name = cellTensor(s, i, j);
  const n = s.counts[i][j];
  if (name) parts.push(n > 1 ? `${name} (+${n - 1} more)` : name);
  const z = s.z[i][j];
  if (mark && mark.kind === "zeroed") parts.push("z −∞");
  else if (z !== null && z !== undefined) parts.push(`z ${z >= 0 ? "+" : ""}${z.toFixed(1)}`);
  if (mark) parts.push((KIND_WORDS[mark.kind] || mark.kind) + (mark.severity === "info" ? " (unusual, not damage)" : ""));
  return parts.join(" · ");
}

/** @param {import("./context.js").Ctx} ctx */
export function createLayersView(ctx) {
  const { rpc } = ctx;
  const root = h("div", { className: "me-layers" });
  const statSelect = h("select", { className: "me-layers-stat", attrs: { "aria-label": "statistic" } });
  for (const s of STATS) statSelect.append(h("option", { value: s, text: s }));
  const exactBox = h("input", { className: "me-layers-exact", type: "checkbox" });
  const exactLabel = h("label", { className: "me-layers-exact-label" }, exactBox, h("span", { text: "exact" }));
  const progress = h("progress", { className: "me-layers-progress", hidden: true });
  const status = h("span", { className: "me-muted me-layers-status", attrs: { role: "status" } });
  const body = h("div", { className: "me-layers-body" });
  const tip = h("div", { className: "me-layers-tip", hidden: true });
  const stopBtn = h("button", { className: "me-layers-stop", text: "Stop", hidden: true,
    title: "Stop after the step under way; what is computed is kept" });
  const continueBtn = h("button", { className: "me-layers-continue", text: "Continue", hidden: true });
  const toolbar = h("div", { className: "me-toolbar" }, h("span", { text: "colour by" }), statSelect, exactLabel,
    progress, stopBtn, continueBtn, status);
  root.append(toolbar, body, tip);
  let started = false;
  let run = 0;
  let summary = null;
  let selected = null;
  /** The computation under way: its mode and how far it got. */
  let computing = null;

  const fail = (e) => {
    computing = null;
    progress.hidden = stopBtn.hidden = true;
    clear(body);
    body.append(h("div", { className: "me-error", text: `The layer profile cannot be shown: ${e && e.message}` }));
  };

  async function compute() {
    const token = ++run;
    const exact = exactBox.checked;
    statSelect.disabled = exactBox.disabled = true;
    continueBtn.hidden = true;
    try {
      const { data: start } = await rpc.request("layers_start", { exact });
      if (token !== run) return;
      if (!start.total) {
        clear(body);
        body.append(h("div", { className: "me-layers-none", text: start.note || "No layers to profile." }));
        toolbar.style.display = "none";
        return;
      }
      // A saved report holds the sampled profile only: no kernel to read every value.
      if (start.offline) exactLabel.style.display = "none";
      exactLabel.title = `Read every value of the ${groupDigits(start.total)} layer tensors (${formatBytes(start.bytes)}) instead of a sample.`;
      exactLabel.lastChild.textContent = `exact (reads ${formatBytes(start.bytes)})`;
      computing = { exact, done: start.done, total: start.total };
      progress.max = start.total;
      progress.hidden = stopBtn.hidden = computing.done >= start.total;
      while (computing.done < start.total) {
        progress.value = computing.done;
        status.textContent = `${exact ? "exact" : "sampled"} statistics of ${groupDigits(computing.done)} of ${groupDigits(start.total)} tensors…`;
        const { data } = await rpc.request("layers_step", { exact }, { timeoutMs: STEP_TIMEOUT_MS });
        if (token !== run) return;
        computing.done = data.done;
      }
      computing = null;
      progress.hidden = stopBtn.hidden = true;
      await draw(token);
    } catch (e) {
      if (token === run) fail(e);
    } finally {
      if (token === run) statSelect.disabled = exactBox.disabled = false;
    }
  }

  /** Stop after the step under way; the kernel keeps what it computed, Continue goes on. */
  function stop() {
    if (!computing) return;
    run += 1; // the loop's next answer is not acted on
    const { exact, done, total } = computing;
    computing = null;
    progress.hidden = stopBtn.hidden = true;
    exactBox.disabled = false;
    statSelect.disabled = !summary; // another statistic of a part would compute the rest at once
    // The map on screen (if any) is the profile drawn before: the box says which one it is.
    if (summary) exactBox.checked = summary.exact;
    continueBtn.hidden = false;
    continueBtn.onclick = () => { exactBox.checked = exact; compute(); };
    status.textContent = `Stopped: the ${exact ? "exact" : "sampled"} statistics of ${groupDigits(done)} of ${groupDigits(total)} tensors are kept; Continue computes the other ${groupDigits(total - done)}.` +
      (summary ? ` The map shows the ${summary.exact ? "exact" : "sampled"} ${summary.stat} drawn before.` : "");
  }
  stopBtn.addEventListener("click", stop);

  async function draw(token = run) {
    status.textContent = "pivoting to layers × roles…";
    const { data } = await rpc.request("layers_profile", { stat: statSelect.value, exact: exactBox.checked }, { timeoutMs: STEP_TIMEOUT_MS });
    if (token !== run) return;
    summary = data;
    render(data);
  }

  function render(s) {
    clear(body);
    if (!s.layers.length) {
      body.append(h("div", { className: "me-layers-none", text: s.note || "No layers to profile." }));
      return;
    }
    const marks = markIndex(s);
    const flagged = new Set((s.marks || []).map((m) => m.layer));
    // Tensors whose values could not be read (a file cut short before them) are no "nothing stands out".
    const none = s.unread && s.unread >= s.tensor_count;
    const verdict = none ? "no value could be read, so nothing can be compared"
      : flagged.size ? `${flagged.size} layer${flagged.size === 1 ? "" : "s"} marked` : "no layer stands out";
    status.textContent = `${s.exact ? "exact" : "sampled"} ${s.stat} of ${groupDigits(s.tensor_count)} tensors in ${s.layers.length} layers; ${verdict}.`;
    if (s.unread_note) body.append(h("div", { className: `me-layers-unread${none ? " me-error" : " me-muted"}`, text: s.unread_note }));
    const grid = h("div", { className: "me-layers-grid", attrs: { role: "grid", "aria-label": `${s.stat} by layer and role`,
      "aria-rowcount": s.layers.length + 1, "aria-colcount": s.roles.length + 1 },
      style: { gridTemplateColumns: `auto repeat(${s.roles.length}, 34px)` } });
    // Rows are there for assistive technology only (display: contents keeps the CSS grid flat).
    grid.append(h("div", { className: "me-layers-row", attrs: { role: "row" } },
      h("div", { className: "me-layers-corner me-muted", text: "layer", attrs: { role: "columnheader" } }),
      ...s.roles.map((role) => h("div", { className: "me-layers-role", text: role, title: role, attrs: { role: "columnheader" } }))));
    /** @type {HTMLElement[][]} */
    const cells = [];
    s.layers.forEach((layer, i) => {
      const row = h("div", { className: "me-layers-row", attrs: { role: "row" } },
        h("div", { className: `me-layers-layer${flagged.has(layer) ? " me-flagged" : ""}`, text: String(layer), attrs: { role: "rowheader" } }));
      cells.push(s.roles.map((role, j) => {
        const mark = marks.get(`${i},${j}`);
        const v = s.values[i][j];
        const cell = h("div", { className: `me-layer-cell${v === null ? " me-empty" : ""}${mark ? ` me-layer-mark me-mark-${mark.kind}${mark.severity === "info" ? " me-mark-unusual" : ""}` : ""}`,
          tabIndex: -1, attrs: { role: "gridcell", "aria-label": cellText(s, i, j, mark) }, text: mark ? GLYPHS[mark.kind] || "!" : "" });
        cell.dataset.row = String(i);
        cell.dataset.col = String(j);
        cell.dataset.layer = String(layer);
        cell.dataset.role = role;
        const name = cellTensor(s, i, j);
        if (name) cell.dataset.tensor = name;
        const bg = cellColor(s.shown[i][j]);
        if (bg) cell.style.backgroundColor = bg;
        if (selected && cell.dataset.tensor === selected) cell.classList.add("me-selected");
        row.append(cell);
        return cell;
      }));
      grid.append(row);
    });
    const showTip = (cell) => {
      const i = Number(cell.dataset.row);
      const j = Number(cell.dataset.col);
      tip.textContent = cellText(s, i, j, marks.get(`${i},${j}`));
      tip.hidden = false;
      const box = root.getBoundingClientRect();
      const c = cell.getBoundingClientRect();
      tip.style.left = `${Math.max(0, Math.min(c.left - box.left, box.width - 360))}px`;
      tip.style.top = `${c.bottom - box.top + 4}px`;
    };
    const cellOf = (ev) => ev.target.closest && ev.target.closest(".me-layer-cell");
    grid.addEventListener("mouseover", (ev) => { const cell = cellOf(ev); if (cell) showTip(cell); });
    grid.addEventListener("mouseleave", () => { tip.hidden = true; });
    grid.addEventListener("focusin", (ev) => { const cell = cellOf(ev); if (cell) showTip(cell); });
    grid.addEventListener("focusout", () => { tip.hidden = true; });
    grid.addEventListener("click", (ev) => {
      const cell = cellOf(ev);
      if (cell && cell.dataset.tensor) pick(cell.dataset.tensor);
    });
    // The keyboard starts on the selected tensor's cell, else the first marked one, else the first.
    const all = cells.flat();
    const first = all.find((c) => c.classList.contains("me-selected")) || all.find((c) => c.classList.contains("me-layer-mark")) || all[0];
    if (first) {
      gridKeys(grid, { rows: s.layers.length, cols: s.roles.length, cellAt: (i, j) => cells[i] && cells[i][j],
        start: [Number(first.dataset.row), Number(first.dataset.col)],
        onPick: (cell) => { if (cell.dataset.tensor) pick(cell.dataset.tensor); } });
    }
    body.append(h("div", { className: "me-layers-scroll" }, grid), legend(s));
    if ((s.marks || []).length) {
      const list = h("div", { className: "me-layers-marks" }, h("div", { className: "me-pane-title", text: `Marked cells (${s.marks.length})` }));
      for (const m of s.marks) {
        const item = h("button", { className: `me-layers-item me-mark-${m.kind}`, title: m.tensor || "" },
          h("span", { className: "me-layers-glyph", text: GLYPHS[m.kind] || "!" }),
          h("span", { className: "me-code", text: m.code }),
          h("span", { className: "me-message", text: m.message }));
        if (m.tensor) item.addEventListener("click", () => pick(m.tensor));
        list.append(item);
      }
      body.append(list);
    }
  }

  function legend(s) {
    return h("div", { className: "me-layers-legend me-muted" },
      h("div", {}, h("span", { className: "me-layers-ramp", attrs: { "aria-hidden": "true" } }),
        h("span", { text: ` blue below, red above the role's median (${s.label}, ±4 at the ends); hatched: no value` })),
      h("div", { className: "me-layers-keys" }, ...Object.entries(GLYPHS).map(([k, g]) => h("span", { className: "me-layers-key", text: `${g} ${KIND_WORDS[k]}` }))));
  }

  async function pick(name) {
    try {
      const { data } = await rpc.request("tensor", { name });
      if (data) ctx.select({ ...data, from: "layers" });
    } catch (e) {
      status.textContent = `Cannot select ${name}: ${e.message}`;
    }
  }

  ctx.onSelect((sel) => {
    selected = sel.tensor || null;
    for (const el of body.querySelectorAll(".me-layer-cell")) el.classList.toggle("me-selected", Boolean(selected) && el.dataset.tensor === selected);
  });
  statSelect.addEventListener("change", () => {
    const token = ++run;
    statSelect.disabled = true;
    draw(token).catch((e) => { if (token === run) fail(e); }).finally(() => { if (token === run) statSelect.disabled = false; });
  });
  exactBox.addEventListener("change", () => compute());

  return {
    el: root,
    load() {
      if (started) return;
      started = true;
      compute();
    },
    get summary() { return summary; },
  };
}
