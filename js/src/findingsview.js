// Findings grouped by severity, in plain words; clicking one selects its bytes and tensor.
import { h } from "./dom.js";
import { baseName } from "./format.js";

const SEVERITIES = ["error", "warning", "info"];

/** Group findings by severity, keeping their order. @param {any[]} findings */
export function groupFindings(findings) {
  const groups = Object.fromEntries(SEVERITIES.map((s) => [s, []]));
  for (const f of findings) (groups[f.severity] || groups.info).push(f);
  return groups;
}

/** @param {import("./context.js").Ctx} ctx */
export function createFindingsView(ctx) {
  const { model } = ctx;
  const findings = model.get("findings") || [];
  const total = (model.get("summary") || {}).finding_total ?? findings.length;
  const root = h("div", { className: "me-findings" });
  if (!findings.length) {
    root.append(h("div", { className: "me-ok", text: "No findings: every check passed." }));
    return { el: root };
  }
  const groups = groupFindings(findings);
  let selectedEl = null;
  for (const sev of SEVERITIES) {
    const items = groups[sev];
    if (!items.length) continue;
    const section = h("details", { className: `me-finding-group me-sev-${sev}`, open: true },
      h("summary", { text: `${sev === "info" ? "info" : `${sev}s`} (${items.length})` }));
    for (const f of items) {
      const where = [];
      if (f.offset !== null && f.offset !== undefined) where.push(`byte ${f.offset}${f.length ? ` (+${f.length})` : ""}`);
      if (f.file) where.push(baseName(f.file));
      const item = h("div", { className: `me-finding me-sev-${sev}`, tabIndex: 0, attrs: { role: "button" } },
        h("span", { className: "me-code", text: f.code }),
        h("span", { className: "me-message", text: f.message }),
        where.length ? h("span", { className: "me-where me-muted", text: where.join(" in ") }) : null);
      const pick = () => {
        if (selectedEl) selectedEl.classList.remove("me-selected");
        item.classList.add("me-selected");
        selectedEl = item;
        ctx.select({ file: f.file, offset: f.offset, length: f.length, tensor: f.tensor, from: "findings" });
      };
      item.addEventListener("click", pick);
      item.addEventListener("keydown", (ev) => { if (ev.key === "Enter") pick(); });
      section.append(item);
    }
    root.append(section);
  }
  if (total > findings.length) root.append(h("div", { className: "me-muted", text: `${total - findings.length} more findings are not shown here; see checkpoint.findings.` }));
  return { el: root };
}
