"""The header messages a weight file needs, decoded: dataspace (shape), datatype (dtype), data
layout (where the bytes are), filter pipeline, attributes, links and symbol tables."""

from __future__ import annotations

from dataclasses import dataclass

from .. import MAX_RANK
from .headers import Message
from .window import Fields, H5Error, Window

FILTER_NAMES = {1: "deflate (gzip)", 2: "shuffle", 3: "fletcher32", 4: "szip", 5: "nbit",
                6: "scale-offset", 307: "bzip2", 32001: "blosc", 32004: "lz4", 32008: "bitshuffle",
                32015: "zstd"}
MAX_ATTRIBUTE_VALUES = 100_000  # strings of one attribute kept (Keras's layer_names of a big model)


def _fields(msg: Message, win: Window) -> Fields:
    return Fields(msg.data, msg.at, win, f"{msg.name} message")


# -- dataspace -----------------------------------------------------------------------------------

def dataspace(data: bytes, at: int, win: Window) -> tuple[int, ...] | None:
    """The shape; () for a scalar, None for a null dataspace (no elements at all)."""
    f = Fields(data, at, win, "dataspace message")
    version, rank, _flags = f.u8(), f.u8(), f.u8()
    if version == 1:
        f.skip(5)
        kind = 1 if rank else 0
    elif version == 2:
        kind = f.u8()
    else:
        raise H5Error("h5_unsupported", f"Dataspace message version {version}; HDF5 defines 1 and 2.", at, 1)
    if rank > MAX_RANK:
        raise H5Error("h5_bad_structure", f"The dataspace has {rank} dimensions; no real tensor has "
                      f"more than {MAX_RANK}.", at + 1, 1)
    if kind == 2:
        return None
    return tuple(f.length() for _ in range(rank if kind == 1 else 0))


# -- datatype ------------------------------------------------------------------------------------

@dataclass(frozen=True)
class Datatype:
    cls: int  # 0 integer, 1 float, 3 string, 8 enum, 9 variable-length...
    size: int
    dtype: str | None  # the safetensors-style name when it is a numeric type this tool decodes
    byteorder: str = "<"
    words: str = ""  # how a person names it when `dtype` is None
    vlen_string: bool = False


CLASS_NAMES = {0: "integer", 1: "floating point", 2: "time", 3: "string", 4: "bitfield", 5: "opaque",
               6: "compound", 7: "reference", 8: "enum", 9: "variable-length", 10: "array"}
_FLOATS = {(2, 5, 10): "F16", (2, 8, 7): "BF16", (4, 8, 23): "F32", (8, 11, 52): "F64",
           (1, 4, 3): "F8_E4M3", (1, 5, 2): "F8_E5M2"}


def datatype(data: bytes, at: int, win: Window, depth: int = 0) -> Datatype:
    f = Fields(data, at, win, "datatype message")
    first = f.u8()
    cls, bits = first & 0x0F, f.take(3)
    size = f.u32()
    order = ">" if bits[0] & 1 else "<"
    if cls == 0:
        signed = bool(bits[0] & 0x08)
        name = {1: "8", 2: "16", 4: "32", 8: "64"}.get(size)
        return Datatype(0, size, (("I" if signed else "U") + name) if name else None, order,
                        f"{'signed' if signed else 'unsigned'} {size * 8}-bit integer")
    if cls == 1:
        f.skip(4)  # bit offset, precision
        _exp_at, exp_bits, _mant_at, mant_bits = f.u8(), f.u8(), f.u8(), f.u8()
        name = _FLOATS.get((size, exp_bits, mant_bits))
        return Datatype(1, size, name, order, f"{size * 8}-bit float ({exp_bits} exponent and "
                        f"{mant_bits} mantissa bits)")
    if cls == 8 and depth < 2:  # numpy bool is an enum of int8 {FALSE: 0, TRUE: 1} in h5py
        base = datatype(data[8:], at + 8, win, depth + 1)
        members = bits[0] | bits[1] << 8
        if base.cls == 0 and size == 1 and members == 2 and b"FALSE" in data and b"TRUE" in data:
            return Datatype(8, 1, "BOOL", "<", "boolean (enum of FALSE and TRUE)")
        return Datatype(8, size, None, order, f"enum of {members} {base.words} values")
    if cls == 9:
        return Datatype(9, size, None, order, "variable-length string" if bits[0] & 0x0F == 1 else
                        "variable-length sequence", vlen_string=bits[0] & 0x0F == 1)
    return Datatype(cls, size, None, order, CLASS_NAMES.get(cls, f"class {cls}"))


