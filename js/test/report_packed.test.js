import { test } from "node:test";
import assert from "node:assert/strict";
import { createStaticModel, decodeNames, decodeTable, edgesFor, unrle } from "../src/report.js";
import { splitName, tensorTrie } from "../src/reporttree.js";
import { createRpc } from "../src/rpc.js";

const b64 = (bytes) => Buffer.from(bytes).toString("base64");
const f32 = (values) => b64(new Uint8Array(new Float32Array(values).buffer));

// What widgets/_report.py writes for two tensors in one file and one missing from the index.
const packed = {
  format: 2,
  state: { view: "explorer", summary: {}, findings: [], files: [{ file: "/m/a.st", size: 200 }, { file: "/m/i.json", size: 90 }] },
  pages: [{ file: "/m/a.st", offset: 0, length: 8, b64: b64([1, 2, 3, 4, 5, 6, 7, 8]), segs: [[0, 8, 0]], spans: [{ kind: "length", path: "header length" }] }],
  tree: [{ id: 0, parent: null, label: "file header", kind: "group", has_children: true }],
  tree_tensors: true,
  table: {
    count: 3,
    names: { shared: [0, 1, 13, 2], suffix: [0, 1, 2], strings: ["model.layers.0.w", "1.w", "2.w"] },
    paths: ["/m/a.st", "/m/i.json"], dtypes: ["F32", ""], shapes: [[2], []],
    file: [0, 2, 1, 1], dtype: [0, 2, 1, 1], shape: [0, 2, 1, 1], offset: [100, 1, 0, 1, 40, 1], length: [8, 2, 30, 1],
    params: { 2: null }, bytes: { 2: null }, marks: { 2: ["missing", "missing: shard b.st"] },
  },
  tensor_stats: {
    count: 2, of: 2, bins: 4, floats: f32([-1, 1, 0, 0.5, 3, 3, 3, 0]), hist: b64([255, 0, 0, 128, 0, 255, 0, 0]),
    peak: [1, 2], zeros: [0, 2], nan: [0, 2], inf: [0, 2], values: [2, 2], exact: [1, 2], sample: ["all 2 elements", 2],
    errors: {}, scales: {},
  },
  heads: { size: 16, lengths: [8, 2], bytes: b64([...Array(16).keys()]) },
  limits: { first_file_bytes: 16384, file_bytes: 4096, files: 4, tensor_bytes: 16 },
};

test("packed columns decode to the kernel's rows", () => {
  assert.deepEqual(unrle([5, 2, "x", 1]), [5, 5, "x"]);
  assert.deepEqual(decodeNames(packed.table.names), ["model.layers.0.w", "model.layers.1.w", "model.layers.2.w"]);
  const rows = decodeTable(packed.table);
  assert.deepEqual(rows.map((r) => [r.offset, r.length, r.params, r.bytes, r.file]),
    [[100, 8, 2, 8, "a.st"], [108, 8, 2, 8, "a.st"], [40, 30, null, null, "i.json"]]);
  assert.equal(rows[2].mark, "missing");
});

test("histogram edges follow the kernel's rule for one value", () => {
  assert.deepEqual(edgesFor(3, 3, 2), [2.5, 3, 3.5]);
  assert.deepEqual(edgesFor(null, null, 2), [0, 0.5, 1]);
});

test("the tensor tree groups like widgets/_tree.py", () => {
  assert.deepEqual(splitName("model.layers.0.self_attn.q_proj.weight"), [["model", "layers", "0", "self_attn"], "q_proj.weight"]);
  assert.deepEqual(splitName("layers.0.w"), [["layers", "0"], "w"]);
  assert.deepEqual(splitName("w"), [[], "w"]);
  const rows = ["a.10.w", "a.9.w", "a.2.w"].map((name) => ({ name, bytes: 4 }));
  const nodes = tensorTrie(rows, 5);
  assert.equal(nodes[0].id, 5);
  assert.deepEqual(nodes.filter((n) => n.kind === "group").map((n) => n.label), ["tensors", "a", "2", "9", "10"]);
  assert.equal(nodes[0].value, "3 tensors");
});

test("a saved report answers statistics, bytes and missing tensors without a kernel", async () => {
  const rpc = createRpc(createStaticModel(packed));
  const st = (await rpc.request("stats", { name: "model.layers.0.w" })).data;
  assert.equal(st.error, undefined);
  assert.deepEqual([st.min, st.max, st.mean, st.std], [-1, 1, 0, 0.5]);
  assert.deepEqual(st.hist.counts, [1, 0, 0, 1]);
  assert.deepEqual(st.hist.edges, [-1, -0.5, 0, 0.5, 1]);
  assert.equal(st.exact, true);
  const gone = (await rpc.request("stats", { name: "model.layers.2.w" })).data;
  assert.match(gone.note, /^missing: shard b.st/);
  // Bytes: the head page and each tensor's first bytes; the rest is marked as not held.
  const page = await rpc.request("bytes", { file: "/m/a.st", offset: 0, length: 4096 });
  assert.equal(page.data.length, 200);
  assert.deepEqual(page.data.known, [[0, 8], [100, 108], [108, 116]]);
  assert.deepEqual([...page.buffers[0].subarray(100, 110)], [0, 1, 2, 3, 4, 5, 6, 7, 8, 9]);
  assert.equal(page.data.spans[page.data.segs[1][2]].tensor, "model.layers.0.w");
  assert.match(page.data.note, /not in this report/i);
  // The tree holds the missing tensor under its group, marked, and finds it by its note.
  const found = (await rpc.request("tree", { expanded: [], query: "missing: shard", start: 0, count: 50 })).data;
  assert.ok(found.rows.some((r) => r.kind === "missing" && r.tensor === "model.layers.2.w"));
  const located = (await rpc.request("tree", { expanded: [], query: "", start: 0, count: 50, locate: "model.layers.2.w" })).data;
  assert.equal(located.rows[located.index].kind, "missing");
  const filtered = (await rpc.request("table", { query: "missing", start: 0, count: 10 })).data;
  assert.deepEqual(filtered.rows.map((r) => r.name), ["model.layers.2.w"]);
});
