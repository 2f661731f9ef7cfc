"""The header tree: nodes built once per checkpoint, flattened to rows on request.

The browser holds only the rows on screen: it sends the ids it has expanded and a filter,
and gets back a window of the flattened list (virtualised rows, pages from the kernel).
Array values and pickle opcodes get their children only when opened.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Callable
from typing import Any

from ..checkpoint import Checkpoint, TensorInfo
from ..gcpause import no_gc
from ..records import IndexMismatch, plain_value
from ..spans import short_repr

ARRAY_PAGE = 100
MAX_MATCHES = 2000
MAX_JSON_CHILDREN = 1000
_INT = re.compile(r"^\d+$")


class Node:
    __slots__ = ("id", "label", "value", "kind", "tensor", "dtype", "shape", "nbytes", "count",
                 "file", "offset", "length", "children", "lazy", "search")

    def __init__(self, label: str, kind: str, value: str | None = None, **kw: Any) -> None:
        self.id = -1
        self.label = label
        self.kind = kind
        self.value = value
        self.tensor: str | None = kw.get("tensor")
        self.dtype: str | None = kw.get("dtype")
        self.shape: list[int] | None = kw.get("shape")
        self.nbytes: int | None = kw.get("nbytes")
        self.count: int | None = kw.get("count")
        self.file: str | None = kw.get("file")
        self.offset: int | None = kw.get("offset")
        self.length: int | None = kw.get("length")
        self.children: list[Node] = []
        self.lazy: Callable[[], list[Node]] | None = kw.get("lazy")
        self.search = kw.get("search", label).lower()

    @property
    def has_children(self) -> bool:
        return bool(self.children) or self.lazy is not None

    def row(self, depth: int, expanded: bool) -> dict:
        return {"id": self.id, "depth": depth, "label": self.label, "value": self.value,
                "kind": self.kind, "tensor": self.tensor, "dtype": self.dtype, "shape": self.shape,
                "bytes": self.nbytes, "count": self.count, "file": self.file, "offset": self.offset,
                "length": self.length, "has_children": self.has_children, "expanded": expanded}


class HeaderTree:
    """Every node of one checkpoint's header, addressable by integer id."""

    def __init__(self, ckpt: Checkpoint) -> None:
        self.ckpt = ckpt
        self.nodes: list[Node] = []
        self.tensor_node: dict[str, int] = {}
        self._in_search = False  # search results copy tensor nodes; locate uses the originals
        self._lower_names: list | None = None
        self.parent: dict[int, int] = {}
        self._header: dict[str, tuple[int, int]] | None = None
        with no_gc():
            self.roots = [self._register(n, None) for n in _roots(ckpt, self.header_spans)]
        self._tensor_roots = {n.id for n in self.roots if n.kind == "group" and n.label == "tensors"}
        self._cache: dict[tuple, list[tuple[Node, int]]] = {}

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

    def header_spans(self) -> dict[str, tuple[int, int]]:
        """Where each tensor is described in the header: one pass over all spans, made once and
        shared by the tensor groups and every search (a 90,000-tensor file has 360,000 spans)."""
        if self._header is None:
            self._header = _tensor_header_spans(self.ckpt)
        return self._header

    def children(self, node: Node) -> list[Node]:
        if node.lazy is not None:
            with no_gc():
                made, node.lazy = node.lazy(), None
                node.children = [self._register(c, node.id) for c in made]
        return node.children

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

        Built nodes are searched as they are; tensors are searched by full name and shown in
        a group of their own (at most MAX_MATCHES). Array items and opcodes are not searched.
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
        if self._lower_names is None:
            notes = {m.name: m.note for m in self.ckpt.index_mismatches if m.kind in ("orphan", "named_twice")}
            self._lower_names = [((f"{t.name}\n{notes[t.name]}" if t.name in notes else t.name).lower(), t)
                                 for t in self.ckpt.tensors.values()]
            self._lower_names += [(f"{m.name}\n{m.note}".lower(), m) for m in _marked(self.ckpt)]
        matches = [t for low, t in self._lower_names if query in low]
        if not matches:
            return
        shown = matches[:MAX_MATCHES]
        label = f"tensors matching {query!r}" + (f" (first {MAX_MATCHES} of {len(matches)})"
                                                 if len(matches) > MAX_MATCHES else "")
        self._in_search = True
        try:
            group = self._register(_tensor_trie(self.ckpt, self.header_spans, shown, label), None)
            self._open_all(group, 0, out)
        finally:
            self._in_search = False

    def _open_all(self, node: Node, depth: int, out) -> None:
        out.append((node, depth))
        for c in self.children(node):
            self._open_all(c, depth + 1, out)

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
                m.name == tensor for m in _marked(self.ckpt))):
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

    def open_groups(self, limit: int) -> None:
        """Build every group (not array pages or opcodes) until `limit` nodes exist."""
        i = 0
        while i < len(self.nodes) and len(self.nodes) < limit:
            n = self.nodes[i]
            if n.kind == "group" and n.lazy is not None:
                self.children(n)
            i += 1

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


