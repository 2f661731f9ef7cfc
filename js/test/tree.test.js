import { test } from "node:test";
import assert from "node:assert/strict";
import { flattenTree, indexTree } from "../src/tree.js";

const nodes = [
  { id: 0, parent: null, label: "__metadata__" },
  { id: 1, parent: 0, label: "format" },
  { id: 2, parent: null, label: "tensors" },
  { id: 3, parent: 2, label: "layers" },
  { id: 4, parent: 3, label: "0" },
  { id: 5, parent: 4, label: "q_proj.weight", tensor: "model.layers.0.q_proj.weight" },
  { id: 6, parent: 3, label: "1" },
  { id: 7, parent: 6, label: "q_proj.weight", tensor: "model.layers.1.q_proj.weight" },
];

test("collapsed tree shows the roots; expanding shows children in order", () => {
  const idx = indexTree(nodes);
  assert.deepEqual(flattenTree(idx, new Set()).map((r) => r.node.id), [0, 2]);
  const rows = flattenTree(idx, new Set([2, 3, 6]));
  assert.deepEqual(rows.map((r) => r.node.id), [0, 2, 3, 4, 6, 7]);
  assert.deepEqual(rows.map((r) => r.depth), [0, 0, 1, 2, 2, 3]);
});

test("search keeps matches and their ancestors, on the full tensor name", () => {
  const idx = indexTree(nodes);
  const rows = flattenTree(idx, new Set(), "layers.1.");
  assert.deepEqual(rows.map((r) => r.node.id), [2, 3, 6, 7]);
  assert.deepEqual(flattenTree(idx, new Set(), "FORMAT").map((r) => r.node.id), [0, 1]);
  assert.deepEqual(flattenTree(idx, new Set(), "nothing"), []);
});
