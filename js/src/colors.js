// Colours for span kinds and dtypes. Translucent fills read well on light and dark themes.

const KIND_HUES = {
  magic: 280, version: 300, count: 320, length: 20, json: 210, metadata: 170, key: 120,
  value: 45, type: 260, kv: 190, tensor_info: 230, dims: 150, offset: 0, padding: 0,
  tensor_data: 200, gap: 0, opcode: 90,
};

/**
 * Background for a span kind; padding is grey and gaps red. `alt` gives every other span a
 * lighter shade, so neighbouring fields of one kind (opcodes, array items) stay apart.
 */
export function kindColor(kind, alt = false) {
  const a = alt ? 0.18 : 0.34;
  if (kind === "padding") return `hsla(0, 0%, 55%, ${a})`;
  if (kind === "gap") return `hsla(0, 85%, 55%, ${a + 0.05})`;
  const hue = KIND_HUES[kind] ?? hashHue(kind);
  return `hsla(${hue}, 70%, 55%, ${a})`;
}

/** A stable colour for the i-th dtype or layer. */
export function paletteColor(i) {
  if (i < 0) return "hsla(0, 0%, 55%, 0.7)";
  const hue = (i * 137.508) % 360;
  return `hsla(${hue.toFixed(0)}, 65%, 52%, 0.85)`;
}

function hashHue(text) {
  let h = 0;
  for (const ch of String(text)) h = (h * 31 + ch.charCodeAt(0)) % 360;
  return h;
}
