// The overview a file opens on: what the model is (format, architecture, parameters,
// quantization, shape) and its top metadata, already expanded. Rows come from the kernel's
// summary (widgets/_overview.py); every value is set as text.
import { h } from "./dom.js";

/** @param {import("./context.js").Ctx} ctx @param {{showFindings?: () => void}} [opts] */
export function createOverviewView(ctx, opts = {}) {
  const s = ctx.model.get("summary") || {};
  const ov = s.overview || { facts: [], metadata: [], metadata_total: 0 };
  const root = h("div", { className: "me-overview" });

  const facts = h("table", { className: "me-facts" });
  for (const [label, value, key] of ov.facts || []) {
    facts.append(h("tr", {},
      h("th", { text: label }),
      h("td", {}, h("span", { className: "me-fact", text: value }),
        key ? h("span", { className: "me-fact-key me-muted", text: key, title: `from ${key}` }) : null)));
  }
  root.append(facts);

  // The checks run at open plus transformers' cross-check (Model tab), which answers later:
  // the count is redrawn when it does, so the Overview never says "no findings" while doctor does.
  const status = h("div", {});
  root.append(status);
  const drawCount = () => {
    const counts = { ...(s.findings || {}) };
    for (const f of ctx.model.get("model_findings") || []) {
      if (["error", "warning", "info"].includes(f.severity)) counts[f.severity] = (counts[f.severity] || 0) + 1;
    }
    const total = (counts.error || 0) + (counts.warning || 0) + (counts.info || 0);
    status.replaceChildren();
    if (!total) {
      status.className = "me-ok";
      status.textContent = "No findings: every check passed.";
      return;
    }
    const parts = ["error", "warning", "info"].filter((k) => counts[k]).map((k) => `${counts[k]} ${k === "info" ? "info" : `${k}${counts[k] === 1 ? "" : "s"}`}`);
    const link = h("button", { className: "me-link me-overview-findings", text: `${parts.join(", ")}: see Findings` });
    if (opts.showFindings) link.addEventListener("click", opts.showFindings);
    status.className = counts.error ? "me-error" : "me-muted";
    status.append(link);
  };
  ctx.model.on("change:model_findings", drawCount);
  ctx.cleanups.push(() => ctx.model.off("change:model_findings", drawCount));
  drawCount();

  const rows = ov.metadata || [];
  if (rows.length) {
    root.append(h("div", { className: "me-pane-title", text: "Metadata" }));
    const table = h("table", { className: "me-meta" });
    for (const [key, value] of rows) table.append(h("tr", {}, h("th", { text: key }), h("td", { text: value })));
    root.append(table);
    const more = (ov.metadata_total || rows.length) - rows.length;
    if (more > 0) root.append(h("div", { className: "me-muted", text: `${more} more key${more === 1 ? "" : "s"} in the Header tab.` }));
  }
  return { el: root };
}
