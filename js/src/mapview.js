// The file map: one bar per file scaled to its size, header and data regions, tensors as
// segments coloured by dtype or layer; missing shards, orphan and duplicate tensors marked.
import { h, clear } from "./dom.js";
import { paletteColor } from "./colors.js";
import { formatBytes } from "./format.js";

/** @param {import("./context.js").Ctx} ctx */
export function createMapView(ctx) {
  const { rpc } = ctx;
  let mode = "dtype";
  let payload = null;
  let selectedTensor = null;
  const root = h("div", { className: "me-shardmap" });
  const modeBtn = h("button", { className: "me-map-mode", text: "colour by layer" });
  const legend = h("div", { className: "me-legend" });
  const status = h("div", { className: "me-muted me-map-status", text: "Loading the file map…" });
  const bars = h("div", { className: "me-map-bars" });
  root.append(h("div", { className: "me-toolbar" }, modeBtn), legend, bars, status, sideFiles(ctx));

  function segColor(seg) {
    return mode === "dtype" ? paletteColor(seg[2]) : paletteColor(seg[3]);
  }

  function draw() {
    clear(bars);
    clear(legend);
    if (!payload) return;
    // Each chip is a swatch beside its text, so a pattern never covers the words.
    const chip = (label, swatchClass, background) => h("span", { className: "me-chip me-legend-chip" },
      h("span", { className: `me-swatch${swatchClass ? ` ${swatchClass}` : ""}`, style: background ? { background } : {} }), label);
    if (mode === "dtype") payload.dtypes.forEach((d, i) => legend.append(chip(d, "", paletteColor(i))));
    else legend.append(h("span", { className: "me-muted", text: "colour = layer number (grey: not in a layer)" }));
    legend.append(chip("header", "me-swatch-header"));
    const biggest = Math.max(1, ...payload.files.map((f) => f.size));
    for (const f of payload.files) {
      const label = h("div", { className: "me-map-label" }, h("span", { text: f.name }),
        h("span", { className: "me-muted", text: f.missing ? " missing" : ` ${formatBytes(f.size)}, ${f.tensors} tensors` }));
      const bar = h("div", { className: `me-map-bar${f.missing ? " me-missing" : ""}`, style: { width: `${Math.max(2, (100 * f.size) / biggest)}%` } });
      bar.dataset.file = f.file;
      if (f.missing) bar.textContent = "file does not exist";
      if (!f.missing && f.size > 0) {
        const headerPct = (100 * Math.min(f.data_start, f.size)) / f.size;
        bar.append(h("div", { className: "me-map-header", style: { left: "0", width: `${headerPct}%` }, title: `header: ${f.data_start} bytes` }));
        for (const seg of f.segments) {
          const el = h("div", {
            className: `me-map-seg${seg[5] ? ` me-mark-${seg[5]}` : ""}${seg[4] === selectedTensor ? " me-selected" : ""}`,
            style: { left: `${(100 * seg[0]) / f.size}%`, width: `${(100 * seg[1]) / f.size}%`, background: segColor(seg) },
          });
          el.title = `${seg[4]}: ${formatBytes(seg[1])}${seg[5] ? ` (${seg[5]})` : ""}`;
          el.dataset.tensor = seg[4];
          el.addEventListener("mouseenter", () => { status.textContent = `${f.name}: ${el.title}`; });
          el.addEventListener("click", (ev) => pick(f, seg, el, ev));
          bar.append(el);
        }
      }
      const row = h("div", { className: "me-map-row" }, label, bar);
      if (f.missing_count) {
        // Clicking the line selects the first missing tensor: the table and tree show the rest.
        const line = h("div", { className: "me-map-missing", text: `${f.missing_note || "missing"}: ${f.missing_count} tensor${f.missing_count === 1 ? "" : "s"} (${f.missing_tensors.slice(0, 3).join(", ")}${f.missing_count > 3 ? ", …" : ""})` });
        line.title = f.missing_tensors.join("\n");
        line.addEventListener("click", () => rpc.request("tensor", { name: f.missing_tensors[0] }).then(({ data }) => data && ctx.select({ ...data, from: "map" }), () => {}));
        row.append(line);
      }
      bars.append(row);
    }
    status.textContent = `${payload.files.length} file(s), ${formatBytes(payload.total)}. Hover a segment for its tensor; click to select it.`;
  }

  async function pick(f, seg, el, ev) {
    let offset = seg[0];
    if (/^\d+ tensors from /.test(seg[4])) {
      const r = el.getBoundingClientRect();
      offset = Math.floor(seg[0] + (seg[1] * (ev.clientX - r.left)) / Math.max(1, r.width));
    }
    try {
      const { data } = await rpc.request("tensor_at", { file: f.file, offset });
      if (data) ctx.select({ ...data, from: "map" });
    } catch (e) { status.textContent = `Cannot select: ${e.message}`; }
  }

  modeBtn.addEventListener("click", () => {
    mode = mode === "dtype" ? "layer" : "dtype";
    modeBtn.textContent = mode === "dtype" ? "colour by layer" : "colour by dtype";
    draw();
  });
  ctx.onSelect((sel) => {
    if (!sel.tensor) return;
    selectedTensor = sel.tensor;
    for (const el of bars.querySelectorAll(".me-map-seg")) el.classList.toggle("me-selected", el.dataset.tensor === sel.tensor);
  });

  let started = false;
  function load() {
    if (started) return;
    started = true;
    rpc.request("map").then(({ data }) => { payload = data; draw(); }, (e) => { status.textContent = `The file map cannot be shown: ${e.message}`; });
  }
  return { el: root, load };
}

/**
 * The files beside the weights that a finding points at (config.json, modeling_*.py, tokenizer
 * files, generation_config.json, README.md) and the code auto_map runs: each a row whose click
 * shows its bytes in the hexdump. @param {import("./context.js").Ctx} ctx
 */
function sideFiles(ctx) {
  const side = (ctx.model.get("files") || []).filter((f) => f.side);
  const box = h("div", { className: "me-side-files", hidden: !side.length },
    h("div", { className: "me-pane-title", text: `Other files the findings point at (${side.length})` }));
  for (const f of side) {
    const n = f.findings || 0;
    const row = h("button", { className: "me-side-file", title: f.file },
      h("span", { className: "me-side-name", text: f.name }),
      h("span", { className: "me-muted", text: ` ${formatBytes(f.size)}, ${n ? `${n} finding${n === 1 ? "" : "s"}` : "code a finding names"}` }));
    row.dataset.file = f.file;
    row.addEventListener("click", () => ctx.select({ file: f.file, offset: 0, length: 0, from: "map" }));
    box.append(row);
  }
  return box;
}
