"""PyTorch checkpoints (zip and legacy) and plain pickles, read without running them.

Nothing from the file is ever imported or called: `pickle_vm` walks the opcodes and builds
inert stand-ins, `pickle_torch` turns torch's reconstructor calls into storage and tensor
references, and this module places each tensor's bytes in the file.

- Zip (torch.save since 1.6): `<archive>/data.pkl` holds the structure; storages are the
  entries `<archive>/data/<key>`; `byteorder` says how to read them.
- Legacy (before 1.6): five pickles back to back (magic number, protocol version, sys_info,
  the data, the sorted storage keys), then for each key an 8-byte element count and the raw
  bytes of that storage.
- Plain pickle (`.pkl`, protocols 0 to 5): one pickle, or several back to back.

The import policy (what is allowed, what is dangerous) is in `pickle_policy`.
"""

from __future__ import annotations

import math
import struct
import zlib
from operator import attrgetter
from typing import Any

from ..checkpoint import TensorInfo
from ..spans import Report, short_repr
from .pickle_numpy import NUMPY_REDUCERS, NumpyArray, array_layout
from .pickle_numpy import locate as locate_array
from .pickle_report import pickle_details
from .pickle_torch import TORCH_REDUCERS, StorageRef, StorageTable, TensorRef, itemsize
from .pickle_vm import Blob, Call, Global, PickleMachine, PickleRun, Unknown, render
from .pickle_walk import walk
from .safetensors import FileResult
from .zipread import COMPRESSION, read_zip

TORCH_LEGACY_MAGIC = 0x1950A86A20F9469CFC6C
LEGACY_PROTOCOL_VERSION = 1001
LEGACY_PICKLES = ("magic number", "protocol version", "sys_info", "data", "storage keys")
SMALL_RECORDS = ("byteorder", "version", ".format_version", ".storage_alignment", ".data/version",
                 ".data/serialization_id")
MAX_RECORD = 256
MAX_INFLATED = 256 * 1024 * 1024
MAX_PICKLES = 16
MAX_SHARED_LISTED = 50
REDUCERS = {**TORCH_REDUCERS, **NUMPY_REDUCERS}
EMBEDDED_FUNC = "torch.storage._load_from_bytes"
WATCH = frozenset({EMBEDDED_FUNC})
PICKLE_STARTS = b"\x80(}]c)NISVFLdlKJMXUTGq"


def sort_spans(rep: Report) -> None:
    """File order, the enclosing span first; two C-keyed stable sorts beat one tuple key."""
    rep.spans.sort(key=attrgetter("length"), reverse=True)
    rep.spans.sort(key=attrgetter("offset"))


# -- zip -------------------------------------------------------------------------------------

def read_torch_zip(source) -> FileResult:
    rep = Report(source.name)
    result = FileResult(source.name, source.size, rep)
    listing = read_zip(source, rep)
    entries = listing.entries
    if not entries:
        rep.error("zip_empty", "No zip entry could be located, so there is no data.pkl and "
                  "nothing to read.", 0, min(4, source.size))
        return result
    names = list(entries)
    pkl_name = _find_data_pkl(names)
    if pkl_name is None:
        rep.error("no_data_pkl", "The zip holds no data.pkl record, so it is not a torch.save "
                  f"checkpoint (entries: {', '.join(short_repr(n, 40) for n in names[:5])}).",
                  0, min(4, source.size))
        _scan_other_pickles(source, rep, entries, None, [])
        return result
    prefix = pkl_name[: -len("data.pkl")]
    _check_zip_layout(source, rep, entries, prefix)
    meta = _read_records(source, rep, entries, prefix)
    result.metadata.update(meta)
    byteorder = _byteorder(meta.get("byteorder"), rep, entries.get(prefix + "byteorder"))

    table = StorageTable(legacy=False)
    machine = PickleMachine(rep, "data.pkl", REDUCERS, table.load, watch=WATCH)
    entry = entries[pkl_name]
    runs: list[PickleRun] = []
    if entry.method == 0:
        run = machine.run(source, entry.data_offset, max(0, min(entry.compressed_size,
                                                                source.size - entry.data_offset)))
        runs.append(run)
        runs += _trailing_pickles(source, rep, run, entry.data_end, "data.pkl")
    else:
        run = _run_inflated(source, rep, machine, entry)
        if run is None:
            return result
        runs.append(run)
    main = runs[0]

    def locate(key: str):
        e = entries.get(f"{prefix}data/{key}")
        if e is None:
            return None
        if e.method != 0:
            return ("compressed", e)
        return e.data_offset, max(0, min(e.size, source.size - e.data_offset))

    _scan_other_pickles(source, rep, entries, pkl_name, runs)
    walked = walk(main.value, rep)
    result.tensors = _tensor_infos(walked.tensors, locate, source, rep, byteorder, "data/",
                                   byte_offsets=main.byte_offsets, runs=runs)
    _storage_spans(table, locate, rep, prefix)
    _orphan_storages(entries, prefix, table, rep)
    result.details["pickle"] = pickle_details(runs, main, walked.structure, rep)
    result.details["zip"] = {"archive": prefix.rstrip("/"), "recovered": listing.recovered,
                             "entries": len(entries), "predicted": listing.predicted}
    sort_spans(rep)
    return result


