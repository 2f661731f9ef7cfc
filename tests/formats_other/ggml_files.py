"""Legacy GGML/GGMF/GGJT files built by hand from the layout llama.cpp's
convert_llama_ggml_to_gguf.py reads (no library writes these any more)."""

from __future__ import annotations

import struct

import numpy as np

MAGICS = {"GGML": b"lmgg", "GGMF": b"fmgg", "GGJT": b"tjgg"}


def tensor_entry(pos: int, name: str, ne: tuple[int, ...], gtype: int, data: bytes, pad: bool) -> bytes:
    """One tensor: header, name, GGJT padding (from the start of the file at `pos`), data."""
    head = struct.pack("<3I", len(ne), len(name.encode()), gtype) + struct.pack(f"<{len(ne)}I", *ne)
    head += name.encode()
    if pad:
        head += b"\0" * (-(pos + len(head)) % 32)
    return head + data


def legacy_file(variant: str = "GGJT", version: int = 3, tokens=(b"<unk>", b"a", b"b"),
                tensors=(), ftype: int = 0, hparams: tuple[int, ...] | None = None) -> bytes:
    """tensors: (name, numpy shape, ggml type, raw bytes)."""
    out = MAGICS[variant] + (struct.pack("<I", version) if variant != "GGML" else b"")
    hp = hparams or (len(tokens), 32, 256, 4, 1, 8, ftype)
    out += struct.pack("<7I", *hp)
    for i, t in enumerate(tokens):
        out += struct.pack("<I", len(t)) + t + (struct.pack("<f", -float(i)) if variant != "GGML" else b"")
    for name, shape, gtype, data in tensors:
        out += tensor_entry(len(out), name, tuple(reversed(shape)), gtype, data, variant == "GGJT")
    return out


def quantized(values: np.ndarray, type_name: str) -> bytes:
    """Blocks of a ggml type made by gguf-py's own quantizer."""
    from gguf import GGMLQuantizationType, quants

    qt = GGMLQuantizationType[type_name]
    if qt == GGMLQuantizationType.F32:
        return values.astype("<f4").tobytes()
    if qt == GGMLQuantizationType.F16:
        return values.astype("<f2").tobytes()
    return quants.quantize(values.astype(np.float32), qt).tobytes()
