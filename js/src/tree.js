// Tree flattening for the offline report (pure, unit-tested): nodes with parent ids become the
// visible rows for a set of expanded ids, or every match of a search with its ancestors.

/**
 * @typedef {{id: number, parent: number|null, label: string, tensor?: string|null}} TreeNode
 * @param {TreeNode[]} nodes
 */
export function indexTree(nodes) {
  /** @type {Map<number|null, TreeNode[]>} */
  const children = new Map();
  /** @type {Map<number, TreeNode>} ids need not be positions: the list may leave nodes out */
  const byId = new Map();
  for (const n of nodes) {
    const p = n.parent ?? null;
    if (!children.has(p)) children.set(p, []);
    children.get(p).push(n);
    byId.set(n.id, n);
  }
  return { nodes, children, byId };
}

/**
 * @param {{children: Map<number|null, TreeNode[]>}} index
 * @param {Set<number>} expanded
 * @param {string} query
 * @returns {{node: TreeNode, depth: number}[]}
 */
export function flattenTree(index, expanded, query = "") {
  const out = [];
  const q = query.trim().toLowerCase();
  const kids = (id) => index.children.get(id) || [];
  if (!q) {
    const walk = (parent, depth) => {
      for (const n of kids(parent)) {
        out.push({ node: n, depth });
        if (expanded.has(n.id)) walk(n.id, depth + 1);
      }
    };
    walk(null, 0);
    return out;
  }
  const matches = (n) => `${n.label} ${n.tensor || ""} ${n.note || ""}`.toLowerCase().includes(q);
  const walk = (n, depth) => {
    const rows = [];
    for (const c of kids(n.id)) rows.push(...walk(c, depth + 1));
    if (rows.length || matches(n)) return [{ node: n, depth }, ...rows];
    return [];
  };
  for (const root of kids(null)) out.push(...walk(root, 0));
  return out;
}
