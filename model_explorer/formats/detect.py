"""Format detection from the first bytes, never from the file name."""

from __future__ import annotations

import struct

# The legacy (pre-1.6) torch.save format starts with a protocol-2 pickle of this number.
TORCH_LEGACY_MAGIC = 0x1950A86A20F9469CFC6C
_LEGACY_PREFIX = b"\x80\x02\x8a\x0a" + TORCH_LEGACY_MAGIC.to_bytes(10, "little")

# Opcodes a protocol 0/1 pickle commonly starts with: MARK, EMPTY_DICT, EMPTY_LIST, GLOBAL,
# EMPTY_TUPLE, NONE, INT, STRING, UNICODE, FLOAT, LONG, DICT, LIST.
_TEXT_PICKLE_STARTS = b"(}]c)NISVFLdl"

EXTENSIONS = {
    "safetensors": (".safetensors",),
    "gguf": (".gguf",),
    "zip": (".bin", ".pt", ".pth", ".ckpt", ".zip"),
    "torch_legacy": (".bin", ".pt", ".pth", ".ckpt"),
    "pickle": (".pkl", ".pickle", ".bin", ".pt", ".pth", ".ckpt", ".p"),
}


def detect(head: bytes, size: int) -> str:
    """One of "safetensors", "gguf", "zip", "torch_legacy", "pickle", "unknown"."""
    if head[:4] == b"GGUF":
        return "gguf"
    if head[:4] in (b"PK\x03\x04", b"PK\x05\x06"):
        return "zip"
    if head[:len(_LEGACY_PREFIX)] == _LEGACY_PREFIX:
        return "torch_legacy"
    if len(head) >= 9 and head[8:9] in (b"{", b" "):
        (n,) = struct.unpack_from("<Q", head, 0)
        if n >= 2 or size <= 10:
            return "safetensors"
    if len(head) >= 2 and head[0] == 0x80 and 2 <= head[1] <= 5:
        return "pickle"
    if head[:1] and head[:1] in _TEXT_PICKLE_STARTS and head.rstrip()[-1:] == b".":
        return "pickle"
    if head[:1] and head[:1] in _TEXT_PICKLE_STARTS and size > len(head):
        return "pickle"
    return "unknown"


def extension_matches(kind: str, name: str) -> bool:
    lower = name.lower()
    return any(lower.endswith(ext) for ext in EXTENSIONS.get(kind, ()))
