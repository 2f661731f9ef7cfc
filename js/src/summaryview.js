// The summary bar: files, format, size, tensor and parameter counts, dtype mix, findings.
import { h } from "./dom.js";
import { formatBytes, humanCount } from "./format.js";

/** @param {import("./context.js").Ctx} ctx */
export function createSummaryView(ctx) {
  const s = ctx.model.get("summary") || {};
  const names = s.names || [];
  const fileText = names.length ? `${names[0]}${s.file_count > 1 ? ` + ${s.file_count - 1} more` : ""}` : String(s.source || "");
  const counts = s.findings || {};
  const root = h("div", { className: "me-summary" },
    h("span", { className: "me-format", text: s.format || "unknown" }),
    h("span", { className: "me-files", text: fileText, title: (s.files || []).join("\n") }),
    // "95.0 MiB of 4.4 GiB (2.1 %), cut short" for a file cut short (formats/truncation.py words it).
    h("span", { className: `me-stat me-size${s.cut_short ? " me-cut" : ""}`, text: s.size_text || formatBytes(s.total_size) }),
    h("span", { className: "me-stat", text: `${s.tensor_count ?? 0} tensors` }),
    h("span", { className: "me-stat", text: `${humanCount(s.parameter_count)} params` }),
    // A shard index that promises more tensors than the shards hold says so up front.
    s.indexed_tensors && s.readable_indexed_tensors < s.indexed_tensors
      ? h("span", { className: "me-stat me-indexed", text: `${s.readable_indexed_tensors.toLocaleString("en-US")} of ${s.indexed_tensors.toLocaleString("en-US")} indexed tensors readable` })
      : null,
  );
  const mix = h("span", { className: "me-mix" });
  for (const [kind, n] of Object.entries(s.dtypes || {})) mix.append(h("span", { className: "me-chip", text: `${kind} ×${n}` }));
  root.append(mix);
  for (const sev of ["error", "warning", "info"]) {
    const n = counts[sev] || 0;
    root.append(h("span", { className: `me-badge me-sev-${sev}${n ? "" : " me-zero"}`, text: `${n} ${sev === "info" ? "info" : `${sev}${n === 1 ? "" : "s"}`}` }));
  }
  return { el: root };
}
