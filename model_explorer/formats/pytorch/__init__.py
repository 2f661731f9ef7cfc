"""PyTorch checkpoints (zip and legacy) and plain pickles, read without running them.

Nothing from the file is ever imported or called: `vm` walks the opcodes and builds
inert stand-ins, `torch_refs` turns torch's reconstructor calls into storage and tensor
references, `walk` names them by path, `placement` places each tensor's bytes in
the file and `report` judges the imports. This module reads the containers.

- Zip (torch.save since 1.6): `<archive>/data.pkl` holds the structure; storages are the
  entries `<archive>/data/<key>`; `byteorder` says how to read them.
- Legacy (before 1.6): five pickles back to back (magic number, protocol version, sys_info,
  the data, the sorted storage keys), then for each key an 8-byte element count and the raw
  bytes of that storage.
- Plain pickle (`.pkl`, protocols 0 to 5): one pickle, or several back to back.

The import policy (what is allowed, what is dangerous) is in `policy`.
"""

from __future__ import annotations

import struct
import zlib
from operator import attrgetter
from typing import Any

from ...spans import Report, short_repr
from ..detect import detect, zip_member_head
from ..detect_pickle import pickle_prefix
from ..result import FileResult
from . import torchscript
from .cutshort import Cut, legacy_keys_length, report_cut, zip_cut
from .numpy_refs import NUMPY_REDUCERS
from .placement import EMBEDDED_FUNC, BytesSource, place_tensors
from .report import pickle_details
from .script_graph import script_structure
from .torch_refs import TORCH_REDUCERS, StorageTable
from .values import PickleRun, render
from .vm import PickleMachine
from .walk import walk
from .zipread import COMPRESSION, read_zip

TORCH_LEGACY_MAGIC = 0x1950A86A20F9469CFC6C
LEGACY_PROTOCOL_VERSION = 1001
LEGACY_PICKLES = ("magic number", "protocol version", "sys_info", "data", "storage keys")
SMALL_RECORDS = ("byteorder", "version", ".format_version", ".storage_alignment", ".data/version",
                 ".data/serialization_id")
MAX_RECORD = 256
MAX_INFLATED = 256 * 1024 * 1024
MAX_PICKLES = 16
REDUCERS = {**TORCH_REDUCERS, **NUMPY_REDUCERS}
WATCH = frozenset({EMBEDDED_FUNC})
PICKLE_STARTS = b"\x80(}]c)NISVFLdlKJMXUTGq"
MAX_EMBED_DEPTH = 8
MAX_SNIFFED = 4096  # members of a zip that is no checkpoint, read to find pickles


class EmbeddedFiles:
    """How deep the torch files embedded in one top-level file nest as they are read: one per
    top-level read, handed down the nesting, so reads in two threads never share a depth."""

    def __init__(self) -> None:
        self.depth = 0  # how deep read_embedded is now

    def read(self, sub) -> FileResult | None:
        return read_embedded(sub, self)


def read_embedded(sub, nesting: EmbeddedFiles) -> FileResult | None:
    """A torch file inside a pickle (torch.storage._load_from_bytes), read like any other,
    to a bounded depth: each level is a Python frame here, and a file can nest hundreds. A plain
    pickle there is read too: torch.load unpickles it (as the legacy magic number) before it
    checks anything, so what it imports and calls runs."""
    kind = detect(bytes(sub.read(0, 512)), sub.size)
    reader = {"torch_legacy": read_torch_legacy, "zip": read_torch_zip, "pickle": read_pickle}.get(kind)
    if reader is None:
        return None
    if nesting.depth >= MAX_EMBED_DEPTH:
        rep = Report(sub.name)
        rep.error("embedded_too_deep", f"Torch files embedded in torch files nest more than "
                  f"{MAX_EMBED_DEPTH} levels deep; the deeper ones are not read, so their imports "
                  "are not checked. No real checkpoint nests them at all.", 0, min(8, sub.size))
        return FileResult(sub.name, sub.size, rep)
    nesting.depth += 1
    try:
        return reader(sub, nesting)
    finally:
        nesting.depth -= 1


