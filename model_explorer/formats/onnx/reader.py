"""ONNX reader: the ModelProto walked field by field, never through `onnx.load`.

What it lists: every initializer of the main graph and of the subgraphs of If/Loop/Scan nodes,
and the tensors Constant nodes hold (named by the node's output), each with its dtype, dims and
the absolute byte range of its values (raw_data, a packed typed field, or external data). It
labels every header field (IR version, producer, opset imports, metadata, nodes, tensor fields)
and keeps, per tensor, the operators that take it as an input, so quantized weights can be
grouped with their scales (quant.py) and an export compared with its source (checks/).
"""

from __future__ import annotations

import struct

from ...hexview import END_KIND
from ...records import Quant, TensorInfo
from ...spans import Report, Span, short_repr
from ..graph_roles import assign_roles
from ..result import FileResult
from ..structure import GraphStructure, GraphValue, OpRecord
from .external import ExternalFiles, external_info
from .graph_check import check_wiring
from .quant import group_quantized
from .quant_ops import group_quant_ops
from .schema import ATTR_GRAPHS, Attribute, Entry, Graph, Model, Node
from .tensor import Parsed, check_tensor, label_tensor, parse_tensor, payload
from .valueinfo import MAX_VALUES, value_info
from .wire import FIXED32, LEN, VARINT, Field, Paged, WireError, fields, signed64, text

MAX_GRAPH_DEPTH = 16       # If inside Loop inside If...: real models nest two or three deep
MAX_FIELDS = 5_000_000     # fields walked in all: a file of millions of empty fields is refused
MAX_LABELLED_NODES = 100_000
MAX_DETAILED_NODES = 20_000  # nodes whose inputs, outputs and attributes are labelled too
MAX_TENSORS = 300_000
PACKED_INTS = ("I4", "U4", "I2", "U2")  # decoded by tensors/schemes/onnx_quant.py
MAX_INTS = 64              # values kept of a repeated int attribute


class _Budget(Exception):
    """More fields than any real model has: the walk stops."""


