// The Explorer: summary bar; left pane with the overview, header tree, tensors (+ histogram),
// layer profile, file map, findings, the model card and (with run=True) the run demo; right pane
// with the hexdump. Selection anywhere updates the other views.
import { h } from "./dom.js";
import { createContext } from "./context.js";
import { createFindingsView, layerOrigin } from "./findingsview.js";
import { createGraphView } from "./graphview.js";
import { createHexView } from "./hexview.js";
import { createHistogramView } from "./histview.js";
import { createLayersView } from "./layersview.js";
import { createMapView } from "./mapview.js";
import { createModelView } from "./modelview.js";
import { createOverviewView } from "./overview.js";
import { createRunPanel } from "./runpanel.js";
import { createSummaryView } from "./summaryview.js";
import { createTableView } from "./tableview.js";
import { createTreeView } from "./treeview.js";

function tabs(names, panels, initial, onShow) {
  const bar = h("div", { className: "me-tabs", attrs: { role: "tablist" } });
  const buttons = names.map((name, i) => {
    const b = h("button", { className: "me-tab", text: name, attrs: { role: "tab" } });
    b.dataset.tab = String(i);
    b.addEventListener("click", () => show(i));
    bar.append(b);
    return b;
  });
  function show(i) {
    buttons.forEach((b, j) => b.classList.toggle("me-active", i === j));
    panels.forEach((p, j) => { p.hidden = i !== j; });
    if (onShow) onShow(i);
  }
  show(initial);
  return { bar, show };
}

/**
 * Render one view (or the whole explorer) into `el`; returns the cleanup function.
 * `host` is anywidget's host API (it draws the Run tab's child widget); absent in reports.
 */
export function renderView(model, el, { host } = {}) {
  const ctx = createContext(model);
  const view = model.get("view") || "explorer";
  let root;
  if (view === "hexdump") root = createHexView(ctx).el;
  else if (view === "tree") root = createTreeView(ctx).el;
  else if (view === "findings") {
    const findings = createFindingsView(ctx, { host });
    findings.load();
    root = findings.el;
  } else if (view === "histogram") root = createHistogramView(ctx, { picker: true }).el;
  else if (view === "shardmap") {
    const map = createMapView(ctx);
    map.load();
    root = map.el;
  } else if (view === "graph") {
    const graph = createGraphView(ctx);
    graph.open();
    root = graph.el;
  } else root = renderExplorer(ctx, host);
  root.classList.add("me-root");
  el.append(root);
  return () => {
    for (const fn of ctx.cleanups) fn();
    root.remove();
  };
}

