import { test } from "node:test";
import assert from "node:assert/strict";
import { baseName, formatShape, formatStat, humanBytes, humanCount, parseOffset } from "../src/format.js";
import { groupFindings } from "../src/findingsview.js";
import { histogramBars } from "../src/histview.js";

test("sizes and counts", () => {
  assert.equal(humanBytes(512), "512 B");
  assert.equal(humanBytes(1536), "1.5 KB");
  assert.equal(humanBytes(20 * 2 ** 30), "20.0 GB");
  assert.equal(humanCount(134_515_008), "134.52M");
  assert.equal(formatShape([2, 3]), "[2, 3]");
  assert.equal(baseName("/a/b/model.safetensors"), "model.safetensors");
});

test("statistics keep tiny and huge values readable", () => {
  assert.equal(formatStat(null), "–");
  assert.equal(formatStat(3), "3");
  assert.equal(formatStat(1e-8), "1.000e-8");
  assert.equal(formatStat(0.5), "0.50000");
});

test("offsets typed by a person", () => {
  assert.equal(parseOffset("1234"), 1234);
  assert.equal(parseOffset("0x4D2"), 1234);
  assert.equal(parseOffset(" 4d2h "), 1234);
  assert.equal(parseOffset("1_000"), 1000);
  assert.equal(parseOffset("-1"), null);
  assert.equal(parseOffset("abc"), null);
});

test("findings grouped by severity in order", () => {
  const g = groupFindings([{ severity: "warning", code: "a" }, { severity: "error", code: "b" }, { severity: "error", code: "c" }]);
  assert.deepEqual(g.error.map((f) => f.code), ["b", "c"]);
  assert.deepEqual(g.warning.map((f) => f.code), ["a"]);
  assert.deepEqual(g.info, []);
});

test("histogram bars: heights scale to the largest bin, log compresses", () => {
  const hist = { edges: [0, 1, 2, 3], counts: [10, 1000, 0] };
  const lin = histogramBars(hist, false, 300, 100);
  assert.equal(lin.length, 3);
  assert.equal(lin[1].h, 100);
  assert.equal(lin[0].h, 1);
  assert.equal(lin[2].h, 0);
  const log = histogramBars(hist, true, 300, 100);
  assert.ok(log[0].h > 30);
  assert.deepEqual([lin[1].x, lin[1].lo, lin[1].hi], [100, 1, 2]);
});
