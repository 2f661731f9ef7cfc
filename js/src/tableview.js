// The tensor table: sortable by any column, filtered by name, virtualised, with resizable
// columns. Names show whole where they fit and lose their middle where they do not (the full
// name is on hover); the list scrolls sideways when its columns are wider than the pane.
import { h } from "./dom.js";
import { formatBytes, formatShape, groupDigits, humanCount, middleEllipsis } from "./format.js";
import { createVirtualList, followSelection } from "./vlist.js";

/** key, header, width in px (name: from the names), numbers align right. */
const COLUMNS = [
  { key: "name", label: "name", width: 0 },
  { key: "dtype", label: "dtype", width: 60 },
  { key: "shape", label: "shape", width: 96 },
  { key: "params", label: "params", width: 68, num: true },
  { key: "bytes", label: "bytes", width: 84, num: true },
  { key: "file", label: "file", width: 170 },
  { key: "offset", label: "offset", width: 96, num: true },
];
const MIN_WIDTH = 40;
const CELL_PAD = 10; // the cell's horizontal padding, px
const NAME_WIDTH = [160, 560]; // the name column's first width fits the names, within these

/** The first width of the name column: its longest name on the first page, bounded. */
export function nameColumnWidth(names, charWidth) {
  const longest = Math.max(8, ...names.map((n) => String(n).length));
  return Math.round(Math.min(NAME_WIDTH[1], Math.max(NAME_WIDTH[0], longest * charWidth + CELL_PAD + 4)));
}

/** How many characters of a monospace font fit in a cell `width` px wide. */
export function charsThatFit(width, charWidth) {
  return Math.max(1, Math.floor((width - CELL_PAD) / Math.max(1, charWidth)));
}

