// The Graph view's pure parts: the ELK graph of a visible set (widgets/_graph.py "graph_view"),
// the opened set after a click or a search, the overlays' colours and legend, the fit transform.
// No DOM here, so node's test runner checks them (js/test/graph.test.js).

export const NODE_H = 34;
export const GROUP_H = 46;
const HEADER = 26; // an open group's title bar, inside its frame

/** Width of a box for its text (monospace-ish estimate: the layout needs sizes before drawing). */
export function boxWidth(item) {
  const text = Math.max((item.label || "").length, (subLabel(item) || "").length);
  return Math.min(240, Math.max(70, 16 + 6.6 * text));
}

/** The second line of a box: a node's op, a group's operator count and parameters. */
export function subLabel(item) {
  if (item.kind === "node") return item.label === item.op ? (item.params ? fmtCount(item.params) : "") : item.op;
  if (item.kind === "group") {
    const p = item.params ? `, ${fmtCount(item.params)} params` : "";
    return `${item.count.toLocaleString("en-US")} ops${p}`;
  }
  return "";
}

/** 1234567 -> "1.2M". @param {number} n */
export function fmtCount(n) {
  if (!Number.isFinite(n)) return "";
  const units = [[1e12, "T"], [1e9, "B"], [1e6, "M"], [1e3, "K"]];
  for (const [v, u] of units) if (Math.abs(n) >= v) return `${(n / v).toFixed(n / v >= 100 ? 0 : 1)}${u}`;
  return String(n);
}

/**
 * The ELK graph of a visible set: open groups are compound nodes holding their members, edges
 * sit at the root with coordinates given in the root's frame (elk.json.*Coords = ROOT).
 * @param {{items: any[], edges: any[]}} view
 */
export function toElk(view) {
  const byKey = new Map();
  const root = { id: "g:", layoutOptions: {
    "elk.algorithm": "layered",
    "elk.direction": "DOWN",
    "elk.hierarchyHandling": "INCLUDE_CHILDREN",
    "elk.layered.spacing.nodeNodeBetweenLayers": "28",
    "elk.spacing.nodeNode": "18",
    "elk.edgeRouting": "POLYLINE",
    "elk.layered.nodePlacement.strategy": "NETWORK_SIMPLEX",
    "elk.json.shapeCoords": "ROOT",
    "elk.json.edgeCoords": "ROOT",
  }, children: [], edges: [] };
  byKey.set("g:", root);
  for (const it of view.items) {
    const node = { id: it.key };
    if (it.kind === "open") {
      node.children = [];
      node.layoutOptions = { "elk.padding": `[top=${HEADER + 8},left=10,bottom=10,right=10]` };
    } else {
      node.width = boxWidth(it);
      node.height = it.kind === "group" ? GROUP_H : NODE_H;
    }
    byKey.set(it.key, node);
  }
  for (const it of view.items) {
    const parent = byKey.get(it.parent) || root;
    parent.children.push(byKey.get(it.key));
  }
  // An open group that holds nothing drawable still needs a size.
  for (const it of view.items) {
    const node = byKey.get(it.key);
    if (node.children && !node.children.length) { node.width = boxWidth(it); node.height = GROUP_H; delete node.children; }
  }
  view.edges.forEach(([s, t], i) => {
    if (byKey.has(s) && byKey.has(t)) root.edges.push({ id: `e${i}`, sources: [s], targets: [t] });
  });
  return root;
}

/**
 * Positioned boxes and edge polylines from ELK's answer (absolute: ROOT coordinates), and the
 * whole drawing's size.
 */
export function placed(layout) {
  const boxes = new Map();
  const walk = (node, dx, dy, abs) => {
    for (const c of node.children || []) {
      const x = abs ? c.x : c.x + dx;
      const y = abs ? c.y : c.y + dy;
      boxes.set(c.id, { x, y, w: c.width, h: c.height });
      walk(c, x, y, abs);
    }
  };
  walk(layout, 0, 0, true);
  const lines = [];
  for (const e of layout.edges || []) {
    for (const s of e.sections || []) {
      lines.push({ id: e.id, source: e.sources[0], target: e.targets[0],
        points: [s.startPoint, ...(s.bendPoints || []), s.endPoint].map((p) => [p.x, p.y]) });
    }
  }
  return { boxes, lines, width: layout.width || 0, height: layout.height || 0 };
}

