"""The Graph tab's requests (js/src/graphview.js), shared by the Explorer and the GraphView alone.

The browser never gets the node table: it asks for the visible set of the boxes it has opened
("graph_view": groups first, a group's members when it is opened), finds nodes by name or op
("graph_search"), asks what a clicked node reads ("graph_node"), and gets the layout engine's
worker script once ("graph_engine", elkjs's own build, sent as bytes: the Explorer's script stays
small for the files that have no graph). Per node it sends the overlays' values: the weights'
dtype (or quantization scheme), parameters, the worst finding in its bytes, and a run's relative
L2 (or absmax/median for a trace) through the node's `layer`/`module` columns where they exist.
"""

from __future__ import annotations

import math
import threading
from collections import Counter
from typing import Any

from ..assets import STATIC
from ._graphtree import GraphTree

_BUILDING = threading.RLock()  # one index build at a time (the background one, or a request's)
MAX_DRAWN = 3000  # items one view may hold; past it the browser is told to open less
SEVERITY_RANK = {"error": 3, "warning": 2, "info": 1}


class GraphIndex:
    """A Graph with its boxes and each node's overlay values, built on the first request."""

    def __init__(self, graph, ckpt=None, overlay=None) -> None:
        nodes = graph.nodes
        self.graph = graph
        self.tree = GraphTree(nodes, graph.edges)
        self.names = [str(x) for x in nodes["name"]]
        self.ops = [str(x) for x in nodes["op"]]
        self.params = [int(x or 0) for x in nodes["parameters"]]
        self.weights = [list(w) if isinstance(w, (list, tuple)) else [] for w in nodes["weights"]]
        self.places = list(zip(nodes["file"], nodes["offset"], nodes["length"]))
        self.dtypes = [_dtype(ckpt, w) for w in self.weights]
        self.findings = _node_findings(ckpt, self.places, self.weights)
        self.run, self.run_meta = _run_values(nodes, overlay)

    def item(self, it: dict) -> dict:
        """A drawn item with what the overlays colour it by."""
        if it["kind"] == "node":
            i = it.pop("row")
            f = self.findings.get(i)
            label = self.names[i].rstrip("/").rsplit("/", 1)[-1] or self.ops[i]
            return {**it, "label": label, "op": self.ops[i], "params": self.params[i],
                    "dtype": self.dtypes[i], "weights": len(self.weights[i]),
                    "finding": f, "run": self.run[i]}
        if it["kind"] == "open":
            return it
        rows = self.tree.boxes[it["key"]].nodes
        ops = Counter(self.ops[i] for i in rows).most_common(3)
        dtypes = Counter(self.dtypes[i] for i in rows if self.dtypes[i]).most_common(1)
        worst = max((self.findings[i] for i in rows if i in self.findings),
                    key=lambda f: SEVERITY_RANK.get(f["severity"], 0), default=None)
        runs = [self.run[i] for i in rows if self.run[i] is not None]
        return {**it, "params": sum(self.params[i] for i in rows), "ops": [[o, n] for o, n in ops],
                "dtype": dtypes[0][0] if dtypes else "", "finding": worst,
                "run": max(runs) if runs else None,
                "first": any(self.run_meta.get("first") == i for i in rows)}

    def view(self, opened: list[str] | None) -> dict:
        if opened is None:
            opened = self.tree.first_opened()
        items, edges = self.tree.visible([o for o in opened if o in self.tree.boxes])
        note = ""
        if len(items) > MAX_DRAWN:
            note = (f"{len(items):,} items would be drawn; the first {MAX_DRAWN:,} are: "
                    "close a group to see the rest.")
            keep = {it["key"] for it in items[:MAX_DRAWN]}
            items = items[:MAX_DRAWN]
            edges = [e for e in edges if e[0] in keep and e[1] in keep]
        first = self.run_meta.get("first")
        return {"opened": [o for o in opened if o in self.tree.boxes], "items": [self.item(it) for it in items],
                "edges": edges, "total": len(self.ids), "note": note,
                "first": None if first is None else "n:" + self.tree.ids[first],
                "run": {k: self.run_meta[k] for k in ("label", "min", "max", "kind") if k in self.run_meta}}

    @property
    def ids(self) -> list[str]:
        return self.tree.ids

    def node(self, key: str) -> dict:
        i = self.tree.row.get(key[2:]) if key.startswith("n:") else None
        if i is None:
            raise ValueError(f"no node {key!r} in this graph")
        file, offset, length = self.places[i]
        return {"key": key, "name": self.names[i], "op": self.ops[i], "weights": self.weights[i],
                "record": {"file": file, "offset": _int(offset), "length": _int(length)},
                "finding": self.findings.get(i), "params": self.params[i], "dtype": self.dtypes[i],
                "run": self.run[i], "open": self.tree.ancestors(key)}


