import { test } from "node:test";
import assert from "node:assert/strict";
import { LRU, PAGE, asciiChar, clampTop, formatOffset, hexByte, pagesFor, rowCount, segmentAt, topForOffset } from "../src/hexlayout.js";

test("offset, hex and ascii columns", () => {
  assert.equal(formatOffset(0), "00000000");
  assert.equal(formatOffset(0x100010), "00100010");
  assert.equal(formatOffset(20 * 2 ** 30), "500000000"); // 20 GB: widens instead of wrapping
  assert.equal(hexByte(0), "00");
  assert.equal(hexByte(255), "ff");
  assert.equal(asciiChar(0x41), "A");
  assert.equal(asciiChar(0x0a), ".");
  assert.equal(asciiChar(0x7f), ".");
});

test("rows and scroll limits for small and huge files", () => {
  assert.equal(rowCount(0), 1);
  assert.equal(rowCount(17), 2);
  assert.equal(clampTop(-5, 1000, 24), 0);
  assert.equal(clampTop(10_000, 1000, 24), 63 - 24);
  const huge = 20 * 2 ** 30;
  assert.equal(clampTop(Number.MAX_SAFE_INTEGER, huge, 24), huge / 16 - 24);
  assert.equal(topForOffset(0x1000, huge, 24), 0x100 - 2);
});

test("pages needed for a byte range", () => {
  assert.deepEqual(pagesFor(0, 10), [0]);
  assert.deepEqual(pagesFor(PAGE - 1, PAGE + 1), [0, 1]);
  assert.deepEqual(pagesFor(5, 5), []);
  assert.deepEqual(pagesFor(3 * PAGE, 4 * PAGE), [3]);
});

test("segmentAt finds the span holding a byte, -1 in gaps", () => {
  const segs = [[0, 8, 0], [8, 20, 1], [24, 30, 2]];
  assert.equal(segmentAt(segs, 0), 0);
  assert.equal(segmentAt(segs, 7), 0);
  assert.equal(segmentAt(segs, 8), 1);
  assert.equal(segmentAt(segs, 21), -1);
  assert.equal(segmentAt(segs, 29), 2);
  assert.equal(segmentAt(segs, 30), -1);
  assert.equal(segmentAt([], 3), -1);
  const many = Array.from({ length: 10_000 }, (_, i) => [i * 3, i * 3 + 2, i]);
  assert.equal(segmentAt(many, 3 * 7777 + 1), 7777);
  assert.equal(segmentAt(many, 3 * 7777 + 2), -1);
});

test("LRU keeps the most recently used pages", () => {
  const c = new LRU(2);
  c.set("a", 1);
  c.set("b", 2);
  c.get("a");
  c.set("c", 3);
  assert.equal(c.has("b"), false);
  assert.equal(c.get("a"), 1);
  assert.equal(c.size, 2);
});
