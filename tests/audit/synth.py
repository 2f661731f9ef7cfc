"""Small synthetic checkpoints for the audit tests and benchmarks: safetensors files, sharded
folders, GGUF files, plain and hostile pickles, and a Llama-shaped model whose layers follow a
trend (so a zeroed, exploded, copied or swapped layer can be planted)."""

from __future__ import annotations

import json
import os
import pickle
import struct

import numpy as np

_ST_DTYPE = {np.dtype(np.float32): "F32", np.dtype(np.float16): "F16", np.dtype(np.int64): "I64"}


def write_safetensors(path, tensors: dict[str, np.ndarray], metadata: dict | None = None) -> str:
    header: dict = {}
    if metadata:
        header["__metadata__"] = metadata
    pos = 0
    for name, a in tensors.items():
        header[name] = {"dtype": _ST_DTYPE[a.dtype], "shape": list(a.shape),
                        "data_offsets": [pos, pos + a.nbytes]}
        pos += a.nbytes
    blob = json.dumps(header).encode()
    blob += b" " * (-len(blob) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(blob)))
        f.write(blob)
        for a in tensors.values():
            f.write(np.ascontiguousarray(a).tobytes())
    return str(path)


def write_sharded(folder, tensors: dict[str, np.ndarray], n_shards: int, config: dict | None = None) -> str:
    os.makedirs(folder, exist_ok=True)
    names = list(tensors)
    weight_map, total = {}, 0
    for s in range(n_shards):
        part = {n: tensors[n] for n in names[s::n_shards]}
        fname = f"model-{s + 1:05d}-of-{n_shards:05d}.safetensors"
        write_safetensors(os.path.join(folder, fname), part)
        for n, a in part.items():
            weight_map[n] = fname
            total += a.nbytes
    with open(os.path.join(folder, "model.safetensors.index.json"), "w") as f:
        json.dump({"metadata": {"total_size": total}, "weight_map": weight_map}, f)
    if config is not None:
        with open(os.path.join(folder, "config.json"), "w") as f:
            json.dump(config, f)
    return str(folder)


def write_gguf(path, tensors: dict[str, np.ndarray], arch: str = "llama") -> str:
    import gguf

    w = gguf.GGUFWriter(str(path), arch)
    w.add_name("synthetic")
    for name, a in tensors.items():
        w.add_tensor(name, a)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return str(path)


def write_pickle(path, tensors: dict[str, np.ndarray]) -> str:
    with open(path, "wb") as f:
        pickle.dump({k: v for k, v in tensors.items()}, f, protocol=4)
    return str(path)


def hostile_pickle(path, marker) -> str:
    """A pickle that would run `touch marker` if anything ever loaded it."""
    cmd = f"touch {marker}"
    body = (b"\x80\x04" + b"cos\nsystem\n" + b"\x8c" + bytes([len(cmd)]) + cmd.encode()
            + b"\x85R" + b".")
    with open(path, "wb") as f:
        f.write(body)
    return str(path)


def small_tensors(seed: int, n: int = 4, width: int = 16) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    return {f"layers.{i}.weight": rng.standard_normal((width, width)).astype(np.float32) for i in range(n)}


def llama_like(layers: int = 8, hidden: int = 32, ffn: int = 64, seed: int = 0, trend: float = 0.25,
               dtype=np.float32) -> dict[str, np.ndarray]:
    """A Llama-shaped state dict whose weight scale grows with depth by `trend` per layer."""
    rng = np.random.default_rng(seed)
    out = {"model.embed_tokens.weight": rng.standard_normal((64, hidden)).astype(dtype)}
    shapes = {"self_attn.q_proj": (hidden, hidden), "self_attn.k_proj": (hidden // 2, hidden),
              "self_attn.v_proj": (hidden // 2, hidden), "self_attn.o_proj": (hidden, hidden),
              "mlp.gate_proj": (ffn, hidden), "mlp.up_proj": (ffn, hidden), "mlp.down_proj": (hidden, ffn)}
    for i in range(layers):
        scale = 1.0 + trend * i
        p = f"model.layers.{i}."
        out[p + "input_layernorm.weight"] = (scale * (1 + 0.01 * rng.standard_normal(hidden))).astype(dtype)
        for role, shape in shapes.items():
            out[p + role + ".weight"] = (0.02 * scale * rng.standard_normal(shape)).astype(dtype)
        out[p + "post_attention_layernorm.weight"] = (scale * (1 + 0.01 * rng.standard_normal(hidden))).astype(dtype)
    out["model.norm.weight"] = np.ones(hidden, dtype)
    out["lm_head.weight"] = rng.standard_normal((64, hidden)).astype(dtype)
    return out


def mixed_tree(root, n_models: int, marker=None, seed: int = 0, big_every: int = 0) -> dict[str, int]:
    """A folder of `n_models` models cycling through the kinds; returns counts per kind.

    Kinds: a safetensors file, a sharded folder (3 shards + config), a GGUF file, a plain
    pickle, a hostile pickle (touches `marker`), a truncated safetensors file.
    """
    os.makedirs(root, exist_ok=True)
    kinds = ["safetensors", "sharded", "gguf", "pickle", "hostile", "truncated"]
    counts = dict.fromkeys(kinds, 0)
    marker = marker or os.path.join(root, "..", "PWNED")
    for i in range(n_models):
        kind = kinds[i % len(kinds)]
        counts[kind] += 1
        sub = os.path.join(root, f"g{i // 100:03d}")
        os.makedirs(sub, exist_ok=True)
        width = 64 if big_every and i % big_every == 0 else 16
        t = small_tensors(seed + i, 4, width)
        if kind == "safetensors":
            write_safetensors(os.path.join(sub, f"m{i:05d}.safetensors"), t)
        elif kind == "sharded":
            write_sharded(os.path.join(sub, f"m{i:05d}"), t, 3, {"model_type": "llama"})
        elif kind == "gguf":
            write_gguf(os.path.join(sub, f"m{i:05d}.gguf"), t)
        elif kind == "pickle":
            write_pickle(os.path.join(sub, f"m{i:05d}.pkl"), t)
        elif kind == "hostile":
            hostile_pickle(os.path.join(sub, f"m{i:05d}.bin"), marker)
        else:
            p = write_safetensors(os.path.join(sub, f"m{i:05d}.safetensors"), t)
            with open(p, "r+b") as f:
                f.truncate(os.path.getsize(p) - 100)
    return counts
