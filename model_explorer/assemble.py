"""Find the files of a model, detect each one's format, read it and merge it into a Checkpoint."""

from __future__ import annotations

import importlib
import json
import traceback
from collections.abc import Callable
from functools import partial
from typing import Any

from . import sources
from .checkpoint import Checkpoint
from .formats import hubquant, mlx
from .formats.detect import WEIGHTS, detect, extension_matches, identify
from .formats.detect_pickle import PICKLE_NAMES, pickle_prefix
from .formats.gguf_split import read_splits
from .formats.hubquant.summary import quant_summary
from .formats.result import FileResult
from .formats.shards import read_index
from .http_ranges import RangeProblem
from .spans import Finding, Report
from .subsources import split_member
from .tensormap import report_lazily


def _lazy(module: str, name: str) -> Callable:
    """A reader imported when a file of its format is first read: opening a safetensors folder
    does not pay for importing the HDF5, ONNX or pickle readers (tens of milliseconds each)."""

    def read(*args, **kwargs):
        return getattr(importlib.import_module(module, __package__), name)(*args, **kwargs)

    read.__name__ = read.__qualname__ = name
    return read


READERS = {
    "safetensors": _lazy(".formats.safetensors", "read_safetensors"),
    "gguf": _lazy(".formats.gguf", "read_gguf"),
    "zip": _lazy(".formats.pytorch", "read_torch_zip"),
    "torch_legacy": _lazy(".formats.pytorch", "read_torch_legacy"),
    "pickle": _lazy(".formats.pytorch", "read_pickle"),
    "npy": _lazy(".formats.npy", "read_npy"),
    "npz": _lazy(".formats.npy", "read_npz"),
    "torch_tar": _lazy(".formats.pytorch.tar", "read_torch_tar"),
    "hdf5": _lazy(".formats.hdf5", "read_hdf5"),
    "keras": _lazy(".formats.hdf5", "read_keras"),
    "flax_msgpack": _lazy(".formats.flax_msgpack", "read_flax_msgpack"),
    "onnx": _lazy(".formats.onnx", "read_onnx"),
    "ggml": _lazy(".formats.ggml_legacy", "read_ggml_legacy"),
    "tflite": _lazy(".formats.tflite", "read_tflite"),
    "openvino": _lazy(".formats.openvino", "read_openvino"),
    "ctranslate2": _lazy(".formats.ctranslate2", "read_ctranslate2"),
    "archive": _lazy(".formats.archive", "read_archive"),
}
# detected kind -> Checkpoint.format
FORMAT_OF = {"safetensors": "safetensors", "gguf": "gguf", "zip": "pytorch",
             "torch_legacy": "pytorch", "pickle": "pickle", "unknown": "unknown",
             "npy": "numpy", "npz": "numpy", "torch_tar": "pytorch", "hdf5": "hdf5", "keras": "keras",
             "flax_msgpack": "flax", "onnx": "onnx", "ggml": "ggml", "tflite": "tflite", "openvino": "openvino",
             "ctranslate2": "ctranslate2", "archive": "archive"}
SIDE_FILES = ("config.json", "generation_config.json")
MAX_SIDE_FILE = 16 * 1024 * 1024


def assemble(path: str, make: Callable[[str], Checkpoint] = Checkpoint) -> Checkpoint:
    """Read every file of the model at `path` into one Checkpoint (no checks beyond the readers').
    `make` builds the empty record to fill: `Checkpoint` or a subclass (the opener's)."""
    ckpt = make(path)
    if sources.isdir(path):
        _open_directory(path, ckpt)
    elif path.endswith(".index.json"):
        _open_index(path, ckpt)
        _read_side_files(sources.dirname(path), ckpt)
    else:
        result = _read_file(path, ckpt)
        if split_member(path) is None:  # (a member of an archive has no folder to look in)
            if ckpt.format == "gguf":
                read_splits(path, result, ckpt, lambda p: _read_file(p, ckpt))
            _read_side_files(sources.dirname(path), ckpt, quiet=True)
    if ckpt.format == "safetensors" and not hubquant.group_hub(ckpt):
        mlx.group_mlx(ckpt, mlx.quantization_config(ckpt.metadata.get("config.json")))
    if ckpt.format in ("safetensors", "gguf"):
        ckpt.details["quantization"] = quant_summary(ckpt)
    ckpt.findings.extend(ckpt.sources.notes())  # how remote bytes came: ranges ignored or wrong
    ckpt.findings.sort(key=lambda f: ("error", "warning", "info").index(f.severity))
    return ckpt


