"""`open(source)`: find the files of a model, detect each one's format, and read it."""

from __future__ import annotations

import contextlib
import gc
import json
import os
import re
from typing import Any

from . import sources
from .checkpoint import Checkpoint
from .formats import mlx
from .formats.detect import detect, extension_matches
from .formats.gguf import read_gguf
from .formats.pytorch import read_pickle, read_torch_legacy, read_torch_zip
from .formats.safetensors import FileResult, read_safetensors
from .formats.shards import read_index
from .spans import Finding, Report

READERS = {
    "safetensors": read_safetensors,
    "gguf": read_gguf,
    "zip": read_torch_zip,
    "torch_legacy": read_torch_legacy,
    "pickle": read_pickle,
}
# detected kind -> Checkpoint.format
FORMAT_OF = {"safetensors": "safetensors", "gguf": "gguf", "zip": "pytorch",
             "torch_legacy": "pytorch", "pickle": "pickle", "unknown": "unknown"}
SIDE_FILES = ("config.json", "generation_config.json")
MAX_SIDE_FILE = 16 * 1024 * 1024
_SPLIT = re.compile(r"^(?P<stem>.*)-(?P<no>\d{5})-of-(?P<count>\d{5})\.gguf$")


def open(source: str | os.PathLike, deep: bool = False) -> Checkpoint:  # noqa: A001
    """Open a checkpoint file, directory, index or URL and read every header in it.

    Raises FileNotFoundError / OSError only when the path itself cannot be read; whatever
    the bytes say, a Checkpoint comes back with findings that locate the problems.
    """
    path = os.fspath(source)
    if not sources.exists(path):
        raise FileNotFoundError(f"No such file or directory: {path!r}")
    with _no_gc():
        ckpt = _open(path)
    if deep:
        from .tensors.deep import deep_check

        deep_check(ckpt)
    return ckpt


@contextlib.contextmanager
def _no_gc():
    """Headers make hundreds of thousands of small objects and no reference cycles; the cyclic
    collector would walk them again and again (40% of opening a 90,000-tensor model)."""
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()


def _open(path: str) -> Checkpoint:
    ckpt = Checkpoint(path)
    if sources.isdir(path):
        _open_directory(path, ckpt)
    elif path.endswith(".index.json"):
        _open_index(path, ckpt)
        _read_side_files(sources.dirname(path), ckpt)
    else:
        result = _read_file(path, ckpt)
        if ckpt.format == "gguf":
            _open_split_gguf(path, result, ckpt)
        _read_side_files(sources.dirname(path), ckpt, quiet=True)
    if ckpt.format == "safetensors":
        mlx.group_mlx(ckpt, mlx.quantization_config(ckpt.metadata.get("config.json")))
    ckpt.findings.sort(key=lambda f: ("error", "warning", "info").index(f.severity))
    return ckpt


def _read_file(path: str, ckpt: Checkpoint) -> FileResult:
    """Detect one file's format from its bytes, read it and merge it into the checkpoint."""
    src = sources.open_source(path)
    ckpt._sources[src.name] = src
    head = bytes(src.read(0, 64))
    kind = detect(head, src.size)
    named = kind
    if kind == "unknown":
        # Bytes that match nothing (a bad magic, a file cut short) are read by the format the
        # name claims, so its reader can say what is wrong where.
        named = next((k for k in ("safetensors", "gguf") if extension_matches(k, sources.basename(path))),
                     "unknown")
    reader = READERS.get(named)
    if reader is None:
        rep = Report(src.name)
        rep.error("unknown_format", "The first bytes match no format this tool reads (safetensors "
                  f"length + JSON, 'GGUF', a zip or a pickle): {head[:16]!r}.", 0, min(16, src.size))
        result = FileResult(src.name, src.size, rep)
    else:
        result = reader(src)
        if named == kind and not extension_matches(kind, sources.basename(path)):
            result.report.info("extension_mismatch", f"The name {sources.basename(path)!r} suggests "
                               f"another format, but the bytes are {FORMAT_OF[kind]}; read as "
                               f"{FORMAT_OF[kind]}.", 0, min(8, src.size))
    fmt = FORMAT_OF[named]
    if ckpt.format == "unknown":
        ckpt.format = fmt
    elif fmt != ckpt.format:
        ckpt.findings.append(Finding("error", "mixed_formats", f"{path!r} is {fmt}, but the "
                                     f"checkpoint is {ckpt.format}.", file=src.name))
    _merge(ckpt, result)
    return result


def _merge(ckpt: Checkpoint, result: FileResult) -> None:
    ckpt.files.append(result.file)
    ckpt.sizes[result.file] = result.size
    ckpt.spans.extend(result.report.spans)
    ckpt.findings.extend(result.report.findings)
    for name, info in result.tensors.items():
        if name not in ckpt.tensors:  # shards.py reports tensors stored twice
            ckpt.tensors[name] = info
    for key, value in result.metadata.items():
        ckpt.metadata.setdefault(key, value)
    if result.details:
        ckpt.details.setdefault("files", {})[result.file] = result.details
        # A pickle summary is shown for the model; with several .bin shards, the first one's.
        if "pickle" in result.details:
            ckpt.details.setdefault("pickle", result.details["pickle"])


