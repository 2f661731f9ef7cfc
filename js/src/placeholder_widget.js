/** Placeholder entry until the widgets land. */
export function render({ el }) {
  el.textContent = "model_explorer";
}
export default { render };
