"""Dense groups (libver='latest' with more than 8 members): the links are link messages stored
as objects of a fractal heap, found through the v2 B-tree that indexes them by name hash.

Read as far as h5py's files need: a heap whose root is a direct block or an indirect block of
direct blocks, and a B-tree of depth 0 or 1 (thousands of links). Deeper ones are a finding.
"""

from __future__ import annotations

from dataclasses import dataclass

from .headers import LINK, Message
from .messages import Link, link
from .window import Fields, H5Error, Window

MAX_RECORDS = 1_000_000


def _bytes_for(value: int) -> int:
    return max(1, (value.bit_length() + 7) // 8)


@dataclass
class Heap:
    win: Window
    addr: int
    width: int
    start_block: int
    max_direct: int
    offset_bytes: int
    length_bytes: int
    root: int
    rows: int

    def object(self, heap_id: bytes, where: str) -> tuple[int, bytes]:
        """(absolute offset, bytes) of a managed object from its heap ID."""
        if heap_id[0] & 0x30:
            raise H5Error("h5_unsupported", f"A link of {where} is a huge or tiny fractal heap object; "
                          "only managed objects are read.", self.win.absolute(self.addr), 0)
        off = int.from_bytes(heap_id[1:1 + self.offset_bytes], "little")
        n = int.from_bytes(heap_id[1 + self.offset_bytes:1 + self.offset_bytes + self.length_bytes], "little")
        block, block_off = self._block_of(off, where)
        at = block + (off - block_off)
        return self.win.absolute(at), self.win.read(at, n, "fractal heap object")

    def _block_of(self, off: int, where: str) -> tuple[int, int]:
        if self.rows == 0:  # the root is one direct block
            return self.root, 0
        f = self.win
        o = f.offset_size
        max_direct_rows = (self.max_direct.bit_length() - 1) - (self.start_block.bit_length() - 1) + 2
        head = 5 + o + self.offset_bytes
        entries = min(self.rows, max_direct_rows) * self.width
        data = f.read(self.root, head + entries * o, "fractal heap indirect block")
        if data[:4] != b"FHIB":
            raise H5Error("h5_bad_structure", f"The fractal heap of {where} has no indirect block (FHIB) "
                          f"at address {self.root}.", f.absolute(self.root), 4)
        start = 0
        for row in range(min(self.rows, max_direct_rows)):
            size = self.start_block if row < 2 else self.start_block << (row - 1)
            for col in range(self.width):
                if start <= off < start + size:
                    at = head + (row * self.width + col) * o
                    addr = int.from_bytes(data[at:at + o], "little")
                    return addr, start
                start += size
        raise H5Error("h5_unsupported", f"A link of {where} lies in a nested indirect block of its fractal "
                      "heap; this reader reads one level.", f.absolute(self.root), 0)


def read_heap(win: Window, addr: int, where: str) -> Heap:
    o, n = win.offset_size, win.length_size
    size = 4 + 1 + 2 + 2 + 1 + 4 + n + o + n + o + 8 * n + 2 + n + n + 2 + 2 + o + 2
    f = Fields(win.read(addr, size, "fractal heap header"), win.absolute(addr), win, "fractal heap header")
    if f.take(4) != b"FRHP":
        raise H5Error("h5_bad_structure", f"The links of {where} point at address {addr}, which holds no "
                      "fractal heap (FRHP).", win.absolute(addr), 4)
    f.skip(1)
    f.skip(2)  # heap ID length
    filters = f.u16()
    f.skip(1)  # flags
    max_managed = f.u32()
    f.skip(n + o + n + o + 8 * n)
    width, start_block, max_direct, max_heap_bits = f.u16(), f.length(), f.length(), f.u16()
    f.skip(2)
    root, rows = f.addr(), f.u16()
    if filters:
        raise H5Error("h5_unsupported", f"The fractal heap of {where} is filtered (compressed); its "
                      "links are not read.", win.absolute(addr), 0)
    if not (1 <= width <= 65536 and start_block > 0 and max_direct >= start_block and 0 < max_heap_bits <= 64):
        raise H5Error("h5_bad_structure", f"The fractal heap of {where} has a doubling table of width "
                      f"{width}, blocks of {start_block} to {max_direct} bytes: not a real one.", win.absolute(addr), size)
    length_bytes = min(_bytes_for(max_direct - 1), max_managed.bit_length() // 8 + 1)
    return Heap(win, addr, width, start_block, max_direct,
                (max_heap_bits + 7) // 8, length_bytes, root, rows)


def btree_records(win: Window, addr: int, where: str) -> list[bytes]:
    """Every record of a v2 B-tree (depth 0 or 1)."""
    o, n = win.offset_size, win.length_size
    f = Fields(win.read(addr, 4 + 1 + 1 + 4 + 2 + 2 + 1 + 1 + o + 2 + n, "v2 B-tree header"),
               win.absolute(addr), win, "v2 B-tree header")
    if f.take(4) != b"BTHD":
        raise H5Error("h5_bad_structure", f"The link index of {where} at address {addr} is no v2 B-tree "
                      "(BTHD).", win.absolute(addr), 4)
    f.skip(2)
    node_size, record_size, depth = f.u32(), f.u16(), f.u16()
    f.skip(2)
    root, root_count = f.addr(), f.u16()
    if record_size == 0 or depth > 1:
        raise H5Error("h5_unsupported", f"The link index of {where} is a v2 B-tree of depth {depth}; this "
                      "reader reads depth 0 and 1.", win.absolute(addr), 0)
    if depth == 0:
        return _leaf(win, root, root_count, record_size, where)
    max_leaf = (node_size - 10) // record_size
    count_bytes = _bytes_for(max_leaf)
    data = win.read(root, 6 + root_count * record_size + (root_count + 1) * (o + count_bytes), "v2 B-tree node")
    if data[:4] != b"BTIN":
        raise H5Error("h5_bad_structure", f"The link index of {where} has no internal node (BTIN) at "
                      f"address {root}.", win.absolute(root), 4)
    records = [data[6 + i * record_size:6 + (i + 1) * record_size] for i in range(root_count)]
    pos = 6 + root_count * record_size
    out: list[bytes] = []
    for i in range(root_count + 1):
        child = int.from_bytes(data[pos:pos + o], "little")
        count = int.from_bytes(data[pos + o:pos + o + count_bytes], "little")
        pos += o + count_bytes
        out.extend(_leaf(win, child, count, record_size, where))
        if i < root_count:
            out.append(records[i])
        if len(out) > MAX_RECORDS:
            raise H5Error("h5_too_large", f"The link index of {where} holds more than {MAX_RECORDS} links.",
                          win.absolute(root), 0)
    return out


def _leaf(win: Window, addr: int, count: int, record_size: int, where: str) -> list[bytes]:
    data = win.read(addr, 6 + count * record_size, "v2 B-tree leaf")
    if data[:4] != b"BTLF":
        raise H5Error("h5_bad_structure", f"The link index of {where} has no leaf node (BTLF) at "
                      f"address {addr}.", win.absolute(addr), 4)
    return [data[6 + i * record_size:6 + (i + 1) * record_size] for i in range(count)]


def dense_links(win: Window, heap_addr: int, index_addr: int, where: str) -> list[Link]:
    heap = read_heap(win, heap_addr, where)
    links = []
    for record in btree_records(win, index_addr, where):
        at, data = heap.object(record[4:], where)  # a name hash, then the heap ID
        links.append(link(Message(LINK, 0, at, at, data), win))
    return links
