// The Model tab: what the model is (each value clickable to the bytes it was read from), the
// chat template with what its audit flags and the prompt it makes of an example
// (templateview.js), the memory table, and a tokenizer inspector.
import { h, clear } from "./dom.js";
import { createTemplateView } from "./templateview.js";
import { createVocabView, visibleToken } from "./vocabview.js";

const MiB = 2 ** 20;

/** @param {import("./context.js").Ctx} ctx */
export function createModelView(ctx) {
  const root = h("div", { className: "me-model" });
  let loaded = false;

  function renderCard(card) {
    clear(root);
    const head = `${card.architecture || "unknown architecture"}${card.family ? ` · ${card.family}` : ""}`;
    root.append(h("div", { className: "me-model-head", text: head }));
    root.append(h("div", { className: "me-muted",
      text: `${(card.parameters || 0).toLocaleString()} parameters · ${(card.bytes / MiB).toFixed(1)} MiB` }));
    const table = h("table", { className: "me-model-card" });
    for (const r of card.rows || []) {
      const row = h("tr", { tabIndex: 0, attrs: { role: "button" } },
        h("td", { text: r.name }), h("td", { text: String(r.value) }),
        h("td", { className: "me-muted", text: r.where }));
      if (r.offset !== null && r.offset !== undefined) {
        const pick = () => ctx.select({ file: r.file, offset: r.offset, length: r.length, tensor: r.tensor, from: "model" });
        row.addEventListener("click", pick);
        row.addEventListener("keydown", (e) => { if (e.key === "Enter") pick(); });
      }
      table.append(row);
    }
    root.append(table);
    if ((card.auto_map || []).length) root.append(autoMap(card.auto_map));
    if (card.tokenizer) root.append(h("div", { className: "me-model-tok", text: `tokenizer: ${card.tokenizer.summary}` }));
    if (card.adapter) root.append(h("div", { text: `adapter: ${card.adapter.summary}` }));
    if ((card.memory || []).length) {
      const mem = h("table", { className: "me-model-memory" },
        h("tr", {}, h("th", { text: "context" }), h("th", { text: "weights" }), h("th", { text: "KV cache" }),
          h("th", { text: "total (margin incl.)" })));
      for (const m of card.memory) {
        mem.append(h("tr", {}, h("td", { text: m.context.toLocaleString() }),
          h("td", { text: `${(m.weights_bytes / MiB).toFixed(0)} MiB` }),
          h("td", { text: `${(m.kv_bytes / MiB).toFixed(0)} MiB` }),
          h("td", { text: `${(m.total_bytes / MiB).toFixed(0)} MiB` })));
      }
      root.append(mem);
    }
    if (card.template || card.chat_example) root.append(createTemplateView(ctx, card.template, card.chat_example));
    if (card.tokenizer) root.append(inspector(Boolean(card.offline)));
  }

  /** What config.json's auto_map names and the code file each runs (read, never imported). */
  function autoMap(entries) {
    const t = h("table", { className: "me-model-automap" },
      h("tr", {}, h("th", { text: "auto_map" }), h("th", { text: "names" }), h("th", { text: "code it runs" })));
    for (const e of entries) {
      const code = h("td", { className: "me-automap-code", text: e.code_name || "another repository's: not read here" });
      const row = h("tr", { tabIndex: 0, attrs: { role: "button" } },
        h("td", { text: `${e.side} > ${e.auto_class}` }), h("td", { text: e.ref }), code);
      // The row shows the auto_map entry's bytes; the code cell shows the code file's.
      row.addEventListener("click", () => ctx.select({ file: e.file, offset: e.offset, length: e.length, from: "model" }));
      if (e.code) {
        code.classList.add("me-link");
        code.addEventListener("click", (ev) => { ev.stopPropagation(); ctx.select({ file: e.code, offset: 0, length: 0, from: "model" }); });
      }
      t.append(row);
    }
    return h("div", { className: "me-model-custom" },
      h("div", { className: "me-pane-title", text: "Custom code: transformers runs these files with trust_remote_code=True" }), t);
  }

  // Answers to typing are drawn only if no later keystroke asked again; a failed request says why.
  async function ask(op, args, into, draw) {
    const mine = (into.dataset.asked = String(Number(into.dataset.asked || 0) + 1));
    try {
      const { data } = await ctx.rpc.request(op, args);
      if (into.dataset.asked !== mine) return;
      clear(into);
      draw(data);
    } catch (e) {
      if (into.dataset.asked !== mine) return;
      clear(into);
      into.append(h("div", { className: "me-error", text: String(e.message || e) }));
    }
  }

  function inspector(offline) {
    const input = h("input", { className: "me-model-text", attrs: { placeholder: "type text to tokenize" } });
    const out = h("div", { className: "me-model-tokens" });
    const find = h("input", { className: "me-model-find", attrs: { placeholder: "find a token by id or text" } });
    const found = h("div", { className: "me-model-found" });
    const title = h("div", { className: "me-pane-title", text: "Tokenizer" });
    if (offline) {
      // A saved report has no tokenizer to run: say so instead of inputs that answer nothing.
      input.disabled = find.disabled = true;
      return h("div", { className: "me-model-inspector me-offline" }, title,
        h("div", { className: "me-muted me-model-offline", text: "Typing text to tokenize needs a live kernel: this saved report holds the tokenizer's summary above, not the tokenizer. In a notebook, mx.explore(path) and its Model tab tokenize as you type." }),
        input, find);
    }
    let timer = null;
    input.addEventListener("input", () => {
      clearTimeout(timer);
      timer = setTimeout(() => ask("tokenize", { text: input.value }, out, (data) => {
        for (const t of data.tokens) {
          out.append(h("span", { className: "me-token", text: t.token,
            attrs: { title: `id ${t.id}, bytes ${t.start}–${t.end}` } }), " ");
        }
      }), 150);
    });
    const vocab = createVocabView(ctx);
    let findTimer = null;
    // Searched as you type, like the text above (a change event waits for the box to lose focus).
    find.addEventListener("input", () => {
      clearTimeout(findTimer);
      if (!find.value.trim()) { // an answer still on its way is not drawn into the emptied list
        found.dataset.asked = String(Number(found.dataset.asked || 0) + 1);
        clear(found);
        return;
      }
      findTimer = setTimeout(() => ask("find_token", { query: find.value }, found, (data) => {
        if (!data.tokens.length) found.append(h("div", { className: "me-muted", text: "no token matches" }));
        for (const t of data.tokens) {
          // A found token opens the vocabulary at its id, among its neighbours.
          const item = h("button", { className: "me-model-found-item", title: `show id ${t.id} in the vocabulary`,
            text: `${t.id}\t${visibleToken(t.token)}` });
          item.addEventListener("click", () => vocab.show(t.id));
          found.append(item);
        }
      }), 250);
    });
    return h("div", { className: "me-model-inspector" }, title, input, out, find, found, vocab.el);
  }

  return {
    el: root,
    async load() {
      if (loaded) return;
      loaded = true;
      root.append(h("div", { className: "me-muted", text: "reading the model…" }));
      try {
        const { data } = await ctx.rpc.request("model_card");
        renderCard(data);
      } catch (e) {
        clear(root);
        root.append(h("div", { className: "me-error", text: String(e.message || e) }));
      }
    },
  };
}
