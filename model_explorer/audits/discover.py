"""From what a person types to the models to audit and the files that are not audited.

A source is a checkpoint file, a folder (every model inside it, found recursively), a glob, a
URL or fsspec path (a file, or a prefix listed like a folder), an `hf://` repo, or a text file
naming one source a line. Every file under a folder, a prefix or a repo is identified by its
first bytes (inventory.py), never by its name; inside a folder the weight files are grouped as
models: a folder with an index, or with config.json beside its safetensors, or with shard-named
weights, is one model; GGUF splits are one model named by their first part; any other weight
file is a model of its own. Whatever a model's open does not read is audited on its own after
(runner.py), so no weight file is left out by a wrong guess here.

Every other file gets an entry saying why it is not audited (inventory.REASONS); side files
(configs, tokenizers, text, images) are attached to the nearest model in their folder or above.
"""

from __future__ import annotations

import glob
import os
import posixpath
import re
import stat
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field

from .. import sources
from ..formats.detect import SIDE, Identified, identify
from . import inventory
from .inventory import FileEntry, auditable, skip_entry

LIST_EXT = (".txt", ".list", ".lst")
_SHARD = re.compile(r"-\d{3,5}-of-\d{3,5}\.\w+$")
_GGUF_SPLIT = re.compile(r"-(\d{5})-of-(\d{5})\.gguf$")
_SKIP_DIRS = {".git", ".cache", "__pycache__", ".ipynb_checkpoints", ".huggingface"}
_GLOB = re.compile(r"[*?\[]")
REMOTE_WORKERS = 32  # first-bytes reads in flight for a remote prefix or a Hub repo


@dataclass
class Plan:
    """`models`: the model sources, in the order found. `weights`: every auditable weight file
    found under a folder, prefix or repo (a model's open should read each; the runner audits on
    its own any it did not). `files`: every file not audited as a model, with its reason."""

    models: list[str] = field(default_factory=list)
    weights: list[str] = field(default_factory=list)
    files: list[FileEntry] = field(default_factory=list)

    def add_model(self, source: str) -> None:
        if source not in self._seen:
            self._seen.add(source)
            self.models.append(source)

    def __post_init__(self) -> None:
        self._seen: set[str] = set()


def group_folder(directory: str, found: dict[str, Identified], join=os.path.join) -> tuple[list[str], list[str]]:
    """(model sources, auditable weight files) among the identified files of one folder (not its
    subfolders), `found` mapping a file name to what its bytes are."""
    data = inventory.data_files(found)
    weights = sorted(n for n, ident in found.items() if auditable(ident, n) and n not in data)
    names = set(found)
    paths = [join(directory, n) for n in weights]
    if not weights:
        return [], []
    if (any(n.endswith(".index.json") for n in names)
            or ("config.json" in names and [n for n in weights if found[n].kind == "safetensors"])
            or sum(1 for n in weights if _SHARD.search(n) and found[n].kind != "gguf") > 1):
        return [directory], paths  # one model: assemble reads the index or every weight file of it
    out = []
    for n in weights:
        m = _GGUF_SPLIT.search(n)
        if m and m[1] != "00001":
            continue  # a later split: the first one brings its siblings
        out.extend(with_members(join(directory, n), found[n]))
    return out, paths


def with_members(path: str, ident: Identified) -> list[str]:
    """A model file, and when it is an archive of models (a wheel, a .nemo, a .mar) each model
    inside it by its path in the archive (`pkg.whl!/pkg/model.pt`), audited as a model of its own."""
    if ident.kind != "model_archive":
        return [path]
    from ..formats.archive import model_paths

    try:
        src = sources.open_source(path)
    except OSError:
        return [path]  # its own row says what is wrong
    try:
        return [path, *model_paths(src)]
    finally:
        src.close()


# -- a local folder ------------------------------------------------------------------------------

def _inside(path: str, root: str) -> bool:
    return path == root or path.startswith(root.rstrip(os.sep) + os.sep)


class _Folder:
    """One folder's files as the walk found them."""

    def __init__(self) -> None:
        self.found: dict[str, Identified] = {}
        self.sizes: dict[str, int] = {}
        self.entries: list[FileEntry] = []  # unreadable, too large, links leaving the root


def _local_file(path: str, root_real: str, limit: int | None, folder: _Folder, links: dict) -> None:
    name = os.path.basename(path)
    try:
        if os.path.islink(path):
            real = os.path.realpath(path)
            if not _inside(real, root_real):
                folder.entries.append(FileEntry(path, "link_outside", "link", "link", f"A link to {real}, "
                                      "outside the audited folder; audit that file or its folder "
                                      "to include it.", None))
                return
            links.setdefault(real, path)
        st = os.stat(path)
        if not stat.S_ISREG(st.st_mode):  # a FIFO would block the read; a device is no model
            folder.entries.append(FileEntry(path, "not_model", "special", "special file",
                                            "Not a regular file (a pipe, socket or device).", None))
            return
        if limit is not None and st.st_size > limit:
            folder.entries.append(inventory.too_large(path, st.st_size, limit))
            return
        folder.found[name] = inventory.identify_local(path, st.st_size)
        folder.sizes[name] = st.st_size
    except OSError as e:
        folder.entries.append(inventory.unreadable(path, e))


