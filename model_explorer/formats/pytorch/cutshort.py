"""A torch file cut short (a download that stopped): one `truncated` finding for the file.

The finding says how much is there (bytes and %), where the file ends, the first tensor cut
and how many are wholly present, in the words the GGUF and safetensors readers use; the
tensors before the cut stay readable, and no tensor gets a finding of its own. Where the rest
of the file would be is laid out as torch writes it:

- Zip (torch.save since 1.6): the central directory, at the end, is gone, so the entries are
  found by walking their local headers (`zipread`). torch writes data.pkl, its small records,
  the storages in the order data.pkl first names them (sorted by key in files without
  `.format_version`), then `version` and `.data/serialization_id`. Each record is a 30-byte
  local header, its name, a padding field that puts its data on the storage alignment (64
  bytes), its data and a 16-byte data descriptor (24 past 4 GiB); the central directory holds
  46 bytes and the name per record (and ZIP64 fields past 4 GiB), then come the ZIP64 end
  record, its locator and the end record (98 bytes). For a file torch 2.x wrote, the expected
  size is exact; for older ones the records after the storages may differ by a few bytes.
- Legacy (before 1.6): five pickles, then for each storage, sorted by key, an 8-byte element
  count and the bytes; the counts are data.pkl's.

When the file ends inside the pickle that names the tensors, nothing can be laid out: the
finding says where the file ends and that no tensor can be located.
"""

from __future__ import annotations

import pickle
from dataclasses import dataclass, field
from typing import Any

from ...hexview import END_KIND
from ...sources import basename
from ..result import FileResult
from ..truncation import Truncation, percent, report_truncation

U32 = 0xFFFFFFFF
LOCAL_HEADER = 30
CENTRAL_ENTRY = 46
END_RECORDS = 56 + 20 + 22  # ZIP64 end record, ZIP64 locator, end record
DEFAULT_ALIGNMENT = 64
# The records torch.save writes after the storages, with their sizes ("3\n", a 40-digit id).
TAIL_RECORDS = (("version", 2), (".data/serialization_id", 40))
SMALL_RECORDS = ((".format_version", 1), (".storage_alignment", 2), ("byteorder", 6))


@dataclass
class Cut:
    """Where a file stops and where the storages it lost would have been."""

    size: int
    expected: int | None  # None: the file ends before what says how long it should be
    where: str = ""  # what the file ends inside, when `expected` is None
    located: dict[str, tuple[int, int]] = field(default_factory=dict)  # key -> (start, present)
    keys: frozenset[str] = frozenset()  # storages not wholly present


# -- zip ---------------------------------------------------------------------------------------

def _descriptor(at: int, nbytes: int) -> int:
    return 24 if nbytes >= U32 or at >= U32 else 16


