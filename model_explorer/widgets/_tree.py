"""The header tree: nodes made when first shown or opened, flattened to rows on request.

The browser holds only the rows on screen: it sends the ids it has expanded and a filter,
and gets back a window of the flattened list (virtualised rows, pages from the kernel).
Showing the tree makes its top level only; a group, a shard's header fields, an array value or
the pickle opcodes get their children when opened (_treeparts.py, _treetensors.py).
"""

from __future__ import annotations

from collections.abc import Callable

from ..checkpoint import Checkpoint
from ..gcpause import no_gc
from ..spans import short_repr
from ._treeparts import Node, gguf_metadata, header_fields, json_node, pickle_nodes
from ._treetensors import MARKED_KINDS, MAX_MATCHES, TensorNames, _split, marked

__all__ = ["HeaderTree", "MARKED_KINDS", "Node"]


class HeaderTree:
    """Every node of one checkpoint's header made so far, addressable by integer id."""

    def __init__(self, ckpt: Checkpoint) -> None:
        self.ckpt = ckpt
        self.nodes: list[Node] = []
        self.tensor_node: dict[str, int] = {}
        self._in_search = False  # search results copy tensor nodes; locate uses the originals
        self._names: TensorNames | None = None
        self.parent: dict[int, int] = {}
        with no_gc():
            self.roots = [self._register(n, None) for n in _roots(ckpt, self.names)]
        self._tensor_roots = {n.id for n in self.roots if n.kind == "group" and n.label == "tensors"}
        self._cache: dict[tuple, list[tuple[Node, int]]] = {}

    def names(self) -> TensorNames:
        """The tensor names as columns, made when the tree first needs them."""
        if self._names is None:
            self._names = TensorNames(self.ckpt)
        return self._names

    def _register(self, node: Node, parent: int | None) -> Node:
        node.id = len(self.nodes)
        self.nodes.append(node)
        if parent is not None:
            self.parent[node.id] = parent
        if node.tensor and node.kind == "tensor" and not self._in_search:
            self.tensor_node[node.tensor] = node.id
        elif node.tensor and node.kind in MARKED_KINDS and not self._in_search:
            self.tensor_node.setdefault(node.tensor, node.id)
        for c in node.children:
            self._register(c, node.id)
        return node

    def children(self, node: Node) -> list[Node]:
        if node.lazy is not None:
            with no_gc():
                self._make(node)
        return node.children

    def _make(self, node: Node) -> None:
        build, node.lazy = node.lazy, None
        try:
            made = build()
        except Exception as e:  # noqa: BLE001 - a damaged part shows why, the rest stays
            made = [_broken(e)]
        node.children = [self._register(c, node.id) for c in made]

    def flatten(self, expanded: frozenset[int], query: str = "") -> list[tuple[Node, int]]:
        key = (expanded, query.lower())
        if key not in self._cache:
            if len(self._cache) > 8:
                self._cache.clear()
            out: list[tuple[Node, int]] = []
            if query:
                self._flatten_matching(query.lower(), out)
            else:
                self._flatten(self.roots, 0, expanded, out)
            self._cache[key] = out
        return self._cache[key]

    def _flatten(self, nodes, depth, expanded, out) -> None:
        for n in nodes:
            out.append((n, depth))
            if n.id in expanded and n.has_children:
                self._flatten(self.children(n), depth + 1, expanded, out)

    def _flatten_matching(self, query: str, out) -> None:
        """Nodes whose name contains the query, with their ancestors, all open.

        Built nodes are searched as they are; tensors are searched by full name (and note)
        over the name column and shown in a group of their own (at most MAX_MATCHES nodes are
        made). Array items, opcodes and the fields of shards not opened yet are not searched.
        """
        def walk(node: Node, depth: int) -> list[tuple[Node, int]]:
            if node.kind == "group" and node.label == "tensors" and node.id in self._tensor_roots:
                return []
            rows: list[tuple[Node, int]] = []
            for c in node.children:
                rows.extend(walk(c, depth + 1))
            if rows or query in node.search:
                return [(node, depth), *rows]
            return []

        for r in self.roots:
            out.extend(walk(r, 0))
        if not self._tensor_roots:
            return
        names = self.names()
        rows, total = names.search(query)
        if not total:
            return
        label = f"tensors matching {query!r}" + (f" (first {MAX_MATCHES} of {total})"
                                                 if total > MAX_MATCHES else "")
        self._in_search = True
        try:
            group = self._register(names.group(label, "", rows, 0), None)
            self._open_all(group, 0, out)
        finally:
            self._in_search = False

    def _open_all(self, node: Node, depth: int, out) -> None:
        with no_gc():  # once for the whole walk: a search may open thousands of groups
            stack = [(node, depth)]
            while stack:
                n, d = stack.pop()
                out.append((n, d))
                if n.lazy is not None:
                    self._make(n)
                stack.extend((c, d + 1) for c in reversed(n.children))

    def window(self, expanded: list[int], query: str, start: int, count: int,
               locate: str | None = None) -> dict:
        exp = set(int(i) for i in expanded)
        index = None
        if locate and not query:
            self._build_path_to(locate)
        if locate and locate in self.tensor_node and not query:
            nid = self.tensor_node[locate]
            p = self.parent.get(nid)
            while p is not None:
                exp.add(p)
                p = self.parent.get(p)
        rows = self.flatten(frozenset(exp), query)
        if locate:
            nid = self.tensor_node.get(locate)
            index = next((i for i, (n, _) in enumerate(rows) if n.id == nid), None)
            if index is not None and not (start <= index < start + count):
                start = max(0, index - count // 2)
        start = max(0, min(start, len(rows)))
        shown = query or None
        out = [n.row(d, (n.id in exp) or bool(shown)) for n, d in rows[start:start + count]]
        return {"total": len(rows), "start": start, "rows": out, "expanded": sorted(exp), "index": index}

    def _build_path_to(self, tensor: str) -> None:
        """Open the groups on the way to a tensor so that its node exists."""
        if tensor in self.tensor_node or not (tensor in self.ckpt.tensors or any(
                m.name == tensor for m in marked(self.ckpt))):
            return
        prefix, _ = _split(tensor)
        for root in self.roots:
            if root.id not in self._tensor_roots:
                continue
            node = root
            for part in prefix:
                node = next((c for c in self.children(node) if c.kind == "group" and c.label == part), None)
                if node is None:
                    return
            self.children(node)

    def open_file_header(self) -> None:
        """Make every file's header fields (the offline report shows them all)."""
        for root in self.roots:
            if root.kind == "group" and root.label == "file header" and root.id not in self._tensor_roots:
                for c in self.children(root):
                    if c.kind == "group":
                        self.children(c)

    def all_rows(self, limit: int) -> list[dict]:
        """Every built node under the roots with its parent id, for the offline report (capped).

        Groups made for past searches are not part of the header, so they stay out; a parent
        always has a smaller id than its children, so one pass finds what hangs off the roots.
        """
        kept = {n.id for n in self.roots}
        out = []
        for n in self.nodes:
            if len(out) >= limit:
                break
            parent = self.parent.get(n.id)
            if parent is not None and parent in kept:
                kept.add(n.id)
            elif n.id not in kept:
                continue
            row = n.row(0, False)
            row["parent"] = parent
            out.append(row)
        return out




# -- the top level -----------------------------------------------------------------------

def _roots(ckpt: Checkpoint, names: Callable[[], TensorNames]) -> list[Node]:
    """The top-level nodes; each part that fails shows why instead of taking the tree down."""
    roots: list[Node] = []
    for part in (_header_part, _metadata_part, _pickle_part):
        try:
            roots.extend(part(ckpt))
        except Exception as e:  # noqa: BLE001 - a damaged header shows what it can
            roots.append(_broken(e))
    if ckpt.tensors or marked(ckpt):
        try:
            tensors = names()
            roots.append(tensors.group("tensors", "", list(range(len(tensors))), 0))
        except Exception as e:  # noqa: BLE001
            roots.append(_broken(e))
    return roots


def _header_part(ckpt: Checkpoint) -> list[Node]:
    node = header_fields(ckpt)
    return [node] if node is not None else []


def _metadata_part(ckpt: Checkpoint) -> list[Node]:
    out: list[Node] = []
    meta = {k: v for k, v in ckpt.metadata.items() if k not in ("config.json", "generation_config.json")}
    if ckpt.format == "gguf":
        if meta:
            out.append(gguf_metadata(meta))
    elif meta:
        n = Node("__metadata__", "group", f"{len(meta)} entries", count=len(meta))
        n.children = [Node(str(k), "meta", short_repr(v, 200), search=f"{k} {v}") for k, v in meta.items()]
        out.append(n)
    for side in ("config.json", "generation_config.json"):
        if side in ckpt.metadata:
            out.append(json_node(side, ckpt.metadata[side], 0))
    return out


def _pickle_part(ckpt: Checkpoint) -> list[Node]:
    pickle = ckpt.details.get("pickle")
    return pickle_nodes(ckpt, pickle) if isinstance(pickle, dict) else []


def _broken(e: Exception) -> Node:
    """A node saying why a part of the tree cannot be shown (its text goes in as text)."""
    return Node("cannot be shown", "error", f"{type(e).__name__}: {str(e)[:200]}")
