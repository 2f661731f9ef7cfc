// The tokenizer inspector's vocabulary: every token by id in a virtualised list (only the rows
// on screen exist; pages of 100 come from the kernel as the list scrolls), a box to jump to an
// id, and tokens found by the search box that jump here when clicked. Nothing is asked of the
// kernel until the vocabulary is opened.
import { h } from "./dom.js";
import { groupDigits } from "./format.js";
import { createVirtualList } from "./vlist.js";

const ESCAPES = { "\n": "\\n", "\t": "\\t", "\r": "\\r" };

/**
 * A token as it can be seen: control characters as escapes (a newline token is "\n", not a
 * blank line), everything else as it is. A missing token (an id the vocabulary skips) says so.
 * @param {string|null|undefined} token
 */
export function visibleToken(token) {
  if (token === null || token === undefined) return "(no token)";
  // eslint-disable-next-line no-control-regex
  return String(token).replace(/[\u0000-\u001f\u007f]/g, (c) => ESCAPES[c] || `\\x${c.charCodeAt(0).toString(16).padStart(2, "0")}`);
}

/**
 * The id typed into the jump box, or why it is not one: {id} or {error}.
 * @param {string} text @param {number} total the vocabulary's size (0 before the first page)
 */
export function parseTokenId(text, total) {
  const t = String(text).trim().replace(/[,_\s]/g, "");
  if (!/^\d+$/.test(t)) return { error: "type a token id (digits)" };
  const id = Number(t);
  if (total && id >= total) return { error: `ids go from 0 to ${groupDigits(total - 1)}` };
  return { id };
}

/** @param {import("./context.js").Ctx} ctx */
export function createVocabView(ctx) {
  const jump = h("input", { className: "me-vocab-jump", type: "text",
    attrs: { placeholder: "go to id", "aria-label": "go to token id", inputmode: "numeric" } });
  const count = h("span", { className: "me-muted me-vocab-count" });
  const error = h("span", { className: "me-error me-vocab-error", hidden: true, attrs: { role: "status" } });
  const summary = h("summary", { text: "Vocabulary" });
  const box = h("div", { className: "me-vocab-box" });
  const root = h("details", { className: "me-model-vocab" }, summary,
    h("div", { className: "me-toolbar" }, jump, count, error), box);
  let total = 0;
  let marked = -1;
  let list = null;
  let ready = null; // the first page's arrival: a jump waits for it to know the list's length

  function renderRow(row) {
    const el = h("div", { className: `me-row me-vocab-row${row.id === marked ? " me-selected" : ""}${row.special ? " me-vocab-special" : ""}` },
      h("span", { className: "me-vocab-id me-num", text: String(row.id) }),
      h("span", { className: "me-vocab-token", text: visibleToken(row.token) }),
      row.special ? h("span", { className: "me-muted me-vocab-tag", text: "special" }) : null);
    el.dataset.id = String(row.id);
    return el;
  }

  function say(message) {
    error.hidden = !message;
    error.textContent = message || "";
  }

  function ensureList() {
    if (list) return list;
    list = createVirtualList({
      className: "me-vocab-list",
      height: 260,
      fetch: async (start, n) => {
        const { data } = await ctx.rpc.request("vocab", { start, count: n });
        total = data.total;
        count.textContent = `${groupDigits(total)} tokens`;
        return data;
      },
      renderRow,
      onError: (e) => say(`The vocabulary cannot be shown: ${e.message}`),
    });
    box.append(list.el);
    ready = list.reset();
    return list;
  }

  /** Open the list, scroll to token `id` and mark it. @param {number} id */
  async function show(id) {
    root.open = true;
    const l = ensureList();
    await ready;
    const got = parseTokenId(String(id), total);
    if (got.error) return say(got.error);
    marked = id;
    say("");
    l.showIndex(id);
  }

  root.addEventListener("toggle", () => { if (root.open) ensureList(); });
  jump.addEventListener("keydown", (ev) => {
    if (ev.key !== "Enter") return;
    const got = parseTokenId(jump.value, total);
    if (got.error) say(got.error);
    else show(got.id).catch((e) => say(String(e.message || e)));
  });
  return { el: root, show };
}
