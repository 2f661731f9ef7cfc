"""Walk an HDF5 file's group graph from the root: old-style groups (symbol table, v1 B-tree,
local heap) and new-style compact groups (link messages), with limits on depth, on the number of
objects and on every B-tree, and each object visited once however often it is linked (so a
cycle is a finding, not a hang)."""

from __future__ import annotations

from dataclasses import dataclass, field

from ...spans import Report, short_repr
from ..catalog_note import note
from . import messages as m
from .dense import dense_links
from .headers import ATTRIBUTE, LAYOUT, LINK, LINK_INFO, SPAN_KIND, SYMBOL_TABLE, Header, read_header
from .window import Fields, H5Error, Window

MAX_DEPTH = 64  # groups inside groups; Keras nests about 8 deep
MAX_OBJECTS = 500_000  # groups and datasets in one file
MAX_BTREE_NODES = 100_000
MAX_NODE_ENTRIES = 65_536
MAX_NAME = 64 * 1024


@dataclass
class Node:
    """One object reached from the root: a group or a dataset, with its attributes."""

    path: str
    header: Header
    attributes: dict[str, m.Attribute] = field(default_factory=dict)
    dataset: bool = False


class Walker:
    def __init__(self, win: Window, rep: Report) -> None:
        self.win, self.rep = win, rep
        self.nodes: list[Node] = []
        self.seen: dict[int, str] = {}  # object header address -> the path it was first reached by
        self.btree_nodes = 0

    def walk(self, root: int) -> None:
        stack = [(root, "", 0)]
        while stack:
            addr, path, depth = stack.pop()
            if len(self.nodes) >= MAX_OBJECTS:
                note(self.rep, "h5_too_large", f"The file links more than {MAX_OBJECTS} objects; the "
                     "rest are not read.", self.win.absolute(addr), 0)
                return
            node = self._visit(addr, path)
            if node is None or node.dataset:
                continue
            children = self._children(node)
            if children and depth >= MAX_DEPTH:
                note(self.rep, "h5_too_deep", f"The group /{path} is {depth} levels deep; groups "
                     f"below {MAX_DEPTH} levels are not read.", node.header.at, 0)
                continue
            for name, child in reversed(children):
                stack.append((child, f"{path}/{name}" if path else name, depth + 1))

    def _visit(self, addr: int, path: str) -> Node | None:
        shown = "/" + path
        absolute = self.win.absolute(addr)
        first = self.seen.get(absolute)
        if first is not None:
            ancestor = first == "" or path.startswith(first + "/")
            note(self.rep, "h5_cycle" if ancestor else "h5_link_repeat",
                 f"{shown} links back to /{first}, which contains it: the group graph is a cycle; it "
                 "is read once." if ancestor else
                 f"{shown} is a second link to the object first reached as /{first}; it is listed "
                 "once, under its first name.", absolute, 0)
            return None
        self.seen[absolute] = path
        try:
            header = read_header(self.win, addr)
        except H5Error as e:
            note(self.rep, e.code, f"{shown}: {e.message}", e.offset, e.length)
            return None
        node = Node(path, header, dataset=any(x.type == LAYOUT for x in header.messages))
        for at, stored, computed in header.bad_checksums:
            note(self.rep, "h5_bad_checksum", f"The checksum of the object header of {shown} is "
                 f"0x{stored:08x}, but its bytes give 0x{computed:08x}: they changed after the file was "
                 "written (its messages are still read).", at, 4, path if node.dataset else None)
        self._label(node)
        for msg in header.messages:
            if msg.type == ATTRIBUTE:
                try:
                    attr = m.attribute(msg, self.win)
                except H5Error as e:
                    note(self.rep, e.code, f"An attribute of {shown}: {e.message}", e.offset, e.length)
                    continue
                node.attributes[attr.name] = attr
        self.nodes.append(node)
        return node

    def _label(self, node: Node) -> None:
        h, rep = node.header, self.rep
        what = "dataset" if node.dataset else "group"
        label = "/" + node.path if node.path else "/ (root group)"
        tensor = node.path if node.dataset else None
        rep.span(h.at, h.prefix, "h5_object_header", f"{label} > object header",
                 f"{what}, version {h.version}, {len(h.messages)} messages", tensor)
        for msg in h.messages:
            rep.span(msg.head, msg.at - msg.head + len(msg.data), SPAN_KIND.get(msg.type, "h5_message"),
                     f"{label} > {msg.name}", None, tensor)

    # -- children --------------------------------------------------------------------------------

    def _children(self, node: Node) -> list[tuple[str, int]]:
        out: list[tuple[str, int]] = []
        where = "/" + node.path
        for msg in node.header.messages:
            try:
                if msg.type == SYMBOL_TABLE:
                    btree, heap = m.symbol_table(msg, self.win)
                    out.extend(self._symbol_table(btree, heap, where))
                elif msg.type == LINK:
                    link = m.link(msg, self.win)
                    if link.address is None:
                        note(self.rep, "h5_link_not_followed", f"{where} links {link.name!r} as a "
                             f"{link.kind} link{' to ' + short_repr(link.target) if link.target else ''}; "
                             "only hard links are followed.", msg.at, len(msg.data))
                    else:
                        out.append((link.name, link.address))
                elif msg.type == LINK_INFO:
                    info = m.link_info(msg, self.win)
                    if info.heap != -1:  # a dense group: its links are objects of a fractal heap
                        try:
                            links = dense_links(self.win, info.heap, info.name_index, where)
                        except H5Error as e:
                            note(self.rep, "h5_dense_group", f"The group {where} keeps its links in a "
                                 f"fractal heap that cannot be read: {e.message} The objects under it "
                                 "are not listed.", e.offset, e.length)
                            continue
                        self.rep.span(msg.head, msg.at - msg.head + len(msg.data), "h5_link",
                                      f"{where} > link info", f"{len(links)} links in a fractal heap")
                        out.extend((x.name, x.address) for x in links if x.address is not None)
            except H5Error as e:
                note(self.rep, e.code, f"The group {where}: {e.message}", e.offset, e.length)
        return out

    def _symbol_table(self, btree: int, heap: int, where: str) -> list[tuple[str, int]]:
        names = self._local_heap(heap, where)
        out: list[tuple[str, int]] = []
        stack: list[tuple[int, int | None]] = [(btree, None)]  # (node address, its level)
        seen: set[int] = set()
        while stack:
            addr, level = stack.pop()
            if addr in seen:
                raise H5Error("h5_cycle", f"The B-tree of {where} reaches its node at address {addr} "
                              "twice: its links form a loop.", self.win.absolute(max(addr, 0)), 0)
            seen.add(addr)
            self.btree_nodes += 1
            if self.btree_nodes > MAX_BTREE_NODES:
                raise H5Error("h5_too_large", f"The group B-trees hold more than {MAX_BTREE_NODES} "
                              "nodes; the rest are not read.", self.win.absolute(max(addr, 0)), 0)
            node_level, children = self._btree_node(addr, where)
            if level is not None and node_level != level - 1:
                raise H5Error("h5_bad_structure", f"A B-tree node of {where} at address {addr} is at "
                              f"level {node_level}; its parent is at level {level}.", self.win.absolute(addr) + 5, 1)
            if node_level == 0:
                for snod in children:
                    out.extend(self._symbol_node(snod, names, where))
            else:
                stack.extend((c, node_level) for c in reversed(children))
        return out

    def _btree_node(self, addr: int, where: str) -> tuple[int, list[int]]:
        o, n = self.win.offset_size, self.win.length_size
        head = Fields(self.win.read(addr, 8 + 2 * o, "group B-tree node"), self.win.absolute(addr), self.win,
                      "group B-tree node")
        if head.take(4) != b"TREE":
            raise H5Error("h5_bad_structure", f"The B-tree node of {where} at address {addr} does not "
                          "start with TREE.", self.win.absolute(addr), 4)
        kind, level, used = head.u8(), head.u8(), head.u16()
        if kind != 0 or used > MAX_NODE_ENTRIES:
            raise H5Error("h5_bad_structure", f"The B-tree node of {where} at address {addr} is of type "
                          f"{kind} with {used} entries; a group node is type 0.", self.win.absolute(addr) + 4, 4)
        size = used * (n + o) + n
        body = Fields(self.win.read(addr + 8 + 2 * o, size, "group B-tree node"),
                      self.win.absolute(addr) + 8 + 2 * o, self.win, "group B-tree node")
        children = []
        for _ in range(used):
            body.skip(n)
            children.append(body.addr())
        self.rep.span(self.win.absolute(addr), 8 + 2 * o + size, "h5_btree", f"{where} > B-tree node",
                      f"level {level}, {used} entries")
        return level, children

    def _symbol_node(self, addr: int, names: tuple[int, bytes], where: str) -> list[tuple[str, int]]:
        o = self.win.offset_size
        head = self.win.read(addr, 8, "symbol table node")
        if head[:4] != b"SNOD":
            raise H5Error("h5_bad_structure", f"The symbol table node of {where} at address {addr} does "
                          "not start with SNOD.", self.win.absolute(addr), 4)
        count = int.from_bytes(head[6:8], "little")
        entry = 2 * o + 24
        f = Fields(self.win.read(addr + 8, count * entry, "symbol table node"), self.win.absolute(addr) + 8,
                   self.win, "symbol table node")
        self.rep.span(self.win.absolute(addr), 8, "h5_btree", f"{where} > symbol table node", f"{count} entries")
        out = []
        for _ in range(count):
            at = f.here
            name_at, header = f.addr(), f.addr()
            f.skip(24)
            name = _heap_name(names, name_at)
            if name is None:
                raise H5Error("h5_bad_structure", f"A member of {where} names itself at offset {name_at} "
                              "of the group's local heap, outside it.", at, o)
            self.rep.span(at, entry, "h5_link", f"{where} > link {name}", name)
            out.append((name, header))
        return out

    def _local_heap(self, addr: int, where: str) -> tuple[int, bytes]:
        n = self.win.length_size
        f = Fields(self.win.read(addr, 8 + 2 * n + self.win.offset_size, "local heap"), self.win.absolute(addr),
                   self.win, "local heap")
        if f.take(4) != b"HEAP":
            raise H5Error("h5_bad_structure", f"The local heap of {where} at address {addr} does not "
                          "start with HEAP.", self.win.absolute(addr), 4)
        f.skip(4)
        size, _free, data_addr = f.length(), f.length(), f.addr()
        self.rep.span(self.win.absolute(addr), f.pos, "h5_heap", f"{where} > local heap", f"{size} bytes of names")
        data = self.win.read(data_addr, size, "local heap data")
        self.rep.span(self.win.absolute(data_addr), size, "h5_heap", f"{where} > local heap names")
        return data_addr, data


def _heap_name(names: tuple[int, bytes], offset: int) -> str | None:
    data = names[1]
    if not 0 <= offset < len(data):
        return None
    end = data.find(b"\0", offset, offset + MAX_NAME)
    return data[offset:end if end >= 0 else min(len(data), offset + MAX_NAME)].decode("utf-8", "replace")
