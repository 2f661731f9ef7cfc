// Hexdump layout and span lookup (pure, unit-tested): rows of 16 bytes, pages of 4 KB.

export const ROW = 16;
export const PAGE = 4096;

/** Offset column text: at least 8 hex digits, more for files past 4 GB. @param {number} n */
export function formatOffset(n) {
  return n.toString(16).padStart(8, "0");
}

/** @param {number} b */
export function hexByte(b) {
  return b.toString(16).padStart(2, "0");
}

/** The character shown in the ASCII column. @param {number} b */
export function asciiChar(b) {
  return b >= 0x20 && b < 0x7f ? String.fromCharCode(b) : ".";
}

/** Total rows for a file of `size` bytes. @param {number} size */
export function rowCount(size) {
  return Math.max(1, Math.ceil(size / ROW));
}

/** Clamp the first visible row so the view never scrolls past the end. */
export function clampTop(top, size, visibleRows) {
  const max = Math.max(0, rowCount(size) - visibleRows);
  return Math.min(Math.max(0, Math.floor(top)), max);
}

/** The row to show first so that `offset` is visible, a few rows from the top. */
export function topForOffset(offset, size, visibleRows, margin = 2) {
  return clampTop(Math.floor(offset / ROW) - margin, size, visibleRows);
}

/** Page numbers needed for bytes [start, end). */
export function pagesFor(start, end, pageSize = PAGE) {
  const out = [];
  if (end <= start) return out;
  for (let p = Math.floor(start / pageSize); p <= Math.floor((end - 1) / pageSize); p += 1) out.push(p);
  return out;
}

/**
 * Index into `segs` ([start, end, spanIndex] sorted by start, non-overlapping) of the segment
 * holding `offset`, or -1. Binary search: a page can hold thousands of segments.
 * @param {number[][]} segs @param {number} offset
 */
export function segmentAt(segs, offset) {
  let lo = 0;
  let hi = segs.length - 1;
  while (lo <= hi) {
    const mid = (lo + hi) >> 1;
    const s = segs[mid];
    if (offset < s[0]) hi = mid - 1;
    else if (offset >= s[1]) lo = mid + 1;
    else return mid;
  }
  return -1;
}

/** A least-recently-used map with a fixed number of entries (pages of bytes). */
export class LRU {
  /** @param {number} capacity */
  constructor(capacity) {
    this.capacity = capacity;
    /** @type {Map<any, any>} */
    this.map = new Map();
  }

  get(key) {
    if (!this.map.has(key)) return undefined;
    const v = this.map.get(key);
    this.map.delete(key);
    this.map.set(key, v);
    return v;
  }

  set(key, value) {
    this.map.delete(key);
    this.map.set(key, value);
    while (this.map.size > this.capacity) this.map.delete(this.map.keys().next().value);
  }

  has(key) {
    return this.map.has(key);
  }

  clear() {
    this.map.clear();
  }

  get size() {
    return this.map.size;
  }
}