def _open_index(path: str, ckpt: Checkpoint) -> None:
    read_index(path, ckpt, lambda shard: _read_file(shard, ckpt))


def _open_directory(path: str, ckpt: Checkpoint) -> None:
    names = sources.listdir(path)
    indexes = [n for n in names if n.endswith(".index.json")]
    preferred = [n for n in indexes if n.endswith(".safetensors.index.json")] or indexes
    if preferred:
        if len(preferred) > 1:
            ckpt.findings.append(Finding("info", "several_indexes", f"The directory holds "
                                         f"{len(preferred)} index files; reading {preferred[0]!r}."))
        _open_index(sources.join(path, preferred[0]), ckpt)
    else:
        weights = ([n for n in names if n.endswith(".safetensors")]
                   or [n for n in names if n.endswith(".gguf")]
                   or [n for n in names if n.endswith((".bin", ".pt", ".pth"))])
        if not weights:
            ckpt.findings.append(Finding("error", "no_weights", "The directory holds no "
                                         ".safetensors, .gguf, .bin or .pt file and no index.",
                                         file=path))
        gguf_first = [n for n in weights if n.endswith(".gguf")]
        if gguf_first and not [n for n in names if n.endswith(".safetensors")]:
            result = _read_file(sources.join(path, weights[0]), ckpt)
            _open_split_gguf(sources.join(path, weights[0]), result, ckpt)
            others = [n for n in weights if sources.join(path, n) not in ckpt.files]
            if others:
                ckpt.findings.append(Finding("info", "several_models", f"The directory holds "
                                             f"{len(others)} other GGUF file(s) ({others[0]!r}...); "
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
        if text is not None:
            try:
                value = json.loads(text)
            except json.JSONDecodeError as e:
                problem = f"is not valid JSON ({e.msg} at character {e.pos})"
            except RecursionError:
                problem = "nests JSON too deeply to read"
        if problem:
            if not quiet:
                ckpt.findings.append(Finding("warning", "bad_config", f"{name} {problem}.", file=p))
            continue
        ckpt.metadata[name] = value


def _open_split_gguf(path: str, first: FileResult, ckpt: Checkpoint) -> None:
    """`model-00001-of-00003.gguf` names its siblings; `split.*` keys say how many there are."""
    count_kv = first.metadata.get("split.count")
    m = _SPLIT.match(sources.basename(path))
    count = count_kv.value if count_kv is not None else (int(m["count"]) if m else 1)
    if not isinstance(count, int) or count <= 1:
        return
    where = (count_kv.offset, count_kv.length) if count_kv is not None else (None, None)
    if m is None:
        ckpt.findings.append(Finding("warning", "split_name", f"The file says it is one of {count} "
                                     "splits, but its name does not follow "
                                     "NAME-00001-of-0000N.gguf, so the others cannot be found.",
                                     *where, file=first.file))
        return
    directory = sources.dirname(path)
    no_kv = first.metadata.get("split.no")
    this_no = no_kv.value if no_kv is not None and isinstance(no_kv.value, int) else int(m["no"]) - 1
    merged = None  # a later split already in the checkpoint
    if this_no != 0:
        # Opened a later split: restart from the first so the model reads in order.
        ckpt.files.clear(), ckpt.tensors.clear(), ckpt.spans.clear(), ckpt.findings.clear()
        ckpt.metadata.clear(), ckpt.sizes.clear()
        first_path = sources.join(directory, f"{m['stem']}-00001-of-{count:05d}.gguf")
        if sources.exists(first_path):
            first = _read_file(first_path, ckpt)
        else:
            ckpt.findings.append(Finding("error", "missing_split", f"The first split "
                                         f"{sources.basename(first_path)!r} does not exist; its "
                                         "tensors and the model's metadata are missing.", *where,
                                         file=first.file))
            _merge(ckpt, first)
            merged = this_no + 1
    for i in range(2, count + 1):
        if i == merged:
            continue
        p = sources.join(directory, f"{m['stem']}-{i:05d}-of-{count:05d}.gguf")
        if not sources.exists(p):
            ckpt.findings.append(Finding("error", "missing_split", f"Split {i} of {count} "
                                         f"({sources.basename(p)!r}) does not exist; its tensors "
                                         "are missing.", *where, file=first.file))
            continue
        before = set(ckpt.tensors)
        result = _read_file(p, ckpt)
        no = result.metadata.get("split.no")
        if no is not None and no.value != i - 1:
            ckpt.findings.append(Finding("error", "split_number", f"{sources.basename(p)!r} says "
                                         f"it is split.no {no.value!r}, expected {i - 1}.",
                                         no.offset, no.length, file=p))
        for name, info in result.tensors.items():
            if name in before:
                ckpt.findings.append(Finding("error", "duplicate_tensor", f"{name!r} appears in "
                                             "more than one split; the first copy is used.",
                                             *info.extra["info_span"], tensor=name, file=p))
    total = first.metadata.get("split.tensors.count")
    if total is not None and total.value != len(ckpt.tensors):
        ckpt.findings.append(Finding("error", "split_tensor_count", f"split.tensors.count says "
                                     f"{total.value} tensors, but the splits hold "
                                     f"{len(ckpt.tensors)}.", total.offset, total.length,
                                     file=first.file))