class _Walk:
    def __init__(self, source) -> None:
        self.data = Paged(source)
        self.rep = Report(source.name)
        self.result = FileResult(source.name, source.size, self.rep)
        self.files = ExternalFiles(source.name)
        self.nodes: list[OpRecord] = []  # every node of every graph, in file order
        self.io: dict[str, list[dict]] = {"inputs": [], "outputs": []}  # the main graph's
        self.input_names: set[str] = set()  # every graph's inputs, for the wiring check
        self.fields = 0
        self.labelled = 0
        self.graphs = 0
        self.cut = False  # the file ends inside a message
        self.reported_cut = False

    def each(self, at: int, end: int, where: str):
        """The fields of one message; a broken one is a finding and ends that message."""
        try:
            for f in fields(self.data, at, end, clip=self.cut and end == self.data.size):
                self.fields += 1
                if self.fields > MAX_FIELDS:
                    raise _Budget
                yield f
        except WireError as e:
            if self.cut and e.cut and e.offset + e.length >= self.data.size:
                self.truncated(None)  # one finding for the cut, wherever the walk meets it
                return
            self.rep.error("onnx_malformed", f"In {where}: {e}", e.offset, e.length)

    # -- model -------------------------------------------------------------------------------

    def model(self) -> None:
        rep, meta, data = self.rep, self.result.metadata, self.data
        size = data.size
        opsets: list[str] = []
        graph_seen = False
        self.cut = True  # the top-level message ends at the end of the file
        for f in self.each(0, size, "the model"):
            n = f.number
            if f.wire == LEN and f.value is not None:  # declared past the end of the file
                self.truncated(f.at + f.value)
            if n == Model.IR_VERSION and f.wire == VARINT:
                meta["onnx.ir_version"] = f.value
                rep.span(f.tag_at, f.end - f.tag_at, "version", "ir_version", str(f.value))
            elif n in (Model.PRODUCER_NAME, Model.PRODUCER_VERSION, Model.DOMAIN) and f.wire == LEN:
                key = {Model.PRODUCER_NAME: "producer_name", Model.PRODUCER_VERSION: "producer_version",
                       Model.DOMAIN: "domain"}[n]
                meta["onnx." + key] = text(data, f, 1024)
                rep.span(f.tag_at, f.end - f.tag_at, "version", key, short_repr(meta["onnx." + key]))
            elif n == Model.MODEL_VERSION and f.wire == VARINT:
                meta["onnx.model_version"] = signed64(f.value)
                rep.span(f.tag_at, f.end - f.tag_at, "version", "model_version", str(signed64(f.value)))
            elif n == Model.DOC_STRING and f.wire == LEN:
                rep.span(f.tag_at, f.end - f.tag_at, "metadata", "doc_string", short_repr(text(data, f, 200)))
            elif n == Model.OPSET_IMPORT and f.wire == LEN:
                domain, version = self.pair(f, "an opset import")
                shown = f"{domain or 'ai.onnx'} {version}"
                opsets.append(shown)
                rep.span(f.tag_at, f.end - f.tag_at, "version", f"opset_import > {domain or 'ai.onnx'}", shown)
            elif n == Model.METADATA_PROPS and f.wire == LEN:
                key, value = self.pair(f, "a metadata entry")
                meta.setdefault(key, value)
                rep.span(f.tag_at, f.end - f.tag_at, "metadata", f"metadata_props > {key}", short_repr(value))
            elif n == Model.GRAPH and f.wire == LEN:
                graph_seen = True
                rep.span(f.tag_at, f.at - f.tag_at, "length", "graph", f"{f.value or f.length:,} bytes")
                self.graph(f.at, f.end, "graph", 0)
            elif n in (Model.FUNCTIONS, Model.TRAINING_INFO) and f.wire == LEN:
                rep.span(f.tag_at, f.end - f.tag_at, "metadata",
                         "functions" if n == Model.FUNCTIONS else "training_info", f"{f.length:,} bytes")
        if opsets:
            meta["onnx.opset_import"] = ", ".join(opsets)
        if not graph_seen and not rep.findings:
            rep.error("onnx_no_graph", "The model holds no graph (ModelProto field 7): there are "
                      "no weights to read.", 0, min(16, size))

    def truncated(self, expected: int | None) -> None:
        if self.reported_cut:
            return
        self.reported_cut = True
        size = self.data.size
        runs = f" that says it runs to byte {expected:,}" if expected else ""
        self.rep.error("truncated", f"The file ends at byte {size:,}, inside a field{runs}: the "
                       "file is cut short and what follows the cut is missing.", size, 0)
        self.rep.span(size, 0, END_KIND, "end of file",
                      f"{size:,} bytes of {expected:,} expected" if expected else f"{size:,} bytes")

    def pair(self, f: Field, what: str) -> tuple[str, str | int]:
        """A StringStringEntryProto (key, value) or an OperatorSetIdProto (domain, version)."""
        key: str = ""
        value: str | int = 0
        for g in self.each(f.at, f.end, what):
            if g.number == Entry.KEY and g.wire == LEN:
                key = text(self.data, g, 1024)
            elif g.number == Entry.VALUE:
                value = text(self.data, g, 4096) if g.wire == LEN else signed64(g.value or 0)
        return key, value

    # -- graphs and nodes --------------------------------------------------------------------

    def graph(self, at: int, end: int, path: str, depth: int) -> None:
        self.graphs += 1
        index = 0
        for f in self.each(at, end, path):
            if f.wire != LEN:
                continue
            if f.number == Graph.NODE:
                self.node(f, path, index, depth)
                index += 1
            elif f.number == Graph.INITIALIZER:
                if f.value is None:  # not cut by the end of the file
                    self.tensor(f.at, f.end, "", f"{path} > initializer", path)
            elif f.number in (Graph.INPUT, Graph.OUTPUT) and depth == 0:
                side = self.io["inputs" if f.number == Graph.INPUT else "outputs"]
                if len(side) < MAX_VALUES:
                    side.append(value_info(self, f))
                    name = side[-1]["name"]
                else:
                    name = self.value_name(f)
                if f.number == Graph.INPUT:
                    self.input_names.add(name)
                if self.labelled < MAX_DETAILED_NODES:
                    self.rep.span(f.tag_at, f.end - f.tag_at, "value",
                                  f"{path} > {'input' if f.number == Graph.INPUT else 'output'}",
                                  short_repr(name))
            elif f.number in (Graph.INPUT, Graph.OUTPUT):  # an inner graph's (a Loop body's inputs)
                name = self.value_name(f)
                if f.number == Graph.INPUT:
                    self.input_names.add(name)
                if self.labelled < MAX_DETAILED_NODES:
                    self.rep.span(f.tag_at, f.end - f.tag_at, "value",
                                  f"{path} > {'input' if f.number == Graph.INPUT else 'output'}",
                                  short_repr(name))
            elif f.number == Graph.NAME:
                self.rep.span(f.tag_at, f.end - f.tag_at, "key", f"{path} > name",
                              short_repr(text(self.data, f, 200)))
            elif f.number == Graph.SPARSE_INITIALIZER:
                self.rep.info("onnx_sparse", f"{path} holds a sparse initializer; sparse tensors "
                              "are not listed here.", f.tag_at, f.end - f.tag_at)

    def value_name(self, f: Field) -> str:
        """The name of a ValueInfoProto (field 1)."""
        for g in self.each(f.at, f.end, "a graph input or output"):
            if g.number == 1 and g.wire == LEN:
                return text(self.data, g, 1024)
        return ""

    def node(self, f: Field, path: str, index: int, depth: int) -> None:
        data = self.data
        rec = OpRecord("", "", at=f.tag_at, length=f.end - f.tag_at, graph=path)
        subgraphs: list[tuple[str, int, int, int]] = []
        value: tuple[int, int] | None = None
        detail = self.labelled < MAX_DETAILED_NODES
        parts: list[tuple[Field, str, str, str]] = []  # a field's span: kind, label, value
        for g in self.each(f.at, f.end, f"{path} > node {index}"):
            if g.wire != LEN:
                continue
            # every input and output is kept: the walk's field budget bounds them all
            if g.number == Node.INPUT:
                rec.inputs.append(text(data, g))
                if detail:
                    parts.append((g, "value", f"input {len(rec.inputs) - 1}", rec.inputs[-1]))
            elif g.number == Node.OUTPUT:
                rec.outputs.append(text(data, g))
                if detail:
                    parts.append((g, "value", f"output {len(rec.outputs) - 1}", rec.outputs[-1]))
            elif g.number == Node.OP_TYPE:
                rec.op_type = text(data, g, 256)
                parts.append((g, "key", "op_type", rec.op_type))
            elif g.number == Node.DOMAIN:
                rec.domain = text(data, g, 256)
                parts.append((g, "key", "domain", rec.domain))
            elif g.number == Node.NAME:
                rec.name = text(data, g, 1024)
                parts.append((g, "key", "name", rec.name))
            elif g.number == Node.ATTRIBUTE:
                got, attr = self.attribute(g, rec, subgraphs, f"{path} > node {index}")
                value = got or value
                if detail:
                    shown = rec.attrs.get(attr)
                    parts.append((g, "kv", f"attribute {attr}", "" if shown is None else short_repr(shown)))
        self.nodes.append(rec)
        here = f"{path} > node {index} {rec.op_type}"
        if self.labelled < MAX_LABELLED_NODES:
            self.labelled += 1
            self.rep.span(f.tag_at, f.end - f.tag_at, "node", here, short_repr(rec.name or rec.op_type))
            for g, kind, label, shown in parts if detail else ():
                self.rep.span(g.tag_at, g.end - g.tag_at, kind, f"{here} > {label}", short_repr(shown))
        if value is not None and rec.op_type == "Constant" and rec.outputs:
            self.tensor(*value, rec.outputs[0], here + " > value", path, constant=True)
        for name, gat, gend, gtag in subgraphs:
            if depth + 1 > MAX_GRAPH_DEPTH:
                self.rep.error("onnx_nesting_too_deep", f"{here} holds subgraph {name!r} nested "
                               f"{depth + 1} graphs deep; past {MAX_GRAPH_DEPTH} the graphs are not "
                               "read.", gtag, gend - gtag)
                continue
            self.rep.span(gtag, gat - gtag, "length", f"{here} > {name}", f"{gend - gat:,} bytes")
            self.graph(gat, gend, f"{here} > {name}", depth + 1)

    def attribute(self, f: Field, rec: OpRecord, subgraphs: list, where: str):
        """Keep the attribute's number(s) in rec.attrs; queue its graphs; return where its
        tensor is (a Constant's value, else None) and the attribute's name."""
        data = self.data
        name, kind = "", 0
        ints: list[int] = []
        number: object = None
        tensor = None
        graphs: list[Field] = []
        for g in self.each(f.at, f.end, where + " > attribute"):
            if g.number == Attribute.NAME and g.wire == LEN:
                name = text(data, g, 256)
            elif g.number == Attribute.TYPE and g.wire == VARINT:
                kind = g.value
            elif g.number == Attribute.I and g.wire == VARINT:
                number = signed64(g.value)
            elif g.number == Attribute.F and g.wire == FIXED32:
                number = struct.unpack("<f", g.value.to_bytes(4, "little"))[0]
            elif g.number == Attribute.INTS and len(ints) < MAX_INTS:
                if g.wire == VARINT:
                    ints.append(signed64(g.value))
            elif g.number == Attribute.T and g.wire == LEN:
                tensor = (g.at, g.end)
            elif g.number in (Attribute.G, Attribute.GRAPHS) and g.wire == LEN:
                graphs.append(g)
        if number is not None:
            rec.attrs[name] = number
        elif ints:
            rec.attrs[name] = ints
        for i, g in enumerate(graphs):
            label = name if kind != ATTR_GRAPHS and len(graphs) == 1 else f"{name}[{i}]"
            subgraphs.append((label or "graph", g.at, g.end, g.tag_at))
        return (tensor if name == "value" else None), name

    # -- tensors -----------------------------------------------------------------------------

    def tensor(self, at: int, end: int, default: str, path: str, graph: str,
               constant: bool = False) -> None:
        rep, tensors = self.rep, self.result.tensors
        p = parse_tensor(self.data, at, end, rep, path)
        # a Constant's tensor is known by the node's output (its own name is often empty)
        name = (default if constant else p.name or default) or f"{graph} > tensor at byte {at}"
        if name in tensors:
            first = tensors[name]
            if not constant and first.extra.get("onnx_graph") == graph:
                rep.warning("onnx_duplicate_name", f"{path} names {name!r} again (first at byte "
                            f"{first.extra['info_span'][0]}); runtimes keep one of them.",
                            at, end - at, name)
            renamed, name = name, _unused(tensors, f"{name} ({path})")
        else:
            renamed = None
        if len(tensors) >= MAX_TENSORS:
            if len(tensors) == MAX_TENSORS:
                rep.warning("onnx_too_many_tensors", f"The model holds more than {MAX_TENSORS} "
                            "tensors; the ones after are not listed.", at, end - at)
            return
        label_tensor(rep, p, name, f"{path} > {name}")
        tensors[name] = self.record(p, name, graph, constant)
        if renamed is not None:
            tensors[name].extra["graph_name"] = renamed

    def record(self, p: Parsed, name: str, graph: str, constant: bool) -> TensorInfo:
        rep = self.rep
        extra: dict[str, object] = {"info_span": (p.at, p.length), "onnx_graph": graph}
        if constant:
            extra["constant"] = True
        if not check_tensor(p, name, rep):
            dt = p.dtype
            return TensorInfo(name, dt.dtype if dt else "UNDEFINED", tuple(p.dims[:8]), rep.file,
                              p.at, 0, quant=Quant(codec="onnx_tensor", label=dt.dtype if dt else "?",
                                                   refusal="its TensorProto cannot be read (see the findings)"),
                              extra=extra)
        if p.external_at or p.location_external:
            info = external_info(p, name, self.files, rep)
            info.extra.update(extra)
            return info
        at, length, varints = payload(p, name, rep)
        dt = p.dtype
        info = TensorInfo(name, dt.dtype, tuple(p.dims), rep.file, at, length, extra=extra)
        if varints is not None:
            info.quant = Quant(codec="onnx_varint", label=dt.dtype, varint_field=varints)
        elif dt.dtype in PACKED_INTS:
            info.quant = Quant(codec="onnx_packed_int", label=dt.dtype)
        elif p.unpacked:
            info.quant = Quant(codec="onnx_tensor", label=dt.dtype,
                               refusal="its values are stored unpacked, one protobuf field each")
        if length:
            rep.spans.append(Span(at, length, "tensor_data", "data > " + name, rep.file,
                                  f"{dt.dtype} {list(p.dims)}", name))
        return info


