"""A TorchScript archive's module tree as a graph: each module data.pkl holds (a `__torch__.*`
object) one node, named by its path as named_modules names it ("" for the root, "encoder.0"),
its class as the op (torch's `___torch_mangle_N` dropped), the parameters and buffers it holds
itself as its weights, an edge from each module to its submodules.

Built from the walk's structure (walk.py), the tree the pickle describes read without running
any of it; a node points at the bytes of data.pkl (the pickle holds the modules, the code/
sources only their methods).
"""

from __future__ import annotations

import re

from ..structure import GraphStructure, OpRecord

MANGLE = re.compile(r"___torch_mangle_\d+\.")
SCRIPT = "__torch__."


def script_structure(structure, file: str, at: int, length: int) -> GraphStructure | None:
    """The module tree of a walked TorchScript data.pkl (None when its root is no module)."""
    if not _is_module(structure):
        return None
    nodes: list[OpRecord] = []
    todo: list[tuple[str, dict, str | None]] = [("", structure, None)]
    while todo:  # iterative: the walk's structure is already bounded in nodes and depth
        path, obj, parent = todo.pop()
        weights, children = [], []
        for key, value in obj.items():
            if isinstance(value, dict) and isinstance(value.get("tensor"), str):
                weights.append(value["tensor"])
            elif _is_module(value):
                children.append((f"{path}.{key}" if path else str(key), value))
        cls = MANGLE.sub("", str(obj["__object__"]))
        rec = OpRecord(cls.rsplit(".", 1)[-1], "", ([parent] if parent is not None else []) + weights,
                       [path or "(root)"], name=path or "(root)", at=at, length=length,
                       graph=_scope(path))
        rec.attrs["class"] = cls
        nodes.append(rec)
        todo.extend((p, v, path or "(root)") for p, v in reversed(children))
    return GraphStructure("torchscript", file, nodes)


def _is_module(value) -> bool:
    return isinstance(value, dict) and str(value.get("__object__", "")).startswith(SCRIPT)


def _scope(path: str) -> str:
    """graph.py reads an OpRecord's graph as "top > scope > scope": a module's parents."""
    parts = path.split(".")[:-1]
    return " > ".join(["module", *parts]) if parts else "module"