def sort_spans(rep: Report) -> None:
    """File order, the enclosing span first; two C-keyed stable sorts beat one tuple key."""
    rep.spans.sort(key=attrgetter("length"), reverse=True)
    rep.spans.sort(key=attrgetter("offset"))


# -- zip -------------------------------------------------------------------------------------

def read_torch_zip(source, embedded: EmbeddedFiles | None = None) -> FileResult:
    rep = Report(source.name)
    result = FileResult(source.name, source.size, rep)
    listing = read_zip(source, rep, report_cut=False)
    entries = listing.entries
    if not entries and listing.cut:
        report_cut(Cut(source.size, None, "the local header of its first zip entry"), result)
        return result
    if not entries:
        rep.error("zip_empty", "No zip entry could be located, so there is no data.pkl and "
                  "nothing to read.", 0, min(4, source.size))
        return result
    names = list(entries)
    pkl_name = _find_data_pkl(names)
    if pkl_name is None and listing.cut:  # torch.jit.save writes data.pkl after the storages
        report_cut(Cut(source.size, None, f"{short_repr(names[-1], 60)} (entry {len(names)}), "
                       "before any data.pkl"), result)
    if pkl_name is None:
        runs: list[PickleRun] = []
        members = _scan_other_pickles(source, rep, entries, None, runs, listing.shadowed,
                                      any_name=True)
        if not listing.cut:
            held = (f"; its member(s) {', '.join(short_repr(n, 40) for n in members[:5])} are "
                    "pickles, which pickle.load runs whatever their names, and are checked below"
                    if members else "")
            rep.error("no_data_pkl", "The zip holds no data.pkl record, so it is not a torch.save "
                      f"checkpoint (entries: {', '.join(short_repr(n, 40) for n in names[:5])})"
                      f"{held}.", 0, min(4, source.size))
        if runs:  # no torch checkpoint, but whatever pickles it holds are still judged
            result.details["pickle"] = pickle_details(runs, None, None, rep)
        return result
    prefix = pkl_name[: -len("data.pkl")]
    _check_zip_layout(source, rep, entries, prefix)
    meta = _read_records(source, rep, entries, prefix, listing.cut)
    result.metadata.update(meta)
    byteorder = _byteorder(meta.get("byteorder"), rep, entries.get(prefix + "byteorder"))

    table = StorageTable(legacy=False)
    machine = PickleMachine(rep, "data.pkl", REDUCERS, table.load, watch=WATCH)
    entry = entries[pkl_name]
    machine.at_file_end = listing.cut and entry.data_end >= source.size
    runs = []
    run: PickleRun | None
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

    cut = _zip_cut(source, listing, prefix, meta, table, main, entry) if listing.cut else None

    def locate(key: str):
        if cut is not None and key in cut.located:  # a storage the end of the file cuts
            return cut.located[key]
        e = entries.get(f"{prefix}data/{key}")
        if e is None:
            return None
        if e.method != 0:
            return ("compressed", e)
        return e.data_offset, max(0, min(e.size, source.size - e.data_offset))

    _scan_other_pickles(source, rep, entries, pkl_name, runs, listing.shadowed)
    walked = walk(main.value, rep)
    result.tensors = place_tensors(walked.tensors, locate, source, rep, byteorder, "data/",
                                   byte_offsets=main.byte_offsets, runs=runs,
                                   read_embedded=(embedded or EmbeddedFiles()).read,
                                   cut=cut.keys if cut else frozenset())
    if cut is not None:
        report_cut(cut, result)
    _storage_spans(table, locate, rep, prefix)
    _orphan_storages(entries, prefix, table, rep)
    scripted = torchscript.is_archive(entries, prefix)
    if scripted:
        torchscript.check_archive(source, rep, entries, prefix, runs)
    result.details["pickle"] = pickle_details(runs, main, walked.structure, rep, scripted)
    if scripted:  # the module tree data.pkl describes, as the archive's graph
        result.structure = script_structure(walked.structure, source.name, main.start, main.end - main.start)
    result.details["zip"] = {"archive": prefix.rstrip("/"), "recovered": listing.recovered,
                             "entries": len(entries), "predicted": listing.predicted}
    sort_spans(rep)
    return result


