// The panel the Findings view opens for "Fix…": the kernel's FixDialog (plan, ticked fixes,
// new name next to the source, progress, report, then explore/compare) for one finding, with
// only that finding's fixes ticked, drawn inside the Explorer.
import { h, clear } from "./dom.js";
import { renderChild } from "./childwidget.js";

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
