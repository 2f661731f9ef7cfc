// The offline report's model: answers the views' requests from data embedded in the page, so
// the same views render without a kernel (and without any network request).
import { flattenTree, indexTree } from "./tree.js";

function hexToBytes(hex) {
  const out = new Uint8Array(hex.length / 2);
  for (let i = 0; i < out.length; i += 1) out[i] = parseInt(hex.substr(i * 2, 2), 16);
  return out;
}

// The kernel's sort keys (widgets/_table.py); equal rows keep file order either way.
const SORT_KEYS = {
  name: (r) => [r.name],
  dtype: (r) => [r.dtype, r.name],
  shape: (r) => [(r.shape || []).length, ...(r.shape || [])],
  params: (r) => [r.params],
  bytes: (r) => [r.bytes],
  file: (r) => [r.path, r.offset],
  offset: (r) => [r.path, r.offset],
};

function compareLists(a, b) {
  for (let i = 0; i < Math.min(a.length, b.length); i += 1) {
    if (a[i] < b[i]) return -1;
    if (a[i] > b[i]) return 1;
  }
  return a.length - b.length;
}

/** A model with the anywidget surface the views use: get/set/on/off/send/save_changes. */
export function createStaticModel(data) {
  const state = { ...data.state };
  /** @type {Map<string, Set<Function>>} */
  const listeners = new Map();
  const pages = (data.pages || []).map((p) => ({ ...p, bytes: hexToBytes(p.hex) }));
  const tree = indexTree(data.tree || []);
  const table = data.table || [];
  const emit = (name, ...args) => { for (const fn of listeners.get(name) || []) fn(...args); };

  function answer(op, args) {
    if (op === "bytes") {
      const p = pages.find((x) => x.file === args.file) || pages[0];
      if (!p) throw new Error("no bytes in this report");
      const start = Math.max(args.offset, p.offset);
      const end = Math.min(args.offset + args.length, p.offset + p.length);
      if (end <= start) return [{ file: p.file, offset: args.offset, length: 0, segs: [], spans: [] }, [new Uint8Array(0)]];
      return [{ ...p, offset: start, length: end - start, bytes: undefined, hex: undefined }, [p.bytes.slice(start - p.offset, end - p.offset)]];
    }
    if (op === "step") {
      const steps = data.steps || [];
      if (!steps.length) return [{ count: 0, index: 0, span: null, text: "No steps in this report." }, []];
      const i = Math.max(0, Math.min(args.index ?? 0, steps.length - 1));
      return [{ ...steps[i], count: steps.length }, []];
    }
    if (op === "tree") {
      const expanded = new Set(args.expanded || []);
      if (args.locate) {
        let node = tree.nodes.find((n) => n.tensor === args.locate && n.kind === "tensor");
        while (node && node.parent !== null && node.parent !== undefined) {
          expanded.add(node.parent);
          node = tree.byId.get(node.parent);
        }
      }
      const flat = flattenTree(tree, expanded, args.query || "");
      let index = null;
      if (args.locate) {
        const k = flat.findIndex((r) => r.node.tensor === args.locate && r.node.kind === "tensor");
        index = k >= 0 ? k : null;
      }
      const start = index !== null ? Math.max(0, index - 50) : args.start;
      const rows = flat.slice(start, start + args.count).map(({ node, depth }) => ({ ...node, depth, expanded: expanded.has(node.id) || Boolean(args.query) }));
      return [{ total: flat.length, start, rows, expanded: [...expanded], index }, []];
    }
    if (op === "table") {
      const q = (args.query || "").toLowerCase();
      let rows = table.filter((r) => r.name.toLowerCase().includes(q));
      const key = SORT_KEYS[args.sort];
      if (key) {
        const sign = args.desc ? -1 : 1;
        rows = [...rows].sort((a, b) => sign * compareLists(key(a), key(b)));
      } else if (args.desc) rows = [...rows].reverse();
      let index = args.locate ? rows.findIndex((r) => r.name === args.locate) : null;
      if (index === -1) index = null;
      const start = index !== null ? Math.max(0, index - 50) : args.start;
      return [{ total: rows.length, start, index, rows: rows.slice(start, start + args.count) }, []];
    }
    if (op === "map") {
      if (!data.map) throw new Error("the file map is not part of this report");
      return [data.map, []];
    }
    if (op === "tensor_at" || op === "tensor") {
      const r = table.find((t) => t.name === args.name) || table.find((t) => t.path === args.file && t.offset <= args.offset && args.offset < t.offset + Math.max(1, t.length));
      return [r ? { tensor: r.name, file: r.path, offset: r.offset, length: r.length } : null, []];
    }
    if (op === "stats") return [{ name: args.name, error: "Statistics need a running kernel; this is a saved report." }, []];
    throw new Error(`unknown request ${op}`);
  }

  return {
    get: (k) => state[k],
    set: (k, v) => { state[k] = v; emit(`change:${k}`); },
    save_changes() {},
    on(name, fn) { if (!listeners.has(name)) listeners.set(name, new Set()); listeners.get(name).add(fn); },
    off(name, fn) { listeners.get(name)?.delete(fn); },
    send(msg) {
      Promise.resolve().then(() => {
        try {
          const [res, buffers] = answer(msg.op, msg.args || {});
          emit("msg:custom", { type: "res", id: msg.id, ok: true, data: res }, buffers);
        } catch (err) {
          emit("msg:custom", { type: "res", id: msg.id, ok: false, error: err.message }, []);
        }
      });
    },
  };
}