function renderExplorer(ctx, host) {
  const { model } = ctx;
  const summary = createSummaryView(ctx);
  const tree = createTreeView(ctx, { lazy: true });
  const table = createTableView(ctx);
  const hist = createHistogramView(ctx);
  const layers = createLayersView(ctx);
  const map = createMapView(ctx);
  const findings = createFindingsView(ctx, { host });
  const modelView = createModelView(ctx);
  const hex = createHexView(ctx);
  const counts = (model.get("summary") || {}).findings || {};
  const nFindings = (counts.error || 0) + (counts.warning || 0) + (counts.info || 0);
  const overview = createOverviewView(ctx, { showFindings: () => left.show(FINDINGS) });
  const run = model.get("run") ? createRunPanel(ctx, host) : null;
  // A finding clicked in the graph: the Findings tab, at the finding's bytes.
  const showFinding = (f) => { left.show(FINDINGS); ctx.select({ file: f.file, offset: f.offset, length: f.length, tensor: f.tensor, from: "findings" }); };
  const graph = model.get("has_graph") ? createGraphView(ctx, { linked: true, showFinding }) : null;
  // Each tab: its name, the panel's class, what it holds, and what showing it starts (the
  // views that ask the kernel for anything ask when first shown, never when the Explorer opens).
  const defs = [
    ["Overview", "overview", [overview.el]],
    ["Header", "header", [tree.el], () => tree.refresh()],
    ["Tensors", "tensors", [table.el, hist.el], () => table.refresh()],
    ["Layers", "layers", [layers.el], () => layers.load()],
    ["Files", "files", [map.el], () => map.load()],
    [`Findings (${nFindings})`, "findings", [findings.el], () => findings.load()],
    ["Model", "model", [modelView.el], () => modelView.load()],
  ];
  if (graph) {
    defs.splice(1, 0, ["Graph", "graph", [graph.el], () => graph.open()]);
    const idle = setTimeout(() => graph.prefetch(), 500); // the engine is ready when the tab opens
    ctx.cleanups.push(() => clearTimeout(idle));
  }
  if (run) defs.push(["Run", "run", [run.el], () => run.open()]);
  const FINDINGS = defs.findIndex((d) => d[1] === "findings");
  const panels = defs.map(([, cls, els]) => h("div", { className: `me-panel me-panel-${cls}` }, ...els));
  // A broken file opens on its findings: that is what its reader came for. A healthy one opens
  // on what the model is.
  const left = tabs(defs.map((d) => d[0]), panels, counts.error ? FINDINGS : 0, (i) => {
    if (defs[i][3]) defs[i][3]();
  });
  countLayerFindings(ctx, left.bar.children[FINDINGS], nFindings);
  const root = h("div", { className: "me-explorer" },
    summary.el,
    kernelNote(ctx),
    h("div", { className: "me-body" },
      h("div", { className: "me-left" }, left.bar, ...panels),
      h("div", { className: "me-right" }, h("div", { className: "me-pane-title", text: "Bytes" }), hex.el)));
  return root;
}

/**
 * The Findings tab's count: the findings of the checks run at open plus, once the Layers tab has
 * computed its profile, the layer findings (its title says how many of each, and from what).
 * @param {import("./context.js").Ctx} ctx @param {Element} tab @param {number} atOpen
 */
function countLayerFindings(ctx, tab, atOpen) {
  const update = () => {
    const layer = ctx.model.get("layer_findings") || [];
    const checked = ctx.model.get("model_findings") || [];
    tab.textContent = `Findings (${atOpen + layer.length + checked.length})`;
    const parts = [];
    if (layer.length) parts.push(`${layer.length} from the Layers tab (${layerOrigin(layer)})`);
    if (checked.length) parts.push(`${checked.length} from transformers' cross-check (Model tab)`);
    if (parts.length) tab.setAttribute("title", `${atOpen} from the checks run at open, ${parts.join(", ")}`);
    else tab.removeAttribute("title");
  };
  for (const key of ["change:layer_findings", "change:model_findings"]) {
    ctx.model.on(key, update);
    ctx.cleanups.push(() => ctx.model.off(key, update));
  }
  update();
}

/**
 * A line that appears when the kernel has not answered a first small request within a few
 * seconds: the notebook was reopened (the widget state came from the file, its kernel is gone)
 * or the kernel is busy. It goes away as soon as any answer arrives.
 */
function kernelNote(ctx, delayMs = 4000) {
  const note = h("div", { className: "me-kernel-note", hidden: true, attrs: { role: "status" },
    text: "Waiting for the kernel: it is busy, or this output was saved in an earlier session. The overview, summary, findings and first bytes are from the saved state; re-run the cell to browse the rest of the bytes, the tree and the tensors." });
  let answered = false;
  const timer = setTimeout(() => { if (!answered) note.hidden = false; }, delayMs);
  const done = () => { answered = true; clearTimeout(timer); note.hidden = true; };
  // Any answer, even an error (the offline report knows no "ping"), means someone is there.
  ctx.rpc.request("ping", {}, { timeoutMs: 0 }).then(done, done);
  ctx.cleanups.push(() => clearTimeout(timer));
  return note;
}
