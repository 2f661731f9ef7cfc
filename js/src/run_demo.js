/**
 * RunDemo: prompt, settings, "Dequantize", streamed generation with tokens/s, and
 * "Compare quantizations" side by side. All text from files or models goes in via textContent
 * (dom.js `h`). The pure helpers are unit-tested; run_demo_widget.js is the anywidget entry.
 *
 * Python -> JS custom messages: token, generate_start, generate_done, compare_event, notice, error,
 * runs_selected. JS -> Python: {type: "dequantize" | "generate" | "compare" | "compare_backends" |
 * "stop" | "trace"}, {type: "compare_runs", source} and {type: "runs_select", layer, module}.
 */
import { h } from "./dom.js";
import { formatBytes } from "./format.js";
import { pickedText, renderRuns } from "./runsview.js";

export { formatBytes };

// -- pure helpers (tested with node) ---------------------------------------------------------

/** "12.3 tokens/s", or "" before there is a rate. */
export function formatTps(tps) {
  if (typeof tps !== "number" || !isFinite(tps) || tps <= 0) return "";
  return `${tps >= 100 ? tps.toFixed(0) : tps.toFixed(1)} tokens/s`;
}

/** Seconds as "850 ms" or "2.31 s". */
export function formatSeconds(s) {
  if (typeof s !== "number" || !isFinite(s)) return "";
  return s < 1 ? `${(s * 1000).toFixed(0)} ms` : `${s.toFixed(2)} s`;
}

/** Perplexity with three decimals; "n/a" when missing. */
export function formatPerplexity(p) {
  return typeof p === "number" && isFinite(p) ? p.toFixed(3) : "n/a";
}

/** Fraction done in [0, 1], or null when the total is unknown (indeterminate bar). */
export function progressFraction(progress) {
  if (!progress || !(progress.total > 0)) return null;
  return Math.min(1, Math.max(0, progress.done / progress.total));
}

/**
 * Pair each token text of a variant with whether the reference has the same token id at that
 * position: [{text, same}]. Positions past the reference's end count as different.
 */
export function agreementSpans(tokens, tokenTexts, reference) {
  const out = [];
  for (let i = 0; i < tokenTexts.length; i++) {
    out.push({ text: tokenTexts[i], same: i < reference.length && tokens[i] === reference[i] });
  }
  return out;
}

/** "14/16 tokens agree, first 12 identical" from an agreement dict. */
export function agreementLabel(agreement) {
  if (!agreement || !(agreement.total >= 0)) return "";
  const { matches, total, prefix } = agreement;
  if (total === 0) return "no tokens";
  if (matches === total) return `all ${total} tokens agree`;
  return `${matches}/${total} tokens agree, first ${prefix} identical`;
}

/** The status line: what is happening, with the source name. */
export function statusLine(status, source) {
  const words = {
    idle: "ready", loading: "loading the model", generating: "generating", converting: "converting",
    comparing: "comparing quantizations", error: "failed", tracing: "tracing", "comparing runs": "comparing runs",
  };
  return `${source}: ${words[status] || status}`;
}

// -- DOM -----------------------------------------------------------------------------------------

/** `el(tag, {class, text, ...attributes}, children)` over dom.js's `h`. */
function el(tag, attrs = {}, children = []) {
  const { class: className, text, ...rest } = attrs;
  return h(tag, { className, text, attrs: rest }, ...children);
}

function table(headers, rows) {
  const t = el("table");
  const head = el("tr");
  for (const h of headers) head.append(el("th", { text: h }));
  t.append(head);
  for (const r of rows) {
    const tr = el("tr");
    for (const cell of r) tr.append(cell instanceof Node ? el("td", {}, [cell]) : el("td", { text: String(cell) }));
    t.append(tr);
  }
  return t;
}

function renderDequant(box, rows, summary) {
  box.replaceChildren();
  if (!rows || rows.length === 0) return;
  const slowest = Math.max(...rows.map((r) => r.seconds), 1e-9);
  const body = rows.map((r) => [
    r.layer, r.dtypes.join(", "), r.tensors, formatBytes(r.quantized_bytes), formatBytes(r.dequantized_bytes),
    el("span", {}, [el("span", { class: "me-rd-bar", style: `width:${Math.round(80 * r.seconds / slowest)}px` }),
      document.createTextNode(` ${formatSeconds(r.seconds)}`)]),
  ]);
  const details = el("details", {}, [el("summary", { text: summary || "dequantize per layer" }),
    table(["layer", "stored as", "tensors", "stored", "float32", "time"], body)]);
  box.append(details);
}

