"""Object headers, versions 1 and 2: the list of messages that says what an object is (a group,
a dataset) and where its parts are, followed through continuation blocks."""

from __future__ import annotations

from dataclasses import dataclass, field

from .checksum import lookup3
from .window import Fields, H5Error, Window

# Message types this reader decodes, and the name a person reads for each.
NIL, DATASPACE, LINK_INFO, DATATYPE, FILL_OLD, FILL, LINK, EXTERNAL, LAYOUT = 0, 1, 2, 3, 4, 5, 6, 7, 8
GROUP_INFO, FILTERS, ATTRIBUTE, CONTINUATION, SYMBOL_TABLE, ATTRIBUTE_INFO = 10, 11, 12, 16, 17, 21
MESSAGE_NAMES = {NIL: "padding", DATASPACE: "dataspace", LINK_INFO: "link info", DATATYPE: "datatype",
                 FILL_OLD: "fill value (old)", FILL: "fill value", LINK: "link", EXTERNAL: "external files",
                 LAYOUT: "data layout", 9: "bogus", GROUP_INFO: "group info", FILTERS: "filter pipeline",
                 ATTRIBUTE: "attribute", 13: "comment", 14: "modification time (old)", 15: "shared messages",
                 CONTINUATION: "continuation", SYMBOL_TABLE: "symbol table", 18: "modification time",
                 19: "B-tree K values", 20: "driver info", ATTRIBUTE_INFO: "attribute info",
                 22: "reference count", 23: "file space info"}
SPAN_KIND = {DATASPACE: "dims", DATATYPE: "type", LAYOUT: "h5_layout", ATTRIBUTE: "h5_attribute", LINK: "h5_link",
             SYMBOL_TABLE: "h5_btree", CONTINUATION: "h5_object_header", NIL: "padding", FILTERS: "h5_filters",
             LINK_INFO: "h5_link"}
MAX_MESSAGES = 4096  # per object header, continuations included
MAX_CONTINUATIONS = 256
MAX_CHUNK = 4 * 1024 * 1024  # one header chunk; real ones are a few hundred bytes


@dataclass(slots=True)
class Message:
    type: int
    flags: int
    at: int  # absolute offset of the message's data
    head: int  # absolute offset of the message's own header (type, size, flags)
    data: bytes

    @property
    def name(self) -> str:
        return MESSAGE_NAMES.get(self.type, f"message type {self.type}")

    @property
    def shared(self) -> bool:
        """The message is stored elsewhere and this is only a reference to it."""
        return bool(self.flags & 0x02)


@dataclass
class Header:
    version: int
    at: int  # absolute offset of the header
    prefix: int  # bytes of its prefix (before the first message)
    messages: list[Message]
    blocks: int = 1  # the first chunk and its continuation blocks
    bad_checksums: list[tuple[int, int, int]] = field(default_factory=list)  # (offset, stored, computed)


def read_header(win: Window, addr: int) -> Header:
    head = win.read(addr, 8, "object header")  # either version's prefix is longer than this
    if head[:4] == b"OHDR":
        return _v2(win, addr, head)
    if head[:1] == b"\x01":
        return _v1(win, addr)
    raise H5Error("h5_bad_structure", f"No object header at address {addr}: the bytes there start "
                  f"{head[:4].hex(' ')}, neither version 1 (01) nor version 2 (OHDR).", win.absolute(addr), len(head[:4]))


def _v1(win: Window, addr: int) -> Header:
    f = Fields(win.read(addr, 16, "object header prefix"), win.absolute(addr), win, "object header prefix")
    f.skip(2)
    count, _refs, size = f.u16(), f.u32(), f.u32()
    size = _checked_chunk(size, win.absolute(addr))
    data = win.read(addr + 16, size, "object header")
    header = Header(1, win.absolute(addr), 16, [])
    pending = [(data, win.absolute(addr + 16))]
    _walk(win, header, pending, 1, count)
    return header


