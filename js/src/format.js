// Number and name formatting shared by the views (pure, unit-tested).

/**
 * Bytes in binary units, as the Python side prints them (model_explorer/units.py):
 * 512 -> "512 B", 1536 -> "1.5 KiB", 98362432 -> "93.8 MiB"; "?" when not a number.
 * @param {number|null|undefined} n
 */
export function formatBytes(n) {
  if (n === null || n === undefined || typeof n !== "number" || !Number.isFinite(n)) return "?";
  const units = ["B", "KiB", "MiB", "GiB", "TiB", "PiB"];
  let v = n;
  let i = 0;
  while (Math.abs(v) >= 1024 && i < units.length - 1) {
    v /= 1024;
    i += 1;
  }
  return i === 0 ? `${v} B` : `${v.toFixed(1)} ${units[i]}`;
}

/** 1234567 -> "1,234,567" (an offset or a count people compare digit by digit). */
export function groupDigits(n) {
  if (n === null || n === undefined || !Number.isFinite(n)) return "?";
  return String(Math.trunc(n)).replace(/\B(?=(\d{3})+(?!\d))/g, ",");
}

/**
 * Shorten `text` to at most `max` characters by cutting out its middle, keeping the distinctive
 * tail of a tensor name whole from a dot: "model.layers.17.mlp.down_proj.weight" at 30 ->
 * "model.…17.mlp.down_proj.weight". When no dotted tail fills half the room, cut by characters.
 * @param {string} text @param {number} max
 */
export function middleEllipsis(text, max) {
  const s = String(text);
  if (s.length <= max) return s;
  if (max <= 1) return max === 1 ? "…" : "";
  const room = max - 1;
  let tail = -1;
  for (let k = s.indexOf(".") + 1; k > 0 && k < s.length; k = s.indexOf(".", k) + 1) {
    if (s.length - k <= room) { tail = s.length - k; break; }
  }
  if (tail < room / 2) tail = room - Math.floor(room / 4);
  return `${s.slice(0, room - tail)}…${s.slice(s.length - tail)}`;
}

/** 1234567 -> "1.23M". @param {number|null|undefined} n */
export function humanCount(n) {
  if (n === null || n === undefined || !Number.isFinite(n)) return "?";
  const a = Math.abs(n);
  if (a >= 1e9) return `${(n / 1e9).toFixed(2)}B`;
  if (a >= 1e6) return `${(n / 1e6).toFixed(2)}M`;
  if (a >= 1e4) return `${(n / 1e3).toFixed(1)}K`;
  return String(n);
}

/** @param {number[]|null|undefined} shape */
export function formatShape(shape) {
  return shape ? `[${shape.join(", ")}]` : "";
}

/** A statistic for the table: short, but exact enough to spot a 1e-8 or a 3e38. */
export function formatStat(v) {
  if (v === null || v === undefined) return "–";
  if (typeof v !== "number") return String(v);
  if (Number.isInteger(v) && Math.abs(v) < 1e9) return String(v);
  const a = Math.abs(v);
  if (a !== 0 && (a < 1e-3 || a >= 1e5)) return v.toExponential(3);
  return v.toPrecision(5);
}

/** Parse "1234", "0x4d2" or "4d2h" into a byte offset; null when it is not a number. */
export function parseOffset(text) {
  const t = String(text).trim().toLowerCase().replace(/_/g, "");
  let v = NaN;
  if (/^0x[0-9a-f]+$/.test(t)) v = parseInt(t.slice(2), 16);
  else if (/^[0-9a-f]+h$/.test(t)) v = parseInt(t.slice(0, -1), 16);
  else if (/^\d+$/.test(t)) v = parseInt(t, 10);
  return Number.isFinite(v) && v >= 0 ? v : null;
}

/** @param {string} path */
export function baseName(path) {
  const parts = String(path || "").split(/[\\/]/);
  return parts[parts.length - 1] || String(path || "");
}
