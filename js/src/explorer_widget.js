// anywidget entry: every view (Explorer, HexDump, HeaderTree, ShardMap, TensorHistogram,
// Findings) is drawn by this one module; the model's `view` trait says which.
import "./explorer.css";
import { renderView } from "./explorer.js";

/** @param {{model: any, el: HTMLElement, host?: any}} args */
function render({ model, el, host }) {
  try {
    return renderView(model, el, { host });
  } catch (err) {
    // A view that cannot draw says why, in the cell.
    el.textContent = `model_explorer could not draw this view: ${err && err.message}`;
    return () => {};
  }
}

export default { render };
