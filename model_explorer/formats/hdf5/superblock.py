"""The HDF5 superblock (versions 0 to 3): where the file's addresses count from, how wide they
are, and where the root group's object header is."""

from __future__ import annotations

from dataclasses import dataclass

from ...spans import Report
from ..catalog_note import note
from .checksum import lookup3
from .window import Fields, H5Error, Window

SIGNATURE = b"\x89HDF\r\n\x1a\n"
# The signature is at 0 or, after a user block, at 512, 1024, 2048... (a power of two).
SIGNATURE_AT = (0, 512, 1024, 2048, 4096, 8192, 16384, 32768, 65536)
WIDTHS = (2, 4, 8)  # offset and length sizes this reader takes (h5py writes 8)


@dataclass
class Superblock:
    version: int
    at: int  # where the signature is, relative to the window's start
    root: int  # the root group's object header address
    eof: int  # the end-of-file address it records


def find_signature(win: Window) -> int | None:
    for at in SIGNATURE_AT:
        if at + 8 > win.size:
            break
        if bytes(win.source.read(win.start + at, 8)) == SIGNATURE:
            return at
    return None


def read_superblock(win: Window, rep: Report) -> Superblock:
    at = find_signature(win)
    if at is None:
        raise H5Error("h5_bad_structure", "No HDF5 signature (89 48 44 46 0d 0a 1a 0a) at byte 0 "
                      "or after a user block of 512, 1024, 2048... bytes.", win.start, min(8, win.size))
    if at:
        rep.span(win.start, at, "padding", "user block", f"{at} bytes")
    # Addresses count from the superblock (the library requires its base address to be there).
    win.base = at
    head = bytes(win.source.read(win.start + at, min(96, win.size - at)))
    f = Fields(head, win.start + at, win, "superblock")
    rep.span(f.here, 8, "magic", "superblock > signature", "\\x89HDF\\r\\n\\x1a\\n")
    f.skip(8)
    version = f.u8()
    rep.span(f.here - 1, 1, "version", "superblock > version", str(version))
    if version in (0, 1):
        return _v0(f, win, rep, at, version)
    if version in (2, 3):
        return _v2(f, win, rep, at, version)
    raise H5Error("h5_unsupported", f"Superblock version {version}; HDF5 defines 0 to 3 (this "
                  "reader takes those).", f.here - 1, 1)


def _widths(f: Fields, win: Window, rep: Report, where: int) -> None:
    o, n = win.offset_size, win.length_size
    rep.span(where, 2, "h5_superblock", "superblock > sizes of offsets and lengths", f"{o}, {n}")
    if o not in WIDTHS or n not in WIDTHS:
        raise H5Error("h5_unsupported", f"The superblock gives addresses of {o} bytes and lengths of "
                      f"{n} bytes; this reader takes 2, 4 or 8.", where, 2)


def _v0(f: Fields, win: Window, rep: Report, at: int, version: int) -> Superblock:
    f.skip(4)  # free-space, root symbol table entry, reserved, shared header versions
    win.offset_size, win.length_size = f.u8(), f.u8()
    _widths(f, win, rep, f.here - 2)
    f.skip(1)
    rep.span(f.here, 4, "h5_superblock", "superblock > B-tree K values", "leaf K, internal K")
    f.skip(8)  # group leaf and internal K, file consistency flags
    if version == 1:
        f.skip(4)  # indexed storage K, reserved
    start = f.here
    base, _free, eof, _driver = f.addr(), f.addr(), f.addr(), f.addr()
    rep.span(start, f.here - start, "h5_address", "superblock > base, free-space, end-of-file and driver addresses",
             f"base {base}, end of file {eof}")
    entry = f.here
    _name, root = f.addr(), f.addr()
    f.skip(24)  # cache type, reserved, scratch pad
    rep.span(entry, f.here - entry, "h5_address", "superblock > root group symbol table entry",
             f"object header at {root}")
    return Superblock(version, at, root, eof)


def _v2(f: Fields, win: Window, rep: Report, at: int, version: int) -> Superblock:
    win.offset_size, win.length_size = f.u8(), f.u8()
    _widths(f, win, rep, f.here - 2)
    f.skip(1)  # file consistency flags
    start = f.here
    base, _ext, eof, root = f.addr(), f.addr(), f.addr(), f.addr()
    rep.span(start, f.here - start, "h5_address", "superblock > base, extension, end-of-file and root addresses",
             f"base {base}, end of file {eof}, root object header at {root}")
    rep.span(f.here, 4, "h5_superblock", "superblock > checksum")
    stored = f.u32()
    computed = lookup3(f.data[:f.pos - 4])
    if stored != computed:
        note(rep, "h5_bad_checksum", f"The superblock's checksum is 0x{stored:08x}, but its bytes give "
             f"0x{computed:08x}: they changed after the file was written.", f.here - 4, 4)
    return Superblock(version, at, root, eof)
