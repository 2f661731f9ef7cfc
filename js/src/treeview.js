// The header tree: collapsible, searchable, virtualised; rows are flattened by the kernel.
import { h } from "./dom.js";
import { formatShape, formatBytes } from "./format.js";
import { createVirtualList, followSelection } from "./vlist.js";

/** @param {import("./context.js").Ctx} ctx */
export function createTreeView(ctx, opts = {}) {
  const { rpc } = ctx;
  let expanded = new Set();
  let query = "";
  let selectedId = null;
  const root = h("div", { className: "me-tree" });
  const search = h("input", { className: "me-search", type: "search", attrs: { placeholder: "Filter names…", "aria-label": "filter names" } });
  const count = h("span", { className: "me-muted me-count" });
  const error = h("div", { className: "me-error", hidden: true });

  const list = createVirtualList({
    className: "me-tree-list",
    height: opts.height || 380,
    fetch: async (start, n) => {
      const { data } = await rpc.request("tree", { expanded: [...expanded], query, start, count: n });
      count.textContent = `${data.total} rows`;
      return data;
    },
    renderRow,
    onError: (e) => { error.hidden = false; error.textContent = `The tree cannot be shown: ${e.message}`; },
  });
  root.append(h("div", { className: "me-toolbar" }, search, count), error, list.el);

  function renderRow(row) {
    const caret = row.has_children ? (row.expanded ? "▾" : "▸") : "";
    const sev = row.kind === "import" && row.dtype ? ` me-sev-${row.dtype}` : "";
    const el = h("div", { className: `me-row me-tree-row me-node-${row.kind}${sev}${row.id === selectedId ? " me-selected" : ""}`, style: { paddingLeft: `${4 + row.depth * 14}px` } },
      h("span", { className: "me-caret", text: caret }),
      h("span", { className: "me-label", text: row.label }),
      row.value ? h("span", { className: "me-value", text: row.value }) : null,
      row.dtype && row.kind === "tensor" ? h("span", { className: "me-dtype", text: row.dtype }) : null,
      row.kind === "tensor" ? h("span", { className: "me-shape", text: formatShape(row.shape) }) : null,
      row.bytes !== null && row.bytes !== undefined ? h("span", { className: "me-bytes", text: formatBytes(row.bytes) }) : null,
    );
    el.title = row.tensor || row.label;
    el.addEventListener("click", (ev) => onRowClick(row, ev));
    return el;
  }

  async function onRowClick(row, ev) {
    const onCaret = /** @type {HTMLElement} */ (ev.target).classList.contains("me-caret");
    if (row.has_children && (onCaret || row.offset === null || row.offset === undefined) && !query) {
      if (expanded.has(row.id)) expanded.delete(row.id);
      else expanded.add(row.id);
      await list.reset();
    }
    if (row.offset !== null && row.offset !== undefined) {
      selectedId = row.id;
      list.redraw();
      ctx.select({ file: row.file, offset: row.offset, length: row.length, tensor: row.tensor, from: "tree" });
    }
  }

  let timer = null;
  search.addEventListener("input", () => {
    clearTimeout(timer);
    timer = setTimeout(() => { query = search.value.trim(); list.reset(); }, 150);
  });

  async function locate(tensor) {
    if (query) {
      query = "";
      search.value = "";
    }
    const { data } = await rpc.request("tree", { expanded: [...expanded], query: "", start: 0, count: 100, locate: tensor });
    expanded = new Set(data.expanded);
    await list.reset(data);
    if (data.index !== null && data.index !== undefined) {
      selectedId = data.rows[data.index - data.start]?.id ?? null;
      list.showIndex(data.index);
    }
  }

  const follow = followSelection(root, (tensor) => locate(tensor).catch(() => {}), () => list.redraw());
  // `lazy` (the Explorer, where the tree is a hidden tab at first): the first rows are asked
  // for when the tab is shown, so building the tree never delays the bytes of the first paint.
  let loaded = !opts.lazy;
  const refresh = () => {
    if (!loaded) {
      loaded = true;
      return list.reset().then(() => follow.refresh());
    }
    return follow.refresh();
  };
  ctx.onSelect((sel) => {
    if (sel.from !== "tree" && sel.tensor) follow.select(sel.tensor);
  });

  if (loaded) list.reset();
  return { el: root, refresh };
}
