"""The plain records every layer shares: where a tensor lives, and what was read from a model.

Nothing here decodes or checks anything; the format readers fill these in and every layer
above reads them.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from .sources import SourceSet
from .spans import Finding, Span
from .tensormap import SpanList, TensorMap


def plain_value(value: Any) -> Any:
    """A metadata entry as a plain value: a GGUF key/value's `.value`, anything else as it is."""
    return getattr(value, "value", value)


def meta_value(metadata: dict[str, Any], key: str, default: Any = None) -> Any:
    """The plain value of `metadata[key]` (GGUF key/values and side-file entries alike)."""
    entry = metadata.get(key)
    return default if entry is None else plain_value(entry)


@dataclass(slots=True)
class TensorInfo:
    """Where one tensor lives: its stored element type (`dtype`, as the file names it: "Q4_K",
    "BF16", "U32"), shape, file, absolute byte range; `label` is what a person reads."""

    name: str
    dtype: str
    shape: tuple[int, ...]
    file: str
    offset: int
    length: int
    byteorder: str = "<"
    # PyTorch: element strides, storage key and offset in elements inside that storage.
    stride: tuple[int, ...] | None = None
    storage: str | None = None
    storage_offset: int = 0
    # Quantization beyond the stored dtype (MLX groups, a Hub scheme): None for a plain tensor.
    quant: Quant | None = None
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def numel(self) -> int:
        return math.prod(self.shape) if self.shape else 1

    @property
    def end(self) -> int:
        return self.offset + self.length

    @property
    def stored_bytes(self) -> int:
        """Bytes on disk: its own and its quantization components', each range counted once."""
        if not self.quant:
            return self.length
        seen = {(self.file, self.offset)}
        n = self.length
        for part in self.quant.parts.values():
            if (part.file, part.offset) not in seen:
                seen.add((part.file, part.offset))
                n += part.length
        return n

    @property
    def label(self) -> str:
        """The type a person would quote: the stored dtype ("Q4_K", "BF16"), or for a quantized
        tensor its quantization's label ("MLX_Q4", "GPTQ_Q4", "BNB_NF4", "FP8_E4M3_B128"...)."""
        return self.quant.label if self.quant is not None else self.dtype

    def to_dict(self) -> dict[str, Any]:
        d = {
            "name": self.name,
            "dtype": self.dtype,
            "shape": list(self.shape),
            "file": self.file,
            "offset": self.offset,
            "length": self.length,
        }
        if self.stride is not None:
            d.update(stride=list(self.stride), storage=self.storage,
                     storage_offset=self.storage_offset)
        if self.quant:
            d["quant"] = self.quant.to_dict()
        return d


