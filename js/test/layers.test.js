import { test } from "node:test";
import assert from "node:assert/strict";
import { cellColor, cellTensor, cellText, GLYPHS, markIndex } from "../src/layersview.js";

const summary = {
  stat: "norm", layers: [0, 1], roles: ["q", "experts"],
  values: [[1.5, 0], [60.25, null]], z: [[0.3, null], [151, null]],
  names: { templates: ["model.layers.{L}.q.weight", null], extra: { "0,1": "model.layers.0.experts.0.w" } },
  counts: [[1, 8], [1, 0]],
  marks: [{ row: 0, col: 1, kind: "zeroed" }, { row: 1, col: 0, kind: "high" }, { row: 1, col: 0, kind: "duplicate" }],
};

test("a cell's colour: none without a value, red above, blue below, stronger further out", () => {
  assert.equal(cellColor(null), "");
  assert.equal(cellColor(NaN), "");
  const alpha = (c) => Number(c.match(/([\d.]+)\)$/)[1]);
  assert.match(cellColor(2), /^hsla\(6,/);
  assert.match(cellColor(-2), /^hsla\(214,/);
  assert.ok(alpha(cellColor(4)) > alpha(cellColor(1)) && alpha(cellColor(1)) > alpha(cellColor(0)));
  assert.equal(cellColor(9), cellColor(4)); // clipped at the ends
});

test("hovering says layer, role, value, tensor, z and the mark", () => {
  const marks = markIndex(summary);
  assert.equal(marks.get("1,0").kind, "high"); // the first mark of a cell wins
  assert.equal(cellText(summary, 1, 0, marks.get("1,0")),
    "layer 1 · q · norm 60.250 · model.layers.1.q.weight · z +151.0 · far above its role's trend");
  assert.equal(cellText(summary, 0, 1, marks.get("0,1")),
    "layer 0 · experts · norm 0 · model.layers.0.experts.0.w (+7 more) · z −∞ · all zeros");
  assert.equal(cellText(summary, 1, 1), "layer 1 · experts · norm no value");
  assert.deepEqual(Object.keys(GLYPHS), ["high", "low", "zeroed", "duplicate", "nonfinite"]);
});

test("a cell's tensor: the role's template with the layer in it, or the name listed apart", () => {
  assert.equal(cellTensor(summary, 1, 0), "model.layers.1.q.weight");
  assert.equal(cellTensor(summary, 0, 1), "model.layers.0.experts.0.w");
  assert.equal(cellTensor(summary, 1, 1), null); // no tensors in that cell
});
