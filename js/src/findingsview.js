// Findings grouped by severity, in plain words; clicking one selects its bytes and tensor.
// A finding a repair resolves gets a "Fix…" button (asked of the kernel when the view is first
// shown, not when the Explorer opens); it opens the FixDialog in a panel above the list. The
// layer profile's findings (computed when the Layers tab opens, never at open) arrive later in
// the synced `layer_findings` and are listed in a group of their own, each saying which
// statistics (sampled or exact) it comes from. So do the findings transformers' cross-check adds
// (`model_findings`, run in the background once the Model tab opens).
import { h, clear } from "./dom.js";
import { baseName } from "./format.js";
import { createFixPanel } from "./fixpanel.js";

const SEVERITIES = ["error", "warning", "info"];

/** Group findings by severity, keeping their order. @param {any[]} findings */
export function groupFindings(findings) {
  const groups = Object.fromEntries(SEVERITIES.map((s) => [s, []]));
  for (const f of findings) (groups[f.severity] || groups.info).push(f);
  return groups;
}

/** Where the layer findings come from, in words: "sampled norm statistics". @param {any[]} list */
export function layerOrigin(list) {
  const kinds = [...new Set(list.map((f) => `${f.statistics || "sampled"} ${f.stat || ""}`.trim()))];
  return `${kinds.join(", ")} statistics`;
}

/** @param {import("./context.js").Ctx} ctx @param {{host?: any}} [opts] */
export function createFindingsView(ctx, opts = {}) {
  const { model } = ctx;
  const findings = model.get("findings") || [];
  const total = (model.get("summary") || {}).finding_total ?? findings.length;
  const root = h("div", { className: "me-findings" });
  const ok = h("div", { className: "me-ok", text: "No findings: every check passed." });
  const layerBox = h("div", { className: "me-layer-findings-box" });
  let selectedEl = null;
  const shown = new Set((model.get("files") || []).map((e) => e.file));

  /** One finding's line; clicking it (or Enter) selects its bytes and tensor. */
  function findingItem(f, sev) {
    const where = [];
    if (f.offset !== null && f.offset !== undefined) where.push(`byte ${f.offset}${f.length ? ` (+${f.length})` : ""}`);
    // A file the hexdump can show is named; a folder (a finding about the model as a whole) is not.
    if (f.file && shown.has(f.file)) where.push(baseName(f.file));
    const item = h("div", { className: `me-finding me-sev-${sev}`, tabIndex: 0, attrs: { role: "button" } },
      h("span", { className: "me-code", text: f.code }),
      f.origin === "layers" ? h("span", { className: "me-finding-origin", text: `${f.statistics} ${f.stat}`,
        title: `From the Layers tab: the layer profile of ${f.statistics} ${f.stat} statistics` }) : null,
      h("span", { className: "me-message", text: f.message }),
      where.length ? h("span", { className: "me-where me-muted", text: where.join(" in ") }) : null,
      // The catalog's fix (codes.py, carried by every finding dict): what to do about it.
      f.fix ? h("div", { className: "me-finding-fix", text: `Fix: ${f.fix}` }) : null);
    const pick = () => {
      if (selectedEl) selectedEl.classList.remove("me-selected");
      item.classList.add("me-selected");
      selectedEl = item;
      ctx.select({ file: f.file, offset: f.offset, length: f.length, tensor: f.tensor, from: "findings" });
    };
    item.addEventListener("click", pick);
    item.addEventListener("keydown", (ev) => { if (ev.key === "Enter" && ev.target === item) pick(); });
    return item;
  }

  function drawLayerFindings() {
    const list = model.get("layer_findings") || [];
    const checked = model.get("model_findings") || [];
    clear(layerBox);
    ok.textContent = list.length || checked.length ? "Every check run at open passed; later checks found what follows." : "No findings: every check passed.";
    if (checked.length) {
      const section = h("details", { className: "me-finding-group me-model-findings", open: true },
        h("summary", { text: `From the Model tab: transformers' build of the architecture (${checked.length})` }));
      for (const f of checked) section.append(findingItem(f, SEVERITIES.includes(f.severity) ? f.severity : "info"));
      layerBox.append(section);
    }
    if (!list.length) return;
    const section = h("details", { className: "me-finding-group me-layer-findings", open: true },
      h("summary", { text: `From the Layers tab: ${layerOrigin(list)} (${list.length})` }));
    for (const f of list) section.append(findingItem(f, SEVERITIES.includes(f.severity) ? f.severity : "info"));
    layerBox.append(section);
  }
  const onLayers = () => drawLayerFindings();
  for (const key of ["change:layer_findings", "change:model_findings"]) {
    model.on(key, onLayers);
    ctx.cleanups.push(() => model.off(key, onLayers));
  }
  drawLayerFindings();

  if (!findings.length) {
    root.append(ok, layerBox);
    return { el: root, load() {} };
  }
  const fixer = createFixPanel(ctx, opts.host);
  const fixNote = h("div", { className: "me-muted me-fix-note", hidden: true });
  root.append(fixer.el, fixNote);
  const groups = groupFindings(findings);
  const indexOf = new Map(findings.map((f, i) => [f, i]));
  /** @type {Map<number, HTMLElement>} */
  const items = new Map();
  for (const sev of SEVERITIES) {
    const list = groups[sev];
    if (!list.length) continue;
    const section = h("details", { className: `me-finding-group me-sev-${sev}`, open: true },
      h("summary", { text: `${sev === "info" ? "info" : `${sev}s`} (${list.length})` }));
    for (const f of list) {
      const item = findingItem(f, sev);
      item.dataset.index = String(indexOf.get(f));
      items.set(indexOf.get(f), item);
      section.append(item);
    }
    root.append(section);
  }
  if (total > findings.length) root.append(h("div", { className: "me-muted", text: `${total - findings.length} more findings are not shown here; see checkpoint.findings.` }));
  root.append(layerBox);

  function addButtons(data) {
    const by = data.by_finding || {};
    for (const [key, fixes] of Object.entries(by)) {
      const i = Number(key);
      const item = items.get(i);
      if (!item || item.querySelector(".me-fix-btn")) continue;
      const btn = h("button", { className: "me-fix-btn", text: "Fix…",
        title: data.offline ? "Fixes are written from a live notebook" : `Open the fix dialog: ${fixes.join(", ")}` });
      if (data.offline) btn.disabled = true;
      btn.addEventListener("click", (ev) => {
        ev.stopPropagation();
        fixer.open(i, findings[i]);
      });
      item.append(btn);
    }
    if (data.note && Object.keys(by).length) {
      fixNote.textContent = data.note;
      fixNote.hidden = false;
    }
  }

  let asked = false;
  return {
    el: root,
    /** Ask the kernel which findings have a fix (once; the plan may read headers again). */
    load() {
      if (asked) return;
      asked = true;
      ctx.rpc.request("fixable", {}, { timeoutMs: 120_000 }).then(({ data }) => addButtons(data), () => {
        asked = false; // no kernel now (a reopened notebook): showing the tab again asks again
      });
    },
  };
}