@dataclass(frozen=True, slots=True, kw_only=True)
class Quant:
    """How a tensor is quantized beyond its stored dtype: made by the format layer
    (formats/mlx.py, formats/hubquant/, the ONNX, OpenVINO, TFLite, CTranslate2 and HDF5
    readers), read by the codecs (tensors/) and the views.

    codec: the decoder's key ("mlx_affine", "gptq", "awq", "bnb_4bit", "fp8_block",
        "ct_pack", ...; tensors/read.py and tensors/schemes/ choose the decoder by it). A refused
        tensor's codec may be only its scheme's layout ("ct") when the grouping stopped early.
    label: what a person reads ("MLX_Q4", "GPTQ_Q4", "BNB_NF4", "FP8_E4M3_B128").
    parts: the component tensors by role ("scales", "biases", "qweight", "qzeros", ...).
    refusal: why it cannot be decoded (a component missing or malformed; the codec refuses
        with this reason), None when its parts are complete.
    The scheme's parameters follow; None where a scheme has no such parameter.
    """

    codec: str
    label: str
    parts: Mapping[str, TensorInfo] = field(default_factory=dict)
    bits: int | None = None
    group_size: int | None = None      # values sharing one scale along a row (bnb's blocksize),
                                       # or along `axis` where set (ONNX block_size)
    sym: bool | None = None
    inferred: bool = False             # bits and group size read off the shapes, not a config
    refusal: str | None = None
    block: tuple[int, int] | None = None  # 2-D scale blocks [rows, cols] (FP8, compressed-tensors)
    act_order: bool | str | None = None   # GPTQ desc_act, compressed-tensors actorder
    checkpoint_format: str | None = None  # GPTQ: "gptq" (zero points stored minus 1), "gptq_v2"
    version: str | None = None            # AWQ layout: "gemm", "gemv", "gemv_fast"
    quant_type: str | None = None         # bitsandbytes 4-bit: "nf4", "fp4"
    dequant_dtype: str | None = None      # bitsandbytes: the dtype its quant state decodes to
    nested: bool | None = None            # bitsandbytes double quantization of absmax
    nested_group_size: int | None = None
    nested_offset: float | None = None
    nested_dtype: str | None = None
    scale_dtype: str | None = None        # FP8: stored dtype of weight_scale_inv
    strategy: str | None = None           # how scales are shared: tensor, channel, group, block
                                          # (compressed-tensors; ONNX QDQ: tensor, channel, group)
    value_type: str | None = None         # compressed-tensors: "int" or "float" codes
    sparsity: str | None = None           # compressed-tensors: "sparse-24-bitmask", ...
    values_dtype: str | None = None       # compressed-tensors sparse: stored dtype of the kept values
    # Integer codes with a scale (ONNX QDQ, OpenVINO, TFLite, CTranslate2: tensors/schemes/affine.py
    # and onnx_quant.py); the scale and zero-point tensors are `parts` "scale" and "zero_point".
    axis: int | None = None               # the axis the scales vary along (ONNX axis, TFLite
                                          # quantized_dimension); group_size then counts along it
    signed: bool | None = None            # codes are signed integers
    zero_point: float | None = None       # one constant zero point (no "zero_point" part)
    divide: bool | None = None            # value = code / scale (CTranslate2), not code * scale
    scale_shape: tuple[int, ...] | None = None  # the scale's full-rank shape, broadcast to the weight
    zero_shape: tuple[int, ...] | None = None   # the same for the zero-point part
    round_to: str | None = None           # dtype the file's own graph rounds the values to ("F16")
    scale_round_to: str | None = None     # dtype the graph rounds the scale to before using it
    # ONNX: the typed protobuf field holding the values (or the codes) one varint each
    # ("int32_data", ...); None when they are raw bytes.
    varint_field: str | None = None
    # Chunked HDF5 datasets read through h5py (tensors/schemes/h5py_dataset.py): the dataset's
    # path, where the HDF5 file lies in the byte source (start, length), its filter names.
    dataset: str | None = None
    window: tuple[int, int] | None = None
    filters: tuple[str, ...] | None = None

    @property
    def usable(self) -> bool:
        """Whether its components are complete (a codec may still not exist: NOT_DECODED)."""
        return self.refusal is None

    def params(self) -> dict[str, Any]:
        """The scheme's own parameters that are set, as plain values (for summaries)."""
        out: dict[str, Any] = {}
        for name in SCHEME_PARAMS:
            v = getattr(self, name)
            if v is not None:
                out[name] = list(v) if isinstance(v, tuple) else v
        return out

    def to_dict(self) -> dict[str, Any]:
        """Plain values; components by role as their tensor names."""
        d: dict[str, Any] = {"codec": self.codec, "label": self.label, "bits": self.bits,
                             "group_size": self.group_size, "sym": self.sym}
        if self.inferred:
            d["inferred"] = True
        if self.refusal is not None:
            d["refusal"] = self.refusal
        d.update(self.params())
        d["parts"] = {role: t.name for role, t in self.parts.items()}
        return d


# Quant fields a scheme sets beside bits, group size and symmetry.
SCHEME_PARAMS = ("block", "act_order", "checkpoint_format", "version", "quant_type",
                 "dequant_dtype", "nested", "nested_group_size", "nested_offset", "nested_dtype",
                 "scale_dtype", "strategy", "value_type", "sparsity", "values_dtype", "axis",
                 "signed", "zero_point", "divide", "scale_shape", "zero_shape", "round_to",
                 "scale_round_to", "varint_field", "dataset", "window", "filters")


@dataclass(slots=True)
class IndexMismatch:
    """A tensor the index and the shards disagree about, kept beside `tensors`, never in it.

    kind: "missing" (the index names it, no shard holds it where the index says: no bytes),
    "duplicate" (a second stored copy, which the index does not use: `info` says where),
    "orphan" (a shard holds it, the index does not list it; the tensor is in `tensors`),
    "named_twice" (the index names it twice; JSON readers keep the last mapping).
    `note` is the line a person reads ("missing: shard model-00023-of-00050.safetensors");
    `file`/`offset`/`length` point at the bytes that show it (the index entry, or the copy).
    """

    name: str
    kind: str
    shard: str
    note: str
    file: str | None = None
    offset: int | None = None
    length: int | None = None
    info: TensorInfo | None = None  # the unused copy of a "duplicate"

    def to_dict(self) -> dict[str, Any]:
        return {"name": self.name, "kind": self.kind, "shard": self.shard, "note": self.note,
                "file": self.file, "offset": self.offset, "length": self.length}


