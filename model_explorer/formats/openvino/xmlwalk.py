"""The OpenVINO IR XML walked with expat, safely and with byte positions.

A DOCTYPE, an entity declaration or an external entity reference stops the walk (the
defusedxml rules, checked here by hand: IR files have none, and they are how XML bombs and
file disclosure work); nesting deeper than any IR is refused; the file is fed in chunks, so
memory does not grow with its size. What is kept: the <net> element, each <layer> with its
<data> attributes and output port precisions, and the <edges>, each with where it is.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from xml.parsers import expat

CHUNK = 1 << 20
MAX_DEPTH = 32  # <net><layers><layer><output><port><dim> is 6; subgraph bodies nest a few more


class Refused(Exception):
    """The XML holds something this walk does not parse (a DOCTYPE, entities, deep nesting)."""

    def __init__(self, message: str, offset: int) -> None:
        super().__init__(message)
        self.offset = offset


@dataclass
class Layer:
    id: str
    name: str
    type: str
    start: int
    end: int = 0
    data: dict[str, str] = field(default_factory=dict)
    data_at: int | None = None  # where the <data .../> element starts
    out_precision: dict[str, str] = field(default_factory=dict)  # output port id -> precision


@dataclass
class Net:
    name: str = ""
    version: str = ""
    start: int = 0  # where the <net ...> start tag is
    layers: dict[str, Layer] = field(default_factory=dict)
    edges: list[tuple[str, str, str, str, int]] = field(default_factory=list)  # from, port, to, port, at
    duplicate_ids: list[tuple[str, int]] = field(default_factory=list)


def walk(source) -> Net:
    """The net of the IR XML in `source`; `Refused` or `expat.ExpatError` when it cannot be read."""
    net = Net()
    p = expat.ParserCreate()
    p.SetParamEntityParsing(expat.XML_PARAM_ENTITY_PARSING_NEVER)
    stack: list[str] = []
    # Only the <layer> directly under <net><layers>: TensorIterator/Loop bodies nest their own.
    state: dict = {"layer": None}

    def refuse(what: str):
        def handler(*_args):
            raise Refused(f"The XML declares {what}; an OpenVINO IR never does, and this reader does "
                          "not parse one (XML bombs and external entities start this way).",
                          p.CurrentByteIndex)
        return handler

    p.StartDoctypeDeclHandler = refuse("a DOCTYPE")
    p.EntityDeclHandler = refuse("an entity")
    p.UnparsedEntityDeclHandler = refuse("an unparsed entity")
    p.ExternalEntityRefHandler = refuse("an external entity reference")

    def start(tag: str, attrs: dict[str, str]) -> None:
        at = p.CurrentByteIndex
        stack.append(tag)
        depth = len(stack)
        if depth > MAX_DEPTH:
            raise Refused(f"The XML nests elements {depth} deep; an IR nests a few.", at)
        if depth == 1 and tag == "net":
            net.name, net.version, net.start = attrs.get("name", ""), attrs.get("version", ""), at
        elif depth == 3 and tag == "layer" and stack[1] == "layers":
            layer = Layer(attrs.get("id", ""), attrs.get("name", ""), attrs.get("type", ""), at)
            if layer.id in net.layers:
                net.duplicate_ids.append((layer.id, at))
            net.layers[layer.id] = layer
            state["layer"] = layer
        elif depth == 4 and tag == "data" and state["layer"] is not None:
            state["layer"].data = dict(attrs)
            state["layer"].data_at = at
        elif depth == 5 and tag == "port" and stack[3] == "output" and state["layer"] is not None:
            state["layer"].out_precision[attrs.get("id", "")] = attrs.get("precision", "")
        elif depth == 3 and tag == "edge" and stack[1] == "edges":
            net.edges.append((attrs.get("from-layer", ""), attrs.get("from-port", ""),
                              attrs.get("to-layer", ""), attrs.get("to-port", ""), at))

    def end(tag: str) -> None:
        depth = len(stack)
        stack.pop()
        if depth == 3 and tag == "layer" and state["layer"] is not None:
            state["layer"].end = p.CurrentByteIndex + len("</layer>")
            state["layer"] = None

    p.StartElementHandler = start
    p.EndElementHandler = end
    pos = 0
    while pos < source.size:
        chunk = bytes(source.read(pos, min(CHUNK, source.size - pos)))
        if not chunk:
            break
        pos += len(chunk)
        p.Parse(chunk, pos >= source.size)
    if pos < source.size or source.size == 0:
        p.Parse(b"", True)
    return net


def element_end(source, at: int, limit: int = 4096) -> int:
    """The byte after the tag that starts at `at` (expat gives where an element starts; a
    self-closing <data/> ends at its '>')."""
    head = bytes(source.read(at, min(limit, source.size - at)))
    close = head.find(b">")
    return at + (close + 1 if close >= 0 else len(head))
