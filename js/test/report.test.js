import { test } from "node:test";
import assert from "node:assert/strict";
import { createStaticModel } from "../src/report.js";
import { createRpc } from "../src/rpc.js";

const data = {
  state: { view: "explorer", summary: {}, findings: [], files: [{ file: "f", size: 32 }] },
  pages: [{ file: "f", offset: 0, length: 4, hex: "47475546", segs: [[0, 4, 0]], spans: [{ kind: "magic", path: "magic" }] }],
  steps: [{ index: 0, span: { offset: 0, length: 4 }, text: "magic" }],
  tree: [{ id: 0, parent: null, label: "tensors", kind: "group" }, { id: 1, parent: 0, label: "w", kind: "tensor", tensor: "w" }],
  table: [{ name: "b", params: 2, bytes: 8, offset: 8, length: 8, path: "f" }, { name: "a", params: 5, bytes: 20, offset: 0, length: 8, path: "f" }],
};

test("the offline report answers the views' requests from embedded data", async () => {
  const model = createStaticModel(data);
  const rpc = createRpc(model);
  const bytes = await rpc.request("bytes", { file: "f", offset: 0, length: 4096 });
  assert.deepEqual([...bytes.buffers[0].subarray(0, 4)], [0x47, 0x47, 0x55, 0x46]);
  assert.deepEqual(bytes.data.known, [[0, 4]]);
  const past = await rpc.request("bytes", { file: "f", offset: 4096, length: 4096 });
  assert.equal(past.data.length, 0);
  const tree = await rpc.request("tree", { expanded: [], query: "", start: 0, count: 10, locate: "w" });
  assert.equal(tree.data.index, 1);
  assert.deepEqual(tree.data.expanded, [0]);
  const table = await rpc.request("table", { sort: "params", desc: true, query: "", start: 0, count: 10 });
  assert.deepEqual(table.data.rows.map((r) => r.name), ["a", "b"]);
  const stats = await rpc.request("stats", { name: "a" });
  assert.equal(stats.data.error, undefined);
  assert.match(stats.data.note, /not in this report/);
  await assert.rejects(rpc.request("nope"), /unknown request/);
});

test("selection set on the static model notifies listeners", () => {
  const model = createStaticModel(data);
  let seen = null;
  model.on("change:selection", () => { seen = model.get("selection"); });
  model.set("selection", { tensor: "a" });
  assert.deepEqual(seen, { tensor: "a" });
});

test("tree locate follows parents by id, not by position in the list", async () => {
  // The kernel leaves search groups out of the report, so ids skip numbers.
  const tree = [{ id: 0, parent: null, label: "tensors", kind: "group" }, { id: 5, parent: 0, label: "layers", kind: "group" },
    { id: 9, parent: 5, label: "w", kind: "tensor", tensor: "w" }];
  const rpc = createRpc(createStaticModel({ ...data, tree }));
  const res = await rpc.request("tree", { expanded: [], query: "", start: 0, count: 10, locate: "w" });
  assert.deepEqual(res.data.expanded.sort(), [0, 5]);
  assert.equal(res.data.rows[res.data.index].id, 9);
});

test("the report's table sorts like the kernel's: shape by rank then dims, ties in file order", async () => {
  const table = [
    { name: "c", shape: [4], params: 4, path: "f", offset: 0, length: 16 },
    { name: "a", shape: [2, 2], params: 4, path: "f", offset: 16, length: 16 },
    { name: "b", shape: [3], params: 3, path: "f", offset: 32, length: 12 },
    { name: "d", shape: [1, 9], params: 9, path: "f", offset: 44, length: 36 },
  ];
  const rpc = createRpc(createStaticModel({ ...data, table }));
  const names = async (args) => (await rpc.request("table", { query: "", start: 0, count: 10, ...args })).data.rows.map((r) => r.name);
  assert.deepEqual(await names({ sort: "shape" }), ["b", "c", "d", "a"]);
  assert.deepEqual(await names({ sort: "params", desc: true }), ["d", "c", "a", "b"]);
  assert.deepEqual(await names({ sort: "index", desc: true }), ["d", "b", "a", "c"]);
});

test("a saved report answers the Model, Findings and Layers tabs offline", async () => {
  const card = { architecture: "llama", rows: [{ name: "layers", value: 2 }], tokenizer: { summary: "BPE" } };
  const data = { state: { view: "explorer", summary: {}, findings: [], files: [] }, table: [],
    model_card: card, fixable: { by_finding: { 0: ["rebuild_index"] }, note: "cannot write fixes" } };
  const rpc = createRpc(createStaticModel(data));
  const got = (await rpc.request("model_card")).data;
  assert.equal(got.offline, true);
  assert.deepEqual(got.rows, card.rows);
  await assert.rejects(rpc.request("tokenize", { text: "hi" }), /needs a live kernel/);
  const fx = (await rpc.request("fixable")).data;
  assert.equal(fx.offline, true);
  assert.deepEqual(fx.by_finding, { 0: ["rebuild_index"] });
  assert.equal((await rpc.request("layers_start")).data.total, 0);
  // A report written before the card was carried says so instead of failing silently.
  const old = createRpc(createStaticModel({ ...data, model_card: undefined, fixable: undefined }));
  await assert.rejects(old.request("model_card"), /not in this report/);
  assert.deepEqual((await old.request("fixable")).data.by_finding, {});
});
