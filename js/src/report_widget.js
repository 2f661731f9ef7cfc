// The offline report's script (inlined into the saved HTML): reads the embedded JSON with
// JSON.parse and draws the explorer with the same views, from that data alone. Its CSS is
// static/explorer_widget.css, inlined by save_html beside this script.
import { renderView } from "./explorer.js";
import { createStaticModel } from "./report.js";

const host = typeof document !== "undefined" ? document.getElementById("me-report") : null;
const source = typeof document !== "undefined" ? document.getElementById("me-report-data") : null;
if (host && source) {
  try {
    const model = createStaticModel(JSON.parse(source.textContent || "{}"));
    renderView(model, host);
    host.dataset.ready = "1";
  } catch (err) {
    host.textContent = `The report could not be drawn: ${err && err.message}`;
  }
}

export default {};