# -- building ----------------------------------------------------------------------------

def _roots(ckpt: Checkpoint, header_spans: Callable[[], dict]) -> list[Node]:
    roots: list[Node] = []
    header = _header_fields(ckpt)
    if header:
        roots.append(header)
    meta = {k: v for k, v in ckpt.metadata.items() if k not in ("config.json", "generation_config.json")}
    if ckpt.format == "gguf":
        if meta:
            roots.append(_gguf_metadata(meta))
    elif meta:
        n = Node("__metadata__", "group", f"{len(meta)} entries", count=len(meta))
        n.children = [Node(str(k), "meta", short_repr(v, 200), search=f"{k} {v}") for k, v in meta.items()]
        roots.append(n)
    for side in ("config.json", "generation_config.json"):
        if side in ckpt.metadata:
            roots.append(_json_node(side, ckpt.metadata[side], 0))
    pickle = ckpt.details.get("pickle")
    if isinstance(pickle, dict):
        roots.extend(_pickle_nodes(ckpt, pickle))
    if ckpt.tensors or _marked(ckpt):
        roots.append(_tensor_trie(ckpt, header_spans))
    return roots


def _header_fields(ckpt: Checkpoint) -> Node | None:
    """The fixed fields at the top of each file (magic, version, counts, header length)."""
    kinds = ("magic", "version", "count", "length", "json", "padding")
    fields = [s for s in ckpt.spans if s.kind in kinds and s.tensor is None]
    if not fields:
        return None
    many = len(ckpt.files) > 1
    node = Node("file header", "group", f"{len(fields)} fields", count=len(fields))
    for s in fields:
        label = f"{os.path.basename(s.file)} > {s.path}" if many else s.path
        node.children.append(Node(label, s.kind, s.value, file=s.file, offset=s.offset,
                                  length=s.length, nbytes=s.length))
    return node


def _gguf_metadata(meta: dict) -> Node:
    root = Node("metadata", "group", f"{len(meta)} keys", count=len(meta))
    groups: dict[str, Node] = {}
    for key, kv in meta.items():
        ns = str(key).split(".", 1)[0]
        if ns not in groups:
            groups[ns] = Node(ns, "group")
            root.children.append(groups[ns])
        groups[ns].children.append(_kv_node(str(key), kv))
    for g in groups.values():
        g.count = len(g.children)
        g.value = f"{g.count} keys"
    return root


def _kv_node(key: str, kv: Any) -> Node:
    value = plain_value(kv)
    vtype = str(getattr(kv, "type", ""))
    where = {"offset": getattr(kv, "offset", None), "length": getattr(kv, "length", None),
             "nbytes": getattr(kv, "length", None), "file": getattr(kv, "file", None) or None}
    if hasattr(value, "__len__") and hasattr(value, "__getitem__") and not isinstance(value, (str, bytes)):
        n = len(value)
        preview = ", ".join(short_repr(value[i], 24) for i in range(min(n, 3)))
        node = Node(key, "array", f"{vtype} x {n}: [{preview}{', …' if n > 3 else ''}]",
                    dtype=vtype, shape=[n], count=n, **where)
        node.lazy = lambda v=value, n=n: _array_pages(v, n)
        return node
    return Node(key, "kv", short_repr(value, 200), dtype=vtype, **where)


def _array_pages(value, n: int) -> list[Node]:
    def items(lo: int, hi: int) -> list[Node]:
        return [Node(f"[{i}]", "item", short_repr(value[i], 200)) for i in range(lo, hi)]

    if n <= ARRAY_PAGE:
        return items(0, n)
    pages = []
    for lo in range(0, n, ARRAY_PAGE):
        hi = min(n, lo + ARRAY_PAGE)
        pages.append(Node(f"[{lo}…{hi - 1}]", "page", f"{hi - lo} items", count=hi - lo,
                          lazy=lambda lo=lo, hi=hi: items(lo, hi)))
    return pages


