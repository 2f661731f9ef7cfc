// The Explorer's "Run" tab: the demo's RunDemo widget, created by the kernel when the tab first
// opens (so exploring never loads a model) and drawn here through anywidget's host API.
import { h, clear } from "./dom.js";
import { renderChild } from "./childwidget.js";

/**
 * @param {import("./context.js").Ctx} ctx
 * @param {{getWidget?: (ref: string) => Promise<{render: (o: {el: HTMLElement}) => Promise<void>}>}|undefined} host
 */
export function createRunPanel(ctx, host) {
  const root = h("div", { className: "me-run" },
    h("div", { className: "me-muted", text: "Open this tab to load the run demo." }));
  let started = false;

  async function open() {
    if (started) return;
    started = true;
    clear(root);
    if (!host || typeof host.getWidget !== "function") {
      root.append(h("div", { className: "me-error", text: "The Run tab needs a live kernel and anywidget 0.11 or newer; in Python, mx.RunDemo(path) shows the same demo." }));
      return;
    }
    root.append(h("div", { className: "me-muted", text: "Loading the run demo…" }));
    try {
      const { data } = await ctx.rpc.request("run_demo");
      const box = h("div", { className: "me-run-widget" });
      clear(root);
      root.append(box);
      await renderChild(ctx.model, host, data.ref, box);
    } catch (err) {
      started = false; // opening the tab again tries again
      clear(root);
      root.append(h("div", { className: "me-error", text: `The run demo cannot be shown: ${err && err.message}` }));
    }
  }
  return { el: root, open };
}