def _find_data_pkl(names: list[str]) -> str | None:
    # torch reads the archive name from the first entry and expects <archive>/data.pkl.
    first = names[0].split("/", 1)[0]
    if f"{first}/data.pkl" in names:
        return f"{first}/data.pkl"
    candidates = [n for n in names if n == "data.pkl" or (n.endswith("/data.pkl") and
                                                          n.count("/") == 1)]
    return candidates[0] if candidates else None


def _check_zip_layout(source, rep: Report, entries, prefix: str) -> None:
    first = min(e.header_offset for e in entries.values())
    if first > 0:
        head = bytes(source.read(0, min(first, 16)))
        looks = head[:1] == b"\x80" or head[:1] in PICKLE_STARTS
        (rep.error if looks else rep.warning)(
            "zip_prefix_bytes" if not looks else "polyglot",
            f"{first} bytes come before the first zip entry ({head!r}…)"
            + ("; they look like a pickle: the file is a pickle/zip polyglot, and a loader "
               "that reads it as a pickle runs that one instead." if looks
               else "; torch writes none, so something was prepended."), 0, first)
    foreign = [n for n in entries if not n.startswith(prefix)]
    if foreign:
        rep.warning("zip_foreign_entry", f"{len(foreign)} entries are outside the archive folder "
                    f"{prefix!r} (first: {foreign[0]!r}); torch ignores them.",
                    entries[foreign[0]].header_offset, 4)
    for name, e in entries.items():
        if e.method == 0:
            continue
        how = COMPRESSION.get(e.method, str(e.method))
        if name.startswith(prefix + "data/"):
            rep.error("zip_compressed_entry", f"The storage {name!r} is {how}-compressed; torch.save "
                      "writes storages uncompressed, and compressed tensor bytes cannot be "
                      "memory-mapped or shown at their offsets.", e.header_offset, 4)
        elif name == prefix + "data.pkl":
            rep.warning("zip_compressed_entry", f"data.pkl is {how}-compressed; torch.save writes "
                        "it uncompressed. It is inflated and checked, but its opcodes have no "
                        "offsets in the file.", e.header_offset, 4)
        else:
            rep.info("zip_compressed_entry", f"{name!r} is {how}-compressed.", e.header_offset, 4)
    code = [n for n in entries if n.startswith(prefix + "code/") or n == prefix + "constants.pkl"]
    if code:
        rep.warning("torchscript_archive", f"This is a TorchScript archive ({code[0]!r}): "
                    "torch.jit.load compiles and runs the code it holds; torch.load hands it to "
                    "torch.jit.load.", entries[code[0]].header_offset, 4)


