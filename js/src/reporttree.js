// The tensor part of the header tree, rebuilt in the offline report from the table's rows
// (pure, unit-tested). The grouping is the kernel's (widgets/_tree.py `_split` and
// `_group_children`): dotted prefixes become groups in order of first appearance, the last two
// components stay together ("q_proj.weight") unless the second-to-last is a layer number,
// and children that are all numbers sort as numbers. Leaves select the tensor's data.

const INT = /^\d+$/;

/** Group path and leaf label of a tensor name. @param {string} name @returns {[string[], string]} */
export function splitName(name) {
  const parts = name.split(".");
  const keep = parts.length > 2 && !INT.test(parts[parts.length - 2]) ? 2 : 1;
  if (parts.length <= keep) return [[], name];
  return [parts.slice(0, -keep), parts.slice(-keep).join(".")];
}

function groupValue(members) {
  const missing = members.filter((m) => m.row.mark === "missing").length;
  return `${members.length} tensor${members.length === 1 ? "" : "s"}${missing ? ` (${missing} missing)` : ""}`;
}

function sumBytes(members) {
  return members.reduce((a, m) => a + (m.row.bytes || 0), 0);
}

/**
 * Tree nodes ({id, parent, label, kind, ...}) for table rows, ids from `firstId`.
 * @param {any[]} rows @param {number} firstId
 */
export function tensorTrie(rows, firstId) {
  const out = [];
  let next = firstId;
  const members = rows.map((row) => {
    const [prefix, label] = splitName(row.name);
    return { prefix, label, row };
  });
  const root = { id: next++, parent: null, label: "tensors", kind: "group", value: groupValue(members), count: members.length, bytes: sumBytes(members), has_children: members.length > 0 };
  out.push(root);

  function leaf(m, parent) {
    const r = m.row;
    const kind = r.mark === "missing" || r.mark === "duplicate" ? r.mark : "tensor";
    return {
      id: next++, parent, label: m.label, kind, value: r.note || null, note: r.note || null, tensor: r.name,
      dtype: kind === "missing" ? null : r.dtype, shape: kind === "missing" ? null : r.shape,
      bytes: r.bytes ?? null, file: r.path, offset: r.offset, length: r.length, has_children: false,
    };
  }

  function build(list, depth, parent) {
    /** @type {Map<string, any[]>} */
    const groups = new Map();
    const order = [];
    for (const m of list) {
      if (m.prefix.length <= depth) { order.push(m); continue; }
      const key = m.prefix[depth];
      if (!groups.has(key)) { groups.set(key, []); order.push(key); }
      groups.get(key).push(m);
    }
    const label = (x) => (typeof x === "string" ? x : x.label);
    if (order.length && order.every((x) => INT.test(label(x)))) order.sort((a, b) => Number(label(a)) - Number(label(b)));
    for (const x of order) {
      if (typeof x !== "string") { out.push(leaf(x, parent)); continue; }
      const ms = groups.get(x);
      const node = { id: next++, parent, label: x, kind: "group", value: groupValue(ms), count: ms.length, bytes: sumBytes(ms), has_children: true };
      out.push(node);
      build(ms, depth + 1, node.id);
    }
  }
  build(members, 0, root.id);
  return out;
}