/** The opened set after a click on a box: a closed group opens, an open one closes. */
export function toggled(opened, key) {
  return opened.includes(key) ? opened.filter((k) => k !== key) : [...opened, key];
}

/** The opened set that shows a search hit: its groups added, outermost first, none twice. */
export function withPath(opened, path) {
  const out = [...opened];
  for (const k of path) if (!out.includes(k)) out.push(k);
  return out;
}

/** The scale and shift that fit a w x h drawing into a vw x vh pane with a margin. */
export function fitTransform(w, h, vw, vh, margin = 16) {
  if (!(w > 0 && h > 0 && vw > 0 && vh > 0)) return { k: 1, x: margin, y: margin };
  const k = Math.min(2, (vw - 2 * margin) / w, (vh - 2 * margin) / h);
  return { k, x: (vw - w * k) / 2, y: (vh - h * k) / 2 };
}

/** The transform that puts the drawing's point (cx, cy) at the pane's centre at scale k. */
export function centreOn(cx, cy, k, vw, vh) {
  return { k, x: vw / 2 - cx * k, y: vh / 2 - cy * k };
}

const PALETTE = ["#8dd3c7", "#fdb462", "#bebada", "#fb8072", "#80b1d3", "#b3de69", "#fccde5", "#bc80bd", "#ccebc5", "#ffed6f"];

/** A stable colour per dtype or scheme name. @param {string} name */
export function categoryColour(name) {
  if (!name) return "#eeeeee";
  let h = 0;
  for (let i = 0; i < name.length; i++) h = (h * 31 + name.charCodeAt(i)) >>> 0;
  return PALETTE[h % PALETTE.length];
}

/** White to `hi` at t in [0, 1]. */
export function ramp(t, hi = [25, 118, 210]) {
  const u = Math.max(0, Math.min(1, Number.isFinite(t) ? t : 0));
  const c = hi.map((v) => Math.round(255 + (v - 255) * u));
  return `rgb(${c[0]},${c[1]},${c[2]})`;
}

const SEVERITY = { error: "#ef9a9a", warning: "#ffcc80", info: "#b3e5fc" };

/**
 * Each drawn item's fill under an overlay, and the legend that explains it.
 * @param {any[]} items @param {string} overlay "dtype" | "params" | "findings" | "run"
 * @param {{label?: string, min?: number, max?: number}} [run]
 * @returns {{fill: Map<string, string>, legend: {colour: string, text: string}[]}}
 */
export function overlayColours(items, overlay, run = {}) {
  const fill = new Map();
  const legend = [];
  const shown = items.filter((it) => it.kind !== "open");
  if (overlay === "dtype") {
    const seen = new Map();
    for (const it of shown) {
      const c = categoryColour(it.dtype || "");
      fill.set(it.key, c);
      const name = it.dtype || "no weights";
      if (!seen.has(name)) seen.set(name, c);
    }
    for (const [text, colour] of seen) legend.push({ colour, text });
  } else if (overlay === "params") {
    const top = Math.max(1, ...shown.map((it) => it.params || 0));
    const lt = Math.log10(top + 1);
    for (const it of shown) fill.set(it.key, ramp(Math.log10((it.params || 0) + 1) / lt));
    legend.push({ colour: ramp(0), text: "0 parameters" }, { colour: ramp(1), text: `${fmtCount(top)} parameters` });
  } else if (overlay === "findings") {
    for (const it of shown) fill.set(it.key, it.finding ? SEVERITY[it.finding.severity] || "#eeeeee" : "#f7f7f7");
    for (const [s, c] of Object.entries(SEVERITY)) legend.push({ colour: c, text: `${s} finding in its bytes` });
    legend.push({ colour: "#f7f7f7", text: "none" });
  } else if (overlay === "run") {
    const lo = run.min ?? 0;
    const hi = run.max ?? 1;
    const span = hi > lo ? hi - lo : 1;
    const red = [211, 47, 47];
    for (const it of shown) fill.set(it.key, it.run === null || it.run === undefined ? "#f7f7f7" : ramp((it.run - lo) / span, red));
    legend.push({ colour: ramp(0, red), text: `${run.label || "value"}: 10^${lo.toFixed(1)}` },
      { colour: ramp(1, red), text: `10^${hi.toFixed(1)}` }, { colour: "#f7f7f7", text: "no run point" });
  }
  return { fill, legend };
}
