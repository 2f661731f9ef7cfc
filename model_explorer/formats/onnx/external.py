"""External data: a tensor whose bytes live in another file beside the model (model.onnx_data).

onnx.external_data_helper writes external_data entries location (a path relative to the model's
folder), offset and length (both optional: 0 and the rest of the file). The file is only sized
here, never read; a location that leaves the folder is refused before anything is opened (the
onnx checker refuses it too), and a missing or short file is an error at the entry's bytes.
"""

from __future__ import annotations

import posixpath

from ... import sources
from ...dtypes import nbytes_for
from ...records import Quant, TensorInfo
from ...spans import Report, Span
from .tensor import Parsed


class ExternalFiles:
    """Sizes of the files the model's tensors point into, each looked up once."""

    def __init__(self, model_file: str) -> None:
        self.folder = sources.dirname(model_file)
        self.sizes: dict[str, int | None] = {}

    def size(self, path: str) -> int | None:
        if path not in self.sizes:
            try:
                if not sources.exists(path):
                    self.sizes[path] = None
                else:
                    src = sources.open_source(path)
                    self.sizes[path] = src.size
                    src.close()
            except OSError:
                self.sizes[path] = None
        return self.sizes[path]

    def found(self) -> dict[str, int]:
        return {p: s for p, s in self.sizes.items() if s is not None}


def _safe_location(location: str) -> bool:
    if not location or "\\" in location or "\0" in location or location.startswith("/"):
        return False
    if len(location) > 1 and location[1] == ":":  # C:...
        return False
    norm = posixpath.normpath(location)
    return not (norm == ".." or norm.startswith("../"))


def _number(value: str) -> int | None:
    return int(value) if value.isdigit() and len(value) <= 20 else None


def external_info(p: Parsed, name: str, files: ExternalFiles, rep: Report) -> TensorInfo:
    """The record of a tensor stored in another file; its `quant.refusal` says why when its
    bytes cannot be reached, so no view reads a file that is not there."""
    dt = p.dtype
    where = p.external_at or (p.at, p.length)
    location = p.external.get("location", ("", 0, 0))[0]
    need = nbytes_for(dt.bits, p.numel) if dt.bits else 0
    offset = _number(p.external.get("offset", ("0",))[0])
    length = _number(p.external.get("length", (str(need),))[0])
    info = TensorInfo(name, dt.dtype, tuple(p.dims), rep.file, where[0], 0,
                      extra={"info_span": (p.at, p.length), "external": location})

    def unusable(reason: str) -> TensorInfo:
        info.quant = Quant(codec="onnx_external", label=dt.dtype, refusal=reason)
        return info

    if not _safe_location(location):
        rep.error("onnx_external_path", f"Tensor {name!r} points at external data "
                  f"{location!r}; a location must be a relative path inside the model's folder "
                  "(no '..', no absolute path). The file was not opened.", *where, name)
        return unusable(f"its external data location {location!r} leaves the model's folder")
    if offset is None or length is None:
        rep.error("onnx_external_bad", f"Tensor {name!r} has external data offset "
                  f"{p.external.get('offset', ('',))[0]!r} and length "
                  f"{p.external.get('length', ('',))[0]!r}; both must be decimal byte counts.",
                  *where, name)
        return unusable("its external data offset or length is not a number")
    if dt.bits and length != need:
        rep.error("onnx_size_mismatch", f"Tensor {name!r} is {dt.onnx} {p.dims}, which needs "
                  f"{need} bytes, but its external data length is {length}.", *where, name)
    path = sources.join(files.folder, location)
    size = files.size(path)
    info.file, info.offset, info.length = path, offset, length
    if size is None:
        rep.error("onnx_external_missing", f"Tensor {name!r} keeps its {length:,} bytes in "
                  f"{location!r} beside the model, but that file is not there.", *where, name)
        return unusable(f"its external data file {location!r} is missing")
    if offset + length > size:
        rep.error("onnx_external_short", f"Tensor {name!r} needs bytes {offset:,} to "
                  f"{offset + length:,} of {location!r}, but that file has only {size:,} bytes: "
                  "it is truncated or belongs to another export.", *where, name)
        return unusable(f"{location!r} ends before its bytes")
    if length:
        rep.spans.append(Span(offset, length, "tensor_data", "data > " + name, path,
                              f"{dt.dtype} {list(p.dims)}", name))
    return info
