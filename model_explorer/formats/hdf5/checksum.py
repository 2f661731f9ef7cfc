"""HDF5's metadata checksum: Bob Jenkins' lookup3 hash (hashlittle, byte by byte, initial value 0),
as H5_checksum_lookup3 computes it over version 2 superblocks, object headers and their
continuation blocks."""

from __future__ import annotations

M = 0xFFFFFFFF


def _rot(x: int, k: int) -> int:
    return ((x << k) | (x >> (32 - k))) & M


def _mix(a: int, b: int, c: int) -> tuple[int, int, int]:
    a = (a - c) & M; a ^= _rot(c, 4); c = (c + b) & M  # noqa: E702 - lookup3's own layout
    b = (b - a) & M; b ^= _rot(a, 6); a = (a + c) & M  # noqa: E702
    c = (c - b) & M; c ^= _rot(b, 8); b = (b + a) & M  # noqa: E702
    a = (a - c) & M; a ^= _rot(c, 16); c = (c + b) & M  # noqa: E702
    b = (b - a) & M; b ^= _rot(a, 19); a = (a + c) & M  # noqa: E702
    c = (c - b) & M; c ^= _rot(b, 4); b = (b + a) & M  # noqa: E702
    return a, b, c


def _final(a: int, b: int, c: int) -> int:
    c ^= b; c = (c - _rot(b, 14)) & M  # noqa: E702
    a ^= c; a = (a - _rot(c, 11)) & M  # noqa: E702
    b ^= a; b = (b - _rot(a, 25)) & M  # noqa: E702
    c ^= b; c = (c - _rot(b, 16)) & M  # noqa: E702
    a ^= c; a = (a - _rot(c, 4)) & M  # noqa: E702
    b ^= a; b = (b - _rot(a, 14)) & M  # noqa: E702
    c ^= b; c = (c - _rot(b, 24)) & M  # noqa: E702
    return c


def lookup3(data: bytes, initval: int = 0) -> int:
    n = len(data)
    a = b = c = (0xDEADBEEF + n + initval) & M
    pos = 0
    while n - pos > 12:
        a = (a + int.from_bytes(data[pos:pos + 4], "little")) & M
        b = (b + int.from_bytes(data[pos + 4:pos + 8], "little")) & M
        c = (c + int.from_bytes(data[pos + 8:pos + 12], "little")) & M
        a, b, c = _mix(a, b, c)
        pos += 12
    tail = data[pos:]
    if not tail:
        return c
    tail = tail + bytes(12 - len(tail))  # the missing bytes add nothing
    a = (a + int.from_bytes(tail[0:4], "little")) & M
    b = (b + int.from_bytes(tail[4:8], "little")) & M
    c = (c + int.from_bytes(tail[8:12], "little")) & M
    return _final(a, b, c)