# -- data layout ---------------------------------------------------------------------------------

@dataclass
class Layout:
    kind: str  # "contiguous", "compact", "chunked", "virtual"
    address: int = -1  # contiguous: the data's file address; chunked: the chunk index's
    size: int | None = None  # contiguous: bytes stored (None when the message does not say)
    compact_at: int = 0  # compact: absolute offset of the data inside the header
    compact_size: int = 0
    chunk: tuple[int, ...] = ()


def layout(msg: Message, win: Window) -> Layout:
    f = _fields(msg, win)
    version = f.u8()
    if version in (1, 2):
        rank, cls = f.u8(), f.u8()
        f.skip(5)
        address = f.addr() if cls != 0 else -1
        dims = tuple(f.u32() for _ in range(rank))
        if cls == 0:
            size = f.u32()
            return Layout("compact", compact_at=f.here, compact_size=size)
        return Layout("contiguous" if cls == 1 else "chunked", address, None, chunk=dims)
    if version in (3, 4, 5):
        cls = f.u8()
        if cls == 0:
            size = f.u16()
            return Layout("compact", compact_at=f.here, compact_size=size)
        if cls == 1:
            return Layout("contiguous", f.addr(), f.length())
        if cls == 2:
            if version == 3:
                rank = f.u8()
                address = f.addr()
                return Layout("chunked", address, chunk=tuple(f.u32() for _ in range(rank)))
            return Layout("chunked")
        if cls == 3:
            return Layout("virtual")
    raise H5Error("h5_unsupported", f"Data layout message version {version}; this reader takes 1 to 5.", msg.at, 1)


