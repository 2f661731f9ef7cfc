import { test } from "node:test";
import assert from "node:assert/strict";
import { pagesForRows, scrollToShow, visibleRange } from "../src/virtual.js";

test("visible rows with overscan, clamped to the list", () => {
  assert.deepEqual(visibleRange(0, 220, 22, 1000, 5), { start: 0, end: 16 });
  assert.deepEqual(visibleRange(2200, 220, 22, 1000, 5), { start: 95, end: 116 });
  assert.deepEqual(visibleRange(0, 220, 22, 3, 5), { start: 0, end: 3 });
  assert.deepEqual(visibleRange(0, 220, 22, 0, 5), { start: 0, end: 0 });
});

test("90,000 rows: a window far down asks for one or two pages only", () => {
  const { start, end } = visibleRange(89_000 * 22, 380, 22, 90_000);
  assert.ok(end - start < 50);
  const pages = pagesForRows(start, end, 100);
  assert.ok(pages.length <= 2 && pages[0] === 889, String(pages));
});

test("scrollToShow moves only when the row is off screen", () => {
  assert.equal(scrollToShow(5, 0, 220, 22), null);
  assert.equal(scrollToShow(0, 100, 220, 22), 0);
  assert.equal(scrollToShow(100, 0, 220, 22), 2200 - 110);
});