function variantCard(result, reference) {
  const card = el("div", { class: "me-rd-variant" });
  card.append(el("h4", { text: result.label }));
  const facts = [formatBytes(result.file_bytes), `perplexity ${formatPerplexity(result.perplexity)}`,
    formatTps(result.decode_tps), agreementLabel(result.agreement)].filter(Boolean);
  card.append(el("div", { class: "me-rd-status", text: facts.join(" · ") }));
  const text = el("div", { class: "me-rd-text" });
  const ref = reference ? reference.tokens : result.tokens;
  for (const span of agreementSpans(result.tokens || [], result.token_texts || [], ref || [])) {
    text.append(el("span", { class: span.same ? "me-rd-same" : "me-rd-diff", text: span.text }));
  }
  card.append(text);
  return card;
}

function renderComparison(box, comparison, live) {
  box.replaceChildren();
  const variants = comparison && comparison.variants;
  if (variants && variants.length) {
    const reference = variants.find((v) => v.label === comparison.reference);
    box.append(el("div", { class: "me-rd-status",
      text: `Greedy continuations; highlighted tokens differ from ${comparison.reference}. ` +
        "Conversions start from the shipped weights, so they cannot undo its rounding." }));
    box.append(el("div", { class: "me-rd-compare" }, variants.map((v) => variantCard(v, reference))));
    return;
  }
  const cards = Object.entries(live);
  if (cards.length) {
    box.append(el("div", { class: "me-rd-compare" }, cards.map(([label, text]) =>
      el("div", { class: "me-rd-variant" }, [el("h4", { text: label }), el("div", { class: "me-rd-text", text })]))));
  }
}

/**
 * Rows of the backend comparison as table cells: what each backend reads per token, what that
 * allows at this machine's memory bandwidth, and what it reaches.
 */
export function backendCells(r) {
  const num = (x, d = 1) => (typeof x === "number" && isFinite(x) ? x.toFixed(d) : "-");
  // A GPU row: its own peak (the accelerator's), no CPU bandwidth cap, and where it ran.
  const gpu = typeof r.device === "string" && /^(cuda|mps)/.test(r.device);
  const peak = gpu ? r.peak_memory : r.peak_rss;
  return [gpu ? `${r.backend} (${r.device.split(" ")[0]})` : r.backend, formatSeconds(r.load_s),
    num(r.prefill_tps), num(r.decode_tps),
    formatBytes(r.weight_bytes_per_token), num(r.cap_tps),
    typeof r.share_of_cap === "number" ? `${Math.round(r.share_of_cap * 100)}%` : "-",
    peak ? formatBytes(peak) : "-", r.agrees_with_numpy || "-"];
}

const BACKEND_HEADS = ["backend", "load", "prefill tok/s", "decode tok/s", "weights read per token",
  "bandwidth cap tok/s", "of cap", "peak memory", "greedy tokens = numpy"];

function renderBackends(box, rows) {
  box.replaceChildren();
  if (!rows || !rows.length) return;
  box.append(el("div", { class: "me-rd-status", text: "A decode step reads every weight matrix once: "
    + "a backend that keeps the weights quantized reads fewer bytes per token, and memory bandwidth "
    + "divided by those bytes is the fastest it can go." }), table(BACKEND_HEADS, rows.map(backendCells)));
}