def _walk_local(root: str, plan: Plan, limit: int | None) -> None:
    root_real = os.path.realpath(root)
    folders: dict[str, _Folder] = {}
    links: dict[str, str] = {}  # real path -> the first link inside the root that points at it
    for directory, dirs, files in os.walk(root):
        keep = []
        for d in sorted(dirs):
            p = os.path.join(directory, d)
            if os.path.islink(p):
                if not _inside(os.path.realpath(p), root_real):
                    plan.files.append(FileEntry(p, "link_outside", "link", "link to a folder",
                                                f"A link to {os.path.realpath(p)}, outside the audited "
                                                "folder; audit that folder to include it.", None))
                continue  # a link inside the root: its files are walked where they are
            if d in _SKIP_DIRS or d.startswith("."):
                plan.files.append(FileEntry(p, "not_searched", "folder", "folder",
                                            "A version-control, cache or hidden folder; not searched. "
                                            "Audit it by its path to include it.", None))
                continue
            keep.append(d)
        dirs[:] = keep
        folder = folders.setdefault(directory, _Folder())
        for name in sorted(files):
            _local_file(os.path.join(directory, name), root_real, limit, folder, links)
    # A file a link inside the root points at is audited through the link (the Hugging Face
    # cache: snapshots/<rev>/model.safetensors -> blobs/<hash>), not twice.
    for directory, folder in folders.items() if links else ():
        for name in list(folder.found):
            p = os.path.join(directory, name)
            link = links.get(os.path.realpath(p))
            if link is not None and not os.path.islink(p):
                ident = folder.found.pop(name)
                plan.files.append(FileEntry(p, "alias", ident.kind, ident.label,
                                            f"The same file as the link {link}, audited through it.",
                                            folder.sizes.get(name)))
    _group_all(folders, plan, os.path.join, os.path.dirname, root)


def _group_all(folders: dict[str, _Folder], plan: Plan, join, parent, root: str) -> None:
    """Models per folder, then each other file's entry, with the model it goes with."""
    model_of: dict[str, str] = {}
    for directory in sorted(folders):
        models, weights = group_folder(directory, folders[directory].found, join)
        for m in models:
            plan.add_model(m)
        plan.weights.extend(weights)
        if models:
            model_of[directory] = models[0]

    def owner(directory: str, lone: bool) -> str | None:
        """The nearest folder at or above `directory` that is one model whole (a Hugging Face
        layout owns its subfolders: 1_Pooling/, onnx/); with `lone`, also a weight file that is a
        model of its own in this folder (a side file beside it is its README or config)."""
        if lone and directory in model_of:
            return model_of[directory]
        d = directory
        while True:
            if model_of.get(d) == d:
                return d
            up = parent(d)
            if up == d or len(up) < len(root.rstrip("/" + os.sep)):
                return None
            d = up

    for directory in sorted(folders):
        folder = folders[directory]
        _skip_entries(directory, folder, owner(directory, True), owner(directory, False), plan, join)
        for e in folder.entries:
            e.model = owner(directory, False)
            plan.files.append(e)


def _skip_entries(directory: str, folder: _Folder, side_model: str | None, model: str | None,
                  plan: Plan, join) -> None:
    """The entries of a folder's identified files that are not audited: side files go with
    `side_model`, the others name `model` (the folder model they are in) for context."""
    data = inventory.data_files(folder.found)
    for name, ident in folder.found.items():
        path, size = join(directory, name), folder.sizes.get(name)
        if name in data:
            owner = data[name]
            plan.files.append(inventory.data_entry(path, join(directory, owner), folder.found[owner], size, model))
        elif not auditable(ident, name):
            plan.files.append(skip_entry(path, ident, size, side_model if ident.role == SIDE else model))


# -- remote prefixes and Hub repos ----------------------------------------------------------------

def _identify_remote(items: list[tuple[str, str, int]], read_of, limit: int | None,
                     folders: dict[str, _Folder]) -> None:
    """(directory, name, size) of remote files, identified in parallel with `read_of(path)`."""

    def one(item):
        directory, name, size = item
        path = f"{directory}/{name}" if directory else name
        if limit is not None and size > limit:
            return item, inventory.too_large(path, size, limit)
        try:
            return item, identify(read_of(path), size, name)
        except OSError as e:
            return item, inventory.unreadable(path, e, size)

    with ThreadPoolExecutor(max_workers=REMOTE_WORKERS, thread_name_prefix="mx-discover") as pool:
        for (directory, name, size), got in pool.map(one, items):
            folder = folders.setdefault(directory, _Folder())
            if isinstance(got, FileEntry):
                folder.entries.append(got)
            else:
                folder.found[name] = got
                folder.sizes[name] = size


