// The offline report's model: answers the views' requests from data embedded in the page, so
// the same views render without a kernel (and without any network request). The data is
// packed small by widgets/_report.py; the decoders here are its inverse (pure, unit-tested).
import { flattenTree, indexTree } from "./tree.js";
import { tensorTrie } from "./reporttree.js";

function hexToBytes(hex) {
  const out = new Uint8Array(hex.length / 2);
  for (let i = 0; i < out.length; i += 1) out[i] = parseInt(hex.substr(i * 2, 2), 16);
  return out;
}

/** @param {string} text */
export function fromBase64(text) {
  const bin = atob(text || "");
  const out = new Uint8Array(bin.length);
  for (let i = 0; i < bin.length; i += 1) out[i] = bin.charCodeAt(i);
  return out;
}

/** [v0, n0, v1, n1, ...] -> the values. @param {any[]} runs */
export function unrle(runs) {
  const out = [];
  for (let i = 0; i + 1 < (runs || []).length; i += 2) for (let k = 0; k < runs[i + 1]; k += 1) out.push(runs[i]);
  return out;
}

/** Front-coded names: each shares `shared[i]` characters with the previous one. */
export function decodeNames(names) {
  const shared = unrle(names.shared);
  const out = [];
  let prev = "";
  for (let i = 0; i < names.suffix.length; i += 1) {
    prev = prev.slice(0, shared[i]) + names.strings[names.suffix[i]];
    out.push(prev);
  }
  return out;
}

const product = (shape) => shape.reduce((a, b) => a * b, 1);
const baseName = (p) => String(p || "").split(/[\\/]/).pop();

/** The table's rows, as the kernel's TensorTable.row() gives them. */
export function decodeTable(t) {
  if (Array.isArray(t)) return t; // reports written before the packed format
  const names = decodeNames(t.names);
  const [file, dtype, shape, offset, length] = ["file", "dtype", "shape", "offset", "length"].map((k) => unrle(t[k]));
  const end = new Map();
  const rows = [];
  for (let i = 0; i < t.count; i += 1) {
    const f = file[i];
    const off = offset[i] + (end.get(f) || 0);
    end.set(f, off + length[i]);
    const s = t.shapes[shape[i]];
    const row = {
      name: names[i], dtype: t.dtypes[dtype[i]], shape: s, params: i in t.params ? t.params[i] : product(s),
      bytes: i in t.bytes ? t.bytes[i] : length[i], file: baseName(t.paths[f]), path: t.paths[f],
      offset: off < 0 ? null : off, length: length[i],
    };
    const mark = t.marks[i];
    if (mark) { row.mark = mark[0]; row.note = mark[1]; }
    rows.push(row);
  }
  return rows;
}

/** Statistics of table row `i` from the packed columns, or null when the report has none. */
export function statsDecoder(packed, rows) {
  if (!packed) return () => null;
  const floats = new Float32Array(fromBase64(packed.floats).buffer);
  const hist = fromBase64(packed.hist);
  const cols = {};
  for (const k of ["peak", "zeros", "nan", "inf", "values", "exact", "sample"]) cols[k] = unrle(packed[k]);
  const bins = packed.bins;
  const num = (v) => (Number.isNaN(v) ? null : v);
  return (i) => {
    if (i >= packed.count) return null;
    const r = rows[i];
    if (packed.errors[i]) return { name: r.name, error: packed.errors[i] };
    const [min, max, mean, std] = [0, 1, 2, 3].map((k) => num(floats[4 * i + k]));
    const peak = cols.peak[i];
    const counts = Array.from(hist.subarray(i * bins, (i + 1) * bins), (q) => Math.round((q * peak) / 255));
    const out = {
      name: r.name, dtype: r.dtype, shape: r.shape, total: r.params, count: cols.values[i],
      exact: Boolean(cols.exact[i]), sample: `${cols.sample[i]}; counts to 1/255 of the largest bin`,
      min, max, mean, std, zeros: cols.zeros[i], nan: cols.nan[i], inf: cols.inf[i],
      hist: { edges: edgesFor(min, max, bins), counts }, offline: true,
    };
    const sc = packed.scales[i];
    if (sc) out.scales = { edges: linspace(sc.lo, sc.hi, sc.counts.length), counts: sc.counts, count: sc.count };
    return out;
  };
}

function linspace(lo, hi, bins) {
  return Array.from({ length: bins + 1 }, (_, k) => lo + ((hi - lo) * k) / bins);
}

/** The kernel's histogram edges (tensors/stats.py Moments.edges) from the range. */
export function edgesFor(min, max, bins) {
  let lo = min ?? 0;
  let hi = max ?? 1;
  if (lo === hi) {
    const half = Math.max(0.5, Math.abs(lo) * 1e-6);
    lo -= half;
    hi += half;
  }
  return linspace(lo, hi, bins);
}