/** Draw the demo into `root`; returns the cleanup function. */
export function renderRunDemo({ model, el: root }) {
  root.classList.add("me-rundemo");

  const prompt = el("textarea", { "aria-label": "prompt" });
  const chat = el("input", { type: "checkbox" });
  const maxTokens = el("input", { type: "number", min: "1", max: "2048", step: "1" });
  const temperature = el("input", { type: "number", min: "0", max: "5", step: "0.1" });
  const device = el("select");
  const bDequant = el("button", { text: "Dequantize" });
  const bGenerate = el("button", { text: "Generate" });
  const bCompare = el("button", { text: "Compare quantizations" });
  const bBackends = el("button", { text: "Compare backends" });
  const bStop = el("button", { text: "Stop" });
  const status = el("span", { class: "me-rd-status" });
  const bar = el("progress", { max: "1" });
  const barLabel = el("span", { class: "me-rd-status" });
  const error = el("div", { class: "me-rd-error" });
  const output = el("div", { class: "me-rd-output" });
  const tps = el("span", { class: "me-rd-status" });
  const stats = el("div", { class: "me-rd-status" });
  const family = el("div", { class: "me-rd-status me-rd-family" });
  const engine = el("div", { class: "me-rd-status me-rd-engine" });
  const dequantBox = el("div");
  const compareBox = el("div");
  const backendsBox = el("div");
  // "Compare with…" and "Trace" (widgets/run_jobs.py RunsJobs): drawn by runsview.js.
  const other = el("input", { type: "text", class: "me-rd-other", "aria-label": "compare with",
    placeholder: "another checkpoint to compare with: a path, URL or hf://" });
  const bRuns = el("button", { text: "Compare with…" });
  const bTrace = el("button", { text: "Trace" });
  const runsEngine = el("select", { class: "me-rd-runs-engine", "aria-label": "run this checkpoint on" }); // runs_engines
  const runsBox = el("div", { class: "me-rd-runs" });
  let runsView = null;

  root.replaceChildren(
    el("div", { class: "me-rd-row" }, [status]),
    prompt,
    el("div", { class: "me-rd-row" }, [
      el("label", {}, [chat, document.createTextNode(" chat")]),
      el("label", {}, [document.createTextNode("max tokens "), maxTokens]),
      el("label", {}, [document.createTextNode("temperature "), temperature]),
      el("label", {}, [document.createTextNode("device "), device]),
    ]),
    el("div", { class: "me-rd-row" }, [bDequant, bGenerate, bCompare, bBackends, bStop, bar, barLabel]),
    el("div", { class: "me-rd-row" }, [other, bRuns, bTrace, el("label", {}, [document.createTextNode("on "), runsEngine])]),
    error, output, el("div", { class: "me-rd-row" }, [tps]), stats, engine, family, dequantBox, compareBox, backendsBox, runsBox);

  let live = {}; // label -> streamed text during a comparison

  function syncInputs() {
    if (document.activeElement !== prompt) prompt.value = model.get("prompt");
    chat.checked = model.get("chat");
    maxTokens.value = String(model.get("max_new_tokens"));
    temperature.value = String(model.get("temperature"));
    device.replaceChildren(...model.get("devices").map((d) => el("option", { value: d, text: d })));
    device.value = model.get("device");
  }
  function syncStatus() {
    const busy = model.get("busy");
    status.textContent = statusLine(model.get("status"), model.get("source_label"));
    for (const b of [bDequant, bGenerate, bCompare, bBackends, bRuns, bTrace]) b.disabled = busy;
    bStop.disabled = !busy;
    error.textContent = model.get("error");
    const p = model.get("progress");
    const f = progressFraction(p);
    bar.style.visibility = busy || f !== null ? "visible" : "hidden";
    if (f === null) bar.removeAttribute("value"); else bar.value = f;
    barLabel.textContent = p && p.label ? `${p.label}${p.total ? ` ${p.done}/${p.total}` : ""}` : "";
  }
  function syncStats() {
    const s = model.get("stats") || {};
    tps.textContent = formatTps(s.decode_tps);
    const parts = [];
    if (s.device) parts.push(`device ${s.device}`);
    if (s.prompt_tokens !== undefined) parts.push(`prompt ${s.prompt_tokens} tokens (${formatTps(s.prefill_tps) || "-"} prefill)`);
    if (s.tokens !== undefined) parts.push(`${s.tokens} generated (${s.stop_reason})`);
    if (s.peak_memory_bytes) parts.push(`peak memory ${formatBytes(s.peak_memory_bytes)}`);
    if (s.first_token_seconds !== undefined && s.first_token_seconds !== null) {
      parts.push(`first token after ${formatSeconds(s.first_token_seconds)}${s.includes_load ? ` (the first run: this includes loading the model, ${formatSeconds(s.load_seconds)})` : ""}`);
    }
    if (s.includes_load === false) parts.push("the model was loaded by an earlier run");
    else if (s.load_seconds && s.includes_load === undefined) parts.push(`load ${formatSeconds(s.load_seconds)}`);
    stats.textContent = parts.join(" · ");
  }
  const syncOutput = () => { output.textContent = model.get("output"); };
  const syncFamily = () => { const f = model.get("family"); family.textContent = f ? `model: ${f}` : ""; };
  const syncEngine = () => { const e = model.get("engine"); engine.textContent = e ? `engine: ${e}` : ""; };
  const syncDequant = () => renderDequant(dequantBox, model.get("dequant"), model.get("dequant_summary"));
  const syncComparison = () => renderComparison(compareBox, model.get("comparison"), live);
  const syncBackends = () => renderBackends(backendsBox, model.get("backends"));
  const syncRuns = () => {
    runsView = renderRuns(runsBox, model.get("runs"), { onPick: (layer, module) => model.send({ type: "runs_select", layer, module }) });
  };
  const syncOther = () => { if (document.activeElement !== other) other.value = model.get("other_source") || ""; };
  const syncRunsEngine = () => {
    runsEngine.replaceChildren(...(model.get("runs_engines") || ["decoder"]).map((e) => el("option", { value: e, text: e })));
    runsEngine.value = model.get("runs_engine") || "decoder";
  };

  function set(name, value) { model.set(name, value); model.save_changes(); }
  prompt.addEventListener("input", () => set("prompt", prompt.value));
  chat.addEventListener("change", () => set("chat", chat.checked));
  maxTokens.addEventListener("change", () => set("max_new_tokens", Math.max(1, parseInt(maxTokens.value, 10) || 1)));
  temperature.addEventListener("change", () => set("temperature", Math.max(0, parseFloat(temperature.value) || 0)));
  device.addEventListener("change", () => set("device", device.value));
  bDequant.addEventListener("click", () => model.send({ type: "dequantize" }));
  bGenerate.addEventListener("click", () => model.send({ type: "generate" }));
  bCompare.addEventListener("click", () => { live = {}; model.send({ type: "compare" }); });
  bBackends.addEventListener("click", () => model.send({ type: "compare_backends" }));
  bStop.addEventListener("click", () => model.send({ type: "stop" }));
  other.addEventListener("change", () => set("other_source", other.value));
  runsEngine.addEventListener("change", () => set("runs_engine", runsEngine.value));
  bRuns.addEventListener("click", () => model.send({ type: "compare_runs", source: other.value }));
  bTrace.addEventListener("click", () => model.send({ type: "trace" }));

  function onMessage(msg) {
    if (!msg || typeof msg !== "object") return;
    // A new run clears the last run's lines.
    if (msg.type === "generate_start") { output.textContent = ""; tps.textContent = ""; stats.textContent = ""; error.textContent = ""; }
    else if (msg.type === "token") { output.append(document.createTextNode(msg.text)); tps.textContent = formatTps(msg.tps); }
    else if (msg.type === "error") { error.textContent = msg.message; }
    else if (msg.type === "notice") { barLabel.textContent = msg.message; }
    else if (msg.type === "runs_selected") { if (runsView) runsView.setNote(pickedText(msg)); }
    else if (msg.type === "compare_event") {
      const e = msg.event;
      if (e.type === "variant_start") live[e.label] = "";
      else if (e.type === "token") live[e.label] = (live[e.label] || "") + e.text;
      else return;
      syncComparison();
    }
  }

  const handlers = [
    ["change:prompt change:chat change:max_new_tokens change:temperature change:device change:devices", syncInputs],
    ["change:status change:busy change:error change:progress change:source_label", syncStatus],
    ["change:stats", syncStats], ["change:output", syncOutput], ["change:family", syncFamily], ["change:engine", syncEngine],
    ["change:dequant change:dequant_summary", syncDequant], ["change:comparison", syncComparison],
    ["change:backends", syncBackends], ["change:runs", syncRuns], ["change:other_source", syncOther],
    ["msg:custom", onMessage],
    ["change:runs_engines change:runs_engine", syncRunsEngine],
  ];
  for (const [ev, fn] of handlers) model.on(ev, fn);
  syncInputs(); syncStatus(); syncStats(); syncOutput(); syncFamily(); syncEngine(); syncDequant(); syncComparison(); syncBackends(); syncRuns(); syncOther(); syncRunsEngine();
  return () => { for (const [ev, fn] of handlers) model.off(ev, fn); };
}

