// Keyboard access to a grid of cells (the Layers tab's heatmap): one cell is in the tab order
// (a "roving" tabindex), the arrow keys, Home/End and Page Up/Down move it, Enter or Space
// picks it. The grid's own ARIA roles and each cell's aria-label are the caller's.

const PAGE = 10; // rows Page Up / Page Down move

/**
 * The cell a key moves to from (i, j) in a rows x cols grid, clamped to the grid; null for a
 * key that does not move. Ctrl+Home / Ctrl+End go to the first / last cell.
 * @param {number} i @param {number} j @param {string} key @param {number} rows @param {number} cols
 * @param {boolean} [ctrl]
 * @returns {[number, number] | null}
 */
export function moveCell(i, j, key, rows, cols, ctrl = false) {
  const clamp = (v, n) => Math.max(0, Math.min(n - 1, v));
  switch (key) {
    case "ArrowUp": return [clamp(i - 1, rows), j];
    case "ArrowDown": return [clamp(i + 1, rows), j];
    case "ArrowLeft": return [i, clamp(j - 1, cols)];
    case "ArrowRight": return [i, clamp(j + 1, cols)];
    case "PageUp": return [clamp(i - PAGE, rows), j];
    case "PageDown": return [clamp(i + PAGE, rows), j];
    case "Home": return ctrl ? [0, 0] : [i, 0];
    case "End": return ctrl ? [rows - 1, cols - 1] : [i, cols - 1];
    default: return null;
  }
}

/**
 * Make the cells of `grid` reachable by keyboard. Cells carry data-row / data-col.
 * @param {HTMLElement} grid
 * @param {{rows: number, cols: number, cellAt: (i: number, j: number) => HTMLElement | undefined,
 *   start: [number, number], onPick: (cell: HTMLElement) => void}} o
 * @returns {{focusable: (cell: HTMLElement) => void}}
 */
export function gridKeys(grid, o) {
  let current = o.cellAt(...o.start);
  if (current) current.tabIndex = 0;
  const focusable = (cell) => {
    if (!cell || cell === current) return;
    if (current) current.tabIndex = -1;
    cell.tabIndex = 0;
    current = cell;
  };
  grid.addEventListener("keydown", (ev) => {
    const cell = /** @type {HTMLElement} */ (ev.target);
    if (!cell.dataset || cell.dataset.row === undefined) return;
    if (ev.key === "Enter" || ev.key === " ") {
      ev.preventDefault();
      o.onPick(cell);
      return;
    }
    const to = moveCell(Number(cell.dataset.row), Number(cell.dataset.col), ev.key, o.rows, o.cols, ev.ctrlKey || ev.metaKey);
    if (!to) return;
    ev.preventDefault(); // the arrows move the cell, not the page
    const next = o.cellAt(...to);
    if (!next) return;
    focusable(next);
    next.focus();
  });
  // A cell clicked (or focused another way) is where the keys go on from.
  grid.addEventListener("focusin", (ev) => {
    const cell = /** @type {HTMLElement} */ (ev.target);
    if (cell.dataset && cell.dataset.row !== undefined) focusable(cell);
  });
  return { focusable };
}