class CheckpointRecord:
    """What the readers found in one model, possibly spread over several files: a plain record.

    The format readers fill it in; the tensor code reads through it (`tensors`, `format`,
    `sources`); `Checkpoint` (checkpoint.py) adds the decoding shortcuts on top.

    Attributes:
        format: "safetensors" | "gguf" | "pytorch" | "pickle" | "unknown".
        files: every file it spans, in order.
        tensors: name -> TensorInfo, in file order (a `TensorMap`: records read as columns
            are built when first looked up; assigning a dict wraps it).
        metadata: format metadata (safetensors `__metadata__`, GGUF key/values), plus
            "config.json" / "generation_config.json" contents when present.
        findings: every diagnosis, errors first in the order found.
        spans: labelled byte ranges of every header field, in file order per file (a
            `SpanList`: a file's spans may be built when first asked for).
    """

    def __init__(self, source: str, format: str = "unknown") -> None:
        self.source = source
        self.format = format
        self.files: list[str] = []
        self._tensors = TensorMap()
        self.metadata: dict[str, Any] = {}
        self.findings: list[Finding] = []
        self.spans = SpanList()
        self.sizes: dict[str, int] = {}
        # Format-specific details the views use (GGUF kv list, shard map, pickle imports...).
        self.details: dict[str, Any] = {}
        # file -> its graph (formats/structure.GraphStructure) for ONNX, OpenVINO and TFLite
        self.structures: dict[str, Any] = {}
        self.derived = DerivedFacts()  # what the model layer works out once (never in details)
        self.sources = SourceSet()

    @property
    def tensors(self) -> TensorMap:
        return self._tensors

    @tensors.setter
    def tensors(self, value) -> None:
        self._tensors = value if isinstance(value, TensorMap) else TensorMap(value)

    def build_all(self) -> None:
        """Build every span and tensor record left for later, so findings that building
        meets join `findings` (doctor and reports read everything)."""
        self.spans.build_all()
        self.tensors.build_all()
        self.findings.sort(key=lambda f: ("error", "warning", "info").index(f.severity))

    # -- bytes ---------------------------------------------------------------------------

    def byte_source(self, file: str | None = None):
        """The open ByteSource of one of the files (the first by default)."""
        return self.sources.get(file or self.files[0])

    def read_bytes(self, offset: int, length: int, file: str | None = None) -> bytes:
        return self.byte_source(file).read(offset, length)

    def meta(self, key: str, default: Any = None) -> Any:
        """The plain value of a metadata entry (a GGUF key/value or a side file), or `default`."""
        return meta_value(self.metadata, key, default)

    def spans_for(self, file: str | None = None) -> list[Span]:
        file = file or (self.files[0] if self.files else "")
        return self.spans.for_file(file)

    def close(self) -> None:
        self.sources.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    # -- summaries -----------------------------------------------------------------------

    @property
    def errors(self) -> list[Finding]:
        return [f for f in self.findings if f.severity == "error"]

    @property
    def warnings(self) -> list[Finding]:
        return [f for f in self.findings if f.severity == "warning"]

    @property
    def total_size(self) -> int:
        return sum(self.sizes.values())

    @property
    def parameter_count(self) -> int:
        return self.tensors.numel_total()  # from the columns, building no record

    def dtype_mix(self) -> dict[str, int]:
        """Tensor count per label (the dtype, or the quantization's label), most common first."""
        return self.tensors.label_counts()

    def finding_counts(self) -> dict[str, int]:
        counts = Counter(f.severity for f in self.findings)
        return {s: counts.get(s, 0) for s in ("error", "warning", "info")}

    @property
    def index_mismatches(self) -> list[IndexMismatch]:
        """Tensors a shard index names but no shard holds, second copies, unlisted tensors."""
        return self.details.get("index_mismatches") or []

    def indexed_counts(self) -> tuple[int, int] | None:
        """(readable, indexed): how many of the tensors an index names can be read, or None
        without an index ("19,600 of 20,000 indexed tensors readable")."""
        indexed = self.details.get("indexed_tensors")
        if indexed is None:
            return None
        missing = {m.name for m in self.index_mismatches if m.kind == "missing"}
        return indexed - len(missing), indexed

    def summary(self) -> dict[str, Any]:
        out = {
            "source": self.source,
            "format": self.format,
            "files": list(self.files),
            "total_size": self.total_size,
            "tensor_count": len(self.tensors),
            "parameter_count": self.parameter_count,
            "dtypes": self.dtype_mix(),
            "findings": self.finding_counts(),
            # filled in at open (formats/hubquant/summary.py): scheme, bits, mix; None if unquantized
            "quantization": self.details.get("quantization"),
        }
        counts = self.indexed_counts()
        if counts is not None:
            out["readable_indexed_tensors"], out["indexed_tensors"] = counts
        return out

    def __repr__(self) -> str:
        c = self.finding_counts()
        return (f"<{type(self).__name__} {self.format} {self.source!r}: {len(self.files)} file(s), "
                f"{len(self.tensors)} tensors, {c['error']} errors, {c['warning']} warnings>")


@dataclass
class DerivedFacts:
    """What the model layer works out from a checkpoint's files, kept with the checkpoint so it
    is worked out once. Apart from `details`, which holds what the readers found (views and
    exports show it); these are the model layer's own objects, typed there."""

    hparams: Any = None  # model/hparams.py read_hparams: HParams
    tokenizer: Any = None  # model/tokenizer_info.py read_tokenizer: (TokenizerInfo, findings)
    tokenizer_object: Any = None  # model/inspector.py build: the Tokenizer itself
    # model/sidefiles.py: side-file paths and contents looked up; model/layouts.py: "layout"
    side_files: dict[str, Any] = field(default_factory=dict)