def _zip_cut(source, listing, prefix: str, meta: dict, table: StorageTable, main: PickleRun,
             entry) -> Cut:
    """Where a zip cut short ends, and where the storages it lost would have been."""
    if main.cut_short:
        return Cut(source.size, None, f"data.pkl (its data starts at byte {entry.data_offset:,}), "
                   "which names and places the tensors")
    if torchscript.is_archive(listing.entries, prefix):  # its records after data.pkl: code
        return Cut(source.size, None, "the TorchScript records written after the tensors (code "
                   "and constants)")
    storages = {k: r.numel * r.itemsize for k, r in table.first.items()
                if isinstance(r.numel, int) and r.numel >= 0}
    return zip_cut(source.size, listing.entries, prefix, storages, meta, main.end - entry.data_offset)


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
        looks = head[:1] in PICKLE_STARTS
        rep.add(
            "polyglot" if looks else "zip_prefix_bytes",
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
        if e.method == 0 or name.startswith(prefix + "code/"):
            continue  # torch.jit.save deflates the TorchScript source and its debug pickles
        how = COMPRESSION.get(e.method, str(e.method))
        if name.startswith(prefix + "data/"):
            rep.error("zip_compressed_storage", f"The storage {name!r} is {how}-compressed; torch.save "
                      "writes storages uncompressed, and compressed tensor bytes cannot be "
                      "memory-mapped or shown at their offsets.", e.header_offset, 4)
        elif name == prefix + "data.pkl":
            rep.warning("zip_compressed_entry", f"data.pkl is {how}-compressed; torch.save writes "
                        "it uncompressed. It is inflated and checked, but its opcodes have no "
                        "offsets in the file.", e.header_offset, 4)
        else:
            rep.info("zip_compressed_other", f"{name!r} is {how}-compressed.", e.header_offset, 4)


def _read_records(source, rep: Report, entries, prefix: str, cut: bool) -> dict[str, Any]:
    meta: dict[str, Any] = {}
    for rec in SMALL_RECORDS:
        e = entries.get(prefix + rec)
        if e is None or e.method != 0 or cut and e.data_end >= source.size:
            continue  # (a record the end of a cut file runs through has no known length)
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
    run = machine.run(BytesSource(data), 0, len(data))
    for g in run.imports:  # positions are inside the inflated bytes; point at the entry
        g.offset = entry.data_offset
    run.start, run.end = entry.data_offset, entry.data_end
    return run


def _storage_spans(table: StorageTable, locate, rep: Report, prefix: str) -> None:
    for key, ref in table.first.items():
        loc = locate(key)
        if loc is None or loc[0] == "compressed":
            continue
        start, avail = loc
        if avail <= 0 and ref.numel:  # cut off by the end of the file: nothing to label
            continue
        rep.span(start, avail, "storage", f"{prefix}data/{key}",
                 f"{ref.dtype} x {ref.numel}" if isinstance(ref.numel, int) else ref.dtype)


def _orphan_storages(entries, prefix: str, table: StorageTable, rep: Report) -> None:
    base = prefix + "data/"
    orphans = [n for n in entries if n.startswith(base) and n[len(base):] not in table.first]
    if orphans:
        rep.info("unused_storage", f"{len(orphans)} storage records are not used by any tensor "
                 f"(first: {orphans[0]!r}).", entries[orphans[0]].header_offset, 4)


def _scan_other_pickles(source, rep: Report, entries, data_pkl: str | None,
                        runs: list[PickleRun], shadowed=(), any_name: bool = False) -> list[str]:
    """Other *.pkl records (constants.pkl, extra files, earlier copies of a duplicated name)
    may be unpickled by some loader; with `any_name` (a zip that is no torch checkpoint), so
    may any member whose bytes are a pickle, the first MAX_SNIFFED of them. Returns the names
    of the members read."""
    others = [(n, e, n.rsplit("/", 1)[-1]) for n, e in entries.items() if n != data_pkl]
    others += [(e.name, e, f"{e.name.rsplit('/', 1)[-1]} (copy at byte {e.header_offset}, not the "
                "one torch loads)") for e in shadowed]
    read = []
    sniffed = 0
    for name, e, label in others:
        if e.method not in (0, 8):
            continue
        if not name.endswith(".pkl"):
            if not any_name or sniffed >= MAX_SNIFFED or name.endswith("/"):
                continue
            sniffed += 1
            head = zip_member_head(source.read, source.size, e.method, e.compressed_size,
                                   e.header_offset)
            if not (head and pickle_prefix(head, max(len(head) + 1, e.size)).is_pickle):
                continue
            label = name
        m = PickleMachine(rep, label, REDUCERS, StorageTable(legacy=False).load, watch=WATCH)
        run = m.run(source, e.data_offset, max(0, min(e.compressed_size, source.size
                                                      - e.data_offset))) if e.method == 0 \
            else _run_inflated(source, rep, m, e)
        if run is not None:
            runs.append(run)
            read.append(name)
    if sniffed >= MAX_SNIFFED and len(others) > MAX_SNIFFED:
        rep.warning("archive_members_unchecked", f"The zip holds {len(others):,} members; the "
                    f"first {MAX_SNIFFED:,} were checked for pickles, the rest were not.", 0,
                    min(4, source.size))
    return read


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

def read_torch_legacy(source, embedded: EmbeddedFiles | None = None) -> FileResult:
    rep = Report(source.name)
    result = FileResult(source.name, source.size, rep)
    table = StorageTable(legacy=True)
    runs: list[PickleRun] = []
    pos = 0
    for label in LEGACY_PICKLES:
        torch_data = label == "data"
        m = PickleMachine(rep, f"legacy {label}", REDUCERS if torch_data else None,
                          table.load if torch_data else None, watch=WATCH)
        m.at_file_end = True  # each pickle may run to the end: running out of bytes is the cut
        run = m.run(source, pos, source.size - pos, open_ended=True)
        runs.append(run)
        if not run.stopped:
            break
        pos = run.end
    kinds = {"magic number": "magic", "protocol version": "version", "sys_info": "sys_info"}
    for label, run in zip(LEGACY_PICKLES, runs):
        if label in kinds:
            rep.span(run.start, run.end - run.start, kinds[label], f"legacy > {label}",
                     short_repr(render(run.value, 2), 60))
    if runs[0].value != TORCH_LEGACY_MAGIC and not runs[0].cut_short:
        rep.error("legacy_bad_magic", f"A legacy torch file starts with the pickled magic number "
                  f"{TORCH_LEGACY_MAGIC:#x}; found {render(runs[0].value, 1)}.", 0, runs[0].end)
    if len(runs) > 1 and runs[1].value != LEGACY_PROTOCOL_VERSION and not runs[1].cut_short:
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
    cut = _legacy_cut(source, rep, runs, table, locations)
    walked = walk(main.value if main else None, rep)
    result.tensors = place_tensors(walked.tensors, lambda key: locations.get(key), source, rep,
                                   byteorder, "storage ",
                                   byte_offsets=main.byte_offsets if main else {}, runs=runs,
                                   read_embedded=(embedded or EmbeddedFiles()).read,
                                   cut=cut.keys if cut else frozenset())
    if cut is not None:
        report_cut(cut, result)
    result.details["pickle"] = pickle_details(runs, main, walked.structure, rep)
    sort_spans(rep)
    return result


def _legacy_cut(source, rep: Report, runs: list[PickleRun], table: StorageTable,
                locations: dict) -> Cut | None:
    """Read the storages after the five pickles into `locations`; the file's `Cut` when it
    ends before the last one does (or inside a pickle), else None."""
    size = source.size
    if runs[-1].cut_short and len(runs) < 5:  # inside the header pickles or data.pkl's
        what = ("its data pickle" if len(runs) == 4 else f"its {LEGACY_PICKLES[len(runs) - 1]} "
                "pickle")
        return Cut(size, None, f"{what} (from byte {runs[-1].start:,})" + (
            ", which names and places the tensors" if len(runs) == 4 else
            ", before the pickle that names and places the tensors"))
    if len(runs) < 4 or not runs[3].stopped:
        return None
    lost: set[str] = set()
    if len(runs) == 5 and runs[4].stopped:
        keys = runs[4].value
        if not (isinstance(keys, list) and all(isinstance(k, str) for k in keys)):
            rep.error("legacy_bad_keys", f"The storage key list should be a list of strings; "
                      f"found {render(keys, 2)}.", runs[4].start, runs[4].end - runs[4].start)
            return None
        end = _legacy_storages(source, rep, keys, runs[4].end, table, locations, lost)
    else:  # the key list is cut (or missing): torch writes data.pkl's keys, sorted
        keys = sorted(table.first)
        start = runs[3].end + legacy_keys_length(keys, runs[3].protocol)
        end = _legacy_storages(source, rep, keys, start, table, locations, lost)
        lost.update(keys)
    if end is None or end <= size:
        return None
    return Cut(size, end, located=dict(locations), keys=frozenset(lost))


def _legacy_storages(source, rep: Report, keys: list[str], pos: int, table: StorageTable,
                     locations: dict, lost: set[str]) -> int | None:
    """Each storage's element count and bytes, from `pos`; where one ends past the end of the
    file (a file cut short), the counts come from data.pkl and the key goes into `lost`.
    Returns where the last storage ends, or None when the layout cannot be followed."""
    for key in keys:
        ref = table.first.get(key)
        if ref is None:
            rep.error("legacy_unknown_key", f"The storage key list names {key!r}, which no tensor "
                      "uses, so its element size is unknown and the storages after it cannot be "
                      "located.", pos, 8)
            return None
        raw = bytes(source.read(pos, 8))
        if len(raw) == 8:
            (count,) = struct.unpack("<q", raw)
            rep.span(pos, 8, "length", f"storage {key} > element count", f"i64 = {count}")
            if count < 0:
                rep.error("legacy_bad_count", f"Storage {key!r} claims {count} elements.", pos, 8)
                return None
            if isinstance(ref.numel, int) and count != ref.numel:
                rep.error("legacy_count_mismatch", f"Storage {key!r} holds {count} elements, but "
                          f"the pickle says {ref.numel}; torch.load fails with 'storage has wrong "
                          "size'.", pos, 8)
        elif isinstance(ref.numel, int) and ref.numel >= 0:
            count = ref.numel  # the file ends inside the count: data.pkl's
        else:
            return None
        nbytes = count * ref.itemsize
        start = pos + 8
        avail = max(0, min(nbytes, source.size - start))
        if start + nbytes > source.size:
            lost.add(key)
        if avail:
            rep.span(start, avail, "storage", f"storage {key}", f"{ref.dtype} x {count}")
        locations[key] = (start, avail)
        pos = start + nbytes
    if pos < source.size:
        rep.warning("trailing_bytes", f"{source.size - pos} bytes follow the last storage; torch "
                    "ignores them.", pos, source.size - pos)
        rep.span(pos, source.size - pos, "gap", "trailing bytes")
    return pos


# -- plain pickles ---------------------------------------------------------------------------

def read_pickle(source, embedded: EmbeddedFiles | None = None) -> FileResult:
    rep = Report(source.name)
    result = FileResult(source.name, source.size, rep)
    runs: list[PickleRun] = []
    pos = 0
    while pos < source.size and len(runs) < MAX_PICKLES:
        label = "pickle" if not runs else f"pickle {len(runs) + 1}"
        m = PickleMachine(rep, label, REDUCERS, watch=WATCH)
        run = m.run(source, pos, source.size - pos, open_ended=True)
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
    result.tensors = place_tensors(walked.tensors, lambda key: locations.get(key), source, rep,
                                   "<", "storage ", quiet_missing=True,
                                   byte_offsets=runs[0].byte_offsets if runs else {}, runs=runs,
                                   read_embedded=(embedded or EmbeddedFiles()).read)
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