def _json_node(label: str, value: Any, depth: int) -> Node:
    if isinstance(value, dict) and depth < 8:
        node = Node(label, "group", f"{len(value)} keys", count=len(value))
        node.children = [_json_node(str(k), v, depth + 1)
                         for k, v in list(value.items())[:MAX_JSON_CHILDREN]]
        return node
    if isinstance(value, list) and depth < 8 and any(isinstance(v, (dict, list)) for v in value[:50]):
        node = Node(label, "group", f"{len(value)} items", count=len(value))
        node.children = [_json_node(f"[{i}]", v, depth + 1) for i, v in enumerate(value[:MAX_JSON_CHILDREN])]
        return node
    text = value if isinstance(value, str) else json.dumps(value, default=str)
    return Node(label, "meta", short_repr(text, 200), search=f"{label} {short_repr(text, 200)}")


def _pickle_nodes(ckpt: Checkpoint, pickle: dict) -> list[Node]:
    out = []
    verdict = pickle.get("verdict")
    imports = pickle.get("imports") or []
    node = Node("pickle imports", "group", f"{len(imports)} imports, verdict: {verdict}",
                count=len(imports))
    for imp in imports:
        name = f"{imp.get('module', '?')}.{imp.get('name', '?')}"
        args = imp.get("args")
        val = f"{imp.get('severity', '')} {imp.get('opcode', '')}" + (f" args {short_repr(args, 80)}" if args else "")
        # The severity rides in `dtype` so the row can be coloured (error: code would run).
        node.children.append(Node(name, "import", val.strip(), dtype=str(imp.get("severity") or ""),
                                  offset=imp.get("offset"), length=1,
                                  file=ckpt.files[0] if ckpt.files else None))
    out.append(node)
    if "structure" in pickle:
        out.append(_structure_node("pickle structure", pickle["structure"], 0, ckpt.tensors))
    opcodes = [s for s in ckpt.spans if s.kind == "opcode"]
    if opcodes:
        op = Node("pickle opcodes", "opcodes", f"{len(opcodes)} opcodes", count=len(opcodes))
        op.lazy = lambda spans=opcodes: _opcode_pages(spans)
        out.append(op)
    return out


def _structure_node(label: str, value: Any, depth: int, tensors: dict) -> Node:
    """The object the pickle rebuilds; tensors appear as references that select their data."""
    if isinstance(value, dict) and "tensor" in value and isinstance(value["tensor"], str):
        t = tensors.get(value["tensor"])
        where = {"file": t.file, "offset": t.offset, "length": t.length, "nbytes": t.length,
                 "dtype": t.kind, "shape": list(t.shape)} if t else {}
        return Node(label, "ref", f"tensor {short_repr(value['tensor'], 120)}", tensor=value["tensor"],
                    **where)
    if isinstance(value, (dict, list)) and depth < 12:
        items = list(value.items()) if isinstance(value, dict) else list(enumerate(value))
        node = Node(label, "group", f"{len(items)} {'keys' if isinstance(value, dict) else 'items'}",
                    count=len(items))
        node.children = [_structure_node(str(k) if isinstance(value, dict) else f"[{k}]", v, depth + 1,
                                         tensors) for k, v in items[:MAX_JSON_CHILDREN]]
        return node
    return Node(label, "meta", short_repr(value, 200))


def _opcode_pages(spans) -> list[Node]:
    def items(lo: int, hi: int) -> list[Node]:
        return [Node(s.path, "opcode", s.value, file=s.file, offset=s.offset, length=s.length,
                     nbytes=s.length) for s in spans[lo:hi]]

    if len(spans) <= ARRAY_PAGE:
        return items(0, len(spans))
    return [Node(f"opcodes {lo}…{min(len(spans), lo + ARRAY_PAGE) - 1}", "page",
                 lazy=lambda lo=lo: items(lo, min(len(spans), lo + ARRAY_PAGE)))
            for lo in range(0, len(spans), ARRAY_PAGE)]


def _split(name: str) -> tuple[list[str], str]:
    """Group path and leaf label of a tensor name.

    The last two components stay together ("q_proj.weight") so leaves read naturally,
    unless the second-to-last is a layer number ("layers.0.w" -> layer 0 > "w").
    """
    parts = name.split(".")
    keep = 2 if len(parts) > 2 and not _INT.match(parts[-2]) else 1
    if len(parts) <= keep:
        return [], name
    return parts[:-keep], ".".join(parts[-keep:])


