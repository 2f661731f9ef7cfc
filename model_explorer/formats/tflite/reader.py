"""TFLite reader: the Model flatbuffer walked by hand (tensorflow/lite/schema/schema.fbs field ids),
no TensorFlow needed.

    Model: version(0) operator_codes(1) subgraphs(2) description(3) buffers(4) metadata(6)
    SubGraph: tensors(0) inputs(1) outputs(2) operators(3) name(4)
    Tensor: shape(0) type(1) buffer(2) name(3) quantization(4) ... external_buffer(10)
    QuantizationParameters: min(0) max(1) scale(2) zero_point(3) quantized_dimension(6)
    Buffer: data(0) offset(1) size(2)   (offset/size: data after the flatbuffer, >2 GB models)

Tensors that own bytes (weights, constants) are listed, each pointing at its buffer's data;
activations (empty buffers) are counted. A quantized tensor's scale and zero-point vectors are
read in place from the flatbuffer and decoded through tensors/schemes/affine.py.
"""

from __future__ import annotations

import math

from ...records import Quant, TensorInfo
from ...spans import Report, short_repr
from .. import MAX_RANK
from ..graph_roles import assign_roles
from ..result import FileResult
from ..structure import GraphStructure, GraphValue
from .flatbuf import Buffer, Malformed, Table, Vector
from .operators import operators

TENSOR_TYPES = ("F32", "F16", "I32", "U8", "I64", "STRING", "BOOL", "I16", "C64", "I8", "F64",
                "C128", "U64", "RESOURCE", "VARIANT", "U32", "U16", "I4", "BF16", "I2", "U4",
                "F8_E4M3")
BITS = {"F32": 32, "F16": 16, "I32": 32, "U8": 8, "I64": 64, "BOOL": 8, "I16": 16, "C64": 64,
        "I8": 8, "F64": 64, "C128": 128, "U64": 64, "U32": 32, "U16": 16, "I4": 4, "BF16": 16,
        "I2": 2, "U4": 4, "F8_E4M3": 8}
QUANTIZED = {"I8": (8, True), "U8": (8, False), "I16": (16, True), "I32": (32, True),
             "I4": (4, True), "U4": (4, False)}
MAX_TENSORS = 1_000_000  # listed per file; a hostile vector of offsets could name more


def read_tflite(source) -> FileResult:
    rep = Report(source.name)
    result = FileResult(source.name, source.size, rep)
    buf = Buffer(source)
    try:
        model = _root(buf, rep)
    except Malformed as e:
        rep.error("tflite_malformed", f"{e} The model cannot be read.", e.offset, e.length)
        return result
    if model is not None:
        _Walk(buf, rep, result).model(model)
    rep.spans.sort(key=lambda s: (s.offset, -s.length))
    return result


def _root(buf: Buffer, rep: Report) -> Table | None:
    if buf.size < 8:
        rep.error("truncated", f"A TFLite file starts with a 4-byte root offset and the identifier "
                  f"'TFL3'; this file has {buf.size} bytes.", 0, buf.size)
        return None
    root = buf.unpack("I", 0, "root offset")
    rep.span(0, 4, "pointer", "root offset", f"u32 = {root}")
    ident = buf.raw(4, 4, "file identifier")
    rep.span(4, 4, "magic", "file identifier", short_repr(ident.decode("latin-1")))
    if ident != b"TFL3":
        rep.warning("tflite_identifier", f"The flatbuffer identifier is {ident!r}, not 'TFL3'.", 4, 4)
    return Table(buf, root, "Model")