def _read_records(source, rep: Report, entries, prefix: str) -> dict[str, Any]:
    meta: dict[str, Any] = {}
    for rec in SMALL_RECORDS:
        e = entries.get(prefix + rec)
        if e is None or e.method != 0:
            continue
        raw = bytes(source.read(e.data_offset, min(e.size, MAX_RECORD)))
        text = raw.decode("utf-8", errors="replace").strip()
        rep.span(e.data_offset, len(raw), "value", f"zip > {rec}", short_repr(text, 60))
        meta[rec.lstrip(".")] = text
    return meta


def _byteorder(text: str | None, rep: Report, entry) -> str:
    if text is None:
        return "<"
    if text == "little":
        return "<"
    if text == "big":
        return ">"
    rep.error("bad_byteorder", f"The byteorder record says {text!r}; torch writes 'little' or "
              "'big'. Reading as little-endian.", entry.data_offset if entry else None, 1)
    return "<"


def _run_inflated(source, rep: Report, machine: PickleMachine, entry) -> PickleRun | None:
    """A deflated data.pkl: torch's reader inflates it, so its imports must be checked too."""
    if entry.method != 8:
        return None
    raw = bytes(source.read(entry.data_offset, entry.compressed_size))
    try:
        d = zlib.decompressobj(-15)
        data = d.decompress(raw, MAX_INFLATED)
    except zlib.error as e:
        rep.error("zip_bad_deflate", f"data.pkl does not inflate: {e}.", entry.data_offset, 1)
        return None
    machine.spans = False
    run = machine.run(_BytesSource(data), 0, len(data))
    for g in run.imports:  # positions are inside the inflated bytes; point at the entry
        g.offset = entry.data_offset
    run.start, run.end = entry.data_offset, entry.data_end
    return run


class _BytesSource:
    def __init__(self, data: bytes) -> None:
        self.data, self.size, self.name, self.bytes_read = data, len(data), "<inflated>", 0

    def read(self, offset: int, n: int) -> bytes:
        return self.data[max(0, offset):max(0, offset + n)]


def _storage_spans(table: StorageTable, locate, rep: Report, prefix: str) -> None:
    for key, ref in table.first.items():
        loc = locate(key)
        if loc is None or loc[0] == "compressed":
            continue
        start, avail = loc
        rep.span(start, avail, "storage", f"{prefix}data/{key}",
                 f"{ref.dtype} x {ref.numel}" if isinstance(ref.numel, int) else ref.dtype)


def _orphan_storages(entries, prefix: str, table: StorageTable, rep: Report) -> None:
    base = prefix + "data/"
    orphans = [n for n in entries if n.startswith(base) and n[len(base):] not in table.first]
    if orphans:
        rep.info("unused_storage", f"{len(orphans)} storage records are not used by any tensor "
                 f"(first: {orphans[0]!r}).", entries[orphans[0]].header_offset, 4)


def _scan_other_pickles(source, rep: Report, entries, data_pkl: str | None,
                        runs: list[PickleRun]) -> None:
    """Other *.pkl records (constants.pkl, extra files) may be unpickled by some loader."""
    for name, e in entries.items():
        if name == data_pkl or not name.endswith(".pkl") or e.method != 0:
            continue
        label = name.rsplit("/", 1)[-1]
        m = PickleMachine(rep, label, REDUCERS, StorageTable(legacy=False).load, watch=WATCH)
        runs.append(m.run(source, e.data_offset, max(0, min(e.compressed_size,
                                                            source.size - e.data_offset))))


