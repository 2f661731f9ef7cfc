// The tensor table: sortable by any column, filtered by name, virtualised.
import { h } from "./dom.js";
import { formatShape, humanBytes, humanCount } from "./format.js";
import { createVirtualList, followSelection } from "./vlist.js";

const COLUMNS = [
  ["name", "name"], ["dtype", "dtype"], ["shape", "shape"], ["params", "params"],
  ["bytes", "bytes"], ["file", "file"], ["offset", "offset"],
];

/** @param {import("./context.js").Ctx} ctx */
export function createTableView(ctx, opts = {}) {
  const { rpc, model } = ctx;
  const manyFiles = (model.get("files") || []).length > 1;
  const cols = COLUMNS.filter(([k]) => manyFiles || k !== "file");
  let sort = "index";
  let desc = false;
  let query = "";
  let selected = null;
  const root = h("div", { className: "me-table" });
  const search = h("input", { className: "me-search", type: "search", attrs: { placeholder: "Filter tensors…", "aria-label": "filter tensors" } });
  const count = h("span", { className: "me-muted me-count" });
  const head = h("div", { className: "me-row me-table-head" });
  const error = h("div", { className: "me-error", hidden: true });
  for (const [key, label] of cols) {
    const cell = h("span", { className: `me-col me-col-${key}`, text: label, attrs: { role: "columnheader" } });
    cell.addEventListener("click", () => {
      if (sort === key) desc = !desc;
      else { sort = key; desc = key !== "name"; }
      for (const c of head.children) c.classList.remove("me-sorted", "me-desc");
      cell.classList.add("me-sorted");
      if (desc) cell.classList.add("me-desc");
      list.reset();
    });
    head.append(cell);
  }
  const list = createVirtualList({
    className: "me-table-list",
    height: opts.height || 240,
    fetch: async (start, n) => {
      const { data } = await rpc.request("table", { sort, desc, query, start, count: n });
      count.textContent = `${data.total} tensors`;
      return data;
    },
    renderRow,
    onError: (e) => { error.hidden = false; error.textContent = `The table cannot be shown: ${e.message}`; },
  });
  root.append(h("div", { className: "me-toolbar" }, search, count), error, head, list.el);

  function renderRow(row) {
    const text = {
      name: row.name, dtype: row.dtype, shape: formatShape(row.shape), params: humanCount(row.params),
      bytes: humanBytes(row.bytes), file: row.file, offset: String(row.offset),
    };
    const cells = cols.map(([k]) => h("span", { className: `me-col me-col-${k}`, text: text[k] }));
    const el = h("div", { className: `me-row me-table-row${row.name === selected ? " me-selected" : ""}` },
      // A tensor the index names but no shard holds has no dtype or bytes: its note says why.
      ...(row.mark === "missing" ? cells.slice(0, 1) : cells),
      row.note ? h("span", { className: `me-note me-note-${row.mark}`, text: row.note }) : null);
    if (row.mark) el.classList.add(`me-mark-${row.mark}`);
    el.title = row.name;
    el.addEventListener("click", () => {
      selected = row.name;
      list.redraw();
      ctx.select({ tensor: row.name, file: row.path, offset: row.offset, length: row.length, from: "table" });
    });
    return el;
  }

  let timer = null;
  search.addEventListener("input", () => {
    clearTimeout(timer);
    timer = setTimeout(() => { query = search.value.trim(); list.reset(); }, 150);
  });

  async function locate(tensor) {
    try {
      const { data } = await rpc.request("table", { sort, desc, query, start: 0, count: 100, locate: tensor });
      if (data.index === null || data.index === undefined) { list.redraw(); return; }
      await list.reset(data);
      list.showIndex(data.index);
    } catch (e) { /* the table keeps its rows */ }
  }
  const follow = followSelection(root, locate, () => list.redraw());
  const refresh = follow.refresh;
  ctx.onSelect((sel) => {
    if (sel.from === "table" || !sel.tensor) return;
    selected = sel.tensor;
    follow.select(sel.tensor);
  });

  list.reset();
  return { el: root, refresh };
}
