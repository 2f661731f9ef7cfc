// The Graph tab (and graph.show() alone): the visible set from the kernel, laid out by elkjs in a
// worker, drawn as SVG inside a `.me-graph` root (every drawn box carries data-node-id). A closed
// group opens on click (an open one closes on its title); pan by dragging, zoom with the wheel,
// Fit, a minimap, search by name or op; overlays with a legend. A node's click selects what it
// reads (the Tensors tab, histogram and hexdump move to it) and shows its record's bytes.
import { clear, h, svg } from "./dom.js";
import { getEngine } from "./graphlayout.js";
import { centreOn, fitTransform, overlayColours, placed, subLabel, toElk, toggled, withPath } from "./graphmodel.js";

const MINI_W = 160;
const MINI_H = 120;

/**
 * @param {import("./context.js").Ctx} ctx
 * @param {{linked?: boolean, showFinding?: (f: any) => void}} [options] linked: an Explorer's
 *   tab (a click selects bytes there)
 */
export function createGraphView(ctx, { linked = false, showFinding } = {}) {
  const { rpc } = ctx;
  const status = h("span", { className: "me-graph-status me-muted", attrs: { role: "status" } });
  const search = h("input", { className: "me-graph-search", attrs: { type: "search", placeholder: "Find a node by name or op…", "aria-label": "Find a node" } });
  const hits = h("select", { className: "me-graph-hits", hidden: true, attrs: { "aria-label": "Matches" } });
  const overlaySel = h("select", { className: "me-graph-overlay", attrs: { "aria-label": "Colour by" } },
    h("option", { value: "dtype", text: "Colour: dtype / scheme" }),
    h("option", { value: "params", text: "Colour: parameters" }),
    h("option", { value: "findings", text: "Colour: findings" }));
  const fitBtn = h("button", { text: "Fit", attrs: { title: "Fit the drawing to the pane" } });
  const canvas = svg("svg", { class: "me-graph-canvas", width: "100%", height: "100%" });
  const scene = svg("g", { class: "me-graph-scene" });
  canvas.append(scene);
  const mini = svg("svg", { class: "me-graph-minimap", width: MINI_W, height: MINI_H });
  const miniScene = svg("g", {});
  const miniView = svg("rect", { class: "me-graph-minimap-view" });
  mini.append(miniScene, miniView);
  const legend = h("div", { className: "me-graph-legend" });
  const details = h("div", { className: "me-graph-details" });
  const pane = h("div", { className: "me-graph-pane" }, canvas, mini, legend);
  const el = h("div", { className: "me-graph" },
    h("div", { className: "me-graph-bar" }, search, hits, overlaySel, fitBtn, status), pane, details);

  let opened = null; // null: what the kernel opens first
  let view = null;
  let drawn = null;
  let t = { k: 1, x: 0, y: 0 };
  let highlight = null;
  let loading = null;
  let seq = 0;
  let started = false;

  const say = (text) => { status.textContent = text; };
  const apply = () => {
    scene.setAttribute("transform", `translate(${t.x},${t.y}) scale(${t.k})`);
    if (!drawn) return;
    const r = canvas.getBoundingClientRect();
    const s = miniScale();
    miniView.setAttribute("x", String(-t.x / t.k * s));
    miniView.setAttribute("y", String(-t.y / t.k * s));
    miniView.setAttribute("width", String(Math.max(2, r.width / t.k * s)));
    miniView.setAttribute("height", String(Math.max(2, r.height / t.k * s)));
  };
  const miniScale = () => (drawn ? Math.min(MINI_W / Math.max(1, drawn.width), MINI_H / Math.max(1, drawn.height)) : 1);
  const fit = () => {
    if (!drawn) return;
    const r = canvas.getBoundingClientRect();
    t = fitTransform(drawn.width, drawn.height, r.width || 600, r.height || 400);
    apply();
  };

  /** Ask for the visible set of `next`, lay it out, draw it; the last request wins. */
  async function load(next, focus = null) {
    const mine = ++seq;
    const t0 = performance.now();
    say("Laying out…");
    el.dataset.state = "loading";
    try {
      const engine = await getEngine(rpc);
      const t1 = performance.now();
      const { data } = await rpc.request("graph_view", next === null ? {} : { opened: next });
      if (mine !== seq) return;
      const t2 = performance.now();
      const layout = await engine.layout(toElk(data));
      if (mine !== seq) return;
      const t3 = performance.now();
      view = data;
      opened = data.opened;
      if (data.run && data.run.kind && ![...overlaySel.options].some((o) => o.value === "run")) {
        overlaySel.append(h("option", { value: "run", text: `Colour: run (${data.run.label})` }));
        overlaySel.value = "run";
      }
      draw(placed(layout));
      if (focus) centre(focus);
      else if (next === null) fit();
      const ms = Math.round(performance.now() - t0);
      const parts = `engine ${Math.round(t1 - t0)}, kernel ${Math.round(t2 - t1)}, layout ${Math.round(t3 - t2)}, draw ${Math.round(performance.now() - t3)} ms`;
      const nodes = data.items.filter((it) => it.kind === "node").length;
      const groups = data.items.filter((it) => it.kind === "group").length;
      say(`${data.total.toLocaleString("en-US")} operators; showing ${groups} groups and ${nodes} nodes (${ms} ms)` +
        (engine.note ? ` · ${engine.note}` : "") + (data.note ? ` · ${data.note}` : ""));
      el.dataset.state = "ready";
      el.dataset.layoutMs = String(ms);
      el.dataset.parts = parts;
      status.title = parts;
    } catch (err) {
      if (mine !== seq) return;
      el.dataset.state = "error";
      say(`The graph could not be drawn: ${err && err.message}`);
    }
  }

  function draw(p) {
    drawn = p;
    clear(scene);
    clear(miniScene);
    const items = new Map(view.items.map((it) => [it.key, it]));
    const overlay = overlaySel.value;
    const { fill, legend: keys } = overlayColours(view.items, overlay, view.run || {});
    drawLegend(keys);
    const edgeLayer = svg("g", { class: "me-graph-edges" });
    const boxLayer = svg("g", { class: "me-graph-boxes" });
    // Open groups first (frames under their members), then the rest.
    const order = [...items.values()].sort((a, b) => (a.kind === "open" ? 0 : 1) - (b.kind === "open" ? 0 : 1));
    for (const it of order) {
      const b = p.boxes.get(it.key);
      if (!b) continue;
      const g = svg("g", { class: `me-graph-item me-graph-${it.kind}`, transform: `translate(${b.x},${b.y})` });
      g.setAttribute("data-node-id", it.key);
      const rect = svg("rect", { width: b.w, height: b.h, rx: it.kind === "node" ? 4 : 6 });
      if (it.kind !== "open") rect.setAttribute("fill", fill.get(it.key) || "#f7f7f7");
      if (it.finding && it.finding.severity === "error") g.classList.add("me-graph-error");
      if (it.key === view.first || it.first) g.classList.add("me-graph-first");
      const title = svg("title", {});
      title.textContent = tooltip(it);
      const label = svg("text", { x: 8, y: it.kind === "open" ? 17 : 14, class: "me-graph-label" });
      label.textContent = it.kind === "open" ? `▾ ${it.label}` : (it.kind === "group" ? `▸ ${it.label}` : it.label);
      g.append(title, rect, label);
      const sub = subLabel(it);
      if (sub) {
        const s = svg("text", { x: 8, y: 28, class: "me-graph-sub" });
        s.textContent = sub;
        g.append(s);
      }
      if (it.key === highlight) g.classList.add("me-graph-hit");
      boxLayer.append(g);
      if (it.kind !== "open") miniScene.append(svg("rect", { x: b.x * miniScale(), y: b.y * miniScale(), width: Math.max(1, b.w * miniScale()), height: Math.max(1, b.h * miniScale()), fill: fill.get(it.key) || "#ccc" }));
    }
    for (const line of p.lines) {
      edgeLayer.append(svg("polyline", { points: line.points.map((q) => q.join(",")).join(" "), class: "me-graph-edge" }));
    }
    scene.append(edgeLayer, boxLayer);
    apply();
  }

  function drawLegend(keys) {
    clear(legend);
    for (const k of keys) {
      legend.append(h("div", { className: "me-graph-key" },
        h("span", { className: "me-graph-swatch", style: { background: k.colour } }), h("span", { text: k.text })));
    }
    legend.append(h("div", { className: "me-graph-key" }, h("span", { className: "me-graph-swatch me-graph-swatch-error" }), h("span", { text: "error finding in its bytes (outlined)" })));
    if (view && view.run && view.run.label) legend.append(h("div", { className: "me-graph-key" }, h("span", { className: "me-graph-swatch me-graph-swatch-first" }), h("span", { text: view.run.kind === "diff" ? "first divergence" : "first NaN/Inf" })));
  }

  function centre(key) {
    const b = drawn && drawn.boxes.get(key);
    if (!b) return;
    const r = canvas.getBoundingClientRect();
    t = centreOn(b.x + b.w / 2, b.y + b.h / 2, Math.max(t.k, 0.8), r.width || 600, r.height || 400);
    apply();
  }

  async function pick(key) {
    highlight = key;
    for (const g of scene.querySelectorAll(".me-graph-hit")) g.classList.remove("me-graph-hit");
    const g = scene.querySelector(`[data-node-id="${CSS.escape(key)}"]`);
    if (g) g.classList.add("me-graph-hit");
    try {
      const { data } = await rpc.request("graph_node", { key });
      showDetails(data);
      if (linked) {
        if (data.weights[0]) selectTensor(data.weights[0]);
        else ctx.select({ ...data.record, from: "graph" });
      }
    } catch (err) {
      clear(details);
      details.append(h("div", { className: "me-error", text: String(err && err.message) }));
    }
  }

  /** Select a weight with its bytes (the Explorer's "tensor" answer), as the file map does. */
  async function selectTensor(name) {
    const { data } = await rpc.request("tensor", { name });
    if (data) ctx.select({ ...data, from: "graph" });
  }

  function showDetails(n) {
    clear(details);
    details.append(h("div", { className: "me-graph-title" }, h("b", { text: n.op }), " ", h("span", { text: n.name })));
    const rec = n.record;
    const recLine = h("div", { className: "me-graph-record", text: `record: ${rec.file} @ ${rec.offset.toLocaleString("en-US")} (${rec.length.toLocaleString("en-US")} bytes)` });
    if (linked) {
      recLine.classList.add("me-link");
      recLine.addEventListener("click", () => ctx.select({ ...rec, from: "graph" }));
    }
    details.append(recLine);
    if (n.weights.length) {
      const list = h("div", { className: "me-graph-weights" }, h("span", { className: "me-muted", text: `reads ${n.weights.length} weight(s), ${n.params.toLocaleString("en-US")} parameters${n.dtype ? ", " + n.dtype : ""}: ` }));
      for (const w of n.weights) {
        const b = h("button", { className: "me-graph-weight", text: w });
        if (linked) b.addEventListener("click", () => selectTensor(w).catch(() => {}));
        list.append(b);
      }
      details.append(list);
    }
    if (n.finding) {
      const f = n.finding;
      const line = h("div", { className: `me-graph-finding me-sev-${f.severity}` }, h("b", { text: `${f.severity} ${f.code}: ` }), h("span", { text: f.message }));
      if (showFinding) {
        line.classList.add("me-link");
        line.addEventListener("click", () => showFinding(f));
      }
      details.append(line);
    }
    if (n.run !== null && n.run !== undefined && view && view.run) details.append(h("div", { text: `${view.run.label}: 10^${Number(n.run).toFixed(2)}` }));
  }

  // Clicks: a closed group opens, an open group's title closes it, a node is picked.
  scene.addEventListener("click", (ev) => {
    const g = /** @type {Element} */ (ev.target).closest("[data-node-id]");
    if (!g || moved) return;
    const key = g.getAttribute("data-node-id");
    const it = view && view.items.find((x) => x.key === key);
    if (!it) return;
    if (it.kind === "node") pick(key);
    else if (it.kind === "group" || /** @type {Element} */ (ev.target).classList.contains("me-graph-label")) load(toggled(opened || [], key), key);
  });
  // Pan and zoom.
  let drag = null;
  let moved = false;
  canvas.addEventListener("pointerdown", (ev) => { drag = { x: ev.clientX, y: ev.clientY, t: { ...t } }; moved = false; });
  canvas.addEventListener("pointermove", (ev) => {
    if (!drag) return;
    const dx = ev.clientX - drag.x;
    const dy = ev.clientY - drag.y;
    if (Math.abs(dx) + Math.abs(dy) > 3) moved = true;
    if (moved) { t = { ...drag.t, x: drag.t.x + dx, y: drag.t.y + dy }; apply(); }
  });
  const end = () => { drag = null; };
  canvas.addEventListener("pointerup", end);
  canvas.addEventListener("pointerleave", end);
  canvas.addEventListener("wheel", (ev) => {
    ev.preventDefault();
    const r = canvas.getBoundingClientRect();
    const k = Math.max(0.05, Math.min(4, t.k * Math.exp(-ev.deltaY * 0.0015)));
    const px = ev.clientX - r.left;
    const py = ev.clientY - r.top;
    t = { k, x: px - (px - t.x) * (k / t.k), y: py - (py - t.y) * (k / t.k) };
    apply();
  }, { passive: false });
  mini.addEventListener("click", (ev) => {
    const r = mini.getBoundingClientRect();
    const s = miniScale();
    const cr = canvas.getBoundingClientRect();
    t = centreOn((ev.clientX - r.left) / s, (ev.clientY - r.top) / s, t.k, cr.width, cr.height);
    apply();
  });
  fitBtn.addEventListener("click", fit);
  overlaySel.addEventListener("change", () => { if (drawn) draw(drawn); });

  // Another view selected a tensor (the table, the hexdump's step-through): the graph follows to
  // the node that reads it, once the tab has been drawn.
  if (linked) {
    ctx.onSelect(async (sel) => {
      if (!started || !view || sel.from === "graph" || !sel.tensor) return;
      try {
        const { data } = await rpc.request("graph_locate", { tensor: sel.tensor });
        if (!data) return;
        highlight = data.key;
        const need = data.open.some((k) => !(opened || []).includes(k));
        if (need) await load(withPath(opened || [], data.open), data.key);
        else { centre(data.key); if (drawn) draw(drawn); }
      } catch (_) { /* the graph stays where it is */ }
    });
  }

  // Search: the kernel finds the nodes; the first (or the chosen) opens its groups and is picked.
  const goTo = (hit) => load(withPath(opened || [], hit.open), hit.key).then(() => pick(hit.key));
  let found = [];
  search.addEventListener("keydown", async (ev) => {
    if (ev.key !== "Enter") return;
    const query = search.value;
    const { data } = await rpc.request("graph_search", { query });
    found = data.hits;
    clear(hits);
    hits.hidden = found.length < 2;
    for (const [i, hit] of found.entries()) hits.append(h("option", { value: String(i), text: `${hit.op} ${hit.name}` }));
    if (!found.length) { say(`No node's name or op holds "${query}".`); return; }
    goTo(found[0]);
  });
  hits.addEventListener("change", () => { const hit = found[Number(hits.value)]; if (hit) goTo(hit); });

  return {
    el,
    /** First shown: ask for the first view (nothing is computed before the tab opens). */
    open() {
      if (started) return loading;
      started = true;
      loading = load(null);
      return loading;
    },
    /** Fetch and start the layout engine before the tab is opened (the Explorer asks at idle). */
    prefetch() { getEngine(rpc).catch(() => {}); },
    get view() { return view; },
  };
}

function tooltip(it) {
  const parts = [it.kind === "node" ? `${it.op} ${it.label}` : it.label];
  if (it.kind === "group") parts.push(`${it.count} operators`, ...(it.ops || []).map(([o, n]) => `${o} x${n}`));
  if (it.params) parts.push(`${it.params.toLocaleString("en-US")} parameters`);
  if (it.dtype) parts.push(it.dtype);
  if (it.finding) parts.push(`${it.finding.severity}: ${it.finding.code}`);
  if (it.kind === "group") parts.push("click to open");
  if (it.kind === "open") parts.push("click to close");
  return parts.join("\n");
}