def _walk_remote(url: str, plan: Plan, limit: int | None) -> None:
    import fsspec

    fs, path = fsspec.core.url_to_fs(url)
    proto = url.split("://", 1)[0]

    def as_url(p: str) -> str:
        return p if "://" in p else f"{proto}://{p}"

    items = []
    for p, info in fs.find(path, detail=True).items():
        d, n = posixpath.split(p.rstrip("/"))
        size = info.get("size")
        if not size:  # an HTTP folder's HTML listing gives no sizes: ask for it (HEAD)
            try:
                size = fs.size(p)
            except OSError:
                size = 0
        items.append((as_url(d), n, int(size or 0)))

    def read_of(p: str):
        inner = fsspec.core.url_to_fs(p)[1]
        return lambda offset, length: fs.cat_file(inner, offset, offset + length)

    folders: dict[str, _Folder] = {}
    _identify_remote(items, read_of, limit, folders)
    _group_all(folders, plan, posixpath.join, posixpath.dirname, as_url(path))


def _walk_hub(source: str, plan: Plan, limit: int | None) -> None:
    """An hf:// repo (or a folder of one) is one model, opened whole; every file of its listing
    is identified by a range read of its first bytes."""
    from .. import hub

    plan.add_model(source)
    try:
        repo = hub.HubRepo(source)
    except hub.HubError:
        return  # the open says what the Hub refused, as a finding
    if repo.target in repo.files:
        return  # one file of a repo: the model itself
    prefix = repo.target + "/" if repo.target else ""
    items = []
    for rel, size in sorted(repo.files.items()):
        if rel.startswith(prefix):
            d, n = posixpath.split(rel)
            items.append((f"{repo.root}/{d}" if d else repo.root, n, size))

    def read_of(p: str):
        return lambda offset, length: repo.read(p, offset, offset + length)

    folders: dict[str, _Folder] = {}
    _identify_remote(items, read_of, limit, folders)
    for directory, folder in folders.items():
        data = inventory.data_files(folder.found)
        plan.weights.extend(f"{directory}/{n}" for n, ident in folder.found.items()
                            if auditable(ident, n) and n not in data)
        _skip_entries(directory, folder, source, source, plan, lambda d, n: f"{d}/{n}")
        for e in folder.entries:
            e.model = source
            plan.files.append(e)


# -- sources --------------------------------------------------------------------------------------

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


def _local_given(source: str, plan: Plan, limit: int | None) -> None:
    """A file named on its own: audited when a reader takes it (or its name claims a format),
    else listed with its reason; a path that does not exist is a model row that says so."""
    try:
        size = os.path.getsize(source)
        if limit is not None and size > limit:
            plan.files.append(inventory.too_large(source, size, limit))
            return
        ident = inventory.identify_local(source, size)
    except OSError:
        plan.add_model(source)  # its row says what is wrong
        return
    if auditable(ident, os.path.basename(source)):
        for m in with_members(source, ident):
            plan.add_model(m)
    else:
        plan.files.append(skip_entry(source, ident, size, None))


def _expand(source: str, plan: Plan, limit: int | None, depth: int = 0) -> None:
    source = os.fspath(source)
    if source.startswith("hf://"):
        _walk_hub(source, plan, limit)
    elif sources.is_remote(source):
        if source.rstrip("/").endswith(inventory.CLAIMED_WEIGHTS + (".index.json",)):
            plan.add_model(source)
        elif _GLOB.search(source.split("://", 1)[1]):
            import fsspec

            fs, path = fsspec.core.url_to_fs(source)
            proto = source.split("://", 1)[0]
            for p in fs.glob(path):
                _expand(p if "://" in p else f"{proto}://{p}", plan, limit, depth)
        else:
            _walk_remote(source, plan, limit)
    elif _GLOB.search(source) and not os.path.exists(source):
        for p in sorted(glob.glob(source, recursive=True)):
            _expand(p, plan, limit, depth)
    elif os.path.isdir(source):
        _walk_local(source, plan, limit)
    elif source.endswith(LIST_EXT) and os.path.isfile(source) and depth < 2:
        for line in _list_file(source):
            _expand(line, plan, limit, depth + 1)
    elif source.endswith(".index.json"):
        plan.add_model(source)
    else:
        _local_given(source, plan, limit)


def plan(srcs: list[str] | str, max_file_bytes: int | None = None) -> Plan:
    """The models, weight files and not-audited files of `srcs`, in the order given, each once."""
    if isinstance(srcs, (str, os.PathLike)):
        srcs = [srcs]
    out = Plan()
    for s in srcs:
        _expand(os.fspath(s), out, max_file_bytes)
    seen: set[str] = set()
    out.weights = [w for w in out.weights if not (w in seen or seen.add(w))]
    files: dict[str, FileEntry] = {}
    for e in out.files:
        files.setdefault(e.path, e)
    out.files = list(files.values())
    return out


def discover(srcs: list[str] | str) -> list[str]:
    """Every model source, in the order given, each once."""
    return plan(srcs).models
