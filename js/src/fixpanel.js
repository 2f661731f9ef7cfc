// The panel the Findings view opens for "Fix…": the kernel's FixDialog (plan, ticked fixes,
// new name next to the source, progress, report, then explore/compare) for one finding, with
// only that finding's fixes ticked, drawn inside the Explorer. Where the front end draws no
// ipywidgets (marimo), the same dialog is drawn here from the kernel's answers (fix_form,
// fix_write, fix_explore, fix_compare).
import { h, clear } from "./dom.js";
import { drawsIpywidgets, renderChild } from "./childwidget.js";

/**
 * The FixDialog drawn without ipywidgets. @param {import("./context.js").Ctx} ctx
 * @param {any} host @param {any} data fix_form's answer @param {() => boolean} live
 * @param {(d: () => void) => void} keep hands over the cleanup of a drawn child widget
 */
function nativeDialog(ctx, host, data, live, keep) {
  const boxes = data.fixes.map((/** @type {any} */ f) => {
    const input = /** @type {HTMLInputElement} */ (h("input", { attrs: { type: "checkbox" }, checked: Boolean(f.ticked) }));
    input.dataset.fix = f.name;
    return h("label", { className: "me-fix-choice" }, input, h("span", { text: f.label }));
  });
  const dest = /** @type {HTMLInputElement} */ (h("input", { className: "me-fix-dest", attrs: { type: "text", "aria-label": "copy to" }, value: data.dest }));
  const write = /** @type {HTMLButtonElement} */ (h("button", { className: "me-fix-write", text: "Write fixed copy", disabled: !data.fixes.length }));
  const explore = /** @type {HTMLButtonElement} */ (h("button", { className: "me-fix-explore", text: "Open in Explorer", disabled: true }));
  const compare = /** @type {HTMLButtonElement} */ (h("button", { className: "me-fix-compare", text: "Compare (mx.diff)", disabled: true }));
  const out = h("pre", { className: "me-fix-out" });
  const view = h("div", { className: "me-fix-view" });
  const fail = (/** @type {any} */ err) => { out.textContent = `Failed: ${err && err.message}`; };
  write.addEventListener("click", async () => {
    write.disabled = true;
    out.textContent = "Writing the fixed copy…";
    const fixes = boxes.map((b) => /** @type {HTMLInputElement} */ (b.querySelector("input"))).filter((i) => i.checked).map((i) => i.dataset.fix);
    try {
      const { data: res } = await ctx.rpc.request("fix_write", { fixes, dest: dest.value }, { timeoutMs: 600_000 });
      if (!live()) return;
      out.textContent = res.text;
      if (res.ok) explore.disabled = compare.disabled = false;
      else write.disabled = false;
    } catch (err) { fail(err); write.disabled = false; }
  });
  explore.addEventListener("click", async () => {
    explore.disabled = true;
    try {
      const { data: res } = await ctx.rpc.request("fix_explore", {}, { timeoutMs: 120_000 });
      if (!live()) return;
      clear(view);
      keep(await renderChild(ctx.model, host, res.ref, view));
    } catch (err) { fail(err); explore.disabled = false; }
  });
  compare.addEventListener("click", async () => {
    try {
      const { data: res } = await ctx.rpc.request("fix_compare", {}, { timeoutMs: 600_000 });
      if (live()) out.textContent = res.text;
    } catch (err) { fail(err); }
  });
  return h("div", { className: "me-fix-native" },
    h("pre", { className: "me-fix-plan", text: data.plan }), ...boxes,
    h("label", { className: "me-fix-destrow" }, h("span", { text: "copy to " }), dest),
    h("div", { className: "me-fix-actions" }, write, explore, compare), out, view);
}

/** @param {import("./context.js").Ctx} ctx @param {any} host */
export function createFixPanel(ctx, host) {
  const title = h("span", { className: "me-fix-title" });
  const close = h("button", { className: "me-fix-close", text: "Close", attrs: { "aria-label": "close the fix dialog" } });
  const body = h("div", { className: "me-fix-body" });
  const root = h("div", { className: "me-fix-panel", hidden: true, attrs: { role: "dialog" } },
    h("div", { className: "me-fix-head" }, title, close), body);
  let dispose = () => {};
  let token = 0;

  function shut() {
    token += 1;
    dispose();
    dispose = () => {};
    clear(body);
    root.hidden = true;
  }
  close.addEventListener("click", shut);
  ctx.cleanups.push(() => dispose());

  /** @param {number} index the finding's place in the findings list @param {any} finding */
  async function open(index, finding) {
    shut();
    const mine = token;
    root.hidden = false;
    title.textContent = `Fix ${finding.code}`;
    body.append(h("div", { className: "me-muted", text: "Reading the repair plan…" }));
    try {
      if (!drawsIpywidgets(ctx.model)) {
        const { data } = await ctx.rpc.request("fix_form", { finding: index }, { timeoutMs: 120_000 });
        if (mine !== token) return;
        clear(body);
        const keep = (/** @type {() => void} */ d) => { if (mine === token) dispose = d; else d(); };
        body.append(nativeDialog(ctx, host, data, () => mine === token, keep));
        root.scrollIntoView?.({ block: "nearest" });
        return;
      }
      const { data } = await ctx.rpc.request("fix_dialog", { finding: index }, { timeoutMs: 120_000 });
      if (mine !== token) return;
      clear(body);
      const box = h("div", { className: "me-fix-widget" });
      body.append(box);
      dispose = await renderChild(ctx.model, host, data.ref, box);
      if (mine !== token) dispose();
    } catch (err) {
      if (mine !== token) return;
      clear(body);
      body.append(h("div", { className: "me-error", text: `The fix dialog cannot be shown here: ${err && err.message}. In Python, mx.FixDialog(path) shows the same dialog.` }));
    }
    root.scrollIntoView?.({ block: "nearest" });
  }
  return { el: root, open, close: shut };
}
