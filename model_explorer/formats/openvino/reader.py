"""OpenVINO IR: openvino_model.xml (the graph) + openvino_model.bin (the constants).

Every Const layer's <data element_type shape offset size/> names a byte range of the .bin; those
are the tensors, read in place. Compressed weights (NNCF, optimum-intel) are u8/i8/u4/i4
Consts behind the decompression pattern

    Const(codes) -> Convert -> [Subtract(Convert(Const zero point))] -> Multiply(Const scale)

which is recognised from the edges and given to tensors/schemes/affine.py, so every view shows
(codes - zero) * scale, never the codes, rounded to the precision the Multiply computes in.
"""

from __future__ import annotations

import math
from xml.parsers import expat

from ... import sources
from ...records import Quant, TensorInfo
from ...spans import Report, Span, short_repr
from .. import MAX_RANK
from ..graph_cycles import on_cycles
from ..result import FileResult
from ..structure import GraphEdge, GraphStructure, GraphValue, OpRecord
from .xmlwalk import Layer, Net, Refused, element_end, walk

ELEMENT_TYPES = {"f32": ("F32", 32), "f16": ("F16", 16), "bf16": ("BF16", 16), "f64": ("F64", 64),
                 "i8": ("I8", 8), "u8": ("U8", 8), "i16": ("I16", 16), "u16": ("U16", 16),
                 "i32": ("I32", 32), "u32": ("U32", 32), "i64": ("I64", 64), "u64": ("U64", 64),
                 "boolean": ("BOOL", 8), "u4": ("U4", 4), "i4": ("I4", 4), "u1": ("U1", 1),
                 "nf4": ("NF4", 4), "f8e4m3": ("F8_E4M3", 8), "f8e5m2": ("F8_E5M2", 8),
                 "u2": ("U2", 2), "u3": ("U3", 3), "u6": ("U6", 6), "f4e2m1": ("F4", 4),
                 "f8e8m0": ("F8_E8M0", 8)}
CODES = {"U8": (8, False), "I8": (8, True), "U4": (4, False), "I4": (4, True)}
ROUNDING = {"FP16": "F16", "BF16": "BF16"}  # the Multiply's output precision
CONVERT_ROUNDING = {"f16": "F16", "bf16": "BF16"}


def bin_path(xml_path: str) -> str:
    base = xml_path[:-4] if xml_path.lower().endswith(".xml") else xml_path
    return base + ".bin"


def read_openvino(source) -> FileResult:
    rep = Report(source.name)
    result = FileResult(source.name, source.size, rep)
    try:
        net = walk(source)
    except Refused as e:
        rep.error("openvino_xml_refused", str(e), e.offset, 1)
        return result
    except expat.ExpatError as e:
        at = _line_col_offset(source, e.lineno, e.offset)
        rep.error("openvino_bad_xml", f"The IR's XML does not parse: {expat.ErrorString(e.code)} "
                  f"(line {e.lineno}, column {e.offset}).", at, 1)
        return result
    rep.span(net.start, element_end(source, net.start) - net.start, "magic", "net",
             f"name {short_repr(net.name)}, IR version {net.version}")
    result.metadata.update({"openvino.name": net.name, "openvino.ir_version": net.version})
    if net.version not in ("10", "11"):
        rep.warning("openvino_ir_version", f"IR version {net.version!r}: this reader knows versions "
                    "10 and 11; the layers are read as if it were 11.", net.start, 5)
    for layer_id, at in net.duplicate_ids:
        rep.error("openvino_duplicate_layer", f"Two layers have id {layer_id!r}; edges to it are "
                  "ambiguous, the second is used.", at, 6)
    _graph_spans(net, source, rep)
    result.structure = _structure(net, source.name)
    _cycles(result.structure, rep)
    consts = [layer for layer in net.layers.values() if layer.type == "Const"]
    result.details.update(layers=len(net.layers), consts=len(consts), edges=len(net.edges))
    bin_src = _open_bin(source, rep) if consts else None
    if bin_src is None:
        return result
    result.companions.append(bin_src)
    infos: dict[str, TensorInfo] = {}  # Const layer id -> its tensor
    names: set[str] = set()
    for layer in consts:
        # the name is settled before the spans are tagged with it (a second `w` is `w#<id>`)
        name = layer.name or f"const_{layer.id}"
        name = f"{name}#{layer.id}" if name in names else name
        names.add(name)
        info = _const_tensor(layer, name, source, bin_src, rep)
        if info is not None:
            result.tensors[info.name] = infos[layer.id] = info
    graph = _Graph(net, infos)
    for layer in consts:
        if layer.id in infos and infos[layer.id].dtype in CODES:
            _decompression(layer, infos[layer.id], graph, rep)
    for info in result.tensors.values():
        rep.spans.append(Span(info.offset, min(info.length, max(0, bin_src.size - info.offset)),
                              "tensor_data", f"data > {info.name}", bin_src.name,
                              f"{info.label} {list(info.shape)}", info.name))
    rep.spans.sort(key=lambda s: (s.file != source.name, s.offset, -s.length))
    return result


