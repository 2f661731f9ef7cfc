"""One TensorProto: its name, dims, data type and where its values are, as spans and a record.

Values live in one of four places: raw_data (little-endian bytes: read in place), a packed
float_data/double_data field (also little-endian bytes in place), a packed varint field
(int32_data, int64_data, uint64_data: decoded by tensors/schemes/onnx_quant.py), or an external
file named by external_data (location, offset, length), checked in external.py.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from ...dtypes import nbytes_for
from ...spans import Report, short_repr
from .. import MAX_RANK
from .schema import DATA_TYPES, FIXED_FIELDS, TYPED_NAMES, Entry, Tensor
from .wire import LEN, VARINT, Field, Paged, WireError, fields, packed_varints, signed64, text

MAX_EXTERNAL_ENTRIES = 16  # location, offset, length, checksum, basepath: a few keys


@dataclass
class Parsed:
    """What one TensorProto says, with the byte ranges that say it."""

    at: int
    length: int
    name: str = ""
    name_at: tuple[int, int] | None = None
    dims: list[int] = field(default_factory=list)
    dims_at: tuple[int, int] | None = None
    data_type: int = 0
    type_at: tuple[int, int] | None = None
    raw: tuple[int, int] | None = None         # raw_data payload
    typed: dict[int, tuple[int, int]] = field(default_factory=dict)  # field -> packed payload
    unpacked: int = 0                          # typed values written one field each
    external: dict[str, tuple[str, int, int]] = field(default_factory=dict)  # key -> (value, at, len)
    external_at: tuple[int, int] | None = None
    location_external: bool = False
    segment: bool = False
    broken: bool = False  # the walk stopped inside it (a finding says where)

    @property
    def dtype(self):
        return DATA_TYPES.get(self.data_type)

    @property
    def numel(self) -> int:
        return math.prod(self.dims) if self.dims else 1


def parse_tensor(data: Paged, at: int, end: int, rep: Report, where: str) -> Parsed:
    """Walk the TensorProto in [at, end); a malformed one keeps what was read before the damage."""
    p = Parsed(at, end - at)
    try:
        for f in fields(data, at, end):
            _field(data, f, p, rep, where)
    except WireError as e:
        p.broken = True
        rep.error("onnx_malformed", f"In {where}: {e}", e.offset, e.length, p.name or None)
    return p


def _field(data: Paged, f: Field, p: Parsed, rep: Report, where: str) -> None:
    n = f.number
    if n == Tensor.NAME and f.wire == LEN:
        p.name, p.name_at = text(data, f), (f.tag_at, f.end - f.tag_at)
    elif n == Tensor.DIMS:
        vals = [f.value or 0] if f.wire == VARINT else packed_varints(data, f, MAX_RANK + 1) \
            if f.wire == LEN else None
        if vals is None:
            raise WireError(f"dims at byte {f.tag_at} has wire type {f.wire}; expected varints.",
                            f.tag_at, f.end - f.tag_at)
        p.dims.extend(signed64(v) for v in vals)
        if len(p.dims) > MAX_RANK:
            raise WireError(f"The tensor has more than {MAX_RANK} dims; no real tensor has.",
                            f.tag_at, f.end - f.tag_at)
        start = p.dims_at[0] if p.dims_at else f.tag_at
        p.dims_at = (start, f.end - start)
    elif n == Tensor.DATA_TYPE and f.wire == VARINT:
        p.data_type, p.type_at = signed64(f.value or 0), (f.tag_at, f.end - f.tag_at)
    elif n == Tensor.RAW_DATA and f.wire == LEN:
        p.raw = (f.at, f.length)
    elif n in TYPED_NAMES and n != Tensor.STRING_DATA:
        if f.wire == LEN:
            if n in p.typed:  # a second packed run: protobuf concatenates them; we do not
                p.unpacked += 1
            p.typed[n] = (f.at, f.length)
        else:
            p.unpacked += 1
    elif n == Tensor.STRING_DATA:
        p.typed.setdefault(n, (f.at, f.length))
    elif n == Tensor.EXTERNAL_DATA and f.wire == LEN:
        start = p.external_at[0] if p.external_at else f.tag_at
        p.external_at = (start, f.end - start)
        if len(p.external) < MAX_EXTERNAL_ENTRIES:
            key, value = _entry(data, f)
            p.external[key] = (value, f.tag_at, f.end - f.tag_at)
    elif n == Tensor.DATA_LOCATION and f.wire == VARINT:
        p.location_external = f.value == 1
    elif n == Tensor.SEGMENT:
        p.segment = True


def _entry(data: Paged, f: Field) -> tuple[str, str]:
    """A StringStringEntryProto (key, value)."""
    key = value = ""
    for g in fields(data, f.at, f.end):
        if g.wire == LEN and g.number == Entry.KEY:
            key = text(data, g, 1024)
        elif g.wire == LEN and g.number == Entry.VALUE:
            value = text(data, g, 4096)
    return key, value


def label_tensor(rep: Report, p: Parsed, name: str, path: str) -> None:
    """The spans of one TensorProto: the message, its name, dims, type and payload."""
    rep.span(p.at, p.length, "tensor_info", path, None, name)
    if p.name_at:
        rep.span(*p.name_at, "key", path + " > name", short_repr(p.name), name)
    if p.dims_at:
        rep.span(*p.dims_at, "dims", path + " > dims", short_repr(p.dims), name)
    if p.type_at:
        dt = p.dtype
        rep.span(*p.type_at, "type", path + " > data_type",
                 f"{p.data_type} = {dt.onnx if dt else 'unknown'}", name)
    if p.external_at:
        rep.span(*p.external_at, "offset", path + " > external_data",
                 ", ".join(f"{k}={v[0]}" for k, v in p.external.items()), name)


def check_tensor(p: Parsed, name: str, rep: Report) -> bool:
    """Findings for what makes a tensor unreadable; True when its layout can be trusted."""
    where = p.type_at or (p.at, p.length)
    dt = p.dtype
    if p.broken:
        return False
    if dt is None:
        rep.error("onnx_bad_dtype", f"Tensor {name!r} has data_type {p.data_type}, which ONNX "
                  f"does not define (1 to {max(DATA_TYPES)}).", *where, tensor=name)
        return False
    if any(d < 0 for d in p.dims):
        rep.error("onnx_bad_dims", f"Tensor {name!r} has dims {p.dims}: a negative size.",
                  *(p.dims_at or where), tensor=name)
        return False
    if p.numel >= 1 << 62:
        rep.error("onnx_bad_dims", f"Tensor {name!r} has dims {short_repr(p.dims)}: more than "
                  "2**62 elements, more than any file holds.", *(p.dims_at or where), tensor=name)
        return False
    if p.segment:
        rep.warning("onnx_segment", f"Tensor {name!r} is one segment of a larger tensor (the "
                    "segment field); segments are not joined here.", p.at, p.length, name)
        return False
    places = [k for k, v in (("raw_data", p.raw), ("external_data", p.external_at),
                             ("typed", p.typed)) if v]
    if len(places) > 1:
        rep.warning("onnx_data_twice", f"Tensor {name!r} holds values in "
                    f"{' and '.join(places)}; ONNX readers take only one of them.", p.at,
                    p.length, name)
    if p.unpacked:
        rep.info("onnx_unpacked_values", f"Tensor {name!r} stores its {TYPED_NAMES[dt.typed]} "
                 "values one field each (not packed) or in several runs; they are not decoded "
                 "here.", p.at, p.length, name)
    return True


def payload(p: Parsed, name: str, rep: Report) -> tuple[int, int, str | None]:
    """(offset, length, varint field name or None) of the tensor's values in this file; the
    length is checked against dims and data type."""
    dt = p.dtype
    need = nbytes_for(dt.bits, p.numel) if dt.bits else None
    if p.raw is not None:
        at, length = p.raw
        if need is not None and length != need:
            rep.error("onnx_size_mismatch", f"Tensor {name!r} is {dt.onnx} {p.dims}, which needs "
                      f"{need} bytes, but its raw_data holds {length}.", at, length, name)
        return at, length, None
    if dt.typed in p.typed:
        at, length = p.typed[dt.typed]
        width = FIXED_FIELDS.get(dt.typed)
        if width is None:
            return at, length, TYPED_NAMES[dt.typed]
        if need is not None and length != need:
            rep.error("onnx_size_mismatch", f"Tensor {name!r} is {dt.onnx} {p.dims}, which needs "
                      f"{need} bytes, but its {TYPED_NAMES[dt.typed]} holds {length} "
                      f"({length // width} values).", at, length, name)
        return at, length, None
    wrong = [TYPED_NAMES[k] for k in p.typed]
    if wrong:
        rep.error("onnx_size_mismatch", f"Tensor {name!r} is {dt.onnx}, whose values belong in "
                  f"{TYPED_NAMES.get(dt.typed, 'raw_data')}, but the tensor fills "
                  f"{', '.join(wrong)}.", p.at, p.length, name)
    elif p.numel and need and not p.unpacked:
        rep.warning("onnx_no_data", f"Tensor {name!r} is {dt.onnx} {p.dims} ({p.numel} values) "
                    "but holds no raw_data, typed values or external_data.", p.at, p.length, name)
    return p.at + p.length, 0, None

