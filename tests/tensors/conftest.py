"""Small checkpoint files for tensor-data tests, written with the reference writers.

GGUF files come from gguf-py's GGUFWriter and safetensors files from the safetensors package,
so the readers and decoders are checked against bytes we did not lay out ourselves.
"""

from __future__ import annotations

import json
import os

import numpy as np
import pytest

import model_explorer as mx


def write_gguf(path, tensors: dict, arch: str = "llama", kv: dict | None = None,
               endianess: str = "little") -> str:
    """tensors: name -> float array (stored F32) or (raw uint8 blocks, GGMLQuantizationType)."""
    import gguf

    os.makedirs(os.path.dirname(str(path)) or ".", exist_ok=True)
    w = gguf.GGUFWriter(str(path), arch, endianess=gguf.GGUFEndian.BIG if endianess == "big"
                        else gguf.GGUFEndian.LITTLE)
    for key, value in (kv or {}).items():
        if isinstance(value, int):
            w.add_uint32(key, value)
        elif isinstance(value, float):
            w.add_float32(key, value)
        else:
            w.add_string(key, value)
    for name, value in tensors.items():
        if isinstance(value, tuple):
            raw, qtype = value
            w.add_tensor(name, raw, raw_dtype=qtype)
        else:
            w.add_tensor(name, value)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return str(path)


def write_safetensors(path, tensors: dict, config: dict | None = None) -> str:
    from safetensors.numpy import save_file

    os.makedirs(os.path.dirname(str(path)) or ".", exist_ok=True)
    save_file({k: np.array(v, order="C") for k, v in tensors.items()}, str(path))
    if config is not None:
        with open(os.path.join(os.path.dirname(str(path)), "config.json"), "w") as f:
            json.dump(config, f)
    return str(path)


def pack_mlx(codes: np.ndarray, bits: int) -> np.ndarray:
    """Pack integer codes (rows, cols) LSB-first into uint32 words, as MLX stores them.

    Written the slow, obvious way (one bit at a time) so it checks the fast unpacker.
    """
    rows, cols = codes.shape
    stream = ((codes[..., None].astype(np.uint64) >> np.arange(bits, dtype=np.uint64)) & 1)
    stream = stream.reshape(rows, cols * bits).astype(np.uint8)
    packed = np.packbits(stream, axis=-1, bitorder="little")  # bit 0 of byte 0 = first bit
    return packed.view("<u4")


@pytest.fixture
def opened():
    """Open a checkpoint and close it after the test."""
    held = []

    def _open(path, **kw):
        c = mx.open(path, **kw)
        held.append(c)
        return c

    yield _open
    for c in held:
        c.close()
