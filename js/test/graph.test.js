// The Graph view's pure parts (src/graphmodel.js): the ELK graph of a visible set, the opened
// set after clicks and searches, the fit, the overlays' colours; and elkjs itself laying out
// what toElk builds (the engine the browser runs in a worker, here on the main thread).
import test from "node:test";
import assert from "node:assert/strict";
import ELK from "elkjs/lib/elk.bundled.js";
import { boxWidth, categoryColour, centreOn, fitTransform, fmtCount, overlayColours, placed, subLabel, toElk, toggled, withPath } from "../src/graphmodel.js";

const VIEW = {
  items: [
    { key: "g:model", kind: "open", parent: "g:", label: "model" },
    { key: "g:model/layers.0", kind: "open", parent: "g:model", label: "layers.0" },
    { key: "n:a", kind: "node", parent: "g:model/layers.0", label: "MatMul", op: "MatMul", params: 64, dtype: "F32" },
    { key: "n:b", kind: "node", parent: "g:model/layers.0", label: "Relu", op: "Relu", params: 0, dtype: "" },
    { key: "g:model/layers.1", kind: "group", parent: "g:model", label: "layers.1", count: 5, params: 1_500_000, dtype: "Q8_0", finding: { severity: "error" } },
    { key: "g:empty", kind: "open", parent: "g:", label: "empty" },
  ],
  edges: [["n:a", "n:b", 1], ["n:b", "g:model/layers.1", 2], ["n:a", "n:gone", 1]],
};

test("toElk nests members in their open groups and keeps edges whose ends are drawn", () => {
  const g = toElk(VIEW);
  assert.deepEqual(g.children.map((c) => c.id), ["g:model", "g:empty"]);
  const model = g.children[0];
  assert.deepEqual(model.children.map((c) => c.id), ["g:model/layers.0", "g:model/layers.1"]);
  assert.deepEqual(model.children[0].children.map((c) => c.id), ["n:a", "n:b"]);
  assert.equal(g.edges.length, 2); // the edge to a node not drawn is left out
  assert.equal(g.layoutOptions["elk.hierarchyHandling"], "INCLUDE_CHILDREN");
  // An open group with nothing inside is drawn as a box with a size, not an empty compound.
  assert.equal(g.children[1].children, undefined);
  assert.ok(g.children[1].width > 0 && g.children[1].height > 0);
});

test("elkjs lays out what toElk builds; placed() reads absolute boxes and edge polylines", async () => {
  const p = placed(await new ELK().layout(toElk(VIEW)));
  for (const it of VIEW.items) assert.ok(p.boxes.has(it.key), it.key);
  const a = p.boxes.get("n:a");
  const layer = p.boxes.get("g:model/layers.0");
  // Members lie inside their group's frame (root coordinates), below their source.
  assert.ok(a.x >= layer.x && a.y >= layer.y && a.x + a.w <= layer.x + layer.w && a.y + a.h <= layer.y + layer.h);
  assert.ok(p.boxes.get("n:b").y > a.y);
  assert.equal(p.lines.length, 2);
  const first = p.lines.find((l) => l.source === "n:a");
  assert.deepEqual(first.points[0].length, 2);
  assert.ok(p.width > 0 && p.height > 0);
});

test("clicks and searches: toggled opens and closes, withPath adds a hit's groups once", () => {
  assert.deepEqual(toggled(["g:a"], "g:b"), ["g:a", "g:b"]);
  assert.deepEqual(toggled(["g:a", "g:b"], "g:a"), ["g:b"]);
  assert.deepEqual(withPath(["g:a"], ["g:a", "g:a/b", "g:a/b/c"]), ["g:a", "g:a/b", "g:a/b/c"]);
});

test("fit and centre transforms", () => {
  const t = fitTransform(1000, 500, 500, 500, 0);
  assert.equal(t.k, 0.5);
  assert.deepEqual([t.x, t.y], [0, 125]);
  assert.equal(fitTransform(10, 10, 500, 500).k, 2); // never zooms past 2x
  assert.deepEqual(centreOn(100, 50, 2, 400, 300), { k: 2, x: 0, y: 50 });
  assert.deepEqual(fitTransform(0, 0, 500, 500), { k: 1, x: 16, y: 16 });
});

test("labels: a group's op count and parameters, a node's op, widths bounded", () => {
  assert.equal(subLabel(VIEW.items[4]), "5 ops, 1.5M params");
  assert.equal(subLabel({ kind: "node", label: "q_proj", op: "MatMul" }), "MatMul");
  assert.equal(fmtCount(999), "999");
  assert.equal(fmtCount(12_345), "12.3K");
  assert.equal(fmtCount(7e9), "7.0B");
  assert.ok(boxWidth({ kind: "node", label: "x".repeat(500) }) <= 240);
  assert.ok(boxWidth({ kind: "node", label: "" }) >= 70);
});

test("overlays: dtype by name with its legend, parameters on a log ramp, findings by severity, run values", () => {
  const d = overlayColours(VIEW.items, "dtype");
  assert.equal(d.fill.get("n:a"), categoryColour("F32"));
  assert.equal(d.fill.get("g:model/layers.1"), categoryColour("Q8_0"));
  assert.ok(!d.fill.has("g:model")); // open frames are not filled
  assert.deepEqual(d.legend.map((k) => k.text).sort(), ["F32", "Q8_0", "no weights"]);
  const p = overlayColours(VIEW.items, "params");
  assert.equal(p.fill.get("n:b"), "rgb(255,255,255)");
  assert.equal(p.fill.get("g:model/layers.1"), "rgb(25,118,210)");
  const f = overlayColours(VIEW.items, "findings");
  assert.equal(f.fill.get("g:model/layers.1"), "#ef9a9a");
  const items = [{ key: "n:x", kind: "node", run: -2 }, { key: "n:y", kind: "node", run: 0 }, { key: "n:z", kind: "node", run: null }];
  const r = overlayColours(items, "run", { label: "relative L2", min: -2, max: 0 });
  assert.equal(r.fill.get("n:x"), "rgb(255,255,255)");
  assert.equal(r.fill.get("n:y"), "rgb(211,47,47)");
  assert.equal(r.fill.get("n:z"), "#f7f7f7");
  assert.match(r.legend[0].text, /relative L2/);
});