def _graph_spans(net: Net, xml, rep: Report) -> None:
    """A span for each layer that is not a Const (those are tensors) and for each edge."""
    for layer in net.layers.values():
        if layer.type != "Const":
            end = max(layer.end, element_end(xml, layer.start))
            rep.span(layer.start, end - layer.start, "layer", f"layer {layer.id} > {layer.name}",
                     short_repr(layer.type))
    for src, sport, dst, dport, at in net.edges:
        rep.span(at, element_end(xml, at) - at, "edge", f"edge {src}:{sport} > {dst}:{dport}",
                 f"layer {src} port {sport} to layer {dst} port {dport}")


def _structure(net: Net, xml_name: str) -> GraphStructure:
    """The net's layers as operators ("layer id:port" names their values), Parameters as its
    inputs, Results as its outputs, and the edges, all with their bytes in the XML."""
    feeds: dict[str, dict[str, str]] = {}
    made: dict[str, list[str]] = {}
    for src, sport, dst, dport, _at in net.edges:
        feeds.setdefault(dst, {})[dport] = f"{src}:{sport}"
        made.setdefault(src, [])
        if f"{src}:{sport}" not in made[src]:
            made[src].append(f"{src}:{sport}")
    nodes = [OpRecord(layer.type, "", [v for _, v in sorted(feeds.get(layer.id, {}).items(), key=_port)],
                      made.get(layer.id, []), dict(layer.data), layer.name, layer.start,
                      max(0, layer.end - layer.start), "net") for layer in net.layers.values()]

    def value(layer: Layer) -> GraphValue:
        text = layer.data.get("shape")
        shape = None if text is None else tuple(int(d) if d.strip().isdigit() else d.strip()
                                                for d in text.split(",") if d.strip())[:MAX_RANK]
        return GraphValue(layer.name, layer.data.get("element_type"), shape, layer.start,
                          max(0, layer.end - layer.start))

    return GraphStructure("openvino", xml_name, nodes,
                          [value(x) for x in net.layers.values() if x.type == "Parameter"],
                          [value(x) for x in net.layers.values() if x.type == "Result"],
                          [GraphEdge(*e) for e in net.edges])


def _cycles(structure: GraphStructure, rep: Report) -> None:
    """Layers whose edges run round a loop: OpenVINO refuses such a net (graph_cycles.py)."""
    nodes = structure.nodes
    loop = on_cycles(nodes, list(range(len(nodes))))
    if loop:
        names = " -> ".join(f"{short_repr(nodes[i].name)!r} ({nodes[i].op_type})" for i in loop[:5])
        more = f" and {len(loop) - 5} more" if len(loop) > 5 else ""
        first = nodes[loop[0]]
        rep.error("openvino_graph_cycle", f"Expected edges that let the layers run in an order where each "
                  f"comes after its inputs; found {len(loop)} layers that feed each other round a loop: "
                  f"{names}{more}.", first.at, first.length)