class _Walk:
    def __init__(self, buf: Buffer, rep: Report, result: FileResult) -> None:
        self.buf, self.rep, self.result = buf, rep, result
        self.buffers: Vector | None = None
        self.listed = 0
        self.names: dict[int, str] = {}  # tensor index -> name, in the subgraph being read
        self.io_wanted: set[int] = set()  # indices of the main subgraph's inputs and outputs
        self.io_found: dict[int, dict] = {}
        self.structure = result.structure = GraphStructure("tflite", result.file)

    def guarded(self, what: str, fn, *args) -> None:
        """One part of the model; a malformed part is a finding and the walk goes on."""
        try:
            fn(*args)
        except Malformed as e:
            self.rep.error("tflite_malformed", f"{e} ({what} skipped)", e.offset, e.length)

    def model(self, m: Table) -> None:
        rep, meta = self.rep, self.result.metadata
        version = m.scalar(0, "I", what="version")
        p = m.field_pos(0)
        if p is not None:
            rep.span(p, 4, "version", "Model > version", f"u32 = {version}")
        meta["tflite.schema_version"] = version
        desc = m.string(3, "description")
        if desc is not None:
            rep.span(desc[1], desc[2], "value", "Model > description", short_repr(desc[0]))
            meta["tflite.description"] = desc[0]
        self.buffers = m.vector(4, 4, "buffers vector")
        if self.buffers is not None:
            rep.span(self.buffers.pos, 4 + self.buffers.nbytes, "count", "Model > buffers",
                     f"{self.buffers.length} buffers")
        self.guarded("operator codes", self.opcodes, m)
        self.guarded("metadata", self.metadata, m)
        subgraphs = m.vector(2, 4, "subgraphs vector")
        if subgraphs is None:
            rep.error("tflite_no_subgraphs", "The model has no subgraphs: it holds no tensors.",
                      m.pos, 4)
            return
        rep.span(subgraphs.pos, 4 + subgraphs.nbytes, "count", "Model > subgraphs",
                 f"{subgraphs.length} subgraphs")
        self.result.details["subgraphs"] = subgraphs.length
        for g in range(subgraphs.length):
            self.guarded(f"subgraph {g}", self.subgraph, subgraphs, g)

    def opcodes(self, m: Table) -> None:
        codes = m.vector(1, 4, "operator codes vector")
        if codes is None:
            return
        found = []
        for i in range(min(codes.length, 4096)):
            oc = codes.table(i, f"operator code {i}")
            builtin = max(oc.scalar(0, "b", what="deprecated builtin code"), oc.scalar(3, "i", what="builtin code"))
            custom = oc.string(1, "custom code")
            found.append(custom[0] if custom else builtin)
            self.rep.span(oc.pos, oc.inline_size, "tensor_info", f"Model > operator code {i}",
                          f"custom {short_repr(custom[0])}" if custom else f"builtin {builtin}")
        self.result.details["operator_codes"] = found

    def metadata(self, m: Table) -> None:
        entries = m.vector(6, 4, "metadata vector")
        if entries is None:
            return
        for i in range(min(entries.length, 4096)):
            t = entries.table(i, f"metadata entry {i}")
            name = t.string(0, "metadata name")
            index = t.scalar(1, "I", what="buffer index")
            if name:
                self.rep.span(name[1], name[2], "key", f"Model > metadata {i} > name", short_repr(name[0]))
                self.result.metadata[f"tflite.metadata.{name[0]}"] = f"buffer {index}"

    def subgraph(self, subgraphs: Vector, g: int) -> None:
        sg = subgraphs.table(g, f"subgraph {g}")
        name = sg.string(4, "subgraph name")
        label = f"subgraph {g}" + (f" ({name[0]})" if name and name[0] else "")
        if name:
            self.rep.span(name[1], name[2], "key", f"{label} > name", short_repr(name[0]))
        tensors = sg.vector(0, 4, "tensors vector")
        if tensors is None:
            return
        self.rep.span(tensors.pos, 4 + tensors.nbytes, "count", f"{label} > tensors",
                      f"{tensors.length} tensors")
        ops = sg.vector(3, 4, "operators vector")
        if ops is not None:
            self.rep.span(ops.pos, 4 + ops.nbytes, "count", f"{label} > operators", f"{ops.length} operators")
        activations = 0
        self.names = {}
        io = {k: _indices(sg.vector(n, 4, f"subgraph {k}")) for k, n in (("inputs", 1), ("outputs", 2))} \
            if g == 0 else {}
        self.io_wanted = {i for v in io.values() for i in v}
        self.io_found = {}
        for i in range(tensors.length):
            if self.listed >= MAX_TENSORS:
                self.rep.error("tflite_too_many_tensors", f"{label} lists {tensors.length} tensors; "
                               f"only the first {MAX_TENSORS} of the file are read.", tensors.pos, 4)
                break
            try:
                activations += not self.tensor(tensors.table(i, f"tensor {i}"), g, i, label)
            except Malformed as e:
                self.rep.error("tflite_malformed", f"{e} (tensor {i} of {label} skipped)", e.offset, e.length)
        self.result.details.setdefault("activations", 0)
        self.result.details["activations"] += activations
        self.guarded(f"operators of {label}", self.operators, ops, label)
        for key, indices in io.items():  # the model's inputs and outputs (the overview's)
            self.result.details[key] = [self.io_found[i] for i in indices if i in self.io_found]
            getattr(self.structure, key).extend(_value(v) for v in self.result.details[key])

    def operators(self, ops: Vector | None, label: str) -> None:
        """Each stored tensor's role from the operators that take it (formats/graph_roles.py),
        the operator counts (details["ops"]), and the operators kept (result.structure)."""
        nodes = operators(ops, self.result.details.get("operator_codes", []), self.names, label)
        self.structure.nodes.extend(nodes)
        if ops is not None and ops.length > len(nodes):
            self.structure.complete = False
        counts = self.result.details.setdefault("ops", {})
        for n in nodes:
            counts[n.op_type] = counts.get(n.op_type, 0) + 1
        tensors = self.result.tensors
        assign_roles({n: tensors[n] for n in self.names.values() if n in tensors},
                     ((n.op_type, n.inputs, n.outputs) for n in nodes))

    def tensor(self, t: Table, g: int, i: int, label: str) -> bool:
        """One tensor; True when it owns bytes (and is listed)."""
        rep = self.rep
        name_field = t.string(3, "tensor name")
        name = name_field[0] if name_field else f"tensor_{i}"
        if g:
            name = f"subgraph{g}/{name}"
        self.names[i] = name
        path = f"{label} > tensor {i} > {name}"
        shape_vec = t.vector(0, 4, "shape")
        shape: tuple[int, ...] = ()
        if shape_vec is not None:
            if shape_vec.length > MAX_RANK:
                raise Malformed(f"Tensor {name!r} has {shape_vec.length} dimensions.", shape_vec.pos)
            shape = shape_vec.numbers("i")
            rep.span(shape_vec.pos, 4 + shape_vec.nbytes, "shape", f"{path} > shape",
                     f"{len(shape)} dims: {list(shape)}", tensor=name)
        code = t.scalar(1, "b", what="type")
        dtype = TENSOR_TYPES[code] if 0 <= code < len(TENSOR_TYPES) else f"TYPE_{code}"
        if i in self.io_wanted:
            sig = t.vector(7, 4, "shape signature")  # -1 where the size is dynamic
            dims = list(sig.numbers("i", MAX_RANK)) if sig is not None and sig.length == len(shape) else list(shape)
            self.io_found[i] = {"name": name, "dtype": dtype, "shape": [d if d >= 0 else "?" for d in dims],
                                "offset": t.pos, "length": t.inline_size}
        p = t.field_pos(1)
        if p is not None:
            rep.span(p, 1, "type", f"{path} > type", f"{code} ({dtype})", tensor=name)
        index = t.scalar(2, "I", what="buffer index")
        p = t.field_pos(2)
        if p is not None:
            rep.span(p, 4, "index", f"{path} > buffer", f"u32 = {index}", tensor=name)
        if name_field:
            rep.span(name_field[1], name_field[2], "key", f"{path} > name", short_repr(name_field[0]), tensor=name)
        rep.span(t.pos, t.inline_size, "tensor_info", path, tensor=name)
        if t.scalar(10, "I", what="external buffer"):
            rep.warning("tflite_external_buffer", f"Tensor {name!r} keeps its data in an external "
                        "buffer group (another file), which this reader does not follow.", t.pos,
                        t.inline_size, name)
            return False
        where = self.buffer_data(index, name, t)
        if where is None:
            return False
        offset, length = where
        if any(d < 0 for d in shape):
            rep.error("tflite_bad_shape", f"Tensor {name!r} holds data but has the dynamic shape "
                      f"{list(shape)}.", shape_vec.pos if shape_vec else t.pos, 4, name)
            shape = tuple(max(d, 0) for d in shape)
        info = TensorInfo(name, dtype, tuple(shape), self.result.file, offset, length)
        info.extra.update(info_span=(t.pos, t.inline_size), buffer=index)
        need = -(-math.prod(shape) * BITS[dtype] // 8) if dtype in BITS else None
        if t.field_pos(6) is not None:  # sparsity parameters: the buffer holds a compressed format
            rep.info("tflite_sparse", f"Tensor {name!r} is stored sparse (TFLite sparsity "
                     f"parameters): its {length} bytes are a compressed format, not {dtype} "
                     f"{list(shape)}; it is listed, not decoded.", t.pos, t.inline_size, name)
            info.quant = Quant(codec="tflite_sparse", label=f"TFLITE_SPARSE_{dtype}",
                               refusal="TFLite sparse tensors are not decoded")
        elif need is not None and need != length:
            rep.error("tflite_size_mismatch", f"Tensor {name!r} is {dtype} {list(shape)}: {need} bytes, "
                      f"but its buffer {index} holds {length}.", offset, length, name)
        q = t.table(4, "quantization parameters")
        if q is not None and info.quant is None:
            self.quantization(q, info, path)
        if name in self.result.tensors:
            rep.error("duplicate_tensor", f"Two tensors are named {name!r}; the second one hides the "
                      "first.", t.pos, t.inline_size, name)
        self.result.tensors[name] = info
        self.listed += 1
        rep.span(offset, length, "tensor_data", f"data > {name}", f"{dtype} {list(shape)}", tensor=name)
        return True

    def buffer_data(self, index: int, name: str, t: Table) -> tuple[int, int] | None:
        """(offset, length) of a buffer's bytes, None when it holds none (an activation)."""
        if self.buffers is None or index >= self.buffers.length:
            if index:
                self.rep.error("tflite_bad_buffer", f"Tensor {name!r} names buffer {index}, but the "
                               f"model has {self.buffers.length if self.buffers else 0}.",
                               t.field_pos(2) or t.pos, 4, name)
            return None
        b = self.buffers.table(index, f"buffer {index}")
        data = b.vector(0, 1, f"data of buffer {index}")
        if data is not None and data.length:
            self.rep.span(data.pos, 4, "size", f"buffer {index} > data length", f"u32 = {data.length}", tensor=name)
            return data.data, data.length
        offset, size = b.scalar(1, "Q", what="offset"), b.scalar(2, "Q", what="size")
        offset_at, size_at = b.field_pos(1), b.field_pos(2)  # None when left out (offset and size 0)
        if offset <= 1 or not size or offset_at is None or size_at is None:
            return None  # 0: no data; 1: the writer's placeholder
        self.rep.span(offset_at, 8, "pointer", f"buffer {index} > offset", f"u64 = {offset}", tensor=name)
        self.rep.span(size_at, 8, "size", f"buffer {index} > size", f"u64 = {size}", tensor=name)
        if offset + size > self.buf.size:
            self.rep.error("data_past_end", f"Tensor {name!r} (buffer {index}) needs bytes {offset} to "
                           f"{offset + size}, past the end of the file ({self.buf.size} bytes).",
                           b.field_pos(1), 8, name)
        return offset, size

    def quantization(self, q: Table, info: TensorInfo, path: str) -> None:
        rep, name = self.rep, info.name
        scale = q.vector(2, 4, "scale vector")
        zero = q.vector(3, 8, "zero_point vector")
        qdim = q.scalar(6, "i", what="quantized_dimension")
        if scale is not None:
            rep.span(scale.pos, 4 + scale.nbytes, "value", f"{path} > quantization > scale",
                     f"{scale.length} x f32: {short_repr(list(scale.numbers('f', 4)))}", tensor=name)
        if zero is not None:
            rep.span(zero.pos, 4 + zero.nbytes, "value", f"{path} > quantization > zero_point",
                     f"{zero.length} x i64: {short_repr(list(zero.numbers('q', 4)))}", tensor=name)
        p = q.field_pos(6)
        if p is not None:
            rep.span(p, 4, "value", f"{path} > quantization > quantized_dimension", f"i32 = {qdim}", tensor=name)
        if scale is None or not scale.length or info.dtype not in QUANTIZED:
            return
        problem = _quant_problem(info, scale, zero, qdim)
        if problem:
            rep.error("tflite_bad_quantization", f"Tensor {name!r}: {problem}; it is not dequantized.",
                      scale.pos, 4 + scale.nbytes, name)
            info.quant = Quant(codec="affine", label=f"TFLITE_{info.dtype}", refusal=problem)
            return
        info.quant = _quant_record(info, scale, zero, qdim)


def _value(v: dict) -> GraphValue:
    return GraphValue(v["name"], v["dtype"], tuple(v["shape"]), v["offset"], v["length"])


def _indices(v: Vector | None) -> tuple:
    return v.numbers("i", 64) if v is not None else ()


def _quant_problem(info: TensorInfo, scale: Vector, zero: Vector | None, qdim: int) -> str:
    n, shape = scale.length, info.shape
    if zero is not None and zero.length not in (0, 1, n):
        return f"it has {n} scales but {zero.length} zero points"
    if n > 1 and not 0 <= qdim < len(shape):
        return f"its {n} scales run along dimension {qdim}, which a {len(shape)}-d tensor does not have"
    if n > 1 and shape[qdim] != n:
        return f"dimension {qdim} has {shape[qdim]} entries but there are {n} scales"
    return ""


def _quant_record(info: TensorInfo, scale: Vector, zero: Vector | None, qdim: int) -> Quant:
    """The quant record of a TFLite quantized tensor (the one place that builds it): value =
    scale * (q - zero_point), per tensor or per channel along `quantized_dimension`."""
    bits, signed = QUANTIZED[info.dtype]
    rank = max(1, len(info.shape))
    n = scale.length

    def along(count: int) -> tuple[int, ...]:
        return tuple(count if (d == qdim and count > 1) else 1 for d in range(rank))

    scale_info = TensorInfo(f"{info.name}.scale", "F32", (n,), info.file, scale.data, scale.nbytes)
    parts = {"scale": scale_info}
    zero_shape = None
    if zero is not None and zero.length:
        parts["zero_point"] = TensorInfo(f"{info.name}.zero_point", "I64", (zero.length,), info.file,
                                         zero.data, zero.nbytes)
        zero_shape = along(zero.length)
    return Quant(codec="affine", label=f"TFLITE_{info.dtype}", parts=parts, bits=bits, signed=signed,
                 divide=False, axis=qdim if n > 1 else None, scale_shape=along(n),
                 zero_shape=zero_shape)
