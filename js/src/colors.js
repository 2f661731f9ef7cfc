// Colours for span kinds and dtypes. Translucent fills read well on light and dark themes.

const KIND_HUES = {
  magic: 280, version: 300, count: 320, length: 20, json: 210, metadata: 170, key: 120,
  value: 45, type: 260, kv: 190, tensor_info: 230, dims: 150, offset: 0, padding: 0,
  tensor_data: 200, gap: 0, opcode: 90,
};

/** Background for a span kind; padding and gaps are grey and red-striped by CSS. */
export function kindColor(kind) {
  if (kind === "padding") return "hsla(0, 0%, 55%, 0.30)";
  if (kind === "gap") return "hsla(0, 85%, 55%, 0.35)";
  const hue = KIND_HUES[kind] ?? hashHue(kind);
  return `hsla(${hue}, 70%, 55%, 0.32)`;
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
