// The Graph view's layout engine: elkjs's layered layout in a web worker. Its worker script comes
// from the kernel once ("graph_engine": elkjs's own elk-worker.min.js, copied by build.mjs) and
// runs from a Blob URL, so the Explorer's script stays small; where a Worker cannot start (a
// page that forbids blob: workers) the same script runs on the main thread, and the view says so.
import ELK from "elkjs/lib/elk-api.js";
import { toElk } from "./graphmodel.js";

let shared = null; // one engine (one worker) per page, whichever view asks first

/**
 * @param {{request: Function}} rpc
 * @returns {Promise<{layout: (graph: any) => Promise<any>, inWorker: boolean, note: string, close: () => void}>}
 */
export function getEngine(rpc) {
  if (!shared) {
    shared = createEngine(rpc).then(async (engine) => {
      // A first small layout of the kind the view asks for (a group open inside the root): the
      // worker's start-up and elkjs's first pass through that code happen now, not on the tab.
      const items = [{ key: "g:a", kind: "open", parent: "g:" }, { key: "g:b", kind: "group", parent: "g:", count: 1 }];
      for (let i = 0; i < 8; i++) items.push({ key: `n:${i}`, kind: "node", parent: "g:a", label: "x", op: "x" });
      await engine.layout(toElk({ items, edges: [["n:0", "n:1", 1], ["n:1", "g:b", 1], ["n:2", "n:3", 1]] }));
      return engine;
    }).catch((err) => { shared = null; throw err; });
  }
  return shared;
}

async function createEngine(rpc) {
  const { buffers } = await rpc.request("graph_engine", {}, { timeoutMs: 60_000 });
  const source = new TextDecoder().decode(buffers[0]);
  let url = null;
  try {
    url = URL.createObjectURL(new Blob([source], { type: "text/javascript" }));
    const probe = new Worker(url);
    probe.terminate();
    const elk = new ELK({ workerFactory: () => new Worker(url) });
    return { layout: (g) => elk.layout(g), inWorker: true, note: "", close: () => { elk.terminateWorker(); URL.revokeObjectURL(url); } };
  } catch (err) {
    if (url) URL.revokeObjectURL(url);
    const mod = { exports: {} };
    new Function("module", "exports", source)(mod, mod.exports); // elkjs's FakeWorker (its own code, not the file's)
    const elk = new ELK({ workerFactory: () => new mod.exports.Worker() });
    return { layout: (g) => elk.layout(g), inWorker: false,
      note: `Layout runs on the page's main thread: a web worker could not start here (${err && err.message}).`,
      close: () => {} };
  }
}
