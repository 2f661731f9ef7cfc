// anywidget entry of RunDemo: a default export (anywidget warns about a bare `render` export).
// The drawing and its pure helpers live in run_demo.js; the styles in run_demo.css.
import "./run_demo.css";
import "./runsview.css"; // the "Compare with…" / "Trace" results (runsview.js)
import { renderRunDemo } from "./run_demo.js";

export default { render: renderRunDemo };