def _v2(win: Window, addr: int, head: bytes) -> Header:
    version, flags = head[4], head[5]
    if version != 2:
        raise H5Error("h5_unsupported", f"Object header version {version} at address {addr}; version "
                      "2 is the one with the OHDR signature.", win.absolute(addr) + 4, 1)
    prefix = 6 + (16 if flags & 0x20 else 0) + (4 if flags & 0x10 else 0)
    width = 1 << (flags & 0x03)
    f = Fields(win.read(addr, prefix + width, "object header prefix"), win.absolute(addr), win, "object header")
    f.skip(prefix)
    size = _checked_chunk(f.uint(width), win.absolute(addr))
    body = addr + prefix + width
    whole = win.read(addr, prefix + width + size + 4, "object header")
    data = whole[prefix + width:-4]
    header = Header(2, win.absolute(addr), prefix + width, [])
    _check(header, whole, win.absolute(addr))
    _walk(win, header, [(data, win.absolute(body))], 2, MAX_MESSAGES, flags)
    return header


def _checked_chunk(size: int, at: int) -> int:
    if size > MAX_CHUNK:
        raise H5Error("h5_too_large", f"An object header claims {size} bytes of messages; real "
                      f"headers hold a few hundred (this reader takes up to {MAX_CHUNK}).", at, 0)
    return size


def _walk(win: Window, header: Header, pending: list, version: int, count: int, flags: int = 0) -> None:
    """Messages of every chunk, continuation blocks appended to `pending` as they are met."""
    seen = {header.at}
    while pending:
        data, at = pending.pop(0)
        for msg in _messages(data, at, version, flags):
            if len(header.messages) >= min(count, MAX_MESSAGES):
                return
            header.messages.append(msg)
            if msg.type == CONTINUATION:
                pending.append(_continuation(win, msg, version, seen, header))
                header.blocks += 1
                if header.blocks > MAX_CONTINUATIONS:
                    raise H5Error("h5_too_large", f"The object header at {header.at} goes on through more "
                                  f"than {MAX_CONTINUATIONS} continuation blocks.", msg.head, 0)


def _check(header: Header, block: bytes, at: int) -> None:
    """A version 2 block ends with the lookup3 checksum of every byte before it."""
    stored, computed = int.from_bytes(block[-4:], "little"), lookup3(block[:-4])
    if stored != computed:
        header.bad_checksums.append((at + len(block) - 4, stored, computed))


def _continuation(win: Window, msg: Message, version: int, seen: set, header: Header) -> tuple[bytes, int]:
    f = Fields(msg.data, msg.at, win, "continuation message")
    addr, length = f.addr(), f.length()
    if win.absolute(addr) in seen:
        raise H5Error("h5_cycle", f"A continuation message points back at address {addr}, a block of "
                      "this header already read: the chain is a loop.", msg.at, len(msg.data))
    seen.add(win.absolute(addr))
    length = _checked_chunk(length, msg.at)
    data = win.read(addr, length, "object header continuation block")
    if version == 1:
        return data, win.absolute(addr)
    if data[:4] != b"OCHK":
        raise H5Error("h5_bad_structure", f"The continuation block at address {addr} should start with "
                      f"OCHK; it starts with {data[:4].hex(' ')}.", win.absolute(addr), 4)
    return data[4:-4], win.absolute(addr) + 4


def _messages(data: bytes, at: int, version: int, flags: int):
    pos, n = 0, len(data)
    head = 8 if version == 1 else 4 + (2 if flags & 0x04 else 0)
    while pos + head <= n:
        if version == 1:
            mtype = int.from_bytes(data[pos:pos + 2], "little")
            size = int.from_bytes(data[pos + 2:pos + 4], "little")
            mflags = data[pos + 4]
        else:
            mtype, size, mflags = data[pos], int.from_bytes(data[pos + 1:pos + 3], "little"), data[pos + 3]
        start = pos + head
        if start + size > n:
            raise H5Error("h5_bad_structure", f"A {MESSAGE_NAMES.get(mtype, f'type {mtype}')} message of "
                          f"{size} bytes runs past the end of its object header chunk.", at + pos, head)
        yield Message(mtype, mflags, at + start, at + pos, data[start:start + size])
        pos = start + size
