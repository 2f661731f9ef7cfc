"""What a repair will write, before it is written: output files, each a list of tensors with
where their bytes come from.

The fixes edit this description (drop a tensor, rename it, point it at other bytes, give it a
new shape); the writer then streams it to disk. A file no fix touched is copied byte for byte.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

from ..formats.result import FileResult
from ..formats.safetensors import read_safetensors
from ..records import TensorInfo
from ..sources import LocalSource

# Files beside the weights that belong to the model and are copied as they are.
WEIGHT_SUFFIXES = (".safetensors", ".gguf", ".bin", ".pt", ".pth", ".ckpt", ".pkl")


class RepairError(ValueError):
    """The repair cannot be done as asked; nothing was written. The message says why."""


# produce(chunk_bytes) yields the tensor's output bytes in chunks of about that size.
Producer = Callable[[int], Iterator[bytes]]


@dataclass
class OutTensor:
    """One tensor of an output file: its name and header there, and where its bytes come from."""

    name: str
    dtype: str
    shape: tuple[int, ...]
    src_file: str | None  # the source file its bytes are copied from
    src_offset: int  # absolute byte range in src_file
    length: int
    origin: str  # its name in the source
    produce: Producer | None = None  # instead of a plain copy (transposes, byte swaps)
    changed: list[str] = field(default_factory=list)  # what the fixes did to it

    @property
    def touched_bytes(self) -> bool:
        return self.produce is not None


@dataclass
class OutFile:
    """One output weight file (safetensors); `verbatim` while no fix has touched it."""

    name: str  # relative to the destination
    source: str | None  # the source file it comes from
    tensors: list[OutTensor] = field(default_factory=list)
    metadata: dict[str, Any] | None = None
    verbatim: bool = True
    result: FileResult | None = None  # what the reader found in the source file

    def touch(self) -> None:
        self.verbatim = False


@dataclass
class Build:
    """The whole output: weight files, the index, config.json and the other side files."""

    source: str
    kind: str  # "safetensors" | "gguf" | "pytorch"
    files: list[OutFile] = field(default_factory=list)
    config: dict | None = None  # config.json as it will be written (None: none / copied as is)
    config_changed: bool = False
    index_name: str | None = None  # write an index under this name
    index_meta: dict[str, Any] = field(default_factory=dict)
    index_source: str | None = None  # the source index (copied as is unless rewritten)
    index_rewrite: bool = False
    side_files: dict[str, str] = field(default_factory=dict)  # dest name -> source path
    notes: list[str] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)  # losses the report must show as errors
    gguf: Any = None  # the GGUF plan (gguf_meta.GGUFEdit) for GGUF sources (the first split)
    gguf_more: list[Any] = field(default_factory=list)  # the other splits of a split GGUF, in order
    single_file: bool = False  # the source is one file, not a folder

    def tensors(self) -> Iterator[tuple[OutFile, OutTensor]]:
        for f in self.files:
            for t in f.tensors:
                yield f, t

    def find(self, name: str) -> tuple[OutFile, OutTensor] | None:
        for f, t in self.tensors():
            if t.name == name:
                return f, t
        return None

    def file_named(self, name: str) -> OutFile | None:
        return next((f for f in self.files if f.name == name), None)


def source_dir(path: str) -> str:
    return path if os.path.isdir(path) else os.path.dirname(os.path.abspath(path))


def read_header(path: str) -> FileResult:
    """A safetensors file's header as the reader sees it (tensors, metadata, findings)."""
    src = LocalSource(path)
    try:
        return read_safetensors(src)
    finally:
        src.close()


def tensors_in_order(result: FileResult) -> list[TensorInfo]:
    return sorted(result.tensors.values(), key=lambda t: (t.offset, t.length))


def safetensors_file(path: str, name: str) -> OutFile:
    """An output file that starts as a verbatim copy of one source safetensors file."""
    result = read_header(path)
    meta = dict(result.metadata) if result.metadata else None
    out = OutFile(name, path, metadata=meta, result=result)
    for t in tensors_in_order(result):
        out.tensors.append(OutTensor(t.name, t.dtype, tuple(t.shape), path, t.offset, t.length, t.name))
    return out


def side_files(directory: str, skip: set[str]) -> dict[str, str]:
    """Plain files beside the weights (config, tokenizer, README...), by name."""
    out = {}
    for name in sorted(os.listdir(directory)):
        p = os.path.join(directory, name)
        if name in skip or not os.path.isfile(p) or name.endswith(WEIGHT_SUFFIXES):
            continue
        if name.endswith(".index.json"):
            continue
        out[name] = p
    return out


def load_json(path: str, limit: int = 256 * 1024 * 1024) -> Any:
    if os.path.getsize(path) > limit:
        raise RepairError(f"{path!r} is larger than {limit} bytes; not read.")
    with open(path, encoding="utf-8") as f:
        return json.load(f)
