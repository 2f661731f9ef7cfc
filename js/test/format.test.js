import { test } from "node:test";
import assert from "node:assert/strict";
import { baseName, formatBytes, formatShape, formatStat, groupDigits, humanCount, middleEllipsis, parseOffset } from "../src/format.js";
import { groupFindings } from "../src/findingsview.js";
import { histogramBars } from "../src/histview.js";

test("sizes and counts", () => {
  // Binary units, one convention with the Python side (model_explorer/units.py).
  assert.equal(formatBytes(512), "512 B");
  assert.equal(formatBytes(1536), "1.5 KiB");
  assert.equal(formatBytes(98362432), "93.8 MiB");
  assert.equal(formatBytes(20 * 2 ** 30), "20.0 GiB");
  assert.equal(formatBytes(undefined), "?");
  assert.equal(groupDigits(1234567), "1,234,567");
  assert.equal(groupDigits(12), "12");
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

test("long names lose their middle, never their distinctive tail", () => {
  const name = "model.layers.17.mlp.down_proj.weight";
  assert.equal(middleEllipsis(name, 60), name);
  assert.equal(middleEllipsis(name, name.length), name);
  assert.equal(middleEllipsis(name, 30), "model.…17.mlp.down_proj.weight");
  assert.equal(middleEllipsis(name, 24), "…17.mlp.down_proj.weight");
  for (let max = 1; max < name.length; max += 1) {
    const short = middleEllipsis(name, max);
    assert.equal(short.length, max);
    assert.ok(short.includes("…"));
  }
  assert.equal(middleEllipsis("x".repeat(50), 10), "xx…xxxxxxx");
});