MARKED_KINDS = ("missing", "duplicate")


def _marked(ckpt: Checkpoint) -> list[IndexMismatch]:
    """Index entries without a tensor of their own: missing ones and unused second copies."""
    return [m for m in ckpt.index_mismatches if m.kind in MARKED_KINDS]


def _tensor_trie(ckpt: Checkpoint, header_spans: Callable[[], dict],
                 infos: list[TensorInfo | IndexMismatch] | None = None, label: str = "tensors") -> Node:
    """Tensors grouped by dotted name prefix: model > layers > 0 > self_attn > q_proj.weight.

    Groups are built when opened, so 90,000 tensors cost nothing until someone looks.
    Tensors an index names but no shard holds sit where their name puts them, marked.
    """
    infos = [*ckpt.tensors.values(), *_marked(ckpt)] if infos is None else infos
    notes = {m.name: m.note for m in ckpt.index_mismatches if m.kind in ("orphan", "named_twice")}
    absent = sum(isinstance(t, IndexMismatch) and t.kind == "missing" for t in infos)
    value = _count_text(len(infos), absent)
    root = Node(label, "group", value, count=len(infos), nbytes=sum(_nbytes(t) for t in infos))

    def first_level() -> list[Node]:  # names are split only when someone opens the group
        members = [(*_split(t.name), _nbytes(t), t, notes.get(t.name)) for t in infos]
        return _group_children("", members, 0, header_spans())

    root.lazy = first_level
    return root


def _count_text(n: int, missing: int) -> str:
    """"400 tensors", "1 tensor", "400 tensors (400 missing)"."""
    return f"{n} tensor{'' if n == 1 else 's'}" + (f" ({missing} missing)" if missing else "")


def _group(label: str, path: str, members: list, depth: int, header: dict) -> Node:
    absent = sum(isinstance(m[3], IndexMismatch) and m[3].kind == "missing" for m in members)
    value = _count_text(len(members), absent)
    node = Node(label, "group", value, count=len(members),
                nbytes=sum(m[2] for m in members), search=path or label)
    node.lazy = lambda: _group_children(path, members, depth, header)
    return node


def _group_children(path: str, members: list, depth: int, header: dict) -> list[Node]:
    groups: dict[str, list] = {}
    out: list[Node | str] = []
    for m in members:
        prefix = m[0]
        if len(prefix) <= depth:
            out.append(_tensor_node(m[3], m[1], header, m[2], m[4]))
            continue
        key = prefix[depth]
        group = groups.get(key)
        if group is None:
            group = groups[key] = []
            out.append(key)
        group.append(m)
    nodes = [_group(x, f"{path}.{x}" if path else x, groups[x], depth + 1, header)
             if isinstance(x, str) else x for x in out]
    if nodes and all(_INT.match(n.label) for n in nodes):
        nodes.sort(key=lambda n: int(n.label))
    return nodes


def _nbytes(info: TensorInfo | IndexMismatch) -> int:
    if isinstance(info, IndexMismatch):
        return _nbytes(info.info) if info.info is not None else 0
    return info.stored_bytes  # a Hub-quantized layer lists its main component among its parts


def _tensor_node(info: TensorInfo | IndexMismatch, label: str, header: dict, nbytes: int,
                 note: str | None = None) -> Node:
    if isinstance(info, IndexMismatch):  # where it shows: its index entry, or the unused copy
        copy = info.info
        return Node(label, info.kind, info.note, tensor=info.name,
                    dtype=copy.kind if copy else None, shape=list(copy.shape) if copy else None,
                    nbytes=nbytes if copy else None, file=info.file, offset=info.offset,
                    length=info.length, search=f"{info.name} {info.note}")
    off, length = header.get(info.name, (info.offset, info.length))
    return Node(label, "tensor", note, tensor=info.name, dtype=info.kind, shape=list(info.shape),
                nbytes=nbytes, file=info.file, offset=off, length=length, search=info.name)


def _tensor_header_spans(ckpt: Checkpoint) -> dict[str, tuple[int, int]]:
    """Where each tensor is described in the header (so selecting it shows its entry)."""
    out = {}
    for s in ckpt.spans:
        if s.kind == "tensor_info" and s.tensor and s.tensor not in out:
            out[s.tensor] = (s.offset, s.length)
    for info in ckpt.tensors.values():
        span = info.extra.get("info_span") if info.extra else None
        if span and info.name not in out:
            out[info.name] = tuple(span)
    return out
