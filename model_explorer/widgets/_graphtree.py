"""The Graph view's hierarchy: boxes (scope groups, and chunks of a crowded group) over a Graph's
operators, and the visible set for a set of opened boxes, edges folded onto what is drawn.

Boxes have keys: "g:<scope path>" for a group, "c:<i>:<scope path>" for the i-th chunk of a group
with more than CHUNK members (a flat ONNX file with 10,000 unscoped nodes is 50 boxes, not 10,000
nodes at once), "n:<node id>" for an operator. The root ("g:") is always open; a box is drawn
when its parent is open, as a container when it is open itself. An edge is drawn between the
drawn items its ends fold onto (a node in a closed box folds onto that box), counted, once.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

CHUNK = 100  # a group with more members than this is cut into chunks of this many, in file order
ROOT = "g:"


@dataclass
class Box:
    key: str
    label: str
    parent: str | None
    members: list[str] = field(default_factory=list)  # child box keys and node keys, in order
    nodes: list[int] = field(default_factory=list)  # row numbers of every operator inside


class GraphTree:
    """Boxes over a Graph's nodes (see the module docstring)."""

    def __init__(self, nodes, edges) -> None:
        ids = [str(x) for x in nodes["id"]]
        groups = [str(g or "") for g in nodes["group"]]
        self.ids = ids
        self.row = {k: i for i, k in enumerate(ids)}
        self.boxes: dict[str, Box] = {ROOT: Box(ROOT, "", None)}
        self.node_parent: list[str] = [ROOT] * len(ids)
        for i, g in enumerate(groups):
            key = self._group_box(g)
            self.boxes[key].members.append("n:" + ids[i])
            self.node_parent[i] = key
        for box in list(self.boxes.values()):
            if box.key.startswith("g:") and len(box.members) > CHUNK:
                self._chunk(box)
        for i, parent in enumerate(self.node_parent):
            key: str | None = parent
            while key is not None:
                self.boxes[key].nodes.append(i)
                key = self.boxes[key].parent
        src = np.array([self.row.get(str(s), -1) for s in edges["source"]], dtype=np.int64)
        dst = np.array([self.row.get(str(t), -1) for t in edges["target"]], dtype=np.int64)
        keep = (src >= 0) & (dst >= 0)
        self.edge_src, self.edge_dst = src[keep], dst[keep]

    def _group_box(self, group: str) -> str:
        key = "g:" + group
        if key not in self.boxes:
            parent = self._group_box(group.rsplit("/", 1)[0]) if "/" in group else ROOT
            self.boxes[key] = Box(key, group.rsplit("/", 1)[-1], parent)
            self.boxes[parent].members.append(key)
        return key

    def _chunk(self, box: Box) -> None:
        members, box.members = box.members, []
        path = box.key[2:]
        for n, start in enumerate(range(0, len(members), CHUNK)):
            part = members[start:start + CHUNK]
            key = f"c:{n}:{path}"
            chunk = Box(key, f"{_short(part[0])} … {_short(part[-1])} ({len(part)})", box.key, part)
            self.boxes[key] = chunk
            box.members.append(key)
            for m in part:
                if m.startswith("n:"):
                    self.node_parent[self.row[m[2:]]] = key
                else:
                    self.boxes[m].parent = key

    def ancestors(self, key: str) -> list[str]:
        """The boxes above a box or node ("n:<id>"), outermost first, the root left out."""
        parent = self.node_parent[self.row[key[2:]]] if key.startswith("n:") else self.boxes[key].parent
        out = []
        while parent is not None and parent != ROOT:
            out.append(parent)
            parent = self.boxes[parent].parent
        return out[::-1]

    def first_opened(self, budget: int = 150) -> list[str]:
        """What opens by itself: a box that holds most of the operators, inside the open ones,
        while the view stays within `budget` items ("/model/layers.N/..." opens "model" and
        shows its N layers closed)."""
        opened: list[str] = []
        total = max(1, len(self.ids))
        box, shown = self.boxes[ROOT], len(self.boxes[ROOT].members)
        while True:
            inner = [self.boxes[m] for m in box.members if not m.startswith("n:")]
            big = max(inner, key=lambda b: len(b.nodes), default=None)
            if big is None or 2 * len(big.nodes) <= total or shown + len(big.members) > budget:
                return opened
            opened.append(big.key)
            shown += len(big.members)
            box = big

    def visible(self, opened: list[str]) -> tuple[list[dict], list[list]]:
        """The drawn items (boxes open or closed, nodes) and the folded edges [source, target, count]."""
        is_open = {ROOT}
        items: list[dict] = []
        folded: dict[str, str] = {}  # box key -> the drawn item its nodes fold onto

        def walk(key: str) -> None:
            for m in self.boxes[key].members:
                if m.startswith("n:"):
                    items.append({"key": m, "kind": "node", "parent": key, "row": self.row[m[2:]]})
                    continue
                box = self.boxes[m]
                if m in wanted:
                    is_open.add(m)
                    items.append({"key": m, "kind": "open", "parent": key, "label": box.label})
                    walk(m)
                else:
                    folded[m] = m
                    items.append({"key": m, "kind": "group", "parent": key, "label": box.label,
                                  "count": len(box.nodes)})

        wanted = set(opened)
        walk(ROOT)
        onto = np.arange(len(self.ids), dtype=np.int64)  # a node's drawn item: itself (>= 0) or a box
        box_index = {k: -1 - i for i, k in enumerate(folded)}
        for key, index in box_index.items():
            onto[self.boxes[key].nodes] = index
        names = list(folded)
        src, dst = onto[self.edge_src], onto[self.edge_dst]
        edges: list[list] = []
        if len(src):
            pairs = np.stack([src, dst], axis=1)[src != dst]
            uniq, counts = np.unique(pairs, axis=0, return_counts=True)
            for (s, t), c in zip(uniq.tolist(), counts.tolist()):
                edges.append([self._key(s, names), self._key(t, names), c])
        return items, edges

    def _key(self, index: int, names: list[str]) -> str:
        return "n:" + self.ids[index] if index >= 0 else names[-1 - index]

    def search(self, query: str, names, ops, limit: int = 50) -> list[dict]:
        """Operators whose name or op holds `query` (any case), each with the boxes to open."""
        q = query.strip().lower()
        if not q:
            return []
        out = []
        for i, (name, op) in enumerate(zip(names, ops)):
            if q in str(name).lower() or q in str(op).lower():
                key = "n:" + self.ids[i]
                out.append({"key": key, "name": str(name), "op": str(op), "open": self.ancestors(key)})
                if len(out) >= limit:
                    break
        return out


def _short(member: str) -> str:
    """A member's own name for a chunk's label: a node's last path part, a group's label."""
    return member[2:].rstrip("/").rsplit("/", 1)[-1]
