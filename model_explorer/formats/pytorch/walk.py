"""Name every tensor in an unpickled structure by its path, and summarise the structure.

`{"model": {"layer.weight": t}}` names `t` "model.layer.weight": keys and list indices joined
with ".". Objects of other classes contribute their BUILD state (attributes) and arguments;
the `_parameters` / `_buffers` / `_modules` levels of a pickled `nn.Module` are skipped so a
whole saved model names its weights as its state dict would ("fc.weight").

The walk is iterative, stops at cycles, and is bounded in nodes and depth, because a small
hostile pickle can describe a deep or exponentially shared structure.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from ...spans import Report
from .. import MAX_RANK
from .numpy_refs import NumpyArray, NumpyDtype, array_layout
from .torch_refs import StorageRef, TensorRef
from .values import Blob, Call, EmuSet, Global, render

MAX_VISITS = 1_000_000
MAX_DEPTH = 200
MAX_STRUCTURE_NODES = 20_000
MODULE_LEVELS = {"_parameters", "_buffers", "_modules"}
ROOT_NAME = "(root)"


@dataclass
class Walked:
    tensors: list[tuple[str, Any]] = field(default_factory=list)  # (name, TensorRef | StorageRef)
    structure: Any = None


def _key_text(k: Any) -> str:
    return k if isinstance(k, str) else render(k, 2, 80)


def _children(v: Any) -> list[tuple[str | None, Any, bool]] | None:
    """(path element or None, child, is_dict_key) for containers; None for leaves."""
    if isinstance(v, dict):
        return [(_key_text(k), x, True) for k, x in v.items()]
    if isinstance(v, (list, tuple)):
        return [(str(i), x, False) for i, x in enumerate(v)]
    if isinstance(v, EmuSet):
        return [(str(i), x, False) for i, x in enumerate(v.items)]
    if isinstance(v, Call):
        out: list = []
        if isinstance(v.state, dict):
            for k, x in v.state.items():
                key = _key_text(k)
                out.append((None if key in MODULE_LEVELS else key, x, True))
        elif v.state is not None:
            out.append(("state", v.state, True))
        if isinstance(v.args, tuple):
            out.extend((str(i), x, False) for i, x in enumerate(v.args))
        out.extend((str(i), x, False) for i, x in enumerate(v.items or ()))
        out.extend((_key_text(k), x, True) for k, x in (v.setitems or ()))
        return out
    return None


def _leaf(v: Any) -> Any:
    if isinstance(v, (bool, int, float)) and not (isinstance(v, int) and v.bit_length() > 53):
        return v
    if v is None:
        return None
    if isinstance(v, str):
        return v if len(v) <= 200 else v[:199] + "…"
    if isinstance(v, (bytes, bytearray, Blob)):
        return render(v, 1, 80)
    if isinstance(v, Global):
        return f"<{v.dotted}>"
    return render(v, 2, 120)


def walk(root: Any, rep: Report) -> Walked:
    out = Walked()
    box: dict = {}
    seen_names: dict[str, int] = {}
    on_path: set[int] = set()
    # Containers already walked that held no tensor: a shared copy needs no second walk.
    tensor_free: set[int] = set()
    structure_nodes = 0
    visits = 0
    # ("enter", value, path parts, parent json, key in parent) or ("exit", id, tensors so far)
    todo: list = [("enter", root, (), box, "root")]
    warned = set()
    global_texts: dict[int, str] = {}  # the Globals live as long as the walk: ids stay unique
    while todo:
        item = todo.pop()
        if item[0] == "exit":
            on_path.discard(item[1])
            if item[2] == len(out.tensors):
                tensor_free.add(item[1])
            continue
        _, v, parts, parent, key = item
        visits += 1
        if visits > MAX_VISITS:
            rep.warning("structure_too_large", f"The pickled structure has more than {MAX_VISITS} "
                        "nodes (shared many times over); tensors past that point are not listed.")
            break
        if isinstance(v, (TensorRef, StorageRef)) or (isinstance(v, NumpyArray)
                                                       and array_layout(v) is not None):
            name = ".".join(parts) or ROOT_NAME
            if name in seen_names:
                seen_names[name] += 1
                if "dup" not in warned:
                    warned.add("dup")
                    rep.info("duplicate_tensor_name", f"Two tensors have the path {name!r}; the "
                             f"second is listed as {name + '#2'!r}.", getattr(v, "offset", None), 1)
                name = f"{name}#{seen_names[name]}"
            seen_names[name] = 1
            out.tensors.append((name, v))
            if parent is not None:
                parent[key] = _tensor_leaf(name, v)
            continue
        if isinstance(v, NumpyArray) and not rep.capped("numpy_array_not_listed"):
            _unlisted_array(v, ".".join(parts) or ROOT_NAME, rep)  # still shown in the structure
        kids = _children(v)
        if kids is None:
            if parent is not None:
                if isinstance(v, Global):  # one text per import, however often it is shared
                    text = global_texts.get(id(v))
                    if text is None:
                        text = global_texts[id(v)] = _leaf(v)
                    parent[key] = text
                else:
                    parent[key] = _leaf(v)
            continue
        if id(v) in on_path or id(v) in tensor_free:
            if parent is not None:
                parent[key] = "<cycle>" if id(v) in on_path else "<shared>"
            continue
        if len(parts) >= MAX_DEPTH:
            if "deep" not in warned:
                warned.add("deep")
                rep.warning("structure_too_deep", f"The pickled structure nests deeper than "
                            f"{MAX_DEPTH} levels; what lies deeper is not listed.")
            continue
        node: Any = None
        if parent is not None and structure_nodes < MAX_STRUCTURE_NODES:
            structure_nodes += 1
            is_map = isinstance(v, dict) or (isinstance(v, Call))
            node = {} if is_map else [None] * len(kids)
            if isinstance(v, Call):
                node["__object__"] = render(v.func, 1, 80)
            parent[key] = node
        elif parent is not None:
            parent[key] = "…"
        on_path.add(id(v))
        todo.append(("exit", id(v), len(out.tensors)))
        for i in range(len(kids) - 1, -1, -1):
            elem, child, is_key = kids[i]
            child_parts = parts if elem is None else parts + (elem,)
            child_key = i if isinstance(node, list) else (elem if elem is not None else kids[i][0])
            if isinstance(node, dict) and elem is None:
                child_key = _hidden_key(v, i)
            todo.append(("enter", child, child_parts, node, child_key))
    out.structure = box.get("root")
    return out


def _hidden_key(v: Call, i: int) -> str:
    """The structure key of a skipped module level (_parameters...), kept in the summary."""
    if isinstance(v.state, dict):
        keys = list(v.state.keys())
        if i < len(keys):
            return _key_text(keys[i])
    return str(i)


def _unlisted_array(v: NumpyArray, name: str, rep: Report) -> None:
    """Say why a numpy array is not in the tensor list: a dtype of text or objects (kept in the
    structure, as a tokenizer's vocabulary might be), or a shape that cannot be one."""
    dt = v.dtype
    if isinstance(dt, NumpyDtype) and dt.name is None:
        rep.info("numpy_array_not_listed", f"The numpy array at {name!r} ({render(dt, 1)}) holds no "
                 "numbers this tool reads as a tensor (text, objects or records); it is shown in "
                 "the structure, not in the tensor list.", v.offset_in_pickle, 1)
    else:
        rep.warning("numpy_array_invalid", f"The numpy array at {name!r} is not listed as a "
                    f"tensor: its dtype {render(dt, 1)} or shape {render(v.shape, 1)} is not one an "
                    f"array can have (a shape is at most {MAX_RANK} sizes).", v.offset_in_pickle, 1)


def _tensor_leaf(name: str, v: Any) -> dict:
    if isinstance(v, NumpyArray):
        dtype, _, shape, _ = array_layout(v)  # type: ignore[misc]  # the caller checked it is not None
        return {"tensor": name, "dtype": dtype, "shape": list(shape), "numpy": True}
    if isinstance(v, StorageRef):
        return {"tensor": name, "dtype": v.dtype, "shape": [v.numel] if isinstance(v.numel, int)
                else [], "storage": True}
    shape = list(v.size) if isinstance(v.size, (tuple, list)) and all(
        isinstance(d, int) for d in v.size) else render(v.size, 1)
    return {"tensor": name, "dtype": v.element_dtype, "shape": shape}
