"""torch's oldest format (torch.save before 0.4): a tar archive of four members.

- `sys_info`: a pickle of {protocol_version, little_endian, type_sizes}.
- `storages`: a pickle of the count, then per storage a pickle of (key, location, storage
  class), an 8-byte element count and the raw bytes; then a pickle of the storage views
  [(view key, root key, element offset, element count)].
- `tensors`: a pickle of the count, then per tensor a pickle of (key, storage key, tensor
  class), an int32 rank, 4 bytes of padding, rank int64 sizes, rank int64 strides and an
  int64 storage offset.
- `pickle`: the object itself; its persistent ids are tensor keys (or, for saved module
  classes, a (class, file, source) tuple).

torch.load (weights_only=False) still reads it: every pickle in it runs, so every one is
judged. Like tarfile, the last member of a name is the one read; earlier ones are judged too.
"""

from __future__ import annotations

import struct
from typing import Any

from ...spans import Report, short_repr
from .. import MAX_RANK
from ..result import FileResult
from .cutshort import Cut, report_cut
from .placement import place_tensors
from .report import DANGER_CODES, SUSPICIOUS_CODES, pickle_details
from .torch_refs import StorageRef, TensorRef, itemsize, storage_dtype
from .values import Global, PickleRun, Unknown, render
from .vm import PickleMachine
from .walk import walk

BLOCK = 512
MEMBERS = ("sys_info", "storages", "tensors", "pickle")
MAX_MEMBERS = 100_000
MAX_RECORDS = 1_000_000
MAX_SNIFFED = 4096  # members of a tar that is no checkpoint, read to find pickles
REGULAR = (b"0", b"\0", b"7")


class _Member:
    __slots__ = ("name", "header", "data", "size", "kind", "cut")

    def __init__(self, name: str, header: int, data: int, size: int, kind: bytes,
                 cut: bool = False) -> None:
        self.name, self.header, self.data, self.size, self.kind = name, header, data, size, kind
        self.cut = cut  # the file ends inside it (a file cut short)


def read_torch_tar(source) -> FileResult:
    from . import EmbeddedFiles, sort_spans  # the container module imports this one

    rep = Report(source.name)
    result = FileResult(source.name, source.size, rep)
    members, cut = list_members(source, rep)
    by_name: dict[str, list[_Member]] = {}
    for m in members:
        by_name.setdefault(m.name, []).append(m)
    missing = [n for n in MEMBERS[1:] if n not in by_name]
    if missing and cut is None:  # (in a file cut short, the members after the cut are lost)
        rep.error("tar_not_torch", f"The tar archive lacks the member(s) {', '.join(missing)} that "
                  "torch's legacy tar format has; torch.load fails on it.", 0, min(BLOCK, source.size))
    for name, copies in by_name.items():
        if len(copies) > 1 and name in MEMBERS:
            rep.error("zip_duplicate_entry", f"The tar holds {len(copies)} members named {name!r}; "
                      f"tarfile (and so torch.load) reads the last one, at byte "
                      f"{copies[-1].header}. Every copy is checked.", copies[-1].header, BLOCK)
        for m in copies:
            if name in MEMBERS and m.kind not in REGULAR:
                rep.error("tar_member_link", f"The member {name!r} is not a regular file (type "
                          f"{m.kind!r}); torch.load extracts it to a temporary folder and reads "
                          "it, so a link makes it read another file.", m.header, BLOCK)
    runs: list[PickleRun] = []
    storages: dict[Any, StorageRef] = {}
    locations: dict[str, tuple[int, int]] = {}
    tensors: dict[Any, TensorRef] = {}
    byteorder = "<"
    for name in MEMBERS:
        for i, m in enumerate(by_name.get(name, [])):
            last = i == len(by_name[name]) - 1
            label = f"tar {name}" + ("" if last else f" (copy at byte {m.header}, not read)")
            if name == "sys_info":
                run = _quiet_if_cut(m, rep, _pickle, source, label, m.data, m.data + m.size, runs)
                if last and isinstance(run.value, dict) and run.value.get("little_endian") is False:
                    byteorder = ">"
            elif name == "storages":
                _quiet_if_cut(m, rep, _storages, source, label, m, runs,
                              storages if last else {}, locations if last else {})
            elif name == "tensors":
                _quiet_if_cut(m, rep, _tensors, source, label, m, runs, storages,
                              tensors if last else {})
    main = None
    for i, m in enumerate(by_name.get("pickle", [])):
        last = i == len(by_name["pickle"]) - 1
        machine = PickleMachine(rep, "tar pickle" if last else f"tar pickle (copy at byte "
                                f"{m.header}, not read)", _reducers(),
                                _Resolver(tensors, storages).load)
        machine.at_file_end = m.cut
        run = machine.run(source, m.data, m.size)
        runs.append(run)
        if last:
            main = run
    if not by_name.keys() & set(MEMBERS):
        _other_pickles(source, rep, members, runs)
    walked = walk(main.value if main else None, rep)
    result.tensors = place_tensors(walked.tensors, lambda key: locations.get(key), source, rep,
                                   byteorder, "storage ",
                                   byte_offsets=main.byte_offsets if main else {}, runs=runs,
                                   read_embedded=EmbeddedFiles().read)
    if cut is not None:
        report_cut(Cut(source.size, None, cut), result)
    result.details["pickle"] = pickle_details(runs, main, walked.structure, rep)
    result.details["tar"] = {"members": [m.name for m in members[:100]]}
    sort_spans(rep)
    return result


