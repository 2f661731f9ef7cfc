// The annotated hexdump: offset, hex and ASCII columns, every byte coloured by its span.
// Only the rows on screen exist in the page; 4 KB pages come from the kernel on demand.
import { h, clear } from "./dom.js";
import { kindColor } from "./colors.js";
import { baseName, formatBytes, parseOffset } from "./format.js";
import { toBytes } from "./rpc.js";
import { LRU, PAGE, ROW, asciiChar, clampTop, formatOffset, hexByte, pagesFor, rowCount, segmentAt, topForOffset } from "./hexlayout.js";

/** @param {import("./context.js").Ctx} ctx @param {{rows?: number}} [opts] */
export function createHexView(ctx, opts = {}) {
  const { model, rpc } = ctx;
  const files = model.get("files") || [];
  const ROWS = opts.rows || 24;
  const cache = new LRU(96);
  const inflight = new Map();
  let file = files.length ? files[0].file : null;
  let size = files.length ? files[0].size : 0;
  // A file cut short: "end of file: N bytes of M expected (P %)", shown once its end is on screen.
  let endText = files.length && typeof files[0].end === "string" ? files[0].end : "";
  let top = 0;
  /** @type {[number, number]|null} */
  let highlight = null;
  let stepIndex = -1;

  const root = h("div", { className: "me-hexdump", tabIndex: 0 });
  const fileSelect = h("select", { className: "me-file-select", attrs: { "aria-label": "file" } });
  for (const f of files) fileSelect.append(h("option", { value: f.file, text: `${f.name} (${formatBytes(f.size)})` }));
  const gotoInput = h("input", { className: "me-goto", attrs: { placeholder: "offset (1234 or 0x4d2)", "aria-label": "go to offset" } });
  const gotoBtn = h("button", { className: "me-goto-btn", text: "Go" });
  const prevBtn = h("button", { className: "me-step-prev", text: "◀ Previous" });
  const nextBtn = h("button", { className: "me-step-next", text: "Next ▶" });
  const stepCount = h("span", { className: "me-step-count me-muted" });
  const stepText = h("div", { className: "me-step-text", text: "Step through the file: Next explains each field in file order." });
  const legend = h("div", { className: "me-legend" });
  for (const kind of model.get("legend") || []) {
    legend.append(h("span", { className: "me-chip", style: { background: kindColor(kind) }, text: kind.replace("_", " ") }));
  }
  const grid = h("div", { className: "me-hex-grid", attrs: { role: "grid" } });
  const slider = h("input", { className: "me-hex-slider", type: "range", min: 0, step: 1, value: 0, attrs: { "aria-label": "scroll" } });
  const status = h("div", { className: "me-hex-status me-muted", text: " " });
  // A saved report holds some bytes only: the others show blank, with its calm note why.
  const absentNote = h("div", { className: "me-muted me-hex-note", hidden: true });
  const endNote = h("div", { className: "me-hex-end", hidden: true });
  const tip = h("div", { className: "me-tooltip", hidden: true });

  root.append(
    h("div", { className: "me-toolbar" }, files.length > 1 ? fileSelect : null, gotoInput, gotoBtn, h("span", { className: "me-sep" }), prevBtn, nextBtn, stepCount),
    stepText, legend, grid, endNote, absentNote, slider, status, tip,
  );

  // One element per cell, built once and refilled on every scroll.
  const rowEls = [];
  for (let r = 0; r < ROWS; r += 1) {
    const off = h("span", { className: "me-hex-off" });
    const hex = [];
    const asc = [];
    const hexBox = h("span", { className: "me-hex-bytes" });
    const ascBox = h("span", { className: "me-hex-ascii" });
    for (let c = 0; c < ROW; c += 1) {
      const cell = h("span", { className: "me-b" });
      cell.dataset.col = String(c);
      hex.push(cell);
      hexBox.append(cell);
      const a = h("span", { className: "me-a" });
      a.dataset.col = String(c);
      asc.push(a);
      ascBox.append(a);
    }
    const line = h("div", { className: "me-hex-row" }, off, hexBox, ascBox);
    line.dataset.row = String(r);
    rowEls.push({ line, off, hex, asc });
    grid.append(line);
  }

  function pageKey(p) {
    return `${file}\u0000${p}`;
  }

  // The first page came with the widget's state: the first bytes draw without a round trip.
  const seeded = model.get("first_page");
  if (seeded && seeded.file === file && seeded.offset === 0) {
    cache.set(pageKey(0), { ...seeded, bytes: toBytes(model.get("first_bytes")) });
  }

  /** Ask for the missing pages of bytes [start, end), contiguous ones in one request. */
  function ensurePages(start, end) {
    const missing = pagesFor(start, Math.min(end, size)).filter((p) => !cache.has(pageKey(p)) && !inflight.has(pageKey(p)));
    const runs = [];
    for (const p of missing) {
      const last = runs[runs.length - 1];
      if (last && last[1] === p - 1 && last[1] - last[0] < 15) last[1] = p;
      else runs.push([p, p]);
    }
    for (const [first, lastPage] of runs) {
      const wanted = file;
      const keys = [];
      for (let p = first; p <= lastPage; p += 1) keys.push(pageKey(p));
      const req = rpc.request("bytes", { file, offset: first * PAGE, length: (lastPage - first + 1) * PAGE }).then(({ data, buffers }) => {
        // One answer can cover several pages: each page's cache entry points at the whole chunk.
        const chunk = { ...data, bytes: buffers[0] || new Uint8Array(0) };
        for (let p = first; p <= lastPage; p += 1) cache.set(`${wanted}\u0000${p}`, chunk);
        keys.forEach((k) => inflight.delete(k));
        if (wanted === file) draw();
      }, (err) => {
        keys.forEach((k) => inflight.delete(k));
        status.textContent = `Cannot read bytes at ${first * PAGE}: ${err.message}`;
      });
      keys.forEach((k) => inflight.set(k, req));
    }
  }

  /** The page, byte and span for an absolute offset (or nulls while it loads). */
  function lookup(offset) {
    const pg = cache.get(pageKey(Math.floor(offset / PAGE)));
    if (!pg) return { pg: null, byte: null, span: null };
    const i = offset - pg.offset;
    const held = !pg.known || pg.known.some(([a, b]) => offset >= a && offset < b);
    const byte = held && i >= 0 && i < pg.bytes.length ? pg.bytes[i] : null;
    const s = segmentAt(pg.segs, offset);
    return { pg, byte, span: s >= 0 ? pg.spans[pg.segs[s][2]] : null };
  }

  function draw() {
    const start = top * ROW;
    ensurePages(start, start + ROWS * ROW);
    slider.max = String(Math.max(0, rowCount(size) - ROWS));
    slider.value = String(top);
    let absent = null;
    const endShown = endText && size <= start + ROWS * ROW;
    for (let r = 0; r < ROWS; r += 1) {
      const rowStart = start + r * ROW;
      const el = rowEls[r];
      const inFile = rowStart < size;
      el.line.hidden = !inFile && r > 0;
      el.off.textContent = inFile ? formatOffset(rowStart) : "";
      for (let c = 0; c < ROW; c += 1) {
        const off = rowStart + c;
        const cell = el.hex[c];
        const a = el.asc[c];
        cell.dataset.off = String(off);
        a.dataset.off = String(off);
        if (off >= size) {
          cell.textContent = "  ";
          a.textContent = " ";
          cell.style.background = a.style.background = "";
          cell.className = off === size && endShown ? "me-b me-empty me-file-end" : "me-b me-empty";
          a.className = "me-a me-empty";
          continue;
        }
        const { pg, byte, span } = lookup(off);
        if (pg && byte === null && pg.note) absent = pg.note;
        cell.textContent = byte === null ? (pg ? "  " : "··") : hexByte(byte);
        a.textContent = byte === null ? " " : asciiChar(byte);
        const bg = span ? kindColor(span.kind, span.index % 2 === 1) : "";
        cell.style.background = bg;
        a.style.background = bg;
        const held = !(pg && byte === null); // a saved report's byte it does not hold
        const hl = held && highlight && off >= highlight[0] && off < highlight[1];
        const kind = span ? ` me-kind-${span.kind}` : held ? " me-unlabelled" : " me-absent";
        cell.className = `me-b${kind}${hl ? " me-hl" : ""}`;
        a.className = `me-a${kind}${hl ? " me-hl" : ""}`;
      }
    }
    endNote.hidden = !endShown;
    endNote.textContent = endShown ? endText : "";
    absentNote.hidden = !absent;
    absentNote.textContent = absent || "";
  }

  function scrollTo(newTop) {
    top = clampTop(newTop, size, ROWS);
    draw();
  }

  /** Show file `f`; false when it is not one of this view's files. */
  function setFile(f) {
    if (f === file) return true;
    const info = files.find((x) => x.file === f);
    if (!info) return false;
    file = f;
    size = info.size;
    endText = typeof info.end === "string" ? info.end : "";
    fileSelect.value = f;
    stepIndex = -1;
    top = 0;
    return true;
  }

  /** Show and highlight bytes [offset, offset + length) of `f` (default: the file shown). */
  function reveal(f, offset, length) {
    // An offset in a file this view cannot show must not light up the same offset elsewhere.
    if (f && !setFile(f)) return;
    highlight = [offset, offset + Math.max(1, length || 1)];
    top = topForOffset(offset, size, ROWS);
    draw();
  }

  function describe(span, off) {
    const where = `byte ${off} (0x${off.toString(16)})`;
    if (!span) return `${where}: no labelled field`;
    const value = span.value ? `: ${span.value}` : "";
    return `${span.path}${value}, ${span.length} bytes at ${span.offset} | ${where}`;
  }

  function onHover(ev) {
    const t = /** @type {HTMLElement} */ (ev.target);
    if (!t.dataset || t.dataset.off === undefined) return;
    const off = Number(t.dataset.off);
    if (off >= size) return;
    const { span } = lookup(off);
    const text = describe(span, off);
    status.textContent = text;
    tip.textContent = span ? `${span.path}${span.value ? `: ${span.value}` : ""}` : "no labelled field";
    tip.hidden = false;
    const r = root.getBoundingClientRect();
    const c = t.getBoundingClientRect();
    tip.style.left = `${Math.max(0, Math.min(c.left - r.left, r.width - 260))}px`;
    tip.style.top = `${c.bottom - r.top + 4}px`;
  }

  function onClick(ev) {
    const t = /** @type {HTMLElement} */ (ev.target);
    if (!t.dataset || t.dataset.off === undefined) return;
    const off = Number(t.dataset.off);
    const { span } = lookup(off);
    if (!span) return;
    highlight = [span.offset, span.offset + span.length];
    // Step-through continues from the field the user clicked.
    if (typeof span.index === "number") stepIndex = span.index;
    draw();
    ctx.select({ file, offset: span.offset, length: span.length, tensor: span.tensor, from: "hexdump" });
  }

  async function step(delta) {
    const index = stepIndex < 0 ? 0 : stepIndex + delta;
    try {
      const { data } = await rpc.request("step", { file, index });
      if (!data.span) {
        stepText.textContent = data.text;
        return;
      }
      stepIndex = data.index;
      stepCount.textContent = `${data.index + 1} / ${data.count}`;
      stepText.textContent = data.text;
      reveal(file, data.span.offset, data.span.length);
    } catch (err) {
      stepText.textContent = `Cannot step: ${err.message}`;
    }
  }

  function gotoOffset() {
    const off = parseOffset(gotoInput.value);
    if (off === null) {
      status.textContent = `Not an offset: ${gotoInput.value} (use 1234 or 0x4d2)`;
      return;
    }
    if (off >= size) {
      status.textContent = `Offset ${off} is past the end of ${baseName(file)} (${size} bytes)`;
      return;
    }
    reveal(file, off, 1);
  }

  grid.addEventListener("mouseover", onHover);
  grid.addEventListener("mouseleave", () => { tip.hidden = true; });
  grid.addEventListener("click", onClick);
  grid.addEventListener("wheel", (ev) => {
    ev.preventDefault();
    const rows = Math.sign(ev.deltaY) * Math.max(1, Math.round(Math.abs(ev.deltaY) / 18));
    scrollTo(top + rows);
  }, { passive: false });
  root.addEventListener("keydown", (ev) => {
    if (ev.target === gotoInput) {
      if (ev.key === "Enter") gotoOffset();
      return;
    }
    const moves = { ArrowDown: 1, ArrowUp: -1, PageDown: ROWS, PageUp: -ROWS };
    if (ev.key in moves) scrollTo(top + moves[ev.key]);
    else if (ev.key === "Home") scrollTo(0);
    else if (ev.key === "End") scrollTo(rowCount(size));
    else return;
    ev.preventDefault();
  });
  slider.addEventListener("input", () => scrollTo(Number(slider.value)));
  gotoBtn.addEventListener("click", gotoOffset);
  prevBtn.addEventListener("click", () => step(-1));
  nextBtn.addEventListener("click", () => step(1));
  fileSelect.addEventListener("change", () => { setFile(fileSelect.value); draw(); });

  ctx.onSelect((sel) => {
    if (sel.from === "hexdump" || sel.offset === null || sel.offset === undefined) return;
    reveal(sel.file || file, sel.offset, sel.length || 1);
  });

  if (!files.length) {
    clear(grid);
    grid.append(h("div", { className: "me-empty-note", text: "No readable file: nothing to show." }));
  } else {
    draw();
  }
  return { el: root };
}
