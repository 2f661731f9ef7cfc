"""Place each tensor a pickle describes at its bytes in the file, and check that they fit.

Torch tensors are views (shape, stride, storage offset) over storages located by the reader
(a zip record, a legacy storage, or a torch file embedded in a plain pickle by
`torch.storage._load_from_bytes`); numpy arrays point at the raw bytes of a BINBYTES /
BYTEARRAY8 argument. Shared storages are recognised and listed on each tensor.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any

from ...records import TensorInfo
from ...spans import Report
from .. import MAX_RANK
from ..result import FileResult
from .numpy_refs import NumpyArray, array_layout
from .numpy_refs import locate as locate_array
from .torch_refs import StorageRef, TensorRef, itemsize
from .values import Blob, Call, Global, PickleRun, Unknown, render

EMBEDDED_FUNC = "torch.storage._load_from_bytes"
MAX_SHARED_LISTED = 50


class BytesSource:
    """Bytes in memory as a source (an inflated record, an embedded file decoded from text)."""

    def __init__(self, data: bytes) -> None:
        self.data, self.size, self.name, self.bytes_read = data, len(data), "<inflated>", 0

    def read(self, offset: int, n: int) -> bytes:
        return self.data[max(0, offset):max(0, offset + n)]


def place_tensors(named: list[tuple[str, Any]], locate, source, rep: Report, byteorder: str,
                  storage_label: str, quiet_missing: bool = False,
                  byte_offsets: dict | None = None, runs: Sequence[PickleRun] = (),
                  read_embedded: Callable[[Any], FileResult | None] | None = None,
                  cut: frozenset[str] = frozenset()) -> dict[str, TensorInfo]:
    """name -> TensorInfo for every (name, TensorRef | StorageRef | NumpyArray) of the walk.

    `locate(key)` gives a storage's (start, bytes available) or None; `read_embedded(source)`
    reads a torch file embedded in the pickle (or returns None when it is not one). Storages
    in `cut` end past the end of a file cut short, which one finding reports for the file:
    their tensors get no finding of their own.
    """
    infos: dict[str, TensorInfo] = {}
    by_storage: dict[str, list[str]] = {}
    missing_reported: set[str] = set(cut)  # reported already, as the file's truncation
    not_raw: list[NumpyArray] = []
    embedded = _EmbeddedStorages(source, rep, byte_offsets or {}, read_embedded)
    for run in runs:  # every embedded torch file is read, used as a storage or not
        for call in run.watched:
            embedded.resolve(call)

    def find(key: str):  # storages of embedded torch files first
        return embedded.locations.get(key) or locate(key)

    for name, ref in named:
        if isinstance(ref, TensorRef) and embedded.is_embedded(ref.storage):
            ref.storage = embedded.resolve(ref.storage)
        if isinstance(ref, NumpyArray):
            infos[name] = _array_info(name, ref, source, rep, byte_offsets or {})
            if not infos[name].length and infos[name].numel:
                not_raw.append(ref)
            continue
        info = _tensor_info(name, ref, find, source, rep, byteorder, missing_reported,
                            quiet_missing, storage_label, cut)
        infos[name] = info
        if info.storage is not None:
            by_storage.setdefault(info.storage, []).append(name)
    unplaced = [n for n, i in infos.items() if (i.storage or "").startswith("embedded@")
                and "storage_start" not in i.extra]
    if unplaced:
        rep.info("tensor_not_raw", f"{len(unplaced)} tensors keep their storage in an embedded "
                 "torch file pickled as latin-1 text (pickle protocol 2), not as raw bytes, so their "
                 f"values have no byte range in the file (first: {unplaced[0]!r}).",
                 None, None, unplaced[0])
    if not_raw:
        rep.info("array_not_raw", f"{len(not_raw)} numpy arrays are pickled as latin-1 text "
                 "(pickle protocol 2), not as raw bytes, so their values have no byte range in the "
                 "file.", not_raw[0].offset_in_pickle, 1)
    for names in by_storage.values():
        if len(names) > 1:
            for n in names:
                infos[n].extra["shared_with"] = [x for x in names if x != n][:MAX_SHARED_LISTED]
    for info in infos.values():
        if info.length and info.extra.get("storage_start") is not None and \
                info.offset < source.size:  # a tensor a file cut short lost has no bytes here
            rep.span(info.offset, max(0, min(info.end, source.size) - info.offset), "tensor_data",
                     f"data > {info.name}", f"{info.dtype} {list(info.shape)}", tensor=info.name)
    return infos


def _array_info(name: str, arr: NumpyArray, source, rep: Report,
                byte_offsets: dict) -> TensorInfo:
    dtype, order, shape, stride = array_layout(arr)  # type: ignore[misc]  # the caller checked it is not None
    info = TensorInfo(name, dtype, shape, source.name, 0, 0, order, stride,
                      extra={"numpy": True, "fortran_order": bool(arr.fortran)})
    where = locate_array(arr, byte_offsets)
    need = math.prod(shape) * itemsize(dtype) if shape else itemsize(dtype)
    if where is None:
        return info
    offset, length = where
    info.offset, info.length = offset, length
    info.extra.update(storage_start=offset, storage_nbytes=length)
    if length != need:
        rep.error("array_size_mismatch", f"Array {name!r} is {dtype} {list(shape)}, which needs "
                  f"{need} bytes, but its data holds {length}.", offset, length, name)
        info.length = min(length, need)
    return info


class _SubSource:
    """Bytes [base, base + size) of another source, seen as a file of their own."""

    def __init__(self, source, base: int, size: int) -> None:
        self.source, self.base, self.size, self.name = source, base, size, source.name
        self.bytes_read = 0

    def read(self, offset: int, n: int) -> bytes:
        if offset >= self.size or n <= 0:
            return b""
        return self.source.read(self.base + offset, min(n, self.size - offset))


class _EmbeddedStorages:
    """`torch.storage._load_from_bytes(b)`: each storage is a legacy torch file inside the pickle.

    The embedded file is read like any other (so its imports are judged too); its findings
    and spans are shifted to absolute offsets when its bytes lie raw in this file.
    """

    MAX_FILES = 100_000

    def __init__(self, source, rep: Report, byte_offsets: dict, read_embedded) -> None:
        self.source, self.rep, self.byte_offsets = source, rep, byte_offsets
        self.read_embedded = read_embedded
        self.locations: dict[str, tuple[int, int]] = {}
        self.done: dict[int, Any] = {}

    def is_embedded(self, storage: Any) -> bool:
        return (isinstance(storage, Call) and isinstance(storage.func, Global)
                and storage.func.dotted == EMBEDDED_FUNC)

    def resolve(self, call: Call) -> Any:
        if id(call) in self.done:
            return self.done[id(call)]
        out = self.done[id(call)] = self._resolve(call)
        return out

    def _resolve(self, call: Call) -> Any:
        args = call.args
        if not (isinstance(args, tuple) and len(args) == 1 and call.kwargs is None):
            self.rep.error("bad_embedded_storage", f"{EMBEDDED_FUNC} is called at byte "
                           f"{call.offset} with {render(args, 2)}; torch passes it one bytes "
                           "object, and fails on anything else.", call.offset, 1)
            return Unknown("embedded storage")
        data = args[0]
        base = None
        sub: _SubSource | BytesSource
        if isinstance(data, Blob):
            base, sub = data.offset, _SubSource(self.source, data.offset, data.length)
        elif isinstance(data, (bytes, bytearray)):
            hit = self.byte_offsets.get(id(data))
            if hit is not None and hit[0] is data:
                base, sub = hit[1], _SubSource(self.source, hit[1], len(data))
            else:  # protocol 2: latin-1 text decoded in memory; no file offsets
                sub = BytesSource(bytes(data))
                sub.name = self.source.name
        else:
            self.rep.error("bad_embedded_storage", f"{EMBEDDED_FUNC} is called at byte "
                           f"{call.offset} with {render(data, 2)}, not bytes; torch fails here.",
                           call.offset, 1)
            return Unknown("embedded storage")
        if len(self.done) > self.MAX_FILES or self.read_embedded is None:
            return Unknown("embedded storage")
        where = f"byte {base}" if base is not None else f"the argument at byte {call.offset}"
        nested = self.read_embedded(sub)
        if nested is None:
            self.rep.error("bad_embedded_storage", f"The bytes embedded at {where} are not a torch "
                           f"file (they start with {bytes(sub.read(0, 8))!r}).", call.offset, 1)
            return Unknown("embedded storage")
        self._merge(nested, base, where)
        root = nested.tensors.get("(root)")
        if root is None or not root.extra.get("bare_storage") or "storage_start" not in root.extra:
            return Unknown("embedded storage")
        key = f"embedded@{base if base is not None else call.offset}"
        ref = StorageRef(key, root.dtype, root.shape[0], "cpu", call.offset, "embedded")
        if base is not None:
            self.locations[key] = (base + root.extra["storage_start"], root.extra["storage_nbytes"])
        return ref

    def _merge(self, nested: FileResult, base: int | None, where: str) -> None:
        what = "torch file" if "zip" in nested.details or "sys_info" in nested.metadata else "pickle"
        for f in nested.report.findings:
            if f.code == "trailing_bytes":
                continue
            shifted = (f.offset + base) if (base is not None and f.offset is not None) else None
            g = getattr(self.rep, f.severity)(f.code, f"In the {what} embedded at {where}: "
                                              f"{f.message}", shifted, f.length if shifted else None,
                                              f.tensor)
            g.extra.update(f.extra)
        if base is not None:
            for sp in nested.report.spans:
                self.rep.span(sp.offset + base, sp.length, sp.kind, f"embedded@{base} > {sp.path}",
                              sp.value)


INT64 = 1 << 63


def _int_tuple(v: Any) -> tuple[int, ...] | None:
    """Sizes and strides as torch holds them: at most MAX_RANK int64 values."""
    if isinstance(v, (tuple, list)) and len(v) <= MAX_RANK and all(
            isinstance(d, int) and not isinstance(d, bool) and -INT64 <= d < INT64 for d in v):
        return tuple(v)
    return None


def _tensor_info(name: str, ref: Any, locate, source, rep: Report, byteorder: str,
                 missing_reported: set, quiet_missing: bool, storage_label: str,
                 cut: frozenset[str] = frozenset()) -> TensorInfo:
    file = source.name
    extra: dict[str, Any] = {}
    shape: tuple[int, ...] | None
    stride: tuple[int, ...] | None
    if isinstance(ref, StorageRef):  # a bare storage: list it as a flat tensor of its dtype
        storage, dtype = ref, ref.dtype
        n = ref.numel if isinstance(ref.numel, int) and ref.numel >= 0 else 0
        shape, stride, soff = (n,), (1,), 0
        extra["bare_storage"] = True
    else:
        storage, dtype = ref.storage, ref.element_dtype
        shape, stride, soff = _int_tuple(ref.size), _int_tuple(ref.stride), ref.storage_offset
        extra["requires_grad"] = ref.requires_grad is True
        if ref.parameter:
            extra["parameter"] = True
        extra.update({k: v for k, v in ref.note.items() if k != "bad_dtype"})
        if "bad_dtype" in ref.note:
            rep.error("bad_tensor_dtype", f"Tensor {name!r} names the dtype {ref.note['bad_dtype']}, "
                      "which torch does not define.", ref.offset, 1, name)
            dtype = "U8"
        if shape is None or stride is None or len(shape) != len(stride) or any(
                d < 0 for d in shape) or any(s < 0 for s in stride):
            rep.error("bad_tensor_shape", f"Tensor {name!r} has size {render(ref.size, 1)} and "
                      f"stride {render(ref.stride, 1)}; expected two lists of as many non-negative "
                      f"integers, at most {MAX_RANK}.", ref.offset, 1, name)
            shape, stride = (), ()
        if not isinstance(soff, int) or isinstance(soff, bool) or not 0 <= soff < INT64:
            rep.error("bad_storage_offset", f"Tensor {name!r} has storage offset {render(soff, 1)}; "
                      "expected a non-negative integer.", ref.offset, 1, name)
            soff = 0
    info = TensorInfo(name, dtype, shape, file, 0, 0, byteorder, stride, None, soff, extra=extra)
    if not isinstance(storage, StorageRef):
        if ref.note.get("meta"):
            return info
        if not quiet_missing:
            rep.error("tensor_without_storage", f"Tensor {name!r} is built from "
                      f"{render(storage, 2)}, not from a storage record.", ref.offset, 1, name)
        return info
    size = itemsize(dtype)
    soff += storage.elem_base  # legacy storage views
    info.storage, info.storage_offset = storage.key, soff
    extra["location"] = storage.location if isinstance(storage.location, str) else None
    if storage.dtype != dtype:
        extra["storage_dtype"] = storage.dtype
    declared = storage.numel * storage.itemsize if isinstance(storage.numel, int) else None
    loc = locate(storage.key)
    if loc is None:
        if storage.key not in missing_reported and not quiet_missing:
            missing_reported.add(storage.key)
            rep.error("missing_storage", f"Tensor {name!r} uses storage {storage.key!r}, but the file "
                      f"has no {storage_label}{storage.key} record: its bytes are missing.",
                      storage.offset, 1, name)
        return info
    if loc[0] == "compressed":
        extra["compressed"] = True
        return info
    start, avail = loc
    extra["storage_start"] = start
    extra["storage_nbytes"] = min(avail, declared) if declared is not None else avail
    if declared is not None and declared > avail and storage.key not in missing_reported:
        missing_reported.add(storage.key)
        rep.error("storage_too_small", f"Storage {storage.key!r} should hold {storage.numel} "
                  f"{storage.dtype} elements ({declared} bytes), but the file has {avail} bytes "
                  "for it.", start, avail, name)
    numel = math.prod(shape) if shape else 1
    info.offset = start + soff * size
    if numel == 0:
        return info
    last = soff + sum((d - 1) * s for d, s in zip(shape, stride))
    info.length = (last - soff + 1) * size
    need = (last + 1) * size
    limit = min(avail, declared) if declared is not None else avail
    if storage.view_numel is not None:
        limit = min(limit, (storage.elem_base + storage.view_numel) * size)
    if need > limit and storage.key not in cut:
        rep.error("view_out_of_bounds", f"Tensor {name!r} ({dtype} {list(shape)}, stride "
                  f"{list(stride)}, offset {soff}) reaches byte {need} of storage "
                  f"{storage.key!r}, which has {limit} bytes: the storage is smaller than the view "
                  "needs.", start, limit, name)
    return info