def _trailing_pickles(source, rep: Report, run: PickleRun, end: int, label: str) -> list[PickleRun]:
    """Bytes after STOP inside one record: flagged, and read as more pickles when they are."""
    out: list[PickleRun] = []
    pos = run.end
    while run.stopped and pos < end and len(out) < MAX_PICKLES:
        head = bytes(source.read(pos, 2))
        if head[:1] != b"\x80" or len(head) < 2 or not 2 <= head[1] <= 5:
            rep.warning("pickle_trailing_bytes", f"{end - pos} bytes follow the STOP opcode of "
                        f"{label}; the unpickler ignores them, but they can hide a second payload.",
                        pos, end - pos)
            rep.span(pos, end - pos, "gap", f"{label} > trailing bytes")
            break
        rep.warning("several_pickles", f"A second pickle starts at byte {pos}, right after the "
                    f"STOP of {label}; the unpickler reads only the first, but a loader that "
                    "calls it again runs this one too (a polyglot).", pos, end - pos)
        m = PickleMachine(rep, f"{label} (pickle {len(out) + 2})", REDUCERS,
                          StorageTable(legacy=False).load, watch=WATCH)
        run = m.run(source, pos, end - pos)
        out.append(run)
        pos = run.end
    return out


# -- legacy ----------------------------------------------------------------------------------

def read_torch_legacy(source) -> FileResult:
    rep = Report(source.name)
    result = FileResult(source.name, source.size, rep)
    table = StorageTable(legacy=True)
    runs: list[PickleRun] = []
    pos = 0
    for label in LEGACY_PICKLES:
        torch_data = label == "data"
        m = PickleMachine(rep, f"legacy {label}", REDUCERS if torch_data else None,
                          table.load if torch_data else None, watch=WATCH)
        run = m.run(source, pos, source.size - pos)
        runs.append(run)
        if not run.stopped:
            break
        pos = run.end
    kinds = {"magic number": "magic", "protocol version": "version", "sys_info": "sys_info"}
    for label, run in zip(LEGACY_PICKLES, runs):
        if label in kinds:
            rep.span(run.start, run.end - run.start, kinds[label], f"legacy > {label}",
                     short_repr(render(run.value, 2), 60))
    if runs[0].value != TORCH_LEGACY_MAGIC:
        rep.error("legacy_bad_magic", f"A legacy torch file starts with the pickled magic number "
                  f"{TORCH_LEGACY_MAGIC:#x}; found {render(runs[0].value, 1)}.", 0, runs[0].end)
    if len(runs) > 1 and runs[1].value != LEGACY_PROTOCOL_VERSION:
        rep.warning("legacy_protocol", f"The legacy protocol version is {render(runs[1].value, 1)}; "
                    f"torch writes and reads {LEGACY_PROTOCOL_VERSION}.", runs[1].start,
                    runs[1].end - runs[1].start)
    byteorder = "<"
    if len(runs) > 2 and isinstance(runs[2].value, dict):
        info = runs[2].value
        result.metadata["sys_info"] = {k: render(v, 2) if not isinstance(v, (bool, int, str))
                                       else v for k, v in info.items() if isinstance(k, str)}
        if info.get("little_endian") is False:
            byteorder = ">"
    main = runs[3] if len(runs) > 3 else None
    locations: dict[str, tuple[int, int]] = {}
    if len(runs) == 5 and runs[4].stopped:
        _legacy_storages(source, rep, runs[4], table, locations)
    elif main is not None and main.stopped:
        rep.error("legacy_truncated", "The legacy file ends before the storage key list; tensor "
                  "bytes cannot be located.", runs[-1].end, 0)
    walked = walk(main.value if main else None, rep)
    result.tensors = _tensor_infos(walked.tensors, lambda key: locations.get(key), source, rep,
                                   byteorder, "storage ",
                                   byte_offsets=main.byte_offsets if main else {}, runs=runs)
    result.details["pickle"] = pickle_details(runs, main, walked.structure, rep)
    sort_spans(rep)
    return result


