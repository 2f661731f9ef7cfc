import { test } from "node:test";
import assert from "node:assert/strict";
import { moveCell } from "../src/gridkeys.js";

test("arrows move one cell and stop at the edges", () => {
  assert.deepEqual(moveCell(2, 3, "ArrowUp", 6, 9), [1, 3]);
  assert.deepEqual(moveCell(2, 3, "ArrowDown", 6, 9), [3, 3]);
  assert.deepEqual(moveCell(2, 3, "ArrowLeft", 6, 9), [2, 2]);
  assert.deepEqual(moveCell(2, 3, "ArrowRight", 6, 9), [2, 4]);
  assert.deepEqual(moveCell(0, 0, "ArrowUp", 6, 9), [0, 0]);
  assert.deepEqual(moveCell(0, 0, "ArrowLeft", 6, 9), [0, 0]);
  assert.deepEqual(moveCell(5, 8, "ArrowDown", 6, 9), [5, 8]);
  assert.deepEqual(moveCell(5, 8, "ArrowRight", 6, 9), [5, 8]);
});

test("Home/End go along the row, with Ctrl to the corners; Page keys ten rows", () => {
  assert.deepEqual(moveCell(2, 3, "Home", 6, 9), [2, 0]);
  assert.deepEqual(moveCell(2, 3, "End", 6, 9), [2, 8]);
  assert.deepEqual(moveCell(2, 3, "Home", 6, 9, true), [0, 0]);
  assert.deepEqual(moveCell(2, 3, "End", 6, 9, true), [5, 8]);
  assert.deepEqual(moveCell(2, 3, "PageDown", 60, 9), [12, 3]);
  assert.deepEqual(moveCell(2, 3, "PageDown", 6, 9), [5, 3]);
  assert.deepEqual(moveCell(2, 3, "PageUp", 60, 9), [0, 3]);
});

test("other keys do not move", () => {
  assert.equal(moveCell(2, 3, "Enter", 6, 9), null);
  assert.equal(moveCell(2, 3, "a", 6, 9), null);
});