def _read_file(path: str, ckpt: Checkpoint) -> FileResult:
    """Detect one file's format from its bytes, read it and merge it into the checkpoint."""
    src = _open_source(path)
    ckpt.sources.add(src)
    try:
        head = bytes(src.read(0, 512))  # a tar's magic is at byte 257
    except RangeProblem:  # the server sent other bytes: the source's note says which
        result = FileResult(src.name, src.size, Report(src.name))
        _merge(ckpt, result)
        return result
    kind = detect(head, src.size)
    if kind in ("unknown", "zip", "torch_tar"):  # a Keras zip, an HDF5 user block, an archive of
        kind = _identified(src, kind)            # models: identify reads more bytes
    named = kind
    if kind == "unknown":
        # Bytes that match nothing (a bad magic, a file cut short) are read by the format the
        # name claims, so its reader can say what is wrong where.
        named = next((k for k in ("safetensors", "gguf", "hdf5", "flax_msgpack") if extension_matches(k, sources.basename(path))),
                     "unknown")
    reader = READERS.get(named)
    if reader is None:
        result = FileResult(src.name, src.size, _unread(src, head))
    else:
        result = _read_safely(reader, src, named)
        if named == kind and not extension_matches(kind, sources.basename(path)):
            result.report.info("extension_mismatch", f"The name {sources.basename(path)!r} suggests "
                               f"another format, but the bytes are {FORMAT_OF[kind]}; read as "
                               f"{FORMAT_OF[kind]}.", 0, min(8, src.size))
    fmt = FORMAT_OF[named]
    if ckpt.format == "unknown":
        ckpt.format = fmt
    elif fmt != ckpt.format:
        ckpt.findings.append(Finding.of("mixed_formats", f"{path!r} is {fmt}, but the "
                                        f"checkpoint is {ckpt.format}.", file=src.name))
    _merge(ckpt, result)
    return result


def _open_source(path: str):
    """A file, or a member of an archive by its path inside it (`pkg.whl!/pkg/model.pt`),
    opened in place (formats/archive/members.py)."""
    member = split_member(path)
    if member is None:
        return sources.open_source(path)
    from .formats.archive.members import open_path

    return open_path(sources.open_source(member[0]), member[1], path)


def _identified(src, kind: str) -> str:
    try:
        reads_as = identify(src.read, src.size, src.name).reads_as
    except OSError:
        return kind
    return reads_as if reads_as in READERS else kind


def _unread(src, head: bytes) -> Report:
    """A file no reader of this version takes: a weight format named by its bytes (ExecuTorch,
    Core ML, a GGML-era LoRA...) is a warning that it was not checked, anything else unknown_format
    (as the audit lists them: audits/inventory.py)."""
    rep = Report(src.name)
    try:
        what = identify(src.read, src.size, src.name)
    except OSError:
        what = None
    if what is not None and what.role == WEIGHTS:
        rep.warning("format_not_read", f"The bytes are {what.label}, a weight format this version "
                    "does not read yet: no tensor of this file is listed or checked.", 0, min(16, src.size))
        return rep
    if not src.size:
        rep.error("unknown_format", "The file is empty: there is no format to read.", 0, 0)
        return rep
    shown = " ".join(f"{b:02x}" for b in head[:16])
    said = f" (they read as {what.label})" if what is not None and what.kind != "unknown" else ""
    if src.name.lower().endswith(PICKLE_NAMES):  # never only "unknown format" for a .pkl
        why = pickle_prefix(head, src.size).why or "its opcodes build nothing"
        rep.error("not_a_pickle", f"The name says pickle, but the bytes are not one: {why} "
                  f"(first bytes {shown}{said}). pickle.load fails on it as well; nothing in "
                  "it is imported or called.", 0, min(16, src.size))
        return rep
    rep.error("unknown_format", "The first bytes match no format this tool reads (safetensors "
              f"length + JSON, 'GGUF', a zip or a pickle): {shown}{said}.", 0, min(16, src.size))
    return rep


def _read_safely(reader, src, kind: str) -> FileResult:
    """A reader that fails is a finding on its file, never an exception out of mx.open."""
    try:
        return reader(src)
    except RangeProblem:  # the source's note says what the server sent instead of the range
        return FileResult(src.name, src.size, Report(src.name))
    except Exception as e:  # noqa: BLE001 - any bug, RecursionError or MemoryError included
        tb = traceback.extract_tb(e.__traceback__)
        frame = tb[-1] if tb else None
        place = f"{frame.filename.rsplit('/', 1)[-1]}:{frame.lineno} in {frame.name}" if frame else "?"
        rep = Report(src.name)
        f = rep.error("internal_error", f"The {kind} reader failed on this file with "
                      f"{type(e).__name__}: {str(e)[:200]} (at {place}). This is a bug in "
                      "model_explorer, not proof that the file is bad; what it holds is unknown.",
                      0, min(16, src.size))
        f.extra.update(exception=type(e).__name__, place=place)
        return FileResult(src.name, src.size, rep)


