"""Pages of bytes with the spans that colour them, and sentences that explain each span.

A page answer is small JSON plus the raw bytes as a binary buffer, so the browser never
holds more than the rows on screen (a 20 GB file scrolls like a 20 KB one).
"""

from __future__ import annotations

import os

from ..formats.kind_words import KIND_WORDS
from ..hexview import END_KIND, SpanIndex
from ..spans import Span

PAGE = 4096
MAX_PAGE = 64 * 1024


def span_json(s: Span, index: int | None = None, file: bool = True) -> dict:
    """A span for the browser; `file=False` inside a page, which names its file once."""
    d = {"offset": s.offset, "length": s.length, "kind": s.kind, "path": s.path,
         "value": s.value, "tensor": s.tensor}
    if file:
        d["file"] = s.file
    if index is not None:
        d["index"] = index
    return d


def page(fs: SpanIndex, data: bytes, file: str, offset: int) -> dict:
    """JSON half of a page answer: the innermost segments and the spans they point to."""
    segs = fs.segments(offset, offset + len(data))
    local: dict[int, int] = {}
    spans = []
    out = []
    for a, b, i in segs:
        if i not in local:
            local[i] = len(spans)
            spans.append(span_json(fs.spans[i], i, file=False))
        out.append([a, b, local[i]])
    return {"file": file, "offset": offset, "length": len(data), "segs": out, "spans": spans}


_OPCODES = {
    "PROTO": "the protocol version this pickle uses",
    "FRAME": "the length of the next frame of opcodes (protocol 4+), for buffered reading",
    "GLOBAL": "import a Python object by module and name; loading this pickle would import it",
    "STACK_GLOBAL": "import a Python object named by the two strings on the stack; loading would import it",
    "REDUCE": "call the callable on the stack with the argument tuple: this is how a pickle runs code",
    "BUILD": "set the state of the object on the stack (calls __setstate__ when loading)",
    "NEWOBJ": "create an object by calling cls.__new__ with arguments",
    "INST": "create an instance of a class named in the opcode (protocol 0)",
    "OBJ": "create an instance of the class on the stack",
    "BINPERSID": "a persistent id: PyTorch's reference to a tensor storage kept outside the pickle",
    "PERSID": "a persistent id (protocol 0): a reference to data kept outside the pickle",
    "MARK": "push a mark, the start of a tuple, list or dict being built",
    "STOP": "the end of the pickle: the object on the stack is the result",
    "EMPTY_DICT": "push an empty dict", "EMPTY_LIST": "push an empty list",
    "EMPTY_TUPLE": "push an empty tuple", "SETITEMS": "add the key/value pairs since the mark to the dict",
    "SETITEM": "add one key/value pair to the dict", "APPENDS": "add the items since the mark to the list",
    "APPEND": "add one item to the list", "MEMOIZE": "remember the top of the stack in the memo",
    "NEWTRUE": "push True", "NEWFALSE": "push False", "NONE": "push None",
}
_OPCODE_PREFIXES = (
    ("BINPUT", "remember the top of the stack in the memo"), ("LONG_BINPUT", "remember the top of the stack in the memo"),
    ("BINGET", "push a value remembered in the memo"), ("LONG_BINGET", "push a value remembered in the memo"),
    ("TUPLE", "build a tuple from the items on the stack"), ("BININT", "push an integer"),
    ("BINFLOAT", "push a float"), ("LONG", "push a long integer"),
    ("SHORT_BINUNICODE", "push a string"), ("BINUNICODE", "push a string"), ("UNICODE", "push a string"),
    ("SHORT_BINBYTES", "push bytes"), ("BINBYTES", "push bytes"), ("BINSTRING", "push a byte string"),
    ("SHORT_BINSTRING", "push a byte string"),
)


def _owner(path: str) -> str:
    """The field a path names: `KV 3 > general.name > value` -> `general.name`."""
    parts = path.split(" > ")
    return parts[-2] if len(parts) >= 2 else parts[0]


