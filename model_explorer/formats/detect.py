"""Format detection from the first bytes, never from the file name."""

from __future__ import annotations

import struct

# The legacy (pre-1.6) torch.save format starts with a pickle of this number: LONG1 with 10
# bytes after PROTO (and, from protocol 4, a FRAME), or a text LONG in protocols 0 and 1.
TORCH_LEGACY_MAGIC = 0x1950A86A20F9469CFC6C
_LEGACY_LONG1 = b"\x8a\x0a" + TORCH_LEGACY_MAGIC.to_bytes(10, "little")
_LEGACY_TEXT = b"L%dL\n" % TORCH_LEGACY_MAGIC
_FRAME = 0x95

# Opcodes a protocol 0/1 pickle commonly starts with: MARK, EMPTY_DICT, EMPTY_LIST, GLOBAL,
# EMPTY_TUPLE, NONE, INT, STRING, UNICODE, FLOAT, LONG, DICT, LIST.
_TEXT_PICKLE_STARTS = b"(}]c)NISVFLdl"

EXTENSIONS = {
    "safetensors": (".safetensors",),
    "gguf": (".gguf",),
    "zip": (".bin", ".pt", ".pth", ".ckpt", ".zip"),
    "torch_legacy": (".bin", ".pt", ".pth", ".ckpt"),
    "pickle": (".pkl", ".pickle", ".bin", ".pt", ".pth", ".ckpt", ".p"),
    "npy": (".npy",),
    "npz": (".npz",),
    "torch_tar": (".bin", ".pt", ".pth", ".ckpt", ".tar"),
}
NPY_MAGIC = b"\x93NUMPY"


def detect(head: bytes, size: int) -> str:
    """One of "safetensors", "gguf", "zip", "npz", "npy", "torch_tar", "torch_legacy",
    "pickle", "unknown". `head` is the first 64 bytes, or 512 to recognise a tar."""
    if head[:4] == b"GGUF":
        return "gguf"
    if head[:4] in (b"PK\x03\x04", b"PK\x05\x06"):
        return "npz" if _first_zip_name(head).endswith(b".npy") else "zip"
    if head[:6] == NPY_MAGIC:
        return "npy"
    if len(head) >= 262 and head[257:262] == b"ustar":
        return "torch_tar"
    if _is_torch_legacy(head):
        return "torch_legacy"
    if len(head) >= 9 and head[8:].lstrip(b" \t\n\r")[:1] == b"{":
        # A u64 length, then a JSON object (JSON allows whitespace before it).
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


def _first_zip_name(head: bytes) -> bytes:
    """The first entry's name as far as `head` holds it (np.savez: 'arr_0.npy')."""
    if len(head) < 30 or head[:4] != b"PK\x03\x04":
        return b""
    (n,) = struct.unpack_from("<H", head, 26)
    return head[30:30 + n] if 30 + n <= len(head) else b""


def _is_torch_legacy(head: bytes) -> bool:
    if head.startswith(_LEGACY_TEXT):
        return True
    if len(head) < 2 or head[0] != 0x80:
        return False
    body = head[2:]
    if body[:1] == bytes([_FRAME]):
        body = body[9:]
    return body.startswith(_LEGACY_LONG1)


def extension_matches(kind: str, name: str) -> bool:
    lower = name.lower()
    return any(lower.endswith(ext) for ext in EXTENSIONS.get(kind, ()))