class GraphOps:
    """Mixin: the graph requests. The host gives `_graph_source()` -> (Graph, checkpoint or None)
    and may set `_graph_overlay`."""

    _graph_index: GraphIndex | None = None
    _graph_overlay: Any = None

    def _graph_source(self):  # pragma: no cover - each host defines it
        raise NotImplementedError

    def graph_index(self) -> GraphIndex:
        with _BUILDING:
            if self._graph_index is None:
                graph, ckpt = self._graph_source()
                self._graph_index = GraphIndex(graph, ckpt, self._graph_overlay)
            return self._graph_index

    def prepare_graph(self) -> None:
        """Build the index in a background thread (the Explorer starts it at open), so the tab's
        first view does not wait for the node table of a large file."""
        def build() -> None:
            try:
                self.graph_index()
            except Exception:  # the tab's own request says why
                pass

        threading.Thread(target=build, name="graph-index", daemon=True).start()

    def _op_graph_view(self, opened: list[str] | None = None):
        return self.graph_index().view(None if opened is None else [str(o) for o in opened]), None

    def _op_graph_search(self, query: str = ""):
        index = self.graph_index()
        return {"query": query, "hits": index.tree.search(str(query), index.names, index.ops)}, None

    def _op_graph_node(self, key: str):
        return self.graph_index().node(str(key)), None

    def _op_graph_locate(self, tensor: str = ""):
        """The first node that reads `tensor` (a selection made elsewhere: the graph follows)."""
        index = self.graph_index()
        row = next((i for i, ws in enumerate(index.weights) if tensor in ws), None)
        if row is None:
            return None, None
        key = "n:" + index.ids[row]
        return {"key": key, "open": index.tree.ancestors(key)}, None

    def _op_graph_engine(self):
        """elkjs's worker script (copied by js/build.mjs), run by the browser in a Blob-URL worker."""
        path = STATIC / "elk_worker.js"
        if not path.is_file():
            raise FileNotFoundError("the layout engine is not built: run `make js`")
        return {"size": path.stat().st_size}, [path.read_bytes()]


def _dtype(ckpt, weights: list[str]) -> str:
    """The storage of a node's first weight: its quantization scheme's label or its dtype."""
    if ckpt is None or not weights:
        return ""
    t = ckpt.tensors.get(weights[0])
    return "" if t is None else str(getattr(t, "label", "") or getattr(t, "dtype", ""))


def _node_findings(ckpt, places, weights) -> dict[int, dict]:
    """Row -> the worst finding whose bytes fall in the node's record or name one of its weights."""
    if ckpt is None or not ckpt.findings:
        return {}
    by_tensor: dict[str, list[int]] = {}
    for i, ws in enumerate(weights):
        for w in ws:
            by_tensor.setdefault(w, []).append(i)
    spans: dict[str, list[tuple[int, int, int]]] = {}
    for i, (file, offset, length) in enumerate(places):
        if offset is not None and length:
            spans.setdefault(str(file), []).append((_int(offset), _int(offset) + _int(length), i))
    for v in spans.values():
        v.sort()
    import bisect

    out: dict[int, dict] = {}
    for n, f in enumerate(ckpt.findings[:5000]):
        rows = list(by_tensor.get(f.tensor or "", []))
        if f.offset is not None and f.file in spans:
            v = spans[f.file]
            j = bisect.bisect_right(v, (f.offset, math.inf, 0)) - 1
            if j >= 0 and v[j][0] <= f.offset < v[j][1]:
                rows.append(v[j][2])
        for i in rows:
            old = out.get(i)
            if old is None or SEVERITY_RANK.get(f.severity, 0) > SEVERITY_RANK.get(old["severity"], 0):
                out[i] = {"index": n, "severity": f.severity, "code": f.code, "message": f.message,
                          "file": f.file, "offset": f.offset, "length": f.length, "tensor": f.tensor}
    return out


def _run_values(nodes, overlay) -> tuple[list[float | None], dict]:
    """Each node's value in a trace or compare_runs result, through its layer/module columns."""
    none: list[float | None] = [None] * len(nodes)
    if overlay is None or "layer" not in nodes or "module" not in nodes:
        return none, {"label": "" if overlay is None else "the graph has no layer/module columns"}
    from ..runs.state import runs_state

    state = runs_state(overlay)
    layers = {int(x): i for i, x in enumerate(state["layers"])}
    modules = {str(m): j for j, m in enumerate(state["modules"])}
    values = state["color"]["values"]
    first = state.get("first") or {}
    out = list(none)
    first_row = None
    for r, (layer, module) in enumerate(zip(nodes["layer"], nodes["module"])):
        try:
            i, j = layers[int(layer)], modules[str(module)]
        except (KeyError, TypeError, ValueError):
            continue
        out[r] = values[i][j]
        if first_row is None and first.get("layer") == int(layer) and first.get("module") == str(module):
            first_row = r
    return out, {"label": state["color"]["label"], "min": state["color"]["min"],
                 "max": state["color"]["max"], "first": first_row, "kind": state["kind"]}


def _int(x) -> int:
    try:
        return int(x)
    except (TypeError, ValueError):
        return 0
