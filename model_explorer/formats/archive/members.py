"""The members of a zip or tar archive, and each one opened where it lies.

A stored member (every tar member, a zip entry written without compression) opens as a window
on the archive's bytes (subsources.WindowSource): nothing is copied, and its byte k is the
archive's byte `start + k`. A deflated zip entry is inflated into memory, a block at a time,
never past MAX_INFLATED_MEMBER bytes and never past the size the zip directory gives it; other
compression methods are not opened (the archive reader says so).
"""

from __future__ import annotations

import zlib
from dataclasses import dataclass

from ...limits import MAX_INFLATED_MEMBER
from ...spans import Report
from ...subsources import MEMBER_SEP, MemorySource, WindowSource
from ..pytorch.tar import REGULAR, list_members
from ..pytorch.zipread import COMPRESSION, read_zip

INFLATE_BLOCK = 1 << 20  # compressed bytes read at a time
MEMBER_HEAD = 4096  # what is read of each member to say what it is


class MemberError(ValueError):
    """A member that cannot be opened: the message says why, in words for a finding."""


@dataclass
class Member:
    name: str
    header: int  # its header's offset in the archive
    data: int  # its first (possibly compressed) byte in the archive
    size: int  # its size once inflated
    stored_size: int  # its bytes in the archive
    method: int = 0  # the zip compression method (0: stored; a tar member is always stored)
    regular: bool = True  # a file (not a folder, link or device)

    @property
    def stored(self) -> bool:
        return self.method == 0

    @property
    def how(self) -> str:
        return COMPRESSION.get(self.method, f"method {self.method}")


def archive_members(source, rep: Report) -> tuple[str, list[Member]]:
    """("zip" or "tar", its members in archive order); what is wrong with the archive itself
    (a cut, a bad header) goes into `rep` as the zip and tar readers report it."""
    if bytes(source.read(0, 4)) in (b"PK\x03\x04", b"PK\x05\x06"):
        listing = read_zip(source, rep)
        members = [Member(e.name, e.header_offset, e.data_offset, e.size, e.compressed_size, e.method,
                          not e.name.endswith("/")) for e in listing.entries.values()]
        return "zip", sorted(members, key=lambda m: m.header)
    found, _cut = list_members(source, rep)
    return "tar", [Member(m.name.removeprefix("./"), m.header, m.data, m.size, m.size, 0,
                          m.kind in REGULAR and not m.name.endswith("/")) for m in found]


def member_head(source, member: Member, n: int = MEMBER_HEAD) -> bytes:
    """The first `n` bytes of a member (b"" for one that cannot be read)."""
    if member.stored:
        return bytes(source.read(member.data, max(0, min(n, member.stored_size))))
    if member.method != 8:
        return b""
    raw = bytes(source.read(member.data, max(0, min(8 * n, member.stored_size))))
    try:
        return zlib.decompressobj(-15).decompress(raw, n)
    except zlib.error:
        return b""


def member_path(archive: str, member: Member | str) -> str:
    return f"{archive}{MEMBER_SEP}{getattr(member, 'name', member)}"


def open_member(source, member: Member, name: str | None = None):
    """The member as a byte source named `name` (ARCHIVE!/MEMBER by default). Raises
    MemberError when it cannot be opened."""
    name = name or member_path(source.name, member)
    if not member.regular:
        raise MemberError(f"{member.name!r} is not a regular file (a folder or a link)")
    if member.stored:
        if member.data + member.size > source.size:
            raise MemberError(f"{member.name!r} is said to hold {member.size:,} bytes from byte "
                              f"{member.data:,}, past the end of the archive ({source.size:,} bytes)")
        return WindowSource(source, member.data, member.size, name)
    if member.method != 8:
        raise MemberError(f"{member.name!r} is {member.how}-compressed; only stored and deflated "
                          "members are opened")
    if member.size > MAX_INFLATED_MEMBER:
        raise MemberError(f"{member.name!r} inflates to {member.size:,} bytes, more than the "
                          f"{MAX_INFLATED_MEMBER:,} held in memory for a compressed member")
    return MemorySource(inflate(source, member), name)


def inflate(source, member: Member) -> bytearray:
    """A deflated member's bytes, inflated a block at a time up to the size the directory gives
    it (which open_member has bounded): a member that inflates to more is cut there and refused."""
    d = zlib.decompressobj(-15)
    out = bytearray()
    pos, end = member.data, min(source.size, member.data + member.stored_size)
    try:
        while pos < end and not d.eof and len(out) <= member.size:
            chunk = bytes(source.read(pos, min(INFLATE_BLOCK, end - pos)))
            if not chunk:
                break
            pos += len(chunk)
            out += d.decompress(chunk, member.size + 1 - len(out))
            while d.unconsumed_tail and len(out) <= member.size:
                out += d.decompress(d.unconsumed_tail, member.size + 1 - len(out))
    except zlib.error as e:
        raise MemberError(f"{member.name!r} does not inflate: {e}") from e
    if len(out) > member.size:
        raise MemberError(f"{member.name!r} inflates to more than the {member.size:,} bytes the zip "
                          "directory gives it (a zip bomb, or a damaged directory)")
    if len(out) < member.size:
        raise MemberError(f"{member.name!r} inflates to {len(out):,} bytes; the zip directory "
                          f"says {member.size:,} (the archive is cut short or damaged)")
    return out


def open_path(archive, names: list[str], name: str):
    """The member `names[-1]` of the member ... `names[0]` of the open `archive` source, named
    `name` (ARCHIVE!/A!/B): each archive on the way is closed with the member read from it.
    Raises FileNotFoundError for a member the archive does not hold, OSError for one that cannot
    be opened (a method other than stored or deflate, over the inflation limit)."""
    source = archive
    for i, wanted in enumerate(names):
        _, members = archive_members(source, Report(source.name))
        found = [m for m in members if m.name == wanted]  # tarfile and zipfile take the last copy
        if not found:
            source.close()
            raise FileNotFoundError(f"{source.name!r} holds no member {wanted!r}")
        try:
            sub = open_member(source, found[-1], name if i == len(names) - 1 else None)
        except MemberError as e:
            source.close()
            raise OSError(str(e)) from e
        if isinstance(sub, WindowSource):
            sub.owned = source  # closed with the member
        else:
            source.close()  # inflated: the archive's bytes are no longer needed
        source = sub
    return source