def _legacy_storages(source, rep: Report, keys_run: PickleRun, table: StorageTable,
                     locations: dict) -> None:
    keys = keys_run.value
    if not (isinstance(keys, list) and all(isinstance(k, str) for k in keys)):
        rep.error("legacy_bad_keys", f"The storage key list should be a list of strings; found "
                  f"{render(keys, 2)}.", keys_run.start, keys_run.end - keys_run.start)
        return
    pos = keys_run.end
    for key in keys:
        ref = table.first.get(key)
        if ref is None:
            rep.error("legacy_unknown_key", f"The storage key list names {key!r}, which no tensor "
                      "uses, so its element size is unknown and the storages after it cannot be "
                      "located.", keys_run.start, keys_run.end - keys_run.start)
            return
        raw = bytes(source.read(pos, 8))
        if len(raw) < 8:
            rep.error("legacy_truncated", f"The file ends before the size of storage {key!r} "
                      f"(byte {pos}).", pos, len(raw))
            return
        (count,) = struct.unpack("<q", raw)
        rep.span(pos, 8, "length", f"storage {key} > element count", f"i64 = {count}")
        nbytes = count * ref.itemsize if count >= 0 else 0
        if count < 0:
            rep.error("legacy_bad_count", f"Storage {key!r} claims {count} elements.", pos, 8)
            return
        if isinstance(ref.numel, int) and count != ref.numel:
            rep.error("legacy_count_mismatch", f"Storage {key!r} holds {count} elements, but the "
                      f"pickle says {ref.numel}; torch.load fails with 'storage has wrong size'.",
                      pos, 8)
        start = pos + 8
        avail = max(0, min(nbytes, source.size - start))
        if start + nbytes > source.size:
            rep.error("legacy_truncated", f"Storage {key!r} needs bytes {start}..{start + nbytes}, "
                      f"past the end of the file ({source.size} bytes): it is truncated.",
                      start, avail)
        rep.span(start, avail, "storage", f"storage {key}", f"{ref.dtype} x {count}")
        locations[key] = (start, avail)
        pos = start + nbytes
    if pos < source.size:
        rep.warning("trailing_bytes", f"{source.size - pos} bytes follow the last storage; torch "
                    "ignores them.", pos, source.size - pos)
        rep.span(pos, source.size - pos, "gap", "trailing bytes")


# -- plain pickles ---------------------------------------------------------------------------

def read_pickle(source) -> FileResult:
    rep = Report(source.name)
    result = FileResult(source.name, source.size, rep)
    runs: list[PickleRun] = []
    pos = 0
    while pos < source.size and len(runs) < MAX_PICKLES:
        label = "pickle" if not runs else f"pickle {len(runs) + 1}"
        m = PickleMachine(rep, label, REDUCERS, watch=WATCH)
        run = m.run(source, pos, source.size - pos)
        runs.append(run)
        if not run.stopped:
            break
        pos = run.end
        if pos >= source.size:
            break
        head = bytes(source.read(pos, 16))
        if head[:1] == b"\x80" and len(head) > 1 and 2 <= head[1] <= 5 or head[:1] in (b"(", b"c"):
            rep.warning("several_pickles", f"Another pickle starts at byte {pos}, right after the "
                        "STOP of the previous one; pickle.load reads only the first, but a loader "
                        "that calls it again runs the next one too.", pos, source.size - pos)
            continue
        _trailing_bytes(source, rep, pos)
        break
    walked = walk(runs[0].value if runs else None, rep)
    locations: dict[str, tuple[int, int]] = {}
    result.tensors = _tensor_infos(walked.tensors, lambda key: locations.get(key), source, rep,
                                   "<", "storage ", quiet_missing=True,
                                   byte_offsets=runs[0].byte_offsets if runs else {}, runs=runs)
    result.details["pickle"] = pickle_details(runs, runs[0] if runs else None, walked.structure, rep)
    sort_spans(rep)
    return result


def _trailing_bytes(source, rep: Report, pos: int) -> None:
    n = source.size - pos
    tail = bytes(source.read(pos, min(n, 1 << 20)))
    if b"PK\x03\x04" in tail or b"PK\x05\x06" in tail:
        rep.warning("polyglot", f"{n} bytes follow the pickle's STOP and hold a zip signature: "
                    "the file is also a zip, which other tools open differently.", pos, n)
    else:
        rep.warning("pickle_trailing_bytes", f"{n} bytes follow the pickle's STOP; pickle.load "
                    "ignores them.", pos, n)
    rep.span(pos, n, "gap", "trailing bytes")