def explain(s: Span, fmt: str) -> str:
    """One sentence for a newcomer: what this field is, its value, and why it is there."""
    v = f" ({s.value})" if s.value else ""
    n = f"{s.length} byte{'s' if s.length != 1 else ''}"
    k, owner = s.kind, _owner(s.path)
    if k in KIND_WORDS:  # the HDF5 and msgpack readers' kinds (formats/kind_words.py)
        return KIND_WORDS[k].format(path=s.path, value=v, size=n)
    if k == "magic":
        return (f"The magic bytes{v}: a reader checks these {n} first to know the file is "
                f"{fmt.upper() if fmt == 'gguf' else fmt}.")
    if k == "version":
        return f"The format version{v}: readers refuse versions they do not know."
    if k == "count":
        return f"The {s.path}{v}: it tells the reader how many entries follow."
    if k == "length":
        return (f"The header length{v}, an unsigned 64-bit little-endian integer: the JSON header "
                "that follows is exactly this long, and tensor data starts right after it.")
    if k == "json":
        return (f"The JSON header{v}: it maps every tensor name to its dtype, shape and "
                "data_offsets (byte positions relative to the end of the header).")
    if k == "metadata":
        return f"The __metadata__ entry{v}: free-form string key/values written by the exporter."
    if k == "kv":
        return f"One metadata entry, {s.path}: a key string, a value type code, then the value ({n})."
    if k == "tensor_info":
        return (f"The header entry that describes tensor {s.tensor or owner!r}: its dtype, shape and "
                f"where its data lies ({n}).")
    if k == "key":
        where = "tensor" if s.tensor else "metadata entry"
        return f"The name of the {where} {owner!r}{v}: a length-prefixed string in the header."
    if k == "type":
        return f"The type code of {owner!r}{v}: it tells the reader how to decode what follows."
    if k == "dims":
        return f"The dimensions of tensor {owner!r}{v}: a count, then one u64 per dimension."
    if k == "offset":
        return f"Where the data of tensor {owner!r} starts{v}, counted from the start of the data section."
    if k == "value":
        return f"The value of {owner!r}{v}: {n} decoded according to the type before it."
    if k == "padding":
        return f"Padding{v}: bytes that carry no data, so that what follows starts aligned."
    if k == "tensor_data":
        return (f"The raw data of tensor {s.tensor or owner!r}{v}: {n}, located by the header's "
                "offsets; the bytes are the tensor's elements in row-major order.")
    if k == "gap":
        return f"{s.path.capitalize()}{v}: {n} that no tensor claims; strict readers reject them."
    if k == END_KIND:
        return (f"The end of the file{v}: the header describes data past this byte, so the file "
                "was cut short (a download or copy that stopped). Tensors that end before it can "
                "be read; the others cannot. Download or copy the file again.")
    if k == "opcode":
        name = s.path.rsplit(" > ", 1)[-1]
        what = _OPCODES.get(name) or next((t for p, t in _OPCODE_PREFIXES if name.startswith(p)), None)
        return (f"Pickle opcode {name}{v}: {what or 'one instruction of the pickle program'}. "
                "This tool reads the opcodes and never runs them.")
    if k == "zip_header":
        return (f"A zip local file header{v}: the signature PK\\x03\\x04, then the name and sizes "
                "of one archive member; PyTorch stores its pickle and each tensor storage as members.")
    if k == "zip_directory":
        return f"The zip central directory{v}: the list of members and where each one starts."
    if k == "zip_end":
        return f"The end-of-directory record{v}: readers start here to find the central directory."
    if k == "storage":
        return (f"A tensor storage{v}: raw bytes that one or more tensors view, referenced from the "
                "pickle by a persistent id.")
    return f"{s.path}{v}: {n} of kind {k!r}{' in ' + os.path.basename(s.file) if s.file else ''}."