def _other_pickles(source, rep: Report, members: list[_Member], runs: list[PickleRun]) -> None:
    """A tar that is no torch checkpoint: a loader that unpacks it and unpickles a member runs
    that member whatever its name, so every regular member whose bytes parse as a pickle (the
    first MAX_SNIFFED) is read and judged."""
    from ..detect_pickle import pickle_prefix

    regular = [m for m in members if m.kind in REGULAR and m.size > 0]
    for m in regular[:MAX_SNIFFED]:
        head = bytes(source.read(m.data, min(m.size, 512)))
        if not pickle_prefix(head, m.size).is_pickle:
            continue
        rep.info("archive_member_pickle", f"The member {m.name!r} is a pickle; pickle.load runs "
                 "it whatever its name, so it is checked.", m.header, BLOCK)
        machine = PickleMachine(rep, f"tar {m.name}", _reducers())
        machine.at_file_end = m.cut
        runs.append(machine.run(source, m.data, m.size))
    if len(regular) > MAX_SNIFFED:
        rep.warning("archive_members_unchecked", f"The tar holds {len(regular):,} members; the "
                    f"first {MAX_SNIFFED:,} were checked for pickles, the rest were not.", 0, BLOCK)


def _reducers():
    from . import REDUCERS

    return REDUCERS


def _quiet_if_cut(m: _Member, rep: Report, read, source, *args):
    """`read(source, rep, *args)` for member `m`; if the file ends inside it, its records run
    into the cut, which the file's `truncated` finding reports: of their findings, only those
    that judge its pickles are kept (and all its spans)."""
    if not m.cut:
        return read(source, rep, *args)
    scratch = Report(rep.file)
    out = read(source, scratch, *args)
    rep.spans += scratch.spans
    for f in scratch.findings:
        if f.code in DANGER_CODES or f.code in SUSPICIOUS_CODES:
            g = getattr(rep, f.severity)(f.code, f.message, f.offset, f.length, f.tensor)
            g.extra.update(f.extra)
    return out


