import { test } from "node:test";
import assert from "node:assert/strict";
import { cellColor, cellText, figureRows, markIndex, nonfinite, num, pickedText, tokensText, verdictLine } from "../src/runsview.js";

const DIFF = {
  kind: "diff", layers: [0, 1], modules: ["q", "v"],
  metrics: { cosine: [[1, 1], [0.999, 0.2]], rel_l2: [[0, 0.001], [0.01, 1.36]], max_abs: [[0, 1e-6], [0.2, 3.5]] },
  color: { label: "relative L2 (log scale)", values: [[-9, -3], [-2, 0.13]], min: -9, max: 0.13 },
  cell_tensors: [["l.0.q", "l.0.v"], ["l.1.q", "l.1.v"]], tensors_b: [["l.0.q", "l.0.v"], ["l.1.q", "blk.1.v"]],
  marks: [{ layer: 1, module: "v", kind: "divergence", text: "first divergence" },
    { layer: 1, module: "v", kind: "massive", text: "later mark of the same cell" }],
  figures: { tokens: 12, kld: { mean: 0.27, median: 0.25, p99: 0.63, max: 0.74 }, top1_agreement: 0.353,
    perplexity: { a: 12.5, b: 40.25 } },
  outer: [{ module: "logits", rel_l2: 0.56, cosine: 0.84 }],
};

test("colours run from clear yellow to opaque red over the scale; no value, no colour", () => {
  assert.equal(cellColor(-9, -9, 0.13), "hsla(48, 90%, 50%, 0.060)");
  assert.equal(cellColor(0.13, -9, 0.13), "hsla(0, 90%, 50%, 0.920)");
  assert.equal(cellColor(5, -9, 0.13), cellColor(0.13, -9, 0.13));  // clamped
  assert.equal(cellColor(null, 0, 1), "");
  assert.equal(cellColor(NaN, 0, 1), "");
});

test("numbers read well at every scale", () => {
  assert.equal(num(0), "0");
  assert.equal(num(1.3612), "1.361");
  assert.equal(num(1e-9), "1.00e-9");
  assert.equal(num(25000.4), "25000");
  assert.equal(num(2.5e6), "2.50e+6");
  assert.equal(num(null), "n/a");
});

test("a cell's text: where, the numbers, both weights when they differ, the mark", () => {
  const marks = markIndex(DIFF);
  assert.equal(marks.get("1,v").kind, "divergence");  // the first mark of a cell wins
  const t = cellText(DIFF, 1, 1, marks.get("1,v"));
  assert.equal(t, "layer 1 · v · cosine 0.2 · relative L2 1.36 · max |a−b| 3.5 · l.1.v (b: blk.1.v) · first divergence");
  assert.match(cellText(DIFF, 0, 0), /^layer 0 · q · cosine 1 · relative L2 0 · max \|a−b\| 0 · l\.0\.q$/);
});

test("a trace cell says absmax against the median and its NaN/Inf", () => {
  const tr = { kind: "trace", layers: [0], modules: ["ffn_out"],
    metrics: { norm: [[3]], absmax: [[2000]], mean: [[0.1]], std: [[1]], nan: [[4]], inf: [[0]] },
    color: { values: [[3.3]] }, cell_tensors: [["l.0.up"]] };
  assert.equal(nonfinite(tr, 0, 0), true);
  assert.equal(nonfinite(DIFF, 1, 1), false);  // a comparison shows NaN as the top of its scale
  const t = cellText(tr, 0, 0, { text: "first NaN/Inf (4 NaN, 0 Inf)" });
  assert.match(t, /absmax 1995x the median \|x\|/);
  assert.match(t, /4 NaN, 0 Inf · l\.0\.up · first NaN\/Inf/);
});

test("the figure table: KLD, top-1 agreement, perplexities, the points outside the layers", () => {
  assert.deepEqual(figureRows(DIFF), [["tokens", "12"],
    ["KLD mean / median / p99 / max (nats)", "0.27 / 0.25 / 0.63 / 0.74"], ["top-1 agreement", "35.3%"],
    ["perplexity a / b", "12.5 / 40.25"], ["logits: relative L2 / cosine", "0.56 / 0.84"]]);
  const tr = { kind: "trace", figures: { tokens: 3, massive: 2, massive_ratio: 1000 }, outer: [] };
  assert.deepEqual(figureRows(tr), [["tokens", "3"], ["massive activations (≥ 1000x the median |x|)", "2"]]);
});

test("a click's answer says what was selected, or why nothing was", () => {
  assert.equal(pickedText({ tensor: "w", selected: true, note: "" }), "Selected w: the tensor table, histogram and bytes show it.");
  assert.equal(pickedText({ tensor: "w", selected: false, note: "", layer: 2, module: "v" }), "layer 2 v: weight w");
  assert.equal(pickedText({ tensor: null, note: "No weight feeds it." }), "No weight feeds it.");
});

test("the verdict line: a comparison's own verdict, a trace's first NaN/Inf, or the note", () => {
  assert.deepEqual(verdictLine({ verdict: { kind: "drift", sentence: "The runs drift apart from embed on." } }),
    { kind: "drift", text: "The runs drift apart from embed on." });
  assert.deepEqual(verdictLine({ first: { sentence: "NaN/Inf first appear at layer 2 ffn_out." } }),
    { kind: "jump", text: "NaN/Inf first appear at layer 2 ffn_out." });
  assert.deepEqual(verdictLine({ figures: { note: "No divergence." } }), { kind: "agree", text: "No divergence." });
  assert.equal(verdictLine({ figures: {} }), null);
});

test("tokens read one by one, quoted, never as a list", () => {
  assert.equal(tokensText(["Ġthe", "a\nb"]), '"Ġthe" "a\\nb"');
  assert.equal(tokensText([]), "none");
});

test("a cross-engine cell says what stands for the point on each side", () => {
  const s = { ...DIFF, engines: ["transformers", "onnxruntime"], aligned_count: 4,
    aligned: [[null, null], [null, "a: encoder.layer.1.v · b: /bert/v/Add (Add, by scope)"]] };
  assert.match(cellText(s, 1, 1), / · a: encoder\.layer\.1\.v · b: \/bert\/v\/Add \(Add, by scope\)$/);
  assert.doesNotMatch(cellText(s, 0, 0), /a: /);
});
