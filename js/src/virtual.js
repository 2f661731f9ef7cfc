// Virtualised lists (pure, unit-tested): which rows to draw and which pages to ask for.

/**
 * Rows [start, end) to draw for a viewport, with `overscan` extra rows on each side.
 * @returns {{start: number, end: number}}
 */
export function visibleRange(scrollTop, viewportHeight, rowHeight, total, overscan = 8) {
  const first = Math.floor(Math.max(0, scrollTop) / rowHeight);
  const count = Math.ceil(viewportHeight / rowHeight) + 1;
  const start = Math.max(0, first - overscan);
  const end = Math.min(total, first + count + overscan);
  return { start, end: Math.max(start, end) };
}

/** Page numbers (of `pageRows` rows each) that cover rows [start, end). */
export function pagesForRows(start, end, pageRows) {
  const out = [];
  if (end <= start) return out;
  for (let p = Math.floor(start / pageRows); p <= Math.floor((end - 1) / pageRows); p += 1) out.push(p);
  return out;
}

/** The scrollTop that brings row `index` into view, or null when it already is. */
export function scrollToShow(index, scrollTop, viewportHeight, rowHeight) {
  const top = index * rowHeight;
  if (top < scrollTop) return top;
  if (top + rowHeight > scrollTop + viewportHeight) return Math.max(0, top - viewportHeight / 2);
  return null;
}
