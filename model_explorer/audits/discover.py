"""From what a person types to the list of models to audit.

A source is a checkpoint file, a folder (every model inside it, found recursively), a glob, a
URL or fsspec path (a file, or a prefix listed like a folder), or a text file naming one source
a line. Inside a folder the files are grouped as models: a folder with an index, or with a
config.json beside its weights, or with shard-named weights, is one model; GGUF splits are one
model named by their first part; any other weight file is a model of its own.

Only names are listed here (one directory listing per folder, no reads of the files): the
fingerprint used to resume is taken by the worker that audits the model.
"""

from __future__ import annotations

import glob
import os
import posixpath
import re

from .. import sources

WEIGHT_EXT = (".safetensors", ".gguf", ".bin", ".pt", ".pth", ".ckpt", ".pkl", ".pickle", ".npz", ".mlx")
LIST_EXT = (".txt", ".list", ".lst")
_SHARD = re.compile(r"-\d{3,5}-of-\d{3,5}\.\w+$")
_GGUF_SPLIT = re.compile(r"-(\d{5})-of-(\d{5})\.gguf$")
_SKIP_DIRS = {".git", ".cache", "__pycache__", ".ipynb_checkpoints", ".huggingface"}
_GLOB = re.compile(r"[*?\[]")


def group_folder(directory: str, names: list[str], join=os.path.join) -> list[str]:
    """The model sources among the file `names` of one folder (not its subfolders)."""
    weights = [n for n in names if n.endswith(WEIGHT_EXT)]
    if not weights and not any(n.endswith(".index.json") for n in names):
        return []
    if (any(n.endswith(".index.json") for n in names)
            or ("config.json" in names and [n for n in weights if n.endswith(".safetensors")])
            or sum(1 for n in weights if _SHARD.search(n) and not n.endswith(".gguf")) > 1):
        return [directory]  # one model: assemble reads the index or every weight file of it
    out = []
    for n in sorted(weights):
        m = _GGUF_SPLIT.search(n)
        if m and m[1] != "00001":
            continue  # a later split: the first one brings its siblings
        out.append(join(directory, n))
    return out


def _walk_local(root: str) -> list[str]:
    found: list[str] = []
    for directory, dirs, files in os.walk(root):
        dirs[:] = sorted(d for d in dirs if d not in _SKIP_DIRS and not d.startswith("."))
        found.extend(group_folder(directory, sorted(files)))
    return found


def _walk_remote(url: str) -> list[str]:
    import fsspec

    fs, path = fsspec.core.url_to_fs(url)
    proto = url.split("://", 1)[0]
    files: dict[str, list[str]] = {}
    for p in fs.find(path):
        d, n = posixpath.split(p.rstrip("/"))
        files.setdefault(d, []).append(n)

    def as_url(p: str) -> str:
        return p if "://" in p else f"{proto}://{p}"

    out: list[str] = []
    for d in sorted(files):
        out.extend(as_url(x) for x in group_folder(d, sorted(files[d]), posixpath.join))
    return out


def _list_file(path: str) -> list[str]:
    base = os.path.dirname(os.path.abspath(path))
    out = []
    with open(path, encoding="utf-8") as f:
        for line in f:
            line = line.strip()
            if not line or line.startswith("#"):
                continue
            out.append(line if sources.is_remote(line) or os.path.isabs(line) else os.path.join(base, line))
    return out


def expand(source: str, _depth: int = 0) -> list[str]:
    """The model sources one source stands for."""
    source = os.fspath(source)
    if source.startswith("hf://"):
        return [source]  # a Hub repo (or a file in one) is one model; its open lists it
    if sources.is_remote(source):
        if source.rstrip("/").endswith(WEIGHT_EXT + (".index.json",)):
            return [source]
        if _GLOB.search(source.split("://", 1)[1]):
            import fsspec

            fs, path = fsspec.core.url_to_fs(source)
            proto = source.split("://", 1)[0]
            return [x for p in fs.glob(path) for x in expand(p if "://" in p else f"{proto}://{p}", _depth)]
        return _walk_remote(source)
    if _GLOB.search(source) and not os.path.exists(source):
        return [x for p in sorted(glob.glob(source, recursive=True)) for x in expand(p, _depth)]
    if os.path.isdir(source):
        return _walk_local(source)
    if source.endswith(LIST_EXT) and os.path.isfile(source) and _depth < 2:
        return [x for line in _list_file(source) for x in expand(line, _depth + 1)]
    return [source]  # a file, or a path that does not exist (its row will say so)


def discover(srcs: list[str] | str) -> list[str]:
    """Every model source, in the order given, each once."""
    if isinstance(srcs, (str, os.PathLike)):
        srcs = [srcs]
    seen: dict[str, None] = {}
    for s in srcs:
        for m in expand(os.fspath(s)):
            seen.setdefault(m, None)
    return list(seen)