def _data_offset(at: int, name_len: int, nbytes: int, align: int) -> int:
    """Where torch's writer puts a record's data: the local header, the name and its padding
    field (with ZIP64 fields past 4 GiB), rounded up to the alignment."""
    start = at + LOCAL_HEADER + name_len + 4
    if nbytes >= U32 or at >= U32:
        start += 4 + (16 if nbytes >= U32 else 0) + (8 if at >= U32 else 0)
    return -(-start // align) * align


def _central_size(records: list[tuple[int, int, int]]) -> int:
    """The central directory and end records for (name length, header offset, size) records."""
    total = END_RECORDS
    for name_len, at, nbytes in records:
        wide = (2 if nbytes >= U32 else 0) + (1 if at >= U32 else 0)
        total += CENTRAL_ENTRY + name_len + (4 + 8 * wide if wide else 0)
    return total


def zip_cut(size: int, entries: dict, prefix: str, storages: dict, meta: dict,
            pickle_bytes: int) -> Cut:
    """Lay out what a torch.save zip cut at `size` lost. `entries` are the entries the walk
    found; `storages` maps each key data.pkl names to its byte count (in first-named order);
    data.pkl holds `pickle_bytes` (its STOP is there: only its descriptor may be cut)."""
    align = _alignment(meta.get("storage_alignment"))
    found = sorted(entries.values(), key=lambda e: e.header_offset)
    done = [e for e in found if e.data_end < size]  # its descriptor follows: complete
    names = {e.name for e in done}
    cut_entry = next((e for e in found if e.data_end >= size), None)
    keys = list(storages) if prefix + ".format_version" in entries else sorted(storages)
    pending: list[tuple[str, int]] = []
    if not any(e.name.startswith(prefix + "data/") for e in done):
        pending += [(prefix + n, k) for n, k in SMALL_RECORDS if prefix + n not in names]
    pending += [(f"{prefix}data/{k}", storages[k]) for k in keys if f"{prefix}data/{k}" not in names]
    pending += [(prefix + n, k) for n, k in TAIL_RECORDS if prefix + n not in names]
    if cut_entry is not None and all(cut_entry.name != n for n, _ in pending):
        pending.insert(0, (cut_entry.name, pickle_bytes if cut_entry.name.endswith("data.pkl")
                           else cut_entry.compressed_size))  # else: at least to the end
    last = done[-1] if done else None
    pos = last.data_end + _descriptor(last.header_offset, last.compressed_size) if last else 0
    records = [(len(e.name.encode()), e.header_offset, e.compressed_size) for e in done]
    starts: dict[str, int] = {}
    for name, nbytes in pending:
        at = pos
        data = _data_offset(at, len(name.encode()), nbytes, align)
        if cut_entry is not None and cut_entry.name == name:  # where the walk found it
            at, data = cut_entry.header_offset, cut_entry.data_offset
        starts[name] = data
        records.append((len(name.encode()), at, nbytes))
        pos = data + nbytes + _descriptor(at, nbytes)
    located, cut = {}, set()
    for k in keys:
        start = starts.get(f"{prefix}data/{k}")
        if start is not None:
            located[k] = (start, max(0, min(storages[k], size - start)))
            if start + storages[k] > size:
                cut.add(k)
    return Cut(size, pos + _central_size(records), located=located, keys=frozenset(cut))


def _alignment(text: Any) -> int:
    try:
        n = int(text)
    except (TypeError, ValueError):
        return DEFAULT_ALIGNMENT
    return n if 0 < n <= 1 << 20 else DEFAULT_ALIGNMENT


# -- legacy ------------------------------------------------------------------------------------

def legacy_keys_length(keys: list[str], protocol: int | None) -> int:
    """The bytes torch's pickle of the sorted storage keys takes (pickled here: a list of
    strings, built from the names data.pkl gave)."""
    return len(pickle.dumps(keys, protocol=protocol if protocol in (2, 3, 4, 5) else 2))


# -- the finding -------------------------------------------------------------------------------

def report_cut(cut: Cut, result: FileResult) -> None:
    """The `truncated` finding and the end-of-file span; and, when the expected size is known,
    the summary in the file's details (`truncated`, the GGUF and safetensors readers' keys)."""
    rep, tensors = result.report, result.tensors
    size, name = cut.size, basename(result.file)
    lost = sorted((t for t in tensors.values() if t.length and t.offset + t.length > size),
                  key=lambda t: (t.offset, t.name))
    total, present = len(tensors), len(tensors) - len(lost)
    if cut.expected is not None and lost:  # the sentence every format's reader says
        tr = Truncation(result.file, size, cut.expected, lost[0].name, present, total,
                        [t.name for t in lost])
        report_truncation(rep, tr, name)
        result.details["truncated"] = tr.to_dict()
        return
    what = (f"no tensor is cut; all {total:,} tensors are wholly present" if tensors else
            "no tensor can be named or located")
    if cut.expected is None:
        text, mark = f"{name} ends at byte {size:,}, inside {cut.where}: {what}.", "the rest is cut"
    else:  # only the records after the storages are cut
        share = f"({percent(size, cut.expected)} %)"
        text = f"{name} ends at byte {size:,} of {cut.expected:,} expected {share}: {what}"
        mark = f"of {cut.expected:,} expected {share}"
        result.details["truncated"] = {"size": size, "expected": cut.expected, "first_cut": None,
                                       "present_tensors": total, "tensors": total,
                                       "cut_tensors": []}
    f = rep.error("truncated", text, size, 0)
    f.extra.update(size=size, expected=cut.expected, first_cut=None, present_tensors=present,
                   tensors=total, cut_tensors=[])
    rep.span(size, 0, END_KIND, "end of file", f"{size:,} bytes {mark}")
