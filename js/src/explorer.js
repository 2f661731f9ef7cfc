// The Explorer: summary bar; left pane with header tree, tensors (+ histogram), file map and
// findings; right pane with the hexdump. Selection anywhere updates the other views.
import { h } from "./dom.js";
import { createContext } from "./context.js";
import { createFindingsView } from "./findingsview.js";
import { createHexView } from "./hexview.js";
import { createHistogramView } from "./histview.js";
import { createMapView } from "./mapview.js";
import { createModelView } from "./modelview.js";
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

/** Render one view (or the whole explorer) into `el`; returns the cleanup function. */
export function renderView(model, el) {
  const ctx = createContext(model);
  const view = model.get("view") || "explorer";
  let root;
  if (view === "hexdump") root = createHexView(ctx).el;
  else if (view === "tree") root = createTreeView(ctx).el;
  else if (view === "findings") root = createFindingsView(ctx).el;
  else if (view === "histogram") root = createHistogramView(ctx, { picker: true }).el;
  else if (view === "shardmap") {
    const map = createMapView(ctx);
    map.load();
    root = map.el;
  } else root = renderExplorer(ctx);
  root.classList.add("me-root");
  el.append(root);
  return () => {
    for (const fn of ctx.cleanups) fn();
    root.remove();
  };
}

function renderExplorer(ctx) {
  const { model } = ctx;
  const summary = createSummaryView(ctx);
  const tree = createTreeView(ctx);
  const table = createTableView(ctx);
  const hist = createHistogramView(ctx);
  const map = createMapView(ctx);
  const findings = createFindingsView(ctx);
  const modelView = createModelView(ctx);
  const hex = createHexView(ctx);
  const counts = (model.get("summary") || {}).findings || {};
  const nFindings = (counts.error || 0) + (counts.warning || 0) + (counts.info || 0);
  const panels = [
    h("div", { className: "me-panel me-panel-header" }, tree.el),
    h("div", { className: "me-panel me-panel-tensors" }, table.el, hist.el),
    h("div", { className: "me-panel me-panel-files" }, map.el),
    h("div", { className: "me-panel me-panel-findings" }, findings.el),
    h("div", { className: "me-panel me-panel-model" }, modelView.el),
  ];
  const names = ["Header", "Tensors", "Files", `Findings (${nFindings})`, "Model"];
  // A broken file opens on its findings: that is what its reader came for.
  const left = tabs(names, panels, counts.error ? 3 : 0, (i) => {
    if (i === 0) tree.refresh();
    if (i === 1) table.refresh();
    if (i === 2) map.load();
    if (i === 4) modelView.load();
  });
  // Selecting a tensor from the map or findings shows its histogram only if asked; the tensor
  // tab is where a user picks tensors, so table selections stay there.
  const root = h("div", { className: "me-explorer" },
    summary.el,
    h("div", { className: "me-body" },
      h("div", { className: "me-left" }, left.bar, ...panels),
      h("div", { className: "me-right" }, h("div", { className: "me-pane-title", text: "Bytes" }), hex.el)));
  return root;
}
