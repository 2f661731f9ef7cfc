import { test } from "node:test";
import assert from "node:assert/strict";
import { createRpc } from "../src/rpc.js";

/** A model whose kernel answers (or not) through `reply(msg)`. */
function fakeModel(reply) {
  const handlers = new Set();
  return {
    on: (_name, fn) => handlers.add(fn),
    off: (_name, fn) => handlers.delete(fn),
    send(msg) {
      const answer = reply(msg);
      if (answer) setTimeout(() => handlers.forEach((fn) => fn(answer, [])), 1);
    },
  };
}

test("answers resolve by id", async () => {
  const rpc = createRpc(fakeModel((m) => ({ type: "res", id: m.id, ok: true, data: m.op })));
  assert.equal((await rpc.request("tree")).data, "tree");
});

test("a kernel error keeps its message and traceback", async () => {
  const rpc = createRpc(fakeModel((m) => ({ type: "res", id: m.id, ok: false, error: "ValueError: bad", trace: "tb" })));
  await assert.rejects(rpc.request("bytes"), (err) => err.message === "ValueError: bad" && err.trace === "tb");
});

test("a dead kernel gives an error that says what to do, not a spinner", async () => {
  const rpc = createRpc(fakeModel(() => null), { timeoutMs: 20 });
  await assert.rejects(rpc.request("table"), /No answer from the kernel after 0 s \(request "table"\).*re-run the cell/);
  // A longer limit for one request (exact statistics).
  const slow = createRpc(fakeModel((m) => null));
  const started = Date.now();
  await assert.rejects(slow.request("stats", {}, { timeoutMs: 30 }), /request "stats"/);
  assert.ok(Date.now() - started >= 25);
});

test("a send that throws (no comm) fails at once", async () => {
  const rpc = createRpc({ on() {}, off() {}, send() { throw new Error("no comm"); } });
  await assert.rejects(rpc.request("map"), /Cannot reach the kernel: no comm/);
});
