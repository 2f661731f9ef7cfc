"""Builders for golden files (safetensors, GGUF, shard dirs, MLX dirs) and small helpers.

Golden bytes are written by hand here, independently of the readers, so a test can place a
defect at a known byte and assert the finding points at it.
"""

from __future__ import annotations

import json
import struct
from dataclasses import dataclass, field

import model_explorer as mx

# GGUF value type codes (from the spec; gguf-py's GGUFValueType has the same numbers).
UINT8, INT8, UINT16, INT16, UINT32, INT32, FLOAT32, BOOL, STRING, ARRAY, UINT64, INT64, FLOAT64 = range(13)
_SCALAR = {UINT8: "B", INT8: "b", UINT16: "H", INT16: "h", UINT32: "I", INT32: "i", FLOAT32: "f",
           BOOL: "?", UINT64: "Q", INT64: "q", FLOAT64: "d"}
# ggml tensor types used in tests
F32, F16, Q4_0, Q8_0 = 0, 1, 2, 8


# -- safetensors ---------------------------------------------------------------------------

def st_bytes(header: dict | str | bytes, data: bytes = b"", length: int | None = None) -> bytes:
    """8-byte little-endian header length, the header, then the data."""
    if isinstance(header, dict):
        raw = json.dumps(header, separators=(",", ":")).encode()
    elif isinstance(header, str):
        raw = header.encode()
    else:
        raw = header
    return struct.pack("<Q", len(raw) if length is None else length) + raw + data


def st_entry(dtype: str, shape: list[int], begin: int, end: int) -> dict:
    return {"dtype": dtype, "shape": shape, "data_offsets": [begin, end]}


def header_len(blob: bytes) -> int:
    return struct.unpack_from("<Q", blob)[0]


# -- GGUF ----------------------------------------------------------------------------------

def _gguf_value(bo: str, vtype: int, value, subtype: int | None = None) -> bytes:
    if vtype in _SCALAR:
        return struct.pack(bo + _SCALAR[vtype], value)
    if vtype == STRING:
        raw = value.encode() if isinstance(value, str) else value
        return struct.pack(bo + "Q", len(raw)) + raw
    if vtype == ARRAY:
        body = b"".join(_gguf_value(bo, subtype, v) for v in value)
        return struct.pack(bo + "IQ", subtype, len(value)) + body
    raise ValueError(vtype)


@dataclass
class GGUFBuilder:
    """Writes GGUF bytes field by field and remembers where each field starts.

    `offsets` keys: "kv:<key>", "ti:<name>", "data".
    """

    version: int = 3
    byteorder: str = "<"
    n_tensors: int | None = None  # override the counts to lie about them
    n_kv: int | None = None
    kvs: list[tuple[str, bytes]] = field(default_factory=list)
    infos: list[tuple[str, bytes]] = field(default_factory=list)
    offsets: dict[str, int] = field(default_factory=dict)

    def kv(self, key: str, vtype: int, value, subtype: int | None = None) -> GGUFBuilder:
        return self.raw_kv(key, struct.pack(self.byteorder + "I", vtype)
                           + _gguf_value(self.byteorder, vtype, value, subtype))

    def raw_kv(self, key: str, type_and_value: bytes) -> GGUFBuilder:
        self.kvs.append((key, _gguf_value(self.byteorder, STRING, key) + type_and_value))
        return self

    def tensor(self, name: str, dims: list[int], gtype: int, offset: int) -> GGUFBuilder:
        bo = self.byteorder
        raw = (_gguf_value(bo, STRING, name) + struct.pack(bo + "I", len(dims))
               + b"".join(struct.pack(bo + "Q", d) for d in dims) + struct.pack(bo + "IQ", gtype, offset))
        self.infos.append((name, raw))
        return self

    def build(self, data: bytes = b"", alignment: int = 32) -> bytes:
        bo = self.byteorder
        out = bytearray(b"GGUF" + struct.pack(bo + "I", self.version))
        out += struct.pack(bo + "QQ", len(self.infos) if self.n_tensors is None else self.n_tensors,
                           len(self.kvs) if self.n_kv is None else self.n_kv)
        for key, raw in self.kvs:
            self.offsets["kv:" + key] = len(out)
            out += raw
        for name, raw in self.infos:
            self.offsets["ti:" + name] = len(out)
            out += raw
        out += b"\0" * (-len(out) % alignment)
        self.offsets["data"] = len(out)
        return bytes(out + data)