def read_onnx(source) -> FileResult:
    """Read one .onnx file (and size the external data files it names)."""
    w = _Walk(source)
    try:
        w.model()
    except _Budget:
        w.rep.error("onnx_too_many_fields", f"The file holds more than {MAX_FIELDS:,} protobuf "
                    "fields, more than any real model; the walk stopped there.", 0,
                    min(16, source.size))
    result = w.result
    whole = not w.reported_cut and len(result.tensors) < MAX_TENSORS and not any(
        f.code in ("onnx_too_many_fields", "onnx_malformed") for f in w.rep.findings)
    if whole:  # a graph read in part would show inputs whose producers were never reached
        known = w.input_names | {str(t.extra.get("graph_name") or n) for n, t in result.tensors.items()}
        check_wiring(w.nodes, known, w.rep)
    for rec in w.nodes:  # by input position first: quant.py's naming rule only where none applies
        group_quant_ops(result.tensors, rec, w.rep)
    group_quantized(result, w.nodes)
    assign_roles(result.tensors, ((r.op_type, r.inputs, r.outputs) for r in w.nodes))
    result.details["onnx"] = _summary(w)
    result.structure = GraphStructure(
        "onnx", source.name, w.nodes,
        [_value(v) for v in result.details["onnx"]["inputs"]], [_value(v) for v in w.io["outputs"]],
        complete=not any(f.code == "onnx_too_many_fields" for f in w.rep.findings))
    found = w.files.found()
    if found:
        result.details["external_files"] = found
    w.rep.spans.sort(key=lambda s: (s.file != source.name, s.offset))
    return result


