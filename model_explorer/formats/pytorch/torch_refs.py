"""What torch's reconstructors would build, as inert references: storages and tensor views.

A torch pickle names its storages by persistent id (`('storage', torch.FloatStorage, '0',
'cpu', 12)` in a zip checkpoint, plus a view tuple in the legacy format) and builds each
tensor with `torch._utils._rebuild_tensor_v2(storage, storage_offset, size, stride, ...)`.
Here those calls return `StorageRef` / `TensorRef` records; nothing is imported or run.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from ...dtypes import SAFETENSORS_BITS, STORAGE_DTYPES, TORCH_DTYPES
from .values import Global, Unknown, render
from .vm import PickleMachine

# Bits per element; the torch-only names extend the safetensors table.
DTYPE_BITS = {**SAFETENSORS_BITS, "C128": 128, "C32": 32, "F8_E4M3FNUZ": 8, "F8_E5M2FNUZ": 8,
              "F4_E2M1FN_X2": 8}


def itemsize(dtype: str | None) -> int:
    return max(1, DTYPE_BITS.get(dtype or "", 8) // 8)


@dataclass(eq=False)
class StorageRef:
    """One storage as a persistent id names it: key, element dtype, element count."""

    key: str
    dtype: str
    numel: Any
    location: Any
    offset: int  # where the persistent id is in the file
    type_name: str
    elem_base: int = 0  # legacy storage views start this many elements into the root storage
    view_numel: int | None = None

    @property
    def itemsize(self) -> int:
        return itemsize(self.dtype)

    def render(self) -> str:
        return f"<storage {self.key} {self.dtype}>"


@dataclass(eq=False)
class TensorRef:
    """A tensor view over a storage, as `_rebuild_tensor_v2` would build it."""

    storage: Any
    storage_offset: Any
    size: Any
    stride: Any
    offset: int  # the REDUCE that builds it
    dtype: str | None = None  # set by _rebuild_tensor_v3 / meta tensors; else the storage's
    requires_grad: Any = False
    parameter: bool = False
    note: dict[str, Any] = field(default_factory=dict)

    @property
    def element_dtype(self) -> str:
        if self.dtype:
            return self.dtype
        return self.storage.dtype if isinstance(self.storage, StorageRef) else "?"

    def render(self) -> str:
        return f"tensor({self.element_dtype} {render(self.size, 1)})"


def storage_dtype(stype: Any) -> tuple[str | None, str]:
    """(dtype, class name) for the storage-type element of a persistent id."""
    if isinstance(stype, Global) and not stype.computed:
        return STORAGE_DTYPES.get(stype.name), stype.name
    if isinstance(stype, str):  # some writers store the name as a string
        name = stype.rsplit(".", 1)[-1]
        return STORAGE_DTYPES.get(name), name
    return None, render(stype, 1)


def dtype_of(value: Any) -> str | None:
    if isinstance(value, Global) and value.module == "torch":
        return TORCH_DTYPES.get(value.name)
    return None


class StorageTable:
    """Persistent ids resolved to StorageRefs, one per (key, dtype), in first-seen order."""

    def __init__(self, legacy: bool) -> None:
        self.legacy = legacy
        self.refs: dict[tuple[str, str], StorageRef] = {}
        self.first: dict[str, StorageRef] = {}  # key -> first reference (its dtype sizes it)

    def load(self, machine: PickleMachine, pid: Any, offset: int) -> Any:
        rep = machine.report
        if not (isinstance(pid, tuple) and pid and pid[0] == "storage"):
            kind = pid[0] if isinstance(pid, tuple) and pid else render(pid, 1)
            machine.once(f"persistent_id_{'other' if kind != 'module' else 'module'}",
                         f"Persistent id {render(pid, 2)} at byte {offset} is not a storage; "
                         + ("it holds the source code of a saved module class, which torch.load "
                            "compares but does not run." if kind == "module"
                            else "torch.load fails on it."), offset, 1)
            return Unknown("persistent id")
        need = 6 if self.legacy else 5
        if len(pid) < need:
            rep.error("bad_persistent_id", f"The storage id {render(pid, 2)} at byte {offset} has "
                      f"{len(pid)} fields; torch writes {need}.", offset, 1)
            return Unknown("persistent id")
        _, stype, key, location, numel = pid[:5]
        dtype, type_name = storage_dtype(stype)
        if dtype is None:
            rep.error("unknown_storage_type", f"The storage id at byte {offset} names the storage "
                      f"type {type_name!r}, which torch does not define.", offset, 1)
            dtype = "U8"
        if isinstance(key, int) and not isinstance(key, bool):
            key = str(key)
        if not isinstance(key, str):
            rep.error("bad_persistent_id", f"The storage id at byte {offset} has key "
                      f"{render(key, 1)}; torch writes a string.", offset, 1)
            key = render(key, 1)
        if not _is_count(numel):
            rep.error("bad_persistent_id", f"The storage id at byte {offset} gives "
                      f"{render(numel, 1)} elements; torch writes a non-negative int64.", offset, 1)
            numel = None
        ref = self.refs.get((key, dtype))
        if ref is None:
            ref = StorageRef(key, dtype, numel, location, offset, type_name)
            self.refs[(key, dtype)] = ref
            self.first.setdefault(key, ref)
        if self.legacy and pid[5] is not None:
            return self._legacy_view(rep, ref, pid[5], offset)
        return ref

    def _legacy_view(self, rep, ref: StorageRef, view: Any, offset: int) -> Any:
        """Pre-1.0 files could name a slice of a storage: (view_key, offset, size)."""
        if not (isinstance(view, tuple) and len(view) == 3 and all(_is_count(v) for v in view[1:])):
            rep.error("bad_persistent_id", f"The storage view {render(view, 2)} at byte {offset} "
                      "is not (key, offset, size).", offset, 1)
            return ref
        return StorageRef(ref.key, ref.dtype, ref.numel, ref.location, offset, ref.type_name,
                          elem_base=view[1], view_numel=view[2])


def _is_count(v: Any) -> bool:
    """A non-negative int64, as torch stores element counts and offsets."""
    return isinstance(v, int) and not isinstance(v, bool) and 0 <= v < 1 << 63


# -- reconstructors ------------------------------------------------------------------------

def _v2(m, args, pos):
    if len(args) < 4:
        return NotImplemented
    rg = args[4] if len(args) > 4 else False
    return TensorRef(args[0], args[1], args[2], args[3], m.base + pos, None, rg)


def _v3(m, args, pos):
    if len(args) < 7:
        return NotImplemented
    t = TensorRef(args[0], args[1], args[2], args[3], m.base + pos, dtype_of(args[6]), args[4])
    if t.dtype is None:
        t.note["bad_dtype"] = render(args[6], 1)
    return t


def _v1(m, args, pos):
    if len(args) != 4:
        return NotImplemented
    return TensorRef(args[0], args[1], args[2], args[3], m.base + pos)


def _parameter(m, args, pos):
    if args and isinstance(args[0], TensorRef):
        args[0].parameter = True
        if len(args) > 1:
            args[0].requires_grad = args[1]
        return args[0]
    return NotImplemented


def _from_type_v2(m, args, pos):
    if len(args) != 4 or not isinstance(args[2], tuple):
        return NotImplemented
    inner = m.apply(args[0], args[2], pos, "REDUCE")
    if isinstance(inner, TensorRef):
        cls = render(args[1], 1)
        if cls not in ("torch.Tensor", "torch.nn.parameter.Parameter"):
            inner.note["subclass"] = cls
        elif cls == "torch.nn.parameter.Parameter":
            inner.parameter = True
    return inner


def _qtensor(m, args, pos):
    if len(args) < 5:
        return NotImplemented
    t = TensorRef(args[0], args[1], args[2], args[3], m.base + pos)
    t.note["quantized"] = render(args[4], 2)
    return t


def _meta(m, args, pos):
    if len(args) < 3:
        return NotImplemented
    t = TensorRef(None, 0, args[1], args[2], m.base + pos, dtype_of(args[0]))
    t.note["meta"] = True
    return t


def _size(m, args, pos):
    return tuple(args[0]) if len(args) == 1 and isinstance(args[0], (tuple, list)) else NotImplemented


def _device(m, args, pos):
    return ":".join(str(a) for a in args if isinstance(a, (str, int)))


def _layout(m, args, pos):
    return args[0] if len(args) == 1 and isinstance(args[0], str) else NotImplemented


def _jit_list(m, args, pos):
    """torch.jit._pickle.build_intlist(data) and its siblings: `data` itself (torch.jit.load's
    unpickler only tags the list with its element type)."""
    return args[0] if len(args) == 1 else NotImplemented


def _jit_type_tag(m, args, pos):
    """restore_type_tag(value, type_str): `value`, its static type noted by torch.jit.load."""
    return args[0] if len(args) == 2 and isinstance(args[1], str) else NotImplemented


def _jit_tensor_id(m, args, pos):
    """build_tensor_from_id(data): an index into a tensor table beside the pickle (RPC
    messages); torch/jit/_pickle.py returns the int, or None for anything else."""
    if len(args) != 1:
        return NotImplemented
    return args[0] if isinstance(args[0], int) and not isinstance(args[0], bool) else None


JIT_PICKLE = "torch.jit._pickle."
TORCH_REDUCERS = {
    **{JIT_PICKLE + n: _jit_list for n in ("build_intlist", "build_tensorlist",
                                           "build_doublelist", "build_boollist")},
    JIT_PICKLE + "restore_type_tag": _jit_type_tag,
    JIT_PICKLE + "build_tensor_from_id": _jit_tensor_id,
    "torch._utils._rebuild_tensor_v2": _v2,
    "torch._utils._rebuild_tensor_v3": _v3,
    "torch._utils._rebuild_tensor": _v1,
    "torch._utils._rebuild_parameter": _parameter,
    "torch._utils._rebuild_parameter_with_state": _parameter,
    "torch._tensor._rebuild_from_type_v2": _from_type_v2,
    "torch._utils._rebuild_qtensor": _qtensor,
    "torch._utils._rebuild_meta_tensor_no_storage": _meta,
    "torch.Size": _size,
    "torch.device": _device,
    "torch.serialization._get_layout": _layout,
}