# -- tensors ---------------------------------------------------------------------------------

def _tensor_infos(named: list[tuple[str, Any]], locate, source, rep: Report, byteorder: str,
                  storage_label: str, quiet_missing: bool = False,
                  byte_offsets: dict | None = None,
                  runs: list[PickleRun] = ()) -> dict[str, TensorInfo]:
    infos: dict[str, TensorInfo] = {}
    by_storage: dict[str, list[str]] = {}
    missing_reported: set[str] = set()
    not_raw: list[NumpyArray] = []
    embedded = _EmbeddedStorages(source, rep, byte_offsets or {})
    for run in runs:  # every embedded torch file is read, used as a storage or not
        for call in run.watched:
            embedded.resolve(call)
    plain_locate = locate

    def locate(key: str):  # noqa: F811 - storages of embedded torch files first
        return embedded.locations.get(key) or plain_locate(key)

    for name, ref in named:
        if isinstance(ref, TensorRef) and embedded.is_embedded(ref.storage):
            ref.storage = embedded.resolve(ref.storage)
        if isinstance(ref, NumpyArray):
            infos[name] = _array_info(name, ref, source, rep, byte_offsets or {})
            if not infos[name].length and infos[name].numel:
                not_raw.append(ref)
            continue
        info = _tensor_info(name, ref, locate, source, rep, byteorder, missing_reported,
                            quiet_missing, storage_label)
        infos[name] = info
        if info.storage is not None:
            by_storage.setdefault(info.storage, []).append(name)
    unplaced = [n for n, i in infos.items() if (i.storage or "").startswith("embedded@")
                and "storage_start" not in i.extra]
    if unplaced:
        rep.info("tensor_not_raw", f"{len(unplaced)} tensors keep their storage in an embedded "
                 "torch file pickled as latin-1 text (pickle protocol 2), not as raw bytes, so their "
                 f"values have no byte range in the file (first: {unplaced[0]!r}).",
                 None, None, unplaced[0])
    if not_raw:
        rep.info("array_not_raw", f"{len(not_raw)} numpy arrays are pickled as latin-1 text "
                 "(pickle protocol 2), not as raw bytes, so their values have no byte range in the "
                 "file.", not_raw[0].offset_in_pickle, 1)
    for names in by_storage.values():
        if len(names) > 1:
            for n in names:
                infos[n].extra["shared_with"] = [x for x in names if x != n][:MAX_SHARED_LISTED]
    for info in infos.values():
        if info.length and info.extra.get("storage_start") is not None:
            rep.span(info.offset, max(0, min(info.end, source.size) - info.offset), "tensor_data",
                     f"data > {info.name}", f"{info.dtype} {list(info.shape)}", tensor=info.name)
    return infos


def _array_info(name: str, arr: NumpyArray, source, rep: Report,
                byte_offsets: dict) -> TensorInfo:
    dtype, order, shape, stride = array_layout(arr)
    info = TensorInfo(name, dtype, shape, source.name, 0, 0, order, stride,
                      extra={"numpy": True, "fortran_order": bool(arr.fortran)})
    where = locate_array(arr, byte_offsets)
    need = math.prod(shape) * itemsize(dtype) if shape else itemsize(dtype)
    if where is None:
        return info
    offset, length = where
    info.offset, info.length = offset, length
    info.extra.update(storage_start=offset, storage_nbytes=length)
    if length != need:
        rep.error("array_size_mismatch", f"Array {name!r} is {dtype} {list(shape)}, which needs "
                  f"{need} bytes, but its data holds {length}.", offset, length, name)
        info.length = min(length, need)
    return info


class _SubSource:
    """Bytes [base, base + size) of another source, seen as a file of their own."""

    def __init__(self, source, base: int, size: int) -> None:
        self.source, self.base, self.size, self.name = source, base, size, source.name
        self.bytes_read = 0

    def read(self, offset: int, n: int) -> bytes:
        if offset >= self.size or n <= 0:
            return b""
        return self.source.read(self.base + offset, min(n, self.size - offset))