/** @param {import("./context.js").Ctx} ctx */
export function createTableView(ctx, opts = {}) {
  const { rpc, model } = ctx;
  const manyFiles = (model.get("files") || []).length > 1;
  const cols = COLUMNS.filter((c) => manyFiles || c.key !== "file").map((c) => ({ ...c }));
  const nameCol = cols[0];
  let sized = false; // the name column got its first width from real names
  let charWidth = 0;
  let sort = "index";
  let desc = false;
  let query = "";
  let selected = null;
  const root = h("div", { className: "me-table" });
  const search = h("input", { className: "me-search", type: "search", attrs: { placeholder: "Filter tensors…", "aria-label": "filter tensors" } });
  const count = h("span", { className: "me-muted me-count" });
  const head = h("div", { className: "me-table-head-row" });
  const headBox = h("div", { className: "me-table-head" }, head);
  const error = h("div", { className: "me-error", hidden: true });

  for (const col of cols) {
    const label = h("span", { className: "me-col-label", text: col.label });
    const grip = h("span", { className: "me-col-resize", title: "drag to resize", attrs: { "aria-hidden": "true" } });
    const cell = h("span", { className: `me-col me-col-${col.key}${col.num ? " me-num" : ""}`, attrs: { role: "columnheader" } }, label, grip);
    cell.dataset.key = col.key;
    col.head = cell;
    label.addEventListener("click", () => {
      if (sort === col.key) desc = !desc;
      else { sort = col.key; desc = col.key !== "name"; }
      for (const c of head.children) c.classList.remove("me-sorted", "me-desc");
      cell.classList.add("me-sorted");
      if (desc) cell.classList.add("me-desc");
      // A new order starts at its first row, not wherever the old order was scrolled to.
      list.el.scrollTop = 0;
      list.reset();
    });
    grip.addEventListener("pointerdown", (ev) => startResize(col, ev));
    head.append(cell);
  }

  const list = createVirtualList({
    className: "me-table-list",
    height: opts.height || 240,
    fetch: async (start, n) => {
      const { data } = await rpc.request("table", { sort, desc, query, start, count: n });
      count.textContent = `${groupDigits(data.total)} tensor${data.total === 1 ? "" : "s"}`;
      fitNames(data.rows);
      return data;
    },
    renderRow,
    onError: (e) => { error.hidden = false; error.textContent = `The table cannot be shown: ${e.message}`; },
  });
  list.el.addEventListener("scroll", () => { headBox.scrollLeft = list.el.scrollLeft; });
  root.append(h("div", { className: "me-toolbar" }, search, count), error, headBox, list.el);

  function measureChar() {
    if (charWidth) return charWidth;
    const probe = h("span", { className: "me-col me-char-probe", text: "0".repeat(40) });
    list.rows.append(probe);
    const w = probe.getBoundingClientRect().width / 40;
    probe.remove();
    if (w > 0) charWidth = w; // 0 while hidden in another tab: measure again when shown
    return w || 7.2;
  }

  function fitNames(rows) {
    if (sized || !rows.length || !charWidth && root.offsetParent === null) return;
    const cw = measureChar();
    nameCol.width = nameColumnWidth(rows.map((r) => r.name), cw);
    sized = charWidth > 0;
    applyWidths();
  }

  function applyWidths() {
    let total = 0;
    for (const col of cols) {
      const w = col.width || NAME_WIDTH[0];
      root.style.setProperty(`--me-w-${col.key}`, `${w}px`);
      total += w;
    }
    head.style.width = `${total}px`;
    list.rows.style.width = `${total}px`;
  }

  function startResize(col, ev) {
    ev.preventDefault();
    ev.stopPropagation();
    const x0 = ev.clientX;
    const w0 = col.width || NAME_WIDTH[0];
    const grip = /** @type {HTMLElement} */ (ev.target);
    grip.setPointerCapture?.(ev.pointerId);
    root.classList.add("me-resizing");
    const move = (e) => {
      col.width = Math.max(MIN_WIDTH, Math.round(w0 + e.clientX - x0));
      if (col === nameCol) sized = true;
      applyWidths();
      if (col === nameCol) list.redraw(); // names re-shorten to the new width
    };
    const up = () => {
      root.classList.remove("me-resizing");
      window.removeEventListener("pointermove", move);
      window.removeEventListener("pointerup", up);
    };
    window.addEventListener("pointermove", move);
    window.addEventListener("pointerup", up);
  }

  function renderRow(row) {
    const fit = charsThatFit(nameCol.width || NAME_WIDTH[0], measureChar());
    const cells = {
      name: [middleEllipsis(row.name, fit), row.name],
      dtype: [row.dtype, row.dtype],
      shape: [formatShape(row.shape), formatShape(row.shape)],
      params: [humanCount(row.params), `${groupDigits(row.params)} parameters`],
      bytes: [formatBytes(row.bytes), `${groupDigits(row.bytes)} bytes`],
      file: [row.file, row.path || row.file],
      offset: [groupDigits(row.offset), `byte ${groupDigits(row.offset)} (0x${Number(row.offset).toString(16)})`],
    };
    const spans = cols.map(({ key, num }) => h("span", { className: `me-col me-col-${key}${num ? " me-num" : ""}`, text: cells[key][0], title: cells[key][1] }));
    const el = h("div", { className: `me-row me-table-row${row.name === selected ? " me-selected" : ""}` },
      // A tensor the index names but no shard holds has no dtype or bytes: its note says why.
      ...(row.mark === "missing" ? spans.slice(0, 1) : spans),
      row.note ? h("span", { className: `me-note me-note-${row.mark}`, text: row.note }) : null);
    if (row.mark) el.classList.add(`me-mark-${row.mark}`);
    el.dataset.tensor = row.name;
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
    timer = setTimeout(() => { query = search.value.trim(); list.el.scrollTop = 0; list.reset(); }, 150);
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
  const refresh = () => {
    // First shown after being hidden: the names can be measured, and the column fitted, now.
    if (!charWidth && !sized) {
      measureChar();
      if (charWidth) return list.reset().then(() => follow.refresh());
    }
    return follow.refresh();
  };
  ctx.onSelect((sel) => {
    if (sel.from === "table" || !sel.tensor) return;
    selected = sel.tensor;
    follow.select(sel.tensor);
  });

  applyWidths();
  list.reset();
  return { el: root, refresh };
}
