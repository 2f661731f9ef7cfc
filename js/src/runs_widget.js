// anywidget entry of RunsView (runs/state.py): the "Compare runs" view of a RunDiff or a
// Trace. The drawing lives in runsview.js; a click asks the kernel for the cell's weight.
import "./runsview.css";
import { pickedText, renderRuns } from "./runsview.js";

function render({ model, el }) {
  let view = null;
  const draw = () => {
    view = renderRuns(el, model.get("runs"), { onPick: (layer, module) => model.send({ type: "runs_select", layer, module }) });
  };
  const onMessage = (msg) => { if (msg && msg.type === "runs_selected" && view) view.setNote(pickedText(msg)); };
  model.on("change:runs", draw);
  model.on("msg:custom", onMessage);
  draw();
  return () => { model.off("change:runs", draw); model.off("msg:custom", onMessage); };
}

export default { render };
