// The chat template as a loader reads it: what the audit flags marked in place (clicking a mark
// sends the hexdump to its bytes), invisible, control and bidi characters drawn as ⟨U+200B⟩,
// the canary conversation it renders beside it (what the conversation said, the template's
// markup, its own text, and what the judge flags), and the exact prompt the template makes of a
// two-turn example (rendered in the kernel, in jinja2's sandbox). Text from the file goes
// through textContent only.
import { h } from "./dom.js";

// What the kernel's text_audit calls hidden: format and control characters (tab, newlines and
// carriage return aside), Unicode tags, the blank Hangul fillers; bidi controls are Cf too.
const INVISIBLE = /^(?![\t\n\v\f\r])[\p{Cf}\p{Cc}\u{E0000}-\u{E007F}\u115F\u1160\u3164\uFFA0]$/u;
const RANK = { error: 0, warning: 1, info: 2 };

/** How an invisible character is drawn. @param {string} ch */
export function codePointLabel(ch) {
  return `⟨U+${ch.codePointAt(0).toString(16).toUpperCase().padStart(4, "0")}⟩`;
}

/**
 * The template cut into pieces for drawing: {text, mark, invisible}. `marks` hold code-point
 * ranges (Python's string indices) {start, end, severity}; where marks overlap the most severe
 * one wins. An invisible character is a piece of its own, drawn by its code point.
 * @param {string} text @param {{start: number, end: number, severity: string}[]} marks
 */
export function templatePieces(text, marks = []) {
  const cps = Array.from(text);
  const cuts = new Set([0, cps.length]);
  for (const m of marks) {
    cuts.add(Math.max(0, Math.min(cps.length, m.start)));
    cuts.add(Math.max(0, Math.min(cps.length, m.end)));
  }
  const sorted = [...cuts].sort((a, b) => a - b);
  const pieces = [];
  for (let i = 0; i + 1 < sorted.length; i++) {
    const [a, b] = [sorted[i], sorted[i + 1]];
    const covering = marks.filter((m) => m.start <= a && m.end >= b && m.end > m.start);
    covering.sort((x, y) => (RANK[x.severity] ?? 3) - (RANK[y.severity] ?? 3));
    const mark = covering[0] || null;
    let run = "";
    for (const ch of cps.slice(a, b)) {
      if (INVISIBLE.test(ch)) {
        if (run) pieces.push({ text: run, mark, invisible: false });
        pieces.push({ text: codePointLabel(ch), mark, invisible: true });
        run = "";
      } else run += ch;
    }
    if (run) pieces.push({ text: run, mark, invisible: false });
  }
  return pieces;
}

const CANARY_TITLE = {
  content: "a message of the canary conversation",
  markup: "role markup the template writes",
  own: "text the template writes of its own",
  injected: "flagged: text the template writes only under a condition, or an answer it begins for the model",
};

/**
 * The canary conversation as the template rendered it (in the kernel, in jinja2's sandbox), each
 * piece marked as the conversation's, the template's markup, its own text, or flagged.
 * @param {{condition: string, pieces: {text: string, kind: string}[]}} canary
 */
export function createCanaryView(canary) {
  const pre = h("pre", { className: "me-canary" });
  for (const piece of canary.pieces || []) {
    const span = h("span", { className: `me-canary-${piece.kind}`, title: CANARY_TITLE[piece.kind] || piece.kind });
    for (const p of templatePieces(piece.text)) {
      span.append(p.invisible ? h("span", { className: "me-invisible", text: p.text, title: "an invisible character" }) : p.text);
    }
    pre.append(span);
  }
  const flagged = (canary.pieces || []).some((p) => p.kind === "injected");
  return h("details", { className: "me-template-canary", open: flagged },
    h("summary", { text: `canary conversation, rendered when ${canary.condition}${flagged ? ": injected text marked" : ""}` }), pre);
}

/** @param {import("./context.js").Ctx} ctx @param {any} tv the card's `template` @param {string|null} rendered */
export function createTemplateView(ctx, tv, rendered) {
  const root = h("div", { className: "me-template-view" });
  if (tv && tv.error) root.append(h("div", { className: "me-error", text: tv.error }));
  if (tv && tv.text !== undefined) {
    const marks = tv.marks || [];
    const pick = (m) => ctx.select({ file: m.file, offset: m.offset, length: m.length, from: "template" });
    const summary = tv.family ? `the published ${tv.family} template` :
      marks.length ? `${marks.length} place${marks.length === 1 ? "" : "s"} flagged` : "nothing flagged";
    const pre = h("pre", { className: "me-template" });
    for (const p of templatePieces(tv.text, marks)) {
      const cls = [p.invisible ? "me-invisible" : "", p.mark ? `me-tpl-mark me-sev-${p.mark.severity}` : ""].join(" ").trim();
      if (!cls) { pre.append(p.text); continue; }
      const span = h("span", { className: cls, text: p.text, title: p.mark ? `${p.mark.code}: ${p.mark.message}` : "an invisible character" });
      if (p.mark && p.mark.offset !== null && p.mark.offset !== undefined) span.addEventListener("click", () => pick(p.mark));
      pre.append(span);
    }
    const list = h("div", { className: "me-template-marks" });
    for (const m of marks) {
      const item = h("div", { className: `me-finding me-sev-${m.severity}`, tabIndex: 0, attrs: { role: "button" } },
        h("span", { className: "me-code", text: m.code }), h("span", { className: "me-message", text: m.message }));
      item.addEventListener("click", () => pick(m));
      item.addEventListener("keydown", (e) => { if (e.key === "Enter") pick(m); });
      list.append(item);
    }
    const others = (tv.others || []).length ? h("div", { className: "me-muted",
      text: `also in the files: ${tv.others.join(", ")} (audited; their findings are in the Findings tab)` }) : null;
    const source = h("details", { className: "me-template-source", open: marks.length > 0 },
      h("summary", { text: `template source (${tv.label}): ${summary}` }), pre, list, others);
    root.append(tv.canary ? h("div", { className: "me-template-pair" }, source, createCanaryView(tv.canary)) : source);
  }
  if (rendered) {
    const prompt = h("pre", { className: "me-model-chat" });
    for (const p of templatePieces(rendered)) {
      prompt.append(p.invisible ? h("span", { className: "me-invisible", text: p.text, title: "an invisible character" }) : p.text);
    }
    root.append(h("details", {}, h("summary", {
      text: "chat template, rendered for a two-turn example: the exact prompt (jinja2's sandbox)" }), prompt));
  }
  return root;
}
