"""A minimal zip reader over `source.read(offset, n)` that keeps every offset exact.

`torch.save` writes a zip with STORED (uncompressed) entries whose data is aligned to 64
bytes, sizes in data descriptors after each entry (flag bit 3) and, always, ZIP64 end
records. The reader finds the end-of-central-directory record in the last 64 KiB + 22
bytes, reads the central directory, then each entry's local header to learn where its data
starts. It never touches entry data, so opening a 1 GB checkpoint reads a few kilobytes.

When there is no end record (a truncated download), it walks the local headers from the
start instead, finding each entry's size from the data descriptor that follows it.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass, field

from ...spans import Report, short_repr

EOCD_SIG = b"PK\x05\x06"
ZIP64_EOCD_SIG = b"PK\x06\x06"
ZIP64_LOCATOR_SIG = b"PK\x06\x07"
CENTRAL_SIG = b"PK\x01\x02"
LOCAL_SIG = b"PK\x03\x04"
DESCRIPTOR_SIG = b"PK\x07\x08"

EOCD = struct.Struct("<4sHHHHIIH")  # 22 bytes
ZIP64_EOCD = struct.Struct("<4sQHHIIQQQQ")  # 56 bytes
ZIP64_LOCATOR = struct.Struct("<4sIQI")  # 20 bytes
CENTRAL = struct.Struct("<4sHHHHHHIIIHHHHHII")  # 46 bytes
LOCAL = struct.Struct("<4sHHHHHIIIHH")  # 30 bytes
MAX_COMMENT = 0xFFFF
STORED = 0
COMPRESSION = {0: "stored", 8: "deflate", 9: "deflate64", 12: "bzip2", 14: "lzma", 93: "zstd"}
# A central directory cannot hold more entries than its bytes allow; this bounds the loop.
MAX_ENTRIES = 1_000_000
RECOVERY_CHUNK = 16 * 1024 * 1024
TORCH_ALIGNMENT = 64
# With more entries than this on a source where each read costs a request, data offsets are
# predicted from torch's alignment rule after a sample of local headers confirms it.
PREDICT_MIN_ENTRIES = 12


@dataclass
class ZipEntry:
    name: str
    header_offset: int  # local header
    data_offset: int  # first byte of the (possibly compressed) data
    compressed_size: int
    size: int
    method: int
    flags: int
    central_offset: int | None = None

    @property
    def data_end(self) -> int:
        return self.data_offset + self.compressed_size


@dataclass
class ZipListing:
    entries: dict[str, ZipEntry] = field(default_factory=dict)
    recovered: bool = False  # entries found by walking local headers, not the directory
    ok: bool = False  # some entries could be located
    predicted: int = 0  # entries placed by torch's alignment rule, their headers not read
    # Earlier copies of a duplicated name: torch and zipfile load the last one, which is the
    # one in `entries`; these are still judged, since other readers take the first.
    shadowed: list[ZipEntry] = field(default_factory=list)
    # The recovery walk ran into the end of the file (inside an entry, or at the directory
    # whose end record is gone): the file is cut short, not damaged.
    cut: bool = False


def read_zip(source, rep: Report, report_cut: bool = True) -> ZipListing:
    """List a zip's entries with exact data offsets; every problem becomes a finding. With
    `report_cut` False, a file cut short (`ZipListing.cut`) is left for the caller to report:
    it knows what the missing entries held."""
    listing = ZipListing()
    size = source.size
    where = _find_end(source, rep)
    if where is None:
        _recover(source, rep, listing)
        if report_cut or not listing.cut:
            rep.error("zip_truncated", "No end-of-central-directory record (PK\\x05\\x06) in the "
                      f"last {MAX_COMMENT + EOCD.size} bytes: the zip is truncated or damaged. "
                      "Entries are recovered by walking the local headers from the start.",
                      max(0, size - 22), min(22, size))
        return listing
    count, cd_size, cd_offset, shift = where
    if shift:
        rep.info("zip_shifted", f"The zip's recorded offsets are {shift} bytes short of where its "
                 "directory really is: bytes were prepended to it. Offsets are corrected.",
                 0, shift)
    if cd_offset + cd_size > size:
        rep.error("zip_directory_past_end", f"The central directory claims bytes {cd_offset}.."
                  f"{cd_offset + cd_size}, past the end of the file ({size} bytes); the file is "
                  "truncated. Entries are recovered from the local headers.", cd_offset, 0)
        _recover(source, rep, listing)
        return listing
    _read_central(source, rep, listing, count, cd_size, cd_offset, shift)
    if not listing.entries and count:
        _recover(source, rep, listing)
    listing.ok = bool(listing.entries)
    return listing


def _find_end(source, rep: Report) -> tuple[int, int, int, int] | None:
    """(entry count, directory size, directory offset, shift), reading ZIP64 records."""
    size = source.size
    if size < EOCD.size:
        return None
    # The usual case has no comment: the record is the last 22 bytes. Only otherwise read the
    # whole window, so opening a big checkpoint never touches the storages before it.
    tail_start = size - EOCD.size
    tail = source.read(tail_start, EOCD.size)
    pos = 0 if tail[:4] == EOCD_SIG else -1
    if pos < 0:
        tail_start = max(0, size - EOCD.size - MAX_COMMENT)
        tail = source.read(tail_start, size - tail_start)
        pos = tail.rfind(EOCD_SIG)
        while pos >= 0 and pos + EOCD.size > len(tail):
            pos = tail.rfind(EOCD_SIG, 0, pos)
    if pos < 0:
        return None
    eocd_off = tail_start + pos
    (_, disk, cd_disk, _, count, cd_size, cd_offset, comment_len) = EOCD.unpack_from(tail, pos)
    rep.span(eocd_off, EOCD.size, "zip_end", "zip > end of central directory",
             f"{count} entries, directory at {cd_offset}")
    if comment_len:
        rep.span(eocd_off + EOCD.size, min(comment_len, size - eocd_off - EOCD.size), "zip_comment",
                 "zip > comment")
    if eocd_off + EOCD.size + comment_len != size:
        rep.warning("zip_trailing_bytes", f"The end record says a {comment_len}-byte comment "
                    f"follows it, but {size - eocd_off - EOCD.size} bytes do: bytes were appended "
                    "to the zip.", eocd_off, EOCD.size)
    if disk or cd_disk:
        rep.error("zip_multidisk", "The zip claims to span several disks; torch never writes that.",
                  eocd_off, EOCD.size)
    end_off = eocd_off
    z64 = _read_zip64(source, rep, eocd_off)
    if z64 is not None:
        count, cd_size, cd_offset, end_off = z64
    # Bytes prepended to a zip shift every offset it records; the directory really starts
    # right before the end records (zipfile computes the same "concat" shift).
    shift = end_off - cd_size - cd_offset
    if shift <= 0 or source.read(cd_offset + shift, 4) != CENTRAL_SIG:
        shift = 0
    return count, cd_size, cd_offset + shift, shift


def _read_zip64(source, rep: Report, eocd_off: int) -> tuple[int, int, int, int] | None:
    """(count, directory size, directory offset, record offset) from the ZIP64 end record."""
    loc_off = eocd_off - ZIP64_LOCATOR.size
    if loc_off < 0:
        return None
    raw = source.read(loc_off, ZIP64_LOCATOR.size)
    if len(raw) < ZIP64_LOCATOR.size or raw[:4] != ZIP64_LOCATOR_SIG:
        return None
    _, _, z64_off, _ = ZIP64_LOCATOR.unpack(raw)
    rep.span(loc_off, ZIP64_LOCATOR.size, "zip_end", "zip > ZIP64 end locator",
             f"record at {z64_off}")
    # The record normally sits right before the locator; its recorded offset is unshifted.
    for off in (loc_off - ZIP64_EOCD.size, z64_off):
        raw = source.read(off, ZIP64_EOCD.size) if off >= 0 else b""
        if len(raw) == ZIP64_EOCD.size and raw[:4] == ZIP64_EOCD_SIG:
            break
    else:
        rep.error("zip64_bad_record", f"The ZIP64 locator points at byte {z64_off}, which does not "
                  "hold a ZIP64 end record (PK\\x06\\x06).", loc_off, ZIP64_LOCATOR.size)
        return None
    (_, rec_size, _, _, _, _, _, count, cd_size, cd_offset) = ZIP64_EOCD.unpack(raw)
    rep.span(off, min(12 + rec_size, source.size - off), "zip_end",
             "zip > ZIP64 end of central directory", f"{count} entries, directory at {cd_offset}")
    return count, cd_size, cd_offset, off


def _read_central(source, rep: Report, listing: ZipListing, count: int, cd_size: int,
                  cd_offset: int, shift: int) -> None:
    data = source.read(cd_offset, cd_size)
    rep.span(cd_offset, len(data), "zip_directory", "zip > central directory", f"{count} entries")
    pos = 0
    limit = min(count, MAX_ENTRIES, len(data) // CENTRAL.size + 1)
    records: list[tuple] = []
    seen: dict[str, int] = {}
    for i in range(limit):
        off = cd_offset + pos
        if pos + CENTRAL.size > len(data) or data[pos:pos + 4] != CENTRAL_SIG:
            rep.error("zip_bad_directory", f"Central directory entry {i} of {count} should start "
                      f"with PK\\x01\\x02 at byte {off}; found {bytes(data[pos:pos + 4])!r}. The "
                      "remaining entries are not read.", off, 4)
            break
        f = CENTRAL.unpack_from(data, pos)
        flags, method, csize, usize = f[3], f[4], f[8], f[9]
        name_len, extra_len, comment_len, local_off = f[10], f[11], f[12], f[16]
        end = pos + CENTRAL.size + name_len + extra_len + comment_len
        if end > len(data):
            rep.error("zip_bad_directory", f"Central directory entry {i} runs past the end of the "
                      "directory.", off, len(data) - pos)
            break
        raw_name = bytes(data[pos + CENTRAL.size:pos + CENTRAL.size + name_len])
        name = raw_name.decode("utf-8" if flags & 0x800 else "cp437", errors="replace")
        extra = data[pos + CENTRAL.size + name_len:pos + CENTRAL.size + name_len + extra_len]
        usize, csize, local_off = _apply_zip64_extra(extra, usize, csize, local_off)
        local_off += shift
        rep.span(off, end - pos, "zip_directory", f"zip > directory > {name}",
                 f"{COMPRESSION.get(method, method)}, {usize} bytes at {local_off}")
        pos = end
        if name in seen:
            rep.error("zip_duplicate_entry", f"The zip holds two entries named {name!r} (directory "
                      f"entries at bytes {seen[name]} and {off}). torch.load and Python's zipfile "
                      "load the last one; other readers take the first. Every copy is checked.",
                      off, CENTRAL.size + name_len)
        seen[name] = off
        records.append((name, off, local_off, csize, usize, method, flags, len(raw_name)))
    if count > limit:
        rep.error("zip_bad_directory", f"The end record says {count} entries; the directory has "
                  f"room for at most {limit}.", cd_offset, cd_size)
    _locate_entries(source, rep, listing, records)


def _locate_entries(source, rep: Report, listing: ZipListing, records: list[tuple]) -> None:
    """Find where each entry's data starts: from its local header, or, when reads are costly
    (a remote file), from torch's 64-byte alignment rule once a sample of headers agrees."""
    predicted: set[int] = set()
    located: dict[int, ZipEntry | None] = {}
    if not hasattr(source, "buffer") and len(records) > PREDICT_MIN_ENTRIES:
        sample = sorted({0, 1, 2, len(records) - 1, len(records) - 2,
                         *range(0, len(records), max(1, len(records) // 6))})
        located = {i: _read_local(source, rep, *records[i]) for i in sample}
        if all(e is not None and e.data_offset == _torch_data_offset(records[i])
               for i, e in located.items()):
            predicted = set(range(len(records))) - set(sample)
    for i, rec in enumerate(records):
        name, cd_off, local_off, csize, usize, method, flags, name_len = rec
        if i in located:
            entry = located[i]
        elif i in predicted and not name.endswith(".pkl"):
            data_offset = _torch_data_offset(rec)
            rep.span(local_off, data_offset - local_off, "zip_header",
                     f"zip > local header > {name}", "not read: placed by torch's alignment rule")
            _check_entry(source, rep, name, local_off, data_offset, csize, method, flags)
            entry = ZipEntry(name, local_off, data_offset, csize, usize, method, flags)
        else:
            entry = _read_local(source, rep, *rec)
        if entry is not None:
            entry.central_offset = cd_off
            _add(listing, entry)
    listing.predicted = len(predicted)


def _add(listing: ZipListing, entry: ZipEntry) -> None:
    """The last entry of a name wins, as in torch and zipfile; earlier ones are kept aside."""
    old = listing.entries.pop(entry.name, None)
    if old is not None:
        listing.shadowed.append(old)
    listing.entries[entry.name] = entry


def _torch_data_offset(rec: tuple) -> int:
    """Where torch's writer puts an entry's data: after the local header, its name and a
    padding extra field (4 bytes + ZIP64 fields when needed), rounded up to 64 bytes."""
    _, _, local_off, _, usize, _, _, name_len = rec
    start = local_off + LOCAL.size + name_len + 4
    if usize >= 0xFFFFFFFF or local_off >= 0xFFFFFFFF:
        start += 4 + (16 if usize >= 0xFFFFFFFF else 0) + (8 if local_off >= 0xFFFFFFFF else 0)
    return -(-start // TORCH_ALIGNMENT) * TORCH_ALIGNMENT


def _apply_zip64_extra(extra, usize: int, csize: int, local_off: int) -> tuple[int, int, int]:
    """Replace 0xFFFFFFFF fields with the 64-bit values of the ZIP64 extra field (id 1)."""
    p = 0
    while p + 4 <= len(extra):
        tag, n = struct.unpack_from("<HH", extra, p)
        body = extra[p + 4:p + 4 + n]
        if tag == 1:
            vals = [struct.unpack_from("<Q", body, k)[0] for k in range(0, len(body) - 7, 8)]
            if usize == 0xFFFFFFFF and vals:
                usize = vals.pop(0)
            if csize == 0xFFFFFFFF and vals:
                csize = vals.pop(0)
            if local_off == 0xFFFFFFFF and vals:
                local_off = vals.pop(0)
            break
        p += 4 + n
    return usize, csize, local_off


def _read_local(source, rep: Report, name: str, cd_off: int, off: int, csize: int, usize: int,
                method: int, flags: int, name_len_cd: int) -> ZipEntry | None:
    raw = bytes(source.read(off, LOCAL.size + name_len_cd))  # one read: header and name
    if len(raw) < LOCAL.size or raw[:4] != LOCAL_SIG:
        rep.error("zip_bad_local_header", f"The directory says {name!r} starts at byte {off}, but "
                  f"there is no local header (PK\\x03\\x04) there; found {raw[:4]!r}.",
                  min(off, source.size), min(4, max(0, source.size - off)))
        return None
    f = LOCAL.unpack_from(raw)
    name_len, extra_len = f[9], f[10]
    local_name = raw[LOCAL.size:LOCAL.size + name_len] if name_len <= name_len_cd else \
        bytes(source.read(off + LOCAL.size, name_len))
    data_offset = off + LOCAL.size + name_len + extra_len
    rep.span(off, LOCAL.size + name_len + extra_len, "zip_header", f"zip > local header > {name}",
             f"{name_len}-byte name, {extra_len}-byte extra")
    if local_name.decode("utf-8", errors="replace") != name:
        rep.error("zip_name_mismatch", f"The directory names an entry {name!r}, but its local "
                  f"header names it {short_repr(local_name.decode('utf-8', 'replace'))}; readers "
                  "disagree on which to believe.", off + LOCAL.size, name_len)
    _check_entry(source, rep, name, off, data_offset, csize, method, flags)
    return ZipEntry(name, off, data_offset, csize, usize, method, flags, cd_off)


def _check_entry(source, rep: Report, name: str, off: int, data_offset: int, csize: int,
                 method: int, flags: int) -> None:
    # Compression is judged by the caller: it matters for tensor bytes, not for code files.
    if flags & 0x1:
        rep.error("zip_encrypted_entry", f"{name!r} is encrypted; it cannot be read.", off, LOCAL.size)
    if data_offset + csize > source.size:
        rep.error("zip_entry_past_end", f"{name!r} needs bytes {data_offset}..{data_offset + csize}, "
                  f"past the end of the file ({source.size} bytes): the file is truncated.",
                  data_offset, max(0, source.size - data_offset))


def _recover(source, rep: Report, listing: ZipListing) -> None:
    """Walk local headers from byte 0; sizes come from the header or the data descriptor."""
    listing.recovered = True
    off = 0
    size = source.size
    while off + LOCAL.size <= size and len(listing.entries) < MAX_ENTRIES:
        raw = source.read(off, LOCAL.size)
        if raw[:4] != LOCAL_SIG:
            listing.cut = raw[:4] == CENTRAL_SIG  # the directory starts, its end is gone
            break
        f = LOCAL.unpack(raw)
        flags, method, csize, usize, name_len, extra_len = f[2], f[3], f[7], f[8], f[9], f[10]
        name = bytes(source.read(off + LOCAL.size, name_len)).decode("utf-8", errors="replace")
        data_offset = off + LOCAL.size + name_len + extra_len
        if data_offset > size:  # the file ends inside this local header: no entry to add
            listing.cut = True
            break
        if flags & 0x8:
            found = _find_descriptor(source, data_offset)
            if found is None:
                # The last entry of a truncated file: it runs to the end, as far as we know.
                csize = usize = max(0, size - data_offset)
                next_off = size
                listing.cut = True
            else:
                csize, usize, next_off = found
        else:
            next_off = data_offset + csize
        rep.span(off, min(LOCAL.size + name_len + extra_len, size - off), "zip_header",
                 f"zip > local header > {name}", f"{name_len}-byte name, {extra_len}-byte extra")
        _add(listing, ZipEntry(name, off, data_offset, csize, usize, method, flags))
        if next_off <= off:
            break
        off = next_off
    else:  # the file ends between entries or inside a local header
        listing.cut = listing.cut or off <= size and len(listing.entries) < MAX_ENTRIES
    listing.ok = bool(listing.entries)


def _find_descriptor(source, data_offset: int) -> tuple[int, int, int] | None:
    """(compressed size, size, next header offset) from the descriptor after the data."""
    pos = data_offset
    size = source.size
    while pos < size:
        chunk = source.read(pos, RECOVERY_CHUNK + 24)
        i = chunk.find(DESCRIPTOR_SIG)
        while i >= 0:
            at = pos + i
            body = chunk[i + 4:i + 24]
            if len(body) >= 20:  # ZIP64 descriptor: crc, 8-byte sizes
                _, c64, u64 = struct.unpack_from("<IQQ", body)
                if c64 == at - data_offset:
                    return c64, u64, at + 24
            if len(body) >= 12:
                _, c32, u32 = struct.unpack_from("<III", body)
                if c32 == at - data_offset:
                    return c32, u32, at + 16
            i = chunk.find(DESCRIPTOR_SIG, i + 1)
        if len(chunk) <= RECOVERY_CHUNK:
            return None
        pos += RECOVERY_CHUNK
    return None