def _port(item: tuple[str, str]) -> tuple[int, str]:
    return (int(item[0]), "") if item[0].isdigit() else (1 << 30, item[0])


def _line_col_offset(source, line: int, col: int) -> int:
    """The byte offset of a 1-based line and 0-based column (expat's error position)."""
    pos, seen = 0, 1
    while seen < line and pos < source.size:
        chunk = bytes(source.read(pos, min(1 << 20, source.size - pos)))
        nl = -1
        while seen < line:
            nl = chunk.find(b"\n", nl + 1)
            if nl < 0:
                break
            seen += 1
        if seen == line and nl >= 0:
            return min(source.size, pos + nl + 1 + col)
        pos += len(chunk)
    return min(col, source.size)


def _open_bin(source, rep: Report):
    path = bin_path(source.name)
    if not sources.exists(path):
        rep.error("openvino_bin_missing", f"The IR's constants live in {sources.basename(path)!r} "
                  "beside the XML, which is missing: no weight can be read.", 0, min(16, source.size))
        return None
    try:
        return sources.open_source(path)
    except OSError as e:
        rep.error("openvino_bin_missing", f"{sources.basename(path)!r} cannot be opened "
                  f"({type(e).__name__}: {e}).", 0, min(16, source.size))
        return None


def _shape(text: str) -> tuple[int, ...] | None:
    text = text.strip()
    if not text:
        return ()
    try:
        dims = tuple(int(d) for d in text.split(","))
    except ValueError:
        return None
    return dims if len(dims) <= MAX_RANK and all(d >= 0 for d in dims) else None


