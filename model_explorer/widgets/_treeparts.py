"""The header tree's nodes, and the parts of the tree that are not tensors: the fixed fields at
the top of each file, GGUF metadata, side JSON files, and what a pickle imports and rebuilds.

A file whose spans are not built yet (a shard the columnar reader opened) gets its fields when
its group is opened, so showing the tree of 163 shards builds no shard's spans.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from typing import Any

from ..checkpoint import Checkpoint
from ..records import plain_value
from ..spans import Span, short_repr

ARRAY_PAGE = 100
MAX_JSON_CHILDREN = 1000
HEADER_KINDS = ("magic", "version", "count", "length", "json", "padding")


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


def header_fields(ckpt: Checkpoint) -> Node | None:
    """The fixed fields at the top of each file (magic, version, counts, header length).

    One file: its fields under "file header". Several: one group per file, whose fields are
    made (and, for a lazily opened shard, whose spans are built) when it is opened.
    """
    spans = ckpt.spans
    if hasattr(spans, "files_with"):
        per_file = spans.files_with(HEADER_KINDS)
    else:  # a plain list of spans
        per_file = {}
        for s in spans:
            if s.kind in HEADER_KINDS:
                per_file.setdefault(s.file, []).append(s)
        per_file = list(per_file.items())
    per_file = [(f, None if got is None else [s for s in got if s.tensor is None]) for f, got in per_file]
    per_file = [(f, got) for f, got in per_file if got is None or got]
    if not per_file:
        return None
    if len(ckpt.files) <= 1 and len(per_file) == 1:
        return _file_group("file header", ckpt, *per_file[0])
    node = Node("file header", "group", f"{len(per_file)} files", count=len(per_file))
    node.children = [_file_group(os.path.basename(f), ckpt, f, got) for f, got in per_file]
    return node


def _file_group(label: str, ckpt: Checkpoint, file: str, fields: list[Span] | None) -> Node:
    node = Node(label, "group")

    def fill(found: list[Span]) -> list[Node]:
        node.value, node.count = f"{len(found)} fields", len(found)
        return [Node(s.path, s.kind, s.value, file=s.file, offset=s.offset, length=s.length,
                     nbytes=s.length) for s in found]

    if fields is not None:
        node.children = fill(fields)
    else:  # building this file's spans waits until someone opens the group
        node.lazy = lambda: fill([s for s in ckpt.spans_for(file)
                                  if s.kind in HEADER_KINDS and s.tensor is None])
    return node


def gguf_metadata(meta: dict) -> Node:
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


def json_node(label: str, value: Any, depth: int) -> Node:
    if isinstance(value, dict) and depth < 8:
        node = Node(label, "group", f"{len(value)} keys", count=len(value))
        node.children = [json_node(str(k), v, depth + 1)
                         for k, v in list(value.items())[:MAX_JSON_CHILDREN]]
        return node
    if isinstance(value, list) and depth < 8 and any(isinstance(v, (dict, list)) for v in value[:50]):
        node = Node(label, "group", f"{len(value)} items", count=len(value))
        node.children = [json_node(f"[{i}]", v, depth + 1) for i, v in enumerate(value[:MAX_JSON_CHILDREN])]
        return node
    text = value if isinstance(value, str) else json.dumps(value, default=str)
    return Node(label, "meta", short_repr(text, 200), search=f"{label} {short_repr(text, 200)}")


def pickle_nodes(ckpt: Checkpoint, pickle: dict) -> list[Node]:
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
                 "dtype": t.label, "shape": list(t.shape)} if t else {}
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
