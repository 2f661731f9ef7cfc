// A virtualised list whose rows come from the kernel in pages: only the rows on screen exist.
import { h } from "./dom.js";
import { pagesForRows, scrollToShow, visibleRange } from "./virtual.js";

const PAGE_ROWS = 100;

/**
 * @param {{className: string, rowHeight?: number, height?: number,
 *   fetch: (start: number, count: number) => Promise<{total: number, start: number, rows: any[]}>,
 *   renderRow: (row: any, index: number) => HTMLElement, onError?: (e: Error) => void}} o
 */
export function createVirtualList(o) {
  const rowHeight = o.rowHeight || 22;
  const viewport = h("div", { className: `me-vlist ${o.className}`, style: { height: `${o.height || 360}px` } });
  const spacer = h("div", { className: "me-vlist-spacer" });
  const layer = h("div", { className: "me-vlist-rows" });
  viewport.append(spacer, layer);
  /** @type {Map<number, any>} */
  let rows = new Map();
  let total = 0;
  let version = 0;
  const loading = new Set();

  function storePage(res, v) {
    if (v !== version) return;
    total = res.total;
    res.rows.forEach((r, i) => rows.set(res.start + i, r));
  }

  async function load(page) {
    const key = `${version}:${page}`;
    if (loading.has(key)) return;
    loading.add(key);
    const v = version;
    try {
      storePage(await o.fetch(page * PAGE_ROWS, PAGE_ROWS), v);
      if (v === version) draw();
    } catch (err) {
      if (o.onError) o.onError(err);
    } finally {
      loading.delete(key);
    }
  }

  function draw() {
    spacer.style.height = `${total * rowHeight}px`;
    const height = viewport.clientHeight || o.height || 360;
    const { start, end } = visibleRange(viewport.scrollTop, height, rowHeight, total);
    const missing = pagesForRows(start, end, PAGE_ROWS).filter((p) => {
      for (let i = p * PAGE_ROWS; i < Math.min(total, (p + 1) * PAGE_ROWS); i += 1) if (!rows.has(i)) return true;
      return false;
    });
    missing.forEach(load);
    const frag = document.createDocumentFragment();
    for (let i = start; i < end; i += 1) {
      const row = rows.get(i);
      const el = row ? o.renderRow(row, i) : h("div", { className: "me-row me-row-loading", text: "…" });
      el.style.top = `${i * rowHeight}px`;
      el.style.height = `${rowHeight}px`;
      el.dataset.index = String(i);
      frag.append(el);
    }
    layer.replaceChildren(frag);
  }

  viewport.addEventListener("scroll", () => draw());

  return {
    el: viewport,
    /** Forget every row (the list changed) and load the first page again. */
    async reset(first) {
      version += 1;
      rows = new Map();
      if (first) storePage(first, version);
      else await load(Math.floor(viewport.scrollTop / rowHeight / PAGE_ROWS));
      draw();
    },
    /** Replace the rows with an answer that already holds the page around `index`. */
    showIndex(index) {
      const height = viewport.clientHeight || o.height || 360;
      const to = scrollToShow(index, viewport.scrollTop, height, rowHeight);
      if (to !== null) viewport.scrollTop = to;
      draw();
    },
    redraw: draw,
    /** The layer that holds the rows: give it a width for lists wider than their box. */
    rows: layer,
  };
}

/**
 * Follow the linked selection only while visible: a hidden list (another tab is open) finds the
 * selected tensor when it is shown, so the kernel answers the visible views first.
 * @param {HTMLElement} root @param {(tensor: string) => void} locate @param {() => void} redraw
 */
export function followSelection(root, locate, redraw) {
  let pending = null;
  const refresh = () => {
    if (pending === null) return redraw();
    const tensor = pending;
    pending = null;
    return locate(tensor);
  };
  return {
    refresh,
    /** @param {string} tensor */
    select(tensor) {
      pending = tensor;
      if (root.offsetParent !== null) refresh();
    },
  };
}