def _const_tensor(layer: Layer, name: str, xml, bin_src, rep: Report) -> TensorInfo | None:
    at = layer.data_at if layer.data_at is not None else layer.start
    data_len = element_end(xml, at) - at
    rep.span(layer.start, max(layer.end, at + data_len) - layer.start, "tensor_info",
             f"layer {layer.id} > {name}", f"Const {layer.data.get('element_type', '?')} "
             f"[{layer.data.get('shape', '')}]", tensor=name)
    rep.span(at, data_len, "value", f"layer {layer.id} > {name} > data",
             short_repr(" ".join(f"{k}={v}" for k, v in layer.data.items())), tensor=name)
    etype = layer.data.get("element_type", "")
    shape = _shape(layer.data.get("shape", ""))
    try:
        offset, size = int(layer.data.get("offset", "")), int(layer.data.get("size", ""))
    except ValueError:
        offset = size = -1
    if etype not in ELEMENT_TYPES or shape is None or offset < 0 or size < 0:
        rep.error("openvino_bad_const", f"Const layer {name!r} has element_type {etype!r}, shape "
                  f"{layer.data.get('shape')!r}, offset {layer.data.get('offset')!r}, size "
                  f"{layer.data.get('size')!r}: not a byte range of the .bin this reader can place.",
                  at, data_len, name)
        return None
    dtype, bits = ELEMENT_TYPES[etype]
    need = -(-math.prod(shape) * bits // 8)
    if need != size:
        rep.error("openvino_size_mismatch", f"Const {name!r} is {etype} {list(shape)}: {need} bytes, "
                  f"but its size says {size}.", at, data_len, name)
    if offset + size > bin_src.size:
        rep.error("data_past_end", f"Const {name!r} needs bytes {offset} to {offset + size} of "
                  f"{sources.basename(bin_src.name)}, which has {bin_src.size}.", at, data_len, name)
    info = TensorInfo(name, dtype, shape, bin_src.name, offset, size)
    info.extra.update(info_span=(layer.start, layer.end - layer.start), layer_id=layer.id, xml=xml.name)
    return info


class _Graph:
    """Who consumes each output, and what feeds each input, from the <edges>."""

    def __init__(self, net: Net, infos: dict[str, TensorInfo]) -> None:
        self.layers, self.infos = net.layers, infos
        self.consumers: dict[str, list[tuple[str, str]]] = {}
        self.inputs: dict[str, dict[str, str]] = {}  # layer id -> input port -> feeding layer id
        for src, _sport, dst, dport, _at in net.edges:
            self.consumers.setdefault(src, []).append((dst, dport))
            self.inputs.setdefault(dst, {})[dport] = src

    def only_consumer(self, layer_id: str) -> Layer | None:
        """The one layer that takes this layer's output as its first input (the decompression
        chain carries the weight there; a zero point or scale comes in second)."""
        users = self.consumers.get(layer_id, [])
        return self.layers.get(users[0][0]) if len(users) == 1 and users[0][1] == "0" else None

    def other_const(self, op: Layer, came_from: str) -> tuple[TensorInfo | None, str | None]:
        """The tensor of the Const feeding `op`'s other input, through one Convert at most, and
        the narrower float that Convert rounds it to (f32 scales made f16), if any."""
        for src in self.inputs.get(op.id, {}).values():
            if src == came_from:
                continue
            layer, rounding = self.layers.get(src), None
            if layer is not None and layer.type == "Convert":
                rounding = CONVERT_ROUNDING.get(layer.data.get("destination_type", ""))
                src = next(iter(self.inputs.get(layer.id, {}).values()), "")
            if src in self.infos:
                return self.infos[src], rounding
        return None, None


def _decompression(layer: Layer, info: TensorInfo, graph: _Graph, rep: Report) -> None:
    convert = graph.only_consumer(layer.id)
    if convert is None or convert.type != "Convert":
        return
    step, zero = graph.only_consumer(convert.id), None
    came = convert.id
    if step is not None and step.type == "Subtract":
        zero, _ = graph.other_const(step, came)
        came, step = step.id, graph.only_consumer(step.id)
    if step is None or step.type != "Multiply":
        return
    scale, scale_rounding = graph.other_const(step, came)
    if scale is None:
        return
    precision = next(iter(step.out_precision.values()), "")
    info.quant = _quant_record(info, scale, zero, ROUNDING.get(precision), scale_rounding)
    if info.quant.refusal is not None:
        rep.error("openvino_bad_decompression", f"Const {info.name!r} is compressed, but "
                  f"{info.quant.refusal}; it is not decoded.", layer.start, layer.end - layer.start,
                  info.name)


def _broadcast(side: tuple[int, ...], shape: tuple[int, ...]) -> tuple[int, ...] | None:
    """`side` as a shape of the weight's rank that numpy broadcasting gives, or None."""
    if len(side) > len(shape):
        return None
    full = (1,) * (len(shape) - len(side)) + tuple(side)
    return full if all(s in (1, d) for s, d in zip(full, shape, strict=True)) else None


def _quant_record(info: TensorInfo, scale: TensorInfo, zero: TensorInfo | None, rounding: str | None,
                  scale_rounding: str | None) -> Quant:
    """The quant record of an OpenVINO compressed weight (the one place that builds it).
    `rounding`: the float the Multiply computes in; `scale_rounding`: the float a Convert
    narrows a float32 scale to before it."""
    bits, signed = CODES[info.dtype]
    label = f"OV_{info.dtype}"
    shape = info.shape or (1,)
    scale_shape = _broadcast(scale.shape, shape)
    if scale_shape is None:
        return Quant(codec="affine", label=label,
                     refusal=f"its scale {list(scale.shape)} does not broadcast to {list(shape)}")
    zero_shape = _broadcast(zero.shape, shape) if zero is not None else None
    if zero is not None and zero_shape is None:
        return Quant(codec="affine", label=label,
                     refusal=f"its zero point {list(zero.shape)} does not broadcast to {list(shape)}")
    parts = {"scale": scale} if zero is None else {"scale": scale, "zero_point": zero}
    return Quant(codec="affine", label=label, parts=parts, bits=bits, signed=signed, divide=False,
                 scale_shape=scale_shape, zero_shape=zero_shape, round_to=rounding,
                 scale_round_to=scale_rounding if scale_rounding and scale.dtype == "F32" else None)
