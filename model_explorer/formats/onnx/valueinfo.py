"""A graph input or output (ValueInfoProto) read for the overview: name, element type and shape.

    ValueInfoProto: name(1) type(2)      TypeProto: tensor_type(1)
    TypeProto.Tensor: elem_type(1) shape(2)      TensorShapeProto: dim(1)*
    Dimension: dim_value(1) | dim_param(2)   (a symbolic size such as "batch")
"""

from __future__ import annotations

from .schema import DATA_TYPES
from .wire import LEN, VARINT, signed64, text

MAX_DIMS = 16
MAX_VALUES = 64  # inputs or outputs kept per graph


def value_info(walk, f) -> dict:
    """{"name", "dtype", "shape" (ints and names; None: no shape recorded), "offset", "length"}
    of one ValueInfoProto field `f`, read through `walk.each` (bounded, broken fields are
    findings there)."""
    out: dict = {"name": "", "dtype": None, "shape": None, "offset": f.tag_at, "length": f.end - f.tag_at}
    data = walk.data
    for g in walk.each(f.at, f.end, "a graph input or output"):
        if g.number == 1 and g.wire == LEN:
            out["name"] = text(data, g, 1024)
        elif g.number == 2 and g.wire == LEN:
            for t in walk.each(g.at, g.end, "a value's type"):
                if t.number == 1 and t.wire == LEN:  # tensor_type
                    _tensor_type(walk, t, out)
    return out


def _tensor_type(walk, t, out: dict) -> None:
    for e in walk.each(t.at, t.end, "a tensor type"):
        if e.number == 1 and e.wire == VARINT:
            dt = DATA_TYPES.get(e.value)
            out["dtype"] = dt.dtype if dt else f"type {e.value}"
        elif e.number == 2 and e.wire == LEN:
            dims: list = []
            for d in walk.each(e.at, e.end, "a tensor shape"):
                if d.number == 1 and d.wire == LEN and len(dims) < MAX_DIMS:
                    dims.append(_dim(walk, d))
            out["shape"] = dims


def _dim(walk, d):
    for x in walk.each(d.at, d.end, "a dimension"):
        if x.number == 1 and x.wire == VARINT:
            return signed64(x.value)
        if x.number == 2 and x.wire == LEN:
            return text(walk.data, x, 64) or "?"
    return "?"