/** Known byte ranges per file: the first pages (with their spans) and each tensor's head. */
function byteChunks(data, rows) {
  /** @type {Map<string, any[]>} */
  const byFile = new Map();
  const add = (file, chunk) => {
    if (!byFile.has(file)) byFile.set(file, []);
    byFile.get(file).push(chunk);
  };
  for (const p of data.pages || []) {
    const bytes = p.b64 !== undefined ? fromBase64(p.b64) : hexToBytes(p.hex || "");
    add(p.file, { offset: p.offset, bytes, segs: p.segs || [], spans: p.spans || [] });
  }
  const heads = data.heads;
  if (heads) {
    const all = fromBase64(heads.bytes);
    const lengths = unrle(heads.lengths);
    let pos = 0;
    lengths.forEach((n, i) => {
      const r = rows[i];
      const span = r.mark === "missing"
        ? { kind: "json", path: `index entry of ${r.name}`, value: r.note, tensor: r.name, offset: r.offset, length: r.length, index: i }
        : { kind: "tensor_data", path: `${r.name} > data`, tensor: r.name, offset: r.offset, length: r.length, index: i };
      if (n) add(r.path, { offset: r.offset, bytes: all.subarray(pos, pos + n), segs: [[r.offset, r.offset + n, 0]], spans: [span] });
      pos += n;
    });
  }
  for (const list of byFile.values()) list.sort((a, b) => a.offset - b.offset);
  return byFile;
}

function notInReport(limits) {
  if (!limits) return "These bytes are not in this report.";
  return `Not in this report: it keeps the first ${limits.first_file_bytes / 1024} KB of the first file, ${limits.file_bytes / 1024} KB of the next ${Math.max(0, limits.files - 1)}, and the first ${limits.tensor_bytes} bytes of each tensor.`;
}

// The kernel's sort keys (widgets/_table.py); equal rows keep file order either way.
const SORT_KEYS = {
  name: (r) => [r.name],
  dtype: (r) => [r.dtype, r.name],
  shape: (r) => [(r.shape || []).length, ...(r.shape || [])],
  params: (r) => [r.params ?? 0],
  bytes: (r) => [r.bytes ?? 0],
  file: (r) => [r.path, r.offset ?? -1],
  offset: (r) => [r.path, r.offset ?? -1],
};

function compareLists(a, b) {
  for (let i = 0; i < Math.min(a.length, b.length); i += 1) {
    if (a[i] < b[i]) return -1;
    if (a[i] > b[i]) return 1;
  }
  return a.length - b.length;
}

export const OFFLINE_TOKENIZER = "Tokenizing typed text needs a live kernel: this saved report holds the tokenizer's summary, not the tokenizer.";
const OFFLINE_LAYERS = "This saved report does not hold the layer profile (it was saved by an older version). In a notebook: mx.explore(path), Layers; or mx.plot_layers(path).";