def _merge(ckpt: Checkpoint, result: FileResult) -> None:
    ckpt.files.append(result.file)
    ckpt.sizes[result.file] = result.size
    for extra, size in result.details.get("external_files", {}).items():  # ONNX external data
        if extra not in ckpt.sizes:
            ckpt.files.append(extra)
            ckpt.sizes[extra] = size
    for src in result.companions:
        ckpt.sources.add(src)
        ckpt.files.append(src.name)
        ckpt.sizes[src.name] = src.size
    if result.structure is not None:  # a graph file's operators, inputs and outputs
        ckpt.structures[result.file] = result.structure
    ckpt.spans.extend(result.report.spans)
    if result.lazy_spans is not None:  # the builder only: the FileResult itself can go
        ckpt.spans.defer(result.file, partial(_build_spans, ckpt, result.file, result.lazy_spans),
                         result.lazy_span_kinds)
    ckpt.findings.extend(result.report.findings)
    ckpt.tensors.add_new(result.tensors)  # the first copy stays; shards.py reports the others
    for key, value in result.metadata.items():
        ckpt.metadata.setdefault(key, value)
    if result.details:
        ckpt.details.setdefault("files", {})[result.file] = result.details
        # A pickle summary is shown for the model; with several .bin shards, the first one's.
        if "pickle" in result.details:
            ckpt.details.setdefault("pickle", result.details["pickle"])


def _build_spans(ckpt: Checkpoint, file: str, build) -> list:
    """A file's spans, built when a view first asks: what building meets is a finding then."""
    try:
        spans, found = build(ckpt.byte_source(file))
    except Exception as e:  # noqa: BLE001 - a view asking for spans must never see a traceback
        found = [Finding.of("internal_error", f"Reading the header of {file!r} again "
                            f"for its byte labels failed with {type(e).__name__}: {str(e)[:200]}. "
                            "This is a bug in model_explorer or the file changed since it was "
                            "opened.", 0, None, file=file)]
        spans = []
    report_lazily(ckpt.findings, found)
    return spans


def _open_index(path: str, ckpt: Checkpoint) -> None:
    read_index(path, ckpt, lambda shard: _read_file(shard, ckpt))


def _open_directory(path: str, ckpt: Checkpoint) -> None:
    names = sources.listdir(path)
    indexes = [n for n in names if n.endswith(".index.json")]
    preferred = [n for n in indexes if n.endswith(".safetensors.index.json")] or indexes
    if preferred:
        if len(preferred) > 1:
            ckpt.findings.append(Finding.of("several_indexes", f"The directory holds "
                                            f"{len(preferred)} index files; reading {preferred[0]!r}."))
        _open_index(sources.join(path, preferred[0]), ckpt)
    else:
        ir_data = {n[:-4] + ".bin" for n in names if n.endswith(".xml") and n[:-4] + ".bin" in names}
        weights = ([n for n in names if n.endswith(".safetensors")]
                   or [n for n in names if n.endswith(".gguf")]
                   or [n for n in names if n.endswith((".bin", ".pt", ".pth")) and n not in ir_data]
                   or [n[:-4] + ".xml" for n in sorted(ir_data)]  # OpenVINO IR: read from its XML
                   or sorted((n for n in names if n.endswith(".onnx")), key=lambda n: n != "model.onnx"))
        if not weights:
            ckpt.findings.append(Finding.of("no_weights", "The directory holds no "
                                            ".safetensors, .gguf, .bin or .pt file and no index.",
                                            file=path))
        gguf_first = [n for n in weights if n.endswith((".gguf", ".onnx"))]  # one model per file
        if gguf_first and not [n for n in names if n.endswith(".safetensors")]:
            result = _read_file(sources.join(path, weights[0]), ckpt)
            read_splits(sources.join(path, weights[0]), result, ckpt,
                        lambda p: _read_file(p, ckpt))
            others = [n for n in weights if sources.join(path, n) not in ckpt.files]
            if others:
                ckpt.findings.append(Finding.of("several_models", f"The directory holds "
                                                f"{len(others)} other {ckpt.format.upper()} file(s) ({others[0]!r}...); "
                                                f"read {weights[0]!r}. Open another by its path.",
                                                file=path))
        else:
            for name in weights:
                _read_file(sources.join(path, name), ckpt)
    _read_side_files(path, ckpt)


def _read_side_files(directory: str, ckpt: Checkpoint, quiet: bool = False) -> None:
    """config.json and generation_config.json go into metadata; bad ones get a finding."""
    for name in SIDE_FILES:
        p = sources.join(directory, name)
        if not sources.exists(p):
            continue
        text, problem = sources.read_text(p, MAX_SIDE_FILE)
        value: Any = None
        at: int | None = None
        if text is not None:
            try:
                value = json.loads(text)
            except json.JSONDecodeError as e:
                at = len(text[:e.pos].encode("utf-8"))
                problem = (f"is not valid JSON ({e.msg} at byte {at}, line {e.lineno}, "
                           f"column {e.colno})")
            except RecursionError:
                problem = "nests JSON too deeply to read"
        if problem:
            if not quiet:
                ckpt.findings.append(Finding.of("bad_config", f"{name} {problem}.", at,
                                                None if at is None else 1, file=p))
            continue
        ckpt.metadata[name] = value