class _EmbeddedStorages:
    """`torch.storage._load_from_bytes(b)`: each storage is a legacy torch file inside the pickle.

    The embedded file is read like any other (so its imports are judged too); its findings
    and spans are shifted to absolute offsets when its bytes lie raw in this file.
    """

    MAX_FILES = 100_000

    def __init__(self, source, rep: Report, byte_offsets: dict) -> None:
        self.source, self.rep, self.byte_offsets = source, rep, byte_offsets
        self.locations: dict[str, tuple[int, int]] = {}
        self.done: dict[int, Any] = {}

    def is_embedded(self, storage: Any) -> bool:
        return (isinstance(storage, Call) and isinstance(storage.func, Global)
                and storage.func.dotted == EMBEDDED_FUNC and isinstance(storage.args, tuple)
                and len(storage.args) == 1)

    def resolve(self, call: Call) -> Any:
        if id(call) in self.done:
            return self.done[id(call)]
        out = self.done[id(call)] = self._resolve(call)
        return out

    def _resolve(self, call: Call) -> Any:
        data = call.args[0]
        base = None
        if isinstance(data, Blob):
            base, sub = data.offset, _SubSource(self.source, data.offset, data.length)
        elif isinstance(data, (bytes, bytearray)):
            hit = self.byte_offsets.get(id(data))
            if hit is not None and hit[0] is data:
                base, sub = hit[1], _SubSource(self.source, hit[1], len(data))
            else:  # protocol 2: latin-1 text decoded in memory; no file offsets
                sub = _BytesSource(bytes(data))
                sub.name = self.source.name
        else:
            return Unknown("embedded storage")
        if len(self.done) > self.MAX_FILES:
            return Unknown("embedded storage")
        head = bytes(sub.read(0, 64))
        from .detect import detect

        kind = detect(head, sub.size)
        reader = {"torch_legacy": read_torch_legacy, "zip": read_torch_zip}.get(kind)
        where = f"byte {base}" if base is not None else f"the argument at byte {call.offset}"
        if reader is None:
            self.rep.error("bad_embedded_storage", f"The torch file embedded at {where} is not a "
                           f"torch file (it starts with {head[:8]!r}).", call.offset, 1)
            return Unknown("embedded storage")
        nested = reader(sub)
        self._merge(nested, base, where)
        root = nested.tensors.get("(root)")
        if root is None or not root.extra.get("bare_storage") or "storage_start" not in root.extra:
            return Unknown("embedded storage")
        key = f"embedded@{base if base is not None else call.offset}"
        ref = StorageRef(key, root.dtype, root.shape[0], "cpu", call.offset, "embedded")
        if base is not None:
            self.locations[key] = (base + root.extra["storage_start"], root.extra["storage_nbytes"])
        return ref

    def _merge(self, nested: FileResult, base: int | None, where: str) -> None:
        for f in nested.report.findings:
            if f.code == "trailing_bytes":
                continue
            shifted = (f.offset + base) if (base is not None and f.offset is not None) else None
            g = getattr(self.rep, f.severity)(f.code, f"In the torch file embedded at {where}: "
                                              f"{f.message}", shifted, f.length if shifted else None,
                                              f.tensor)
            g.extra.update(f.extra)
        if base is not None:
            for sp in nested.report.spans:
                self.rep.span(sp.offset + base, sp.length, sp.kind, f"embedded@{base} > {sp.path}",
                              sp.value)


def _int_tuple(v: Any) -> tuple[int, ...] | None:
    if isinstance(v, (tuple, list)) and all(isinstance(d, int) and not isinstance(d, bool)
                                            for d in v):
        return tuple(v)
    return None