/** A model with the anywidget surface the views use: get/set/on/off/send/save_changes. */
export function createStaticModel(data) {
  const state = { ...data.state };
  /** @type {Map<string, Set<Function>>} */
  const listeners = new Map();
  const table = decodeTable(data.table || []);
  const rowOf = new Map();
  table.forEach((r, i) => { if (!rowOf.has(r.name)) rowOf.set(r.name, i); });
  const treeNodes = [...(data.tree || [])];
  if (data.tree_tensors) treeNodes.push(...tensorTrie(table, treeNodes.reduce((m, n) => Math.max(m, n.id), -1) + 1));
  const tree = indexTree(treeNodes);
  const stats = statsDecoder(data.tensor_stats, table);
  const chunks = byteChunks(data, table);
  const sizes = new Map((state.files || []).map((f) => [f.file, f.size]));
  const absent = notInReport(data.limits);
  const emit = (name, ...args) => { for (const fn of listeners.get(name) || []) fn(...args); };

  /** The profile's findings to the Findings tab, as the kernel's `layer_findings` would be. */
  function layerFindings(s) {
    state.layer_findings = (s.marks || []).map((m) => {
      const r = table[rowOf.get(m.tensor)] || {};
      return { severity: m.severity, code: m.code, message: m.message, tensor: m.tensor, file: r.path ?? null,
        offset: r.offset ?? null, length: r.length ?? null, origin: "layers", statistics: "sampled", stat: s.stat };
    });
    emit("change:layer_findings");
  }

  function bytes(args) {
    const file = chunks.has(args.file) || sizes.has(args.file) ? args.file : (data.pages || [])[0]?.file;
    if (!file) throw new Error("no bytes in this report");
    const size = sizes.get(file) ?? Infinity;
    const start = Math.max(0, Math.min(args.offset, size));
    const end = Math.min(args.offset + args.length, size);
    const buf = new Uint8Array(Math.max(0, end - start));
    const known = [];
    const segs = [];
    const spans = [];
    for (const c of chunks.get(file) || []) {
      const a = Math.max(start, c.offset);
      const b = Math.min(end, c.offset + c.bytes.length);
      if (b <= a) continue;
      buf.set(c.bytes.subarray(a - c.offset, b - c.offset), a - start);
      known.push([a, b]);
      const base = spans.length;
      spans.push(...c.spans);
      for (const [s0, s1, k] of c.segs) if (s1 > a && s0 < b) segs.push([Math.max(s0, a), Math.min(s1, b), base + k]);
    }
    segs.sort((x, y) => x[0] - y[0]);
    return [{ file, offset: start, length: buf.length, segs, spans, known, note: absent, size }, [buf]];
  }

  function answer(op, args) {
    if (op === "bytes") return bytes(args);
    if (op === "step") {
      const steps = data.steps || [];
      if (!steps.length) return [{ count: 0, index: 0, span: null, text: "No steps in this report." }, []];
      const i = Math.max(0, Math.min(args.index ?? 0, steps.length - 1));
      return [{ ...steps[i], count: steps.length }, []];
    }
    if (op === "tree") {
      const expanded = new Set(args.expanded || []);
      const target = args.locate
        ? tree.nodes.find((n) => n.tensor === args.locate && n.kind === "tensor") || tree.nodes.find((n) => n.tensor === args.locate && n.kind !== "group")
        : null;
      for (let node = target; node && node.parent !== null && node.parent !== undefined; node = tree.byId.get(node.parent)) expanded.add(node.parent);
      const flat = flattenTree(tree, expanded, args.query || "");
      let index = null;
      if (target) {
        const k = flat.findIndex((r) => r.node === target);
        index = k >= 0 ? k : null;
      }
      const start = index !== null ? Math.max(0, index - 50) : args.start;
      const rows = flat.slice(start, start + args.count).map(({ node, depth }) => ({ ...node, depth, expanded: expanded.has(node.id) || Boolean(args.query) }));
      return [{ total: flat.length, start, rows, expanded: [...expanded], index }, []];
    }
    if (op === "table") {
      const q = (args.query || "").toLowerCase();
      let rows = q ? table.filter((r) => r.name.toLowerCase().includes(q) || (r.note || "").toLowerCase().includes(q)) : table;
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
      const r = op === "tensor" ? table[rowOf.get(args.name)] : table.find((t) => t.path === args.file && t.offset !== null && t.offset <= args.offset && args.offset < t.offset + Math.max(1, t.length));
      return [r ? { tensor: r.name, file: r.path, offset: r.offset, length: r.length, dtype: r.dtype, shape: r.shape } : null, []];
    }
    if (op === "stats") {
      const i = rowOf.get(args.name);
      const r = table[i];
      if (r && r.mark === "missing") return [{ name: args.name, note: `${r.note}: no values to read.` }, []];
      const st = i === undefined ? null : stats(i);
      if (st) return [st, []];
      const packed = data.tensor_stats;
      const why = packed && i !== undefined && i >= packed.count && packed.count < packed.of
        ? ` (it keeps the statistics of the first ${packed.count.toLocaleString("en-US")} of ${packed.of.toLocaleString("en-US")} tensors)` : "";
      return [{ name: args.name, note: `The statistics of this tensor are not in this report${why}.` }, []];
    }
    if (op === "model_card") {
      const card = data.model_card;
      if (!card) throw new Error("The model card is not in this report (it was saved by an older version).");
      if (card.error) throw new Error(`The model card could not be read when this report was saved: ${card.error}`);
      return [{ ...card, offline: true }, []];
    }
    if (op === "tokenize" || op === "find_token" || op === "vocab") throw new Error(OFFLINE_TOKENIZER);
    if (op === "fixable") return [{ by_finding: {}, ...(data.fixable || {}), offline: true }, []];
    if (op === "layers_start") {
      const L = data.layers;
      if (!L || !L.total) return [{ total: 0, note: (L && L.note) || OFFLINE_LAYERS }, []];
      return [{ total: L.total, done: L.total, offline: true, stats: Object.keys(L.summaries) }, []];
    }
    if (op === "layers_profile") {
      const L = data.layers;
      if (!L || !L.summaries) throw new Error(OFFLINE_LAYERS);
      const summary = { ...(L.summaries[args.stat] || L.summaries.norm), names: L.names, counts: L.counts };
      layerFindings(summary);
      return [summary, []];
    }
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
