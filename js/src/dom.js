// Tiny DOM helpers. Text always goes through textContent: no string from a file is ever
// parsed as HTML, so a tensor named `<img onerror=...>` shows as those characters.

/**
 * Create an element. `props.text` sets textContent, `props.on` adds listeners, `props.attrs`
 * sets attributes (plain values, never markup), other keys are assigned as properties.
 * @param {string} tag
 * @param {Record<string, any>} [props]
 * @param {...(Node|string|null|undefined|false)} children
 * @returns {HTMLElement}
 */
export function h(tag, props = {}, ...children) {
  const el = document.createElement(tag);
  for (const [key, value] of Object.entries(props)) {
    if (value === undefined || value === null) continue;
    if (key === "text") el.textContent = String(value);
    else if (key === "className") el.className = value;
    else if (key === "on") for (const [ev, fn] of Object.entries(value)) el.addEventListener(ev, fn);
    else if (key === "attrs") for (const [a, v] of Object.entries(value)) el.setAttribute(a, String(v));
    else if (key === "style") Object.assign(el.style, value);
    else el[key] = value;
  }
  for (const child of children) {
    if (child === null || child === undefined || child === false) continue;
    el.append(typeof child === "string" ? document.createTextNode(child) : child);
  }
  return el;
}

/** Create an SVG element with attributes. @param {string} tag @param {Record<string, any>} attrs */
export function svg(tag, attrs = {}) {
  const el = document.createElementNS("http://www.w3.org/2000/svg", tag);
  for (const [a, v] of Object.entries(attrs)) el.setAttribute(a, String(v));
  return el;
}

/** Remove every child. @param {Element} el */
export function clear(el) {
  while (el.firstChild) el.removeChild(el.firstChild);
}