def filters(msg: Message, win: Window) -> list[str]:
    """The filters' names, in pipeline order (deflate, shuffle, ...)."""
    f = _fields(msg, win)
    version, count = f.u8(), f.u8()
    if version == 1:
        f.skip(6)
    names = []
    for _ in range(min(count, 32)):
        fid = f.u16()
        name_len = f.u16() if version == 1 or fid >= 256 else 0
        f.skip(2)  # flags
        values = f.u16()
        if name_len:
            f.skip(-(-name_len // 8) * 8 if version == 1 else name_len)
        f.skip(4 * values + (4 if version == 1 and values % 2 else 0))
        names.append(FILTER_NAMES.get(fid, f"filter {fid}"))
    return names


# -- attributes ----------------------------------------------------------------------------------

@dataclass
class Attribute:
    name: str
    value: object  # a str, a list of str, a number, a list of numbers, or None when not decoded
    at: int
    length: int
    words: str = ""  # why `value` is None


def attribute(msg: Message, win: Window) -> Attribute:
    f = _fields(msg, win)
    version = f.u8()
    if version not in (1, 2, 3):
        raise H5Error("h5_unsupported", f"Attribute message version {version}; HDF5 defines 1 to 3.", msg.at, 1)
    flags = f.u8()
    name_size, type_size, space_size = f.u16(), f.u16(), f.u16()
    if version == 3:
        f.skip(1)  # name encoding
    pad = (lambda n: -(-n // 8) * 8) if version == 1 else (lambda n: n)
    name = f.take(pad(name_size))[:name_size].split(b"\0", 1)[0].decode("utf-8", "replace")
    type_at = f.here
    type_bytes = f.take(pad(type_size))
    space_at = f.here
    space_bytes = f.take(pad(space_size))
    attr = Attribute(name, None, msg.at, len(msg.data))
    if flags & 0x03:
        attr.words = "its datatype or dataspace is shared (stored elsewhere)"
        return attr
    dt = datatype(type_bytes, type_at, win)
    shape = dataspace(space_bytes, space_at, win)
    count = 1
    for d in shape or ():
        count *= d
    raw = f.data[f.pos:]
    if shape is None or dt.size * count > len(raw):
        attr.words = "its value is empty" if shape is None else "its value is cut short"
        return attr
    try:
        attr.value = (_vlen_strings(raw, count, shape, win) if dt.vlen_string else
                      _attribute_value(dt, shape, count, raw))
    except H5Error as e:
        attr.words = f"its strings cannot be read from the global heap: {e.message}"
        return attr
    if attr.value is None:
        attr.words = f"its values are {dt.words}"
    return attr


def _attribute_value(dt: Datatype, shape: tuple[int, ...], count: int, raw: bytes):
    items: list[str] | list[int] | list[float]
    if dt.cls == 3:
        items = [raw[i * dt.size:(i + 1) * dt.size].split(b"\0", 1)[0].decode("utf-8", "replace")
                 for i in range(min(count, MAX_ATTRIBUTE_VALUES))]
    elif dt.dtype in ("I8", "U8", "I16", "U16", "I32", "U32", "I64", "U64"):
        signed = dt.dtype[0] == "I"
        items = [int.from_bytes(raw[i * dt.size:(i + 1) * dt.size], "big" if dt.byteorder == ">" else "little",
                                signed=signed) for i in range(min(count, MAX_ATTRIBUTE_VALUES))]
    elif dt.dtype in ("F32", "F64"):
        import struct

        fmt = (">" if dt.byteorder == ">" else "<") + ("f" if dt.size == 4 else "d")
        items = [struct.unpack_from(fmt, raw, i * dt.size)[0] for i in range(min(count, MAX_ATTRIBUTE_VALUES))]
    else:
        return None
    return items[0] if shape == () and items else items


MAX_HEAP_COLLECTION = 1024 * 1024  # h5py's global heap collections are 4 KiB


def _vlen_strings(raw: bytes, count: int, shape: tuple[int, ...], win: Window):
    """Variable-length strings (h5py's str and bytes attributes): each a length and a global heap
    id (collection address, object index); the text is the object's bytes in that collection."""
    o = win.offset_size
    width = 4 + o + 4
    collections: dict[int, dict[int, bytes]] = {}
    items = []
    for i in range(min(count, MAX_ATTRIBUTE_VALUES, len(raw) // width)):
        length = int.from_bytes(raw[i * width:i * width + 4], "little")
        addr = int.from_bytes(raw[i * width + 4:i * width + 4 + o], "little")
        index = int.from_bytes(raw[i * width + 4 + o:(i + 1) * width], "little")
        objects = collections.get(addr)
        if objects is None:
            if len(collections) >= 64:
                break
            objects = collections[addr] = _global_heap(addr, win)
        items.append(objects.get(index, b"")[:length].decode("utf-8", "replace"))
    return items[0] if shape == () and items else items


def _global_heap(addr: int, win: Window) -> dict[int, bytes]:
    head = Fields(win.read(addr, 8 + win.length_size, "global heap collection"), win.absolute(addr), win,
                  "global heap collection")
    if head.take(4) != b"GCOL":
        raise H5Error("h5_bad_structure", f"No global heap collection (GCOL) at address {addr}.",
                      win.absolute(addr), 4)
    head.skip(4)
    size = head.length()
    if size > MAX_HEAP_COLLECTION:
        raise H5Error("h5_too_large", f"The global heap collection at address {addr} claims {size} bytes.",
                      win.absolute(addr), 0)
    f = Fields(win.read(addr, size, "global heap collection"), win.absolute(addr), win, "global heap collection")
    f.skip(8 + win.length_size)
    objects: dict[int, bytes] = {}
    while f.left() >= 8 + win.length_size:
        index = f.u16()
        f.skip(6)
        n = f.length()
        if index == 0 or n > f.left():
            break  # index 0 is the free space at the end
        objects[index] = f.take(n)
        f.align(8)
    return objects


# -- links and groups ----------------------------------------------------------------------------

@dataclass
class Link:
    name: str
    address: int | None  # a hard link's object header; None for soft and external links
    kind: str = "hard"
    target: str = ""  # a soft link's path


def link(msg: Message, win: Window) -> Link:
    f = _fields(msg, win)
    version, flags = f.u8(), f.u8()
    if version != 1:
        raise H5Error("h5_unsupported", f"Link message version {version}; HDF5 defines 1.", msg.at, 1)
    ltype = f.u8() if flags & 0x08 else 0
    if flags & 0x04:
        f.skip(8)
    if flags & 0x10:
        f.skip(1)
    name_len = f.uint(1 << (flags & 0x03))
    name = f.take(name_len).decode("utf-8", "replace")
    if ltype == 0:
        return Link(name, f.addr())
    if ltype == 1:
        return Link(name, None, "soft", f.take(f.u16()).decode("utf-8", "replace"))
    return Link(name, None, "external" if ltype == 64 else f"type {ltype}")


@dataclass
class LinkInfo:
    heap: int  # the fractal heap of a dense group's links; -1 when the group is compact
    name_index: int


def link_info(msg: Message, win: Window) -> LinkInfo:
    f = _fields(msg, win)
    f.u8()
    flags = f.u8()
    if flags & 0x01:
        f.skip(8)
    return LinkInfo(f.addr(), f.addr())


def symbol_table(msg: Message, win: Window) -> tuple[int, int]:
    """(v1 B-tree address, local heap address) of an old-style group."""
    f = _fields(msg, win)
    return f.addr(), f.addr()