def list_members(source, rep: Report) -> tuple[list[_Member], str | None]:
    """Walk the 512-byte headers (ustar, with GNU long names and pax paths and sizes); and,
    for a file cut short, what it ends inside."""
    out: list[_Member] = []
    cut = None
    pos = 0
    long_name: str | None = None
    pax: dict[str, str] = {}
    while pos + BLOCK <= source.size and len(out) < MAX_MEMBERS:
        head = bytes(source.read(pos, BLOCK))
        if head == b"\0" * BLOCK:
            break
        stored = _octal(head[148:156])
        actual = sum(head[:148]) + 8 * 32 + sum(head[156:])
        if stored != actual:
            rep.error("tar_bad_checksum", f"The tar header at byte {pos} has checksum {stored}; its "
                      f"bytes sum to {actual}. tarfile stops here.", pos + 148, 8)
            break
        size = _octal(head[124:136])
        kind = head[156:157]
        if size is None or size < 0:
            rep.error("tar_bad_header", f"The tar header at byte {pos} has no valid size.",
                      pos + 124, 12)
            break
        data = pos + BLOCK
        rep.span(pos, BLOCK, "tar_header", f"tar > header > {_name(head)}", f"{size} bytes")
        cut_here = data + size > source.size
        if cut_here:
            cut = f"its member {short_repr(_name(head), 60)} (from byte {pos:,})"
            size = max(0, source.size - data)
        if kind in (b"x", b"g", b"L"):
            body = bytes(source.read(data, min(size, 1 << 20)))
            if kind == b"L":
                long_name = body.split(b"\0", 1)[0].decode("utf-8", "replace")
            elif kind == b"x":
                pax = _pax(body)
        else:
            name = pax.get("path") or long_name or _name(head)
            if "size" in pax and pax["size"].isdigit():
                size = min(int(pax["size"]), max(0, source.size - data))
            if cut_here:
                cut = f"its member {short_repr(name, 60)} (from byte {pos:,})"
            out.append(_Member(name, pos, data, size, kind, cut_here))
            long_name, pax = None, {}
        pos = data + -(-size // BLOCK) * BLOCK
    tail = bytes(source.read(pos, BLOCK)) if pos < source.size and cut is None else b""
    if 0 < len(tail) < BLOCK and tail.strip(b"\0"):  # the file ends inside a header
        cut = f"the tar header at byte {pos:,}"
    elif pos > source.size and cut is None and out:  # inside the padding after a member
        cut = f"the padding after its member {short_repr(out[-1].name, 60)}"
    return out, cut


def _name(head: bytes) -> str:
    name = head[:100].split(b"\0", 1)[0]
    prefix = head[345:500].split(b"\0", 1)[0] if head[257:262] == b"ustar" else b""
    text = (prefix + b"/" + name) if prefix else name
    return text.decode("utf-8", "replace")


def _octal(field: bytes) -> int | None:
    if field[:1] and field[0] & 0x80:  # base-256 (GNU) for big sizes
        return int.from_bytes(field[1:], "big")
    text = field.split(b"\0", 1)[0].strip(b" ")
    try:
        return int(text, 8) if text else 0
    except ValueError:
        return None


def _pax(body: bytes) -> dict[str, str]:
    out: dict[str, str] = {}
    for line in body.split(b"\n"):
        _, _, kv = line.partition(b" ")
        key, eq, value = kv.partition(b"=")
        if eq:
            out[key.decode("utf-8", "replace")] = value.decode("utf-8", "replace")
    return out


def _pickle(source, rep: Report, label: str, start: int, end: int, runs: list[PickleRun],
            ) -> PickleRun:
    from . import REDUCERS

    run = PickleMachine(rep, label, REDUCERS).run(source, start, max(0, end - start))
    runs.append(run)
    return run


def _count(run: PickleRun, rep: Report, what: str) -> int | None:
    n = run.value
    if not (isinstance(n, int) and not isinstance(n, bool) and 0 <= n <= MAX_RECORDS):
        rep.error("tar_bad_record", f"The {what} count is {render(n, 1)}; expected a small "
                  "non-negative integer.", run.start, max(1, run.end - run.start))
        return None
    return n


def _storages(source, rep: Report, label: str, m: _Member, runs, storages: dict,
              locations: dict) -> None:
    end = m.data + m.size
    run = _pickle(source, rep, f"{label} > count", m.data, end, runs)
    n = _count(run, rep, "storage") if run.stopped else None
    pos = run.end
    for i in range(n or 0):
        run = _pickle(source, rep, f"{label} > {i}", pos, end, runs)
        rec = run.value
        if not (run.stopped and isinstance(rec, tuple) and len(rec) == 3):
            rep.error("tar_bad_record", f"Storage record {i} should be (key, location, storage "
                      f"class); found {render(rec, 2)}.", run.start, max(1, run.end - run.start))
            return
        key, location, stype = rec
        dtype, type_name = storage_dtype(stype)
        if dtype is None:
            rep.error("unknown_storage_type", f"Storage {render(key, 1)} names the storage type "
                      f"{type_name!r}, which torch does not define.", run.start, 1)
            dtype = "U8"
        raw = bytes(source.read(run.end, 8))
        if len(raw) < 8:
            rep.error("tar_truncated", f"The element count of storage {render(key, 1)} is cut "
                      "short.", run.end, len(raw))
            return
        (numel,) = struct.unpack("<q", raw)
        start = run.end + 8
        nbytes = numel * itemsize(dtype) if numel >= 0 else -1
        if nbytes < 0 or start + nbytes > end:
            rep.error("tar_truncated", f"Storage {render(key, 1)} claims {numel} {dtype} elements "
                      f"({nbytes} bytes) from byte {start}; its member ends at byte {end}.",
                      run.end, 8)
            return
        rep.span(run.end, 8, "length", f"{label} > {render(key, 1)} > element count", str(numel))
        rep.span(start, nbytes, "storage", f"{label} > {render(key, 1)}", f"{dtype} x {numel}")
        skey = _skey(key)
        storages[key] = StorageRef(skey, dtype, numel, location, run.start, type_name)
        locations[skey] = (start, nbytes)
        pos = start + nbytes
    if n is None:
        return
    run = _pickle(source, rep, f"{label} > views", pos, end, runs)
    views = run.value
    if not isinstance(views, list):
        rep.error("tar_bad_record", f"The storage views should be a list; found {render(views, 2)}.",
                  run.start, max(1, run.end - run.start))
        return
    for v in views[:MAX_RECORDS]:
        if not (isinstance(v, tuple) and len(v) == 4 and v[1] in storages and
                all(isinstance(x, int) and x >= 0 for x in v[2:])):
            rep.error("tar_bad_record", f"The storage view {render(v, 2)} is not (key, root key, "
                      "offset, count) over a known storage.", run.start, 1)
            continue
        root = storages[v[1]]
        storages[v[0]] = StorageRef(root.key, root.dtype, root.numel, root.location, run.start,
                                    root.type_name, elem_base=v[2], view_numel=v[3])


def _tensors(source, rep: Report, label: str, m: _Member, runs, storages: dict,
             tensors: dict) -> None:
    end = m.data + m.size
    run = _pickle(source, rep, f"{label} > count", m.data, end, runs)
    n = _count(run, rep, "tensor") if run.stopped else None
    pos = run.end
    for i in range(n or 0):
        run = _pickle(source, rep, f"{label} > {i}", pos, end, runs)
        rec = run.value
        if not (run.stopped and isinstance(rec, tuple) and len(rec) == 3):
            rep.error("tar_bad_record", f"Tensor record {i} should be (key, storage key, tensor "
                      f"class); found {render(rec, 2)}.", run.start, max(1, run.end - run.start))
            return
        key, storage_key, _ = rec
        head = bytes(source.read(run.end, 8))
        ndim = struct.unpack_from("<i", head)[0] if len(head) == 8 else -1
        if not 0 <= ndim <= MAX_RANK:
            rep.error("tar_bad_record", f"Tensor {render(key, 1)} has rank {ndim}; expected 0 to "
                      f"{MAX_RANK}.", run.end, len(head))
            return
        body = bytes(source.read(run.end + 8, 16 * ndim + 8))
        if len(body) < 16 * ndim + 8 or run.end + 16 + 16 * ndim > end:
            rep.error("tar_truncated", f"The shape of tensor {render(key, 1)} is cut short.",
                      run.end, 8 + len(body))
            return
        values = struct.unpack(f"<{2 * ndim + 1}q", body)
        rep.span(run.end, 16 + 16 * ndim, "tensor_info", f"{label} > {render(key, 1)} > shape",
                 short_repr(list(values[:ndim]), 60))
        storage = storages.get(storage_key)
        if storage is None:
            rep.error("missing_storage", f"Tensor {render(key, 1)} uses storage "
                      f"{render(storage_key, 1)}, which the storages member does not hold.",
                      run.start, 1)
            storage = Unknown("storage")
        tensors[key] = TensorRef(storage, values[-1], values[:ndim], values[ndim:2 * ndim],
                                 run.start)
        pos = run.end + 16 + 16 * ndim


def _skey(key: Any) -> str:
    return str(key) if isinstance(key, (int, str)) else render(key, 1)


class _Resolver:
    """The main pickle's persistent ids: tensor keys, or (class, file, source) tuples."""

    def __init__(self, tensors: dict, storages: dict) -> None:
        self.tensors, self.storages = tensors, storages

    def load(self, machine: PickleMachine, pid: Any, offset: int) -> Any:
        if isinstance(pid, tuple):
            return pid[0] if pid and isinstance(pid[0], Global) else Unknown("persistent id")
        key = pid
        if isinstance(pid, str) and pid.lstrip("-").isdigit():
            key = int(pid)
        found = self.tensors.get(key) or self.storages.get(key)
        if found is None:
            machine.report.error("bad_persistent_id", f"The pickle refers to {render(pid, 1)} at "
                                 f"byte {offset}, which no tensor or storage record defines; "
                                 "torch.load fails here.", offset, 1)
            return Unknown("persistent id")
        return found