def _summary(w: _Walk) -> dict:
    """What the views and the diff use: operator counts and each tensor's consumers."""
    ops: dict[str, int] = {}
    users: dict[str, list[tuple[str, int, int, str]]] = {}  # op, input index, transB, node name
    tensors = w.result.tensors
    for rec in w.nodes:
        op = rec.op_type if rec.domain in ("", "ai.onnx") else f"{rec.domain}.{rec.op_type}"
        ops[op] = ops.get(op, 0) + 1
        for i, name in enumerate(rec.inputs):
            if name in tensors:
                users.setdefault(name, []).append((rec.op_type, i, _flag(rec.attrs.get("transB")),
                                                   rec.name))
    # graph inputs that are initializers (IR < 4 lists them as inputs) are weights, not inputs
    inputs = [v for v in w.io["inputs"] if v["name"] not in tensors]
    return {"ops": ops, "nodes": len(w.nodes), "graphs": w.graphs, "users": users,
            "inputs": inputs, "outputs": w.io["outputs"]}


def _value(v: dict) -> GraphValue:
    shape = v.get("shape")
    return GraphValue(v.get("name", ""), v.get("dtype"), None if shape is None else tuple(shape),
                      v.get("offset"), v.get("length"))


def _unused(tensors, name: str) -> str:
    """`name`, or `name #2`, `name #3`...: the first one no tensor has yet (a third initializer
    of the same name in the same graph must not overwrite the second)."""
    if name not in tensors:
        return name
    n = 2
    while f"{name} #{n}" in tensors:
        n += 1
    return f"{name} #{n}"


def _flag(value: object) -> int:
    """An integer attribute used as a flag (transB); 0 when absent or not one integer."""
    return value if isinstance(value, int) else 0
