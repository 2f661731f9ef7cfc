"""Where a pickle's objects of outside classes sit, relative to its tensors.

`torch.save(model)` puts the tensors inside the author's objects: without their classes there
are no weights. A PyTorch Lightning checkpoint keeps its tensors in a plain `state_dict` and
only its hyperparameters in omegaconf's objects: the classes are needed for the file, not for
the weights. `holders` tells the two apart by walking the unpickled structure (bounded, each
value once per "inside an object or not") and saying, per top-level key of a dict root, which
keys hold tensors, which hold objects, and whether any tensor is reached through an object.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from .numpy_refs import NumpyArray
from .torch_refs import StorageRef, TensorRef
from .values import Call, EmuSet, Global, render

MAX_VISITS = 200_000


@dataclass
class Holders:
    tensors_plain: int = 0  # tensors reached through plain containers only
    tensors_in_objects: int = 0  # tensors reached through an object of an outside class
    tensor_keys: list[str] = field(default_factory=list)  # top-level keys holding tensors
    object_keys: list[str] = field(default_factory=list)  # top-level keys holding such objects
    complete: bool = True  # False: the walk stopped at MAX_VISITS

    @property
    def weights_plain(self) -> bool:
        """Every tensor sits in plain containers, and some object of an outside class elsewhere."""
        return self.complete and self.tensors_plain > 0 and self.tensors_in_objects == 0 \
            and bool(self.object_keys)


def _is_outside(v: Any, outside: set[int]) -> bool:
    """An object built from one of the `outside` Globals (by id): its class is the callee, or an
    argument of a reconstructor (`copyreg._reconstructor(cls, object, None)`)."""
    if not isinstance(v, Call):
        return False
    if isinstance(v.func, Global) and id(v.func) in outside:
        return True
    args = v.args if isinstance(v.args, tuple) else ()
    return any(isinstance(a, Global) and id(a) in outside for a in args[:3])


def _kids(v: Any) -> list:
    if isinstance(v, dict):
        return list(v.values())
    if isinstance(v, (list, tuple)):
        return list(v)
    if isinstance(v, EmuSet):
        return list(v.items)
    if isinstance(v, Call):
        out: list = list(v.args) if isinstance(v.args, tuple) else [v.args]
        if isinstance(v.state, dict):
            out.extend(v.state.values())
        elif v.state is not None:
            out.append(v.state)
        out.extend(v.items or ())
        out.extend(x for _, x in (v.setitems or ()))
        return out
    return []


def holders(root: Any, outside: list[Global]) -> Holders:
    """Where the objects of the `outside` classes (and references to them) sit in `root`."""
    out = Holders()
    ids = {id(g) for g in outside}
    if isinstance(root, Call) and root.setitems and not root.state and not root.args:
        top = [(render(k, 1, 60) if not isinstance(k, str) else k, x) for k, x in root.setitems]
    elif isinstance(root, dict):
        top = [(k if isinstance(k, str) else render(k, 1, 60), x) for k, x in root.items()]
    else:
        top = [("(root)", root)]
    visits = 0
    for key, value in top:
        seen: set[tuple[int, bool]] = set()
        todo = [(value, False)]
        has_tensor = has_object = False
        while todo:
            v, inside = todo.pop()
            visits += 1
            if visits > MAX_VISITS:
                out.complete = False
                break
            if isinstance(v, Global):
                has_object = has_object or id(v) in ids
                continue
            if isinstance(v, (TensorRef, StorageRef, NumpyArray)):
                has_tensor = True
                if inside:
                    out.tensors_in_objects += 1
                else:
                    out.tensors_plain += 1
                continue
            if (id(v), inside) in seen:
                continue
            seen.add((id(v), inside))
            if _is_outside(v, ids):
                has_object = True
                inside = True
            todo.extend((k, inside) for k in _kids(v))
        if has_tensor:
            out.tensor_keys.append(key)
        if has_object:
            out.object_keys.append(key)
        if not out.complete:
            break
    return out