def _tensor_info(name: str, ref: Any, locate, source, rep: Report, byteorder: str,
                 missing_reported: set, quiet_missing: bool, storage_label: str) -> TensorInfo:
    file = source.name
    extra: dict[str, Any] = {}
    if isinstance(ref, StorageRef):  # a bare storage: list it as a flat tensor of its dtype
        storage, dtype = ref, ref.dtype
        n = ref.numel if isinstance(ref.numel, int) and ref.numel >= 0 else 0
        shape, stride, soff = (n,), (1,), 0
        extra["bare_storage"] = True
    else:
        storage, dtype = ref.storage, ref.element_dtype
        shape, stride, soff = _int_tuple(ref.size), _int_tuple(ref.stride), ref.storage_offset
        extra["requires_grad"] = ref.requires_grad is True
        if ref.parameter:
            extra["parameter"] = True
        extra.update({k: v for k, v in ref.note.items() if k != "bad_dtype"})
        if "bad_dtype" in ref.note:
            rep.error("bad_tensor_dtype", f"Tensor {name!r} names the dtype {ref.note['bad_dtype']}, "
                      "which torch does not define.", ref.offset, 1, name)
            dtype = "U8"
        if shape is None or stride is None or len(shape) != len(stride) or any(
                d < 0 for d in shape) or any(s < 0 for s in stride):
            rep.error("bad_tensor_shape", f"Tensor {name!r} has size {render(ref.size, 1)} and "
                      f"stride {render(ref.stride, 1)}; expected two lists of as many non-negative "
                      "integers.", ref.offset, 1, name)
            shape, stride = (), ()
        if not isinstance(soff, int) or isinstance(soff, bool) or soff < 0:
            rep.error("bad_storage_offset", f"Tensor {name!r} has storage offset {render(soff, 1)}; "
                      "expected a non-negative integer.", ref.offset, 1, name)
            soff = 0
    info = TensorInfo(name, dtype, shape, file, 0, 0, byteorder, stride, None, soff, extra=extra)
    if not isinstance(storage, StorageRef):
        if ref.note.get("meta"):
            return info
        if not quiet_missing:
            rep.error("tensor_without_storage", f"Tensor {name!r} is built from "
                      f"{render(storage, 2)}, not from a storage record.", ref.offset, 1, name)
        return info
    size = itemsize(dtype)
    soff += storage.elem_base  # legacy storage views
    info.storage, info.storage_offset = storage.key, soff
    extra["location"] = storage.location if isinstance(storage.location, str) else None
    if storage.dtype != dtype:
        extra["storage_dtype"] = storage.dtype
    declared = storage.numel * storage.itemsize if isinstance(storage.numel, int) else None
    loc = locate(storage.key)
    if loc is None:
        if storage.key not in missing_reported and not quiet_missing:
            missing_reported.add(storage.key)
            rep.error("missing_storage", f"Tensor {name!r} uses storage {storage.key!r}, but the file "
                      f"has no {storage_label}{storage.key} record: its bytes are missing.",
                      storage.offset, 1, name)
        return info
    if loc[0] == "compressed":
        extra["compressed"] = True
        return info
    start, avail = loc
    extra["storage_start"] = start
    extra["storage_nbytes"] = min(avail, declared) if declared is not None else avail
    if declared is not None and declared > avail and storage.key not in missing_reported:
        missing_reported.add(storage.key)
        rep.error("storage_too_small", f"Storage {storage.key!r} should hold {storage.numel} "
                  f"{storage.dtype} elements ({declared} bytes), but the file has {avail} bytes "
                  "for it.", start, avail, name)
    numel = math.prod(shape) if shape else 1
    info.offset = start + soff * size
    if numel == 0:
        return info
    last = soff + sum((d - 1) * s for d, s in zip(shape, stride))
    info.length = (last - soff + 1) * size
    need = (last + 1) * size
    limit = min(avail, declared) if declared is not None else avail
    if storage.view_numel is not None:
        limit = min(limit, (storage.elem_base + storage.view_numel) * size)
    if need > limit:
        rep.error("view_out_of_bounds", f"Tensor {name!r} ({dtype} {list(shape)}, stride "
                  f"{list(stride)}, offset {soff}) reaches byte {need} of storage "
                  f"{storage.key!r}, which has {limit} bytes: the storage is smaller than the view "
                  "needs.", start, limit, name)
    return info