def small_gguf(byteorder: str = "<", version: int = 3) -> tuple[bytes, GGUFBuilder]:
    """Two F32 tensors and a few key/values: a valid file."""
    b = GGUFBuilder(version=version, byteorder=byteorder)
    b.kv("general.architecture", STRING, "llama").kv("llama.block_count", UINT32, 2)
    b.kv("tokenizer.ggml.tokens", ARRAY, ["a", "bc", "déf"], STRING)
    b.tensor("a", [4, 2], F32, 0).tensor("b", [8], F32, 32)
    data = struct.pack(byteorder + "8f", *range(8)) + struct.pack(byteorder + "8f", *range(8, 16))
    return b.build(data), b


# -- opening and finding -------------------------------------------------------------------

def write(tmp_path, name: str, blob: bytes) -> str:
    p = tmp_path / name
    p.parent.mkdir(parents=True, exist_ok=True)
    p.write_bytes(blob)
    return str(p)


def open_bytes(tmp_path, blob: bytes, name: str = "model.safetensors") -> mx.Checkpoint:
    return mx.open(write(tmp_path, name, blob))


def finding(ckpt, code: str):
    """The one finding with this code (fails with the list of findings when absent)."""
    hits = [f for f in ckpt.findings if f.code == code]
    assert hits, f"no {code!r} finding; got {[str(f) for f in ckpt.findings]}"
    return hits[0]


def codes(ckpt) -> set[str]:
    return {f.code for f in ckpt.findings}


# -- multi-file checkpoints ----------------------------------------------------------------

def shard_dir(tmp_path, n_shards: int = 3, per_shard: int = 2, folder: str = "sharded",
              shard_name=lambda i, n: f"model-{i:05d}-of-{n:05d}.safetensors") -> tuple:
    """A Hugging Face style sharded safetensors directory; returns (dir, index dict, arrays)."""
    import numpy as np
    import safetensors.numpy

    d = tmp_path / folder
    d.mkdir(parents=True, exist_ok=True)
    weight_map, arrays, total = {}, {}, 0
    for s in range(1, n_shards + 1):
        shard = {f"layers.{s}.w{j}": np.full((2, j + 1), s, dtype=np.float32) for j in range(per_shard)}
        name = shard_name(s, n_shards)
        (d / name).parent.mkdir(parents=True, exist_ok=True)
        safetensors.numpy.save_file(shard, str(d / name))
        for k, v in shard.items():
            weight_map[k] = name
            total += v.nbytes
        arrays.update(shard)
    index = {"metadata": {"total_size": total}, "weight_map": weight_map}
    write_index(d, index)
    return d, index, arrays


def write_index(d, index: dict, name: str = "model.safetensors.index.json") -> str:
    p = d / name
    p.write_text(json.dumps(index, indent=2, ensure_ascii=False))
    return str(p)


def mlx_dir(tmp_path, bits: int = 4, group: int = 64, rows: int = 8, cols: int = 128,
            config: dict | None = None, drop: tuple[str, ...] = (), folder: str = "mlx") -> tuple:
    """An MLX-quantized safetensors directory: one packed linear layer plus a norm."""
    import numpy as np
    import safetensors.numpy

    d = tmp_path / folder
    d.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(0)
    tensors = {
        "model.layers.0.mlp.up_proj.weight": rng.integers(0, 2**32, (rows, cols * bits // 32), dtype=np.uint32),
        "model.layers.0.mlp.up_proj.scales": np.ones((rows, cols // group), dtype=np.float16),
        "model.layers.0.mlp.up_proj.biases": np.zeros((rows, cols // group), dtype=np.float16),
        "model.norm.weight": np.ones(cols, dtype=np.float16),
    }
    for name in drop:
        tensors.pop(name)
    safetensors.numpy.save_file(tensors, str(d / "model.safetensors"))
    cfg = {"model_type": "llama", "quantization": {"group_size": group, "bits": bits}}
    if config is not None:
        cfg = config
    (d / "config.json").write_text(json.dumps(cfg))
    return d, tensors
