// One tensor's histogram (linear or log counts), its statistics and its block-scale histogram.
import { h, svg, clear } from "./dom.js";
import { formatShape, formatStat } from "./format.js";

const W = 420;
const H = 140;

/**
 * Bars for a histogram: x from the bin edges, heights scaled to the largest count.
 * @param {{edges: number[], counts: number[]}} hist @param {boolean} log
 * @returns {{x: number, w: number, y: number, h: number, count: number, lo: number, hi: number}[]}
 */
export function histogramBars(hist, log, width = W, height = H) {
  const { edges, counts } = hist;
  if (!counts || !counts.length) return [];
  const scale = (c) => (log ? Math.log10(1 + c) : c);
  const top = Math.max(...counts.map(scale)) || 1;
  const bw = width / counts.length;
  return counts.map((c, i) => {
    const bh = (scale(c) / top) * height;
    return { x: i * bw, w: Math.max(1, bw - 1), y: height - bh, h: bh, count: c, lo: edges[i], hi: edges[i + 1] };
  });
}

function drawHistogram(container, hist, log, cls) {
  const plot = svg("svg", { class: `me-hist-svg ${cls}`, viewBox: `0 0 ${W} ${H + 16}`, preserveAspectRatio: "none", role: "img" });
  for (const b of histogramBars(hist, log)) {
    if (b.count === 0) continue;
    const rect = svg("rect", { class: "me-bar", x: b.x, y: b.y, width: b.w, height: b.h });
    const title = svg("title");
    title.textContent = `[${formatStat(b.lo)}, ${formatStat(b.hi)}): ${b.count}`;
    rect.append(title);
    plot.append(rect);
  }
  const lo = svg("text", { x: 0, y: H + 13, class: "me-axis" });
  lo.textContent = formatStat(hist.edges[0]);
  const hi = svg("text", { x: W, y: H + 13, class: "me-axis", "text-anchor": "end" });
  hi.textContent = formatStat(hist.edges[hist.edges.length - 1]);
  plot.append(lo, hi);
  container.append(plot);
}

/** @param {import("./context.js").Ctx} ctx */
export function createHistogramView(ctx, opts = {}) {
  const { rpc, model } = ctx;
  let log = false;
  let current = null;
  let stats = null;
  let token = 0;
  const root = h("div", { className: "me-histogram" });
  const title = h("div", { className: "me-hist-title", text: "Select a tensor to see its values." });
  const logBtn = h("button", { className: "me-log-toggle", text: "log counts" });
  const exactBtn = h("button", { className: "me-exact", text: "Compute exact", hidden: true });
  const note = h("span", { className: "me-muted me-sample-note" });
  const body = h("div", { className: "me-hist-body" });
  const picker = opts.picker ? h("input", { className: "me-search", type: "search", attrs: { placeholder: "Tensor name…", "aria-label": "pick tensor" } }) : null;
  const picks = h("div", { className: "me-picks" });
  if (picker) root.append(h("div", { className: "me-toolbar" }, picker), picks);
  root.append(title, h("div", { className: "me-toolbar" }, logBtn, exactBtn, note), body);

  function draw() {
    clear(body);
    if (!stats) return;
    if (stats.error) {
      body.append(h("div", { className: "me-error", text: stats.error }));
      return;
    }
    if (stats.note) { // not a failure: the values are not there (a missing shard, a report)
      body.append(h("div", { className: "me-muted me-hist-note", text: stats.note }));
      return;
    }
    // A file cut inside this tensor: the values are of the rows or blocks that are there only.
    if (stats.partial) body.append(h("div", { className: "me-hist-partial", text: stats.partial }));
    if (stats.hist && stats.hist.counts && stats.hist.counts.length) drawHistogram(body, stats.hist, log, "me-values");
    else body.append(h("div", { className: "me-muted", text: "No finite values to plot." }));
    const rows = [["min", stats.min], ["max", stats.max], ["mean", stats.mean], ["std", stats.std],
      ["zeros", stats.zeros === null || stats.zeros === undefined ? null : `${(stats.zeros * 100).toFixed(2)}%`],
      ["NaN", stats.nan], ["Inf", stats.inf], ["values read", stats.count], ["elements", stats.total]];
    const table = h("table", { className: "me-stats" });
    for (const [k, v] of rows) table.append(h("tr", {}, h("th", { text: k }), h("td", { text: formatStat(v) })));
    body.append(table);
    if (stats.scales && stats.scales.counts) {
      body.append(h("div", { className: "me-hist-title", text: `Block scales (${stats.scales.count ?? "?"} blocks)` }));
      drawHistogram(body, stats.scales, log, "me-scales");
    }
  }

  async function show(name, exact = false) {
    current = name;
    const my = ++token;
    title.textContent = `${name}: loading…`;
    exactBtn.hidden = true;
    try {
      // Exact statistics read every value: a 10 GB tensor takes minutes, not a spinner forever.
      const { data } = await rpc.request("stats", { name, exact }, { timeoutMs: exact ? 900_000 : 120_000 });
      if (my !== token) return;
      stats = data;
      const shape = data.shape ? ` ${formatShape(data.shape)}` : "";
      title.textContent = `${name}${data.dtype ? ` · ${data.dtype}` : ""}${shape}`;
      const took = typeof data.seconds === "number" ? ` (${data.seconds.toFixed(3)} s)` : "";
      note.textContent = data.error || data.note ? "" : data.exact ? `exact: every value read${took}` : `sampled: ${data.sample || "a sample of the values"}${took}`;
      exactBtn.hidden = Boolean(data.error || data.note || data.exact || data.offline || data.partial);
    } catch (err) {
      if (my !== token) return;
      stats = { error: `Statistics failed: ${err.message}` };
      title.textContent = name;
    }
    draw();
  }

  logBtn.addEventListener("click", () => {
    log = !log;
    logBtn.classList.toggle("me-on", log);
    logBtn.textContent = log ? "linear counts" : "log counts";
    draw();
  });
  exactBtn.addEventListener("click", () => current && show(current, true));

  if (picker) {
    let timer = null;
    picker.addEventListener("input", () => {
      clearTimeout(timer);
      timer = setTimeout(async () => {
        const { data } = await rpc.request("table", { query: picker.value.trim(), start: 0, count: 12 });
        clear(picks);
        for (const row of data.rows) {
          picks.append(h("button", { className: "me-pick", text: row.name, on: { click: () => ctx.select({ tensor: row.name, file: row.path, offset: row.offset, length: row.length, from: "picker" }) } }));
        }
      }, 150);
    });
  }

  ctx.onSelect((sel) => {
    if (sel.tensor && sel.tensor !== current) show(sel.tensor);
  });
  const initial = model.get("selection") || {};
  if (initial.tensor) show(initial.tensor);
  return { el: root, show };
}
