"""Small broken checkpoints built in the tests, and the checks every repair must pass."""

from __future__ import annotations

import hashlib
import json
import os
import struct
from pathlib import Path

import numpy as np
import pytest

CONFIG = {
    "architectures": ["LlamaForCausalLM"], "model_type": "llama", "vocab_size": 32, "hidden_size": 16,
    "intermediate_size": 24, "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2,
    "head_dim": 4, "max_position_embeddings": 64, "rms_norm_eps": 1e-5, "tie_word_embeddings": False,
    "torch_dtype": "float32", "rope_theta": 10000.0, "hidden_act": "silu",
}


def llama_tensors(config: dict = CONFIG, seed: int = 0) -> dict[str, np.ndarray]:
    """The tensors of a tiny LlamaForCausalLM, in transformers' names and shapes."""
    rng = np.random.default_rng(seed)
    h, i, v = config["hidden_size"], config["intermediate_size"], config["vocab_size"]
    hd, nh, kv = config["head_dim"], config["num_attention_heads"], config["num_key_value_heads"]
    out = {"model.embed_tokens.weight": rng.normal(size=(v, h))}
    for layer in range(config["num_hidden_layers"]):
        p = f"model.layers.{layer}."
        out.update({p + "self_attn.q_proj.weight": rng.normal(size=(nh * hd, h)),
                    p + "self_attn.k_proj.weight": rng.normal(size=(kv * hd, h)),
                    p + "self_attn.v_proj.weight": rng.normal(size=(kv * hd, h)),
                    p + "self_attn.o_proj.weight": rng.normal(size=(h, nh * hd)),
                    p + "mlp.gate_proj.weight": rng.normal(size=(i, h)),
                    p + "mlp.up_proj.weight": rng.normal(size=(i, h)),
                    p + "mlp.down_proj.weight": rng.normal(size=(h, i)),
                    p + "input_layernorm.weight": np.ones(h),
                    p + "post_attention_layernorm.weight": np.ones(h)})
    out["model.norm.weight"] = np.ones(h)
    out["lm_head.weight"] = rng.normal(size=(v, h))
    return {k: (a * 0.02 if a.ndim == 2 else a).astype(np.float32) for k, a in out.items()}


def header_bytes(header: dict, pad: bool = True) -> bytes:
    raw = json.dumps(header).encode()
    if pad:
        raw += b" " * (-len(raw) % 8)
    return struct.pack("<Q", len(raw)) + raw


def write_raw(path, tensors: dict[str, np.ndarray], metadata=None, pad=True, gap_after=None,
              edit=None) -> None:
    """A safetensors file written by hand, so it can be wrong in exactly one way."""
    header, blobs, pos = {}, [], 0
    if metadata is not None:
        header["__metadata__"] = metadata
    for name, a in tensors.items():
        data = np.ascontiguousarray(a).tobytes()
        header[name] = {"dtype": {"float32": "F32", "float16": "F16"}[str(a.dtype)],
                        "shape": list(a.shape), "data_offsets": [pos, pos + len(data)]}
        blobs.append(data)
        pos += len(data)
        if name == gap_after:
            blobs.append(b"\xee" * 16)
            pos += 16
    if edit:
        edit(header)
    Path(path).write_bytes(header_bytes(header, pad) + b"".join(blobs))


def write_folder(folder, tensors, config=CONFIG, shards=1, **kw) -> Path:
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    names = list(tensors)
    if shards == 1:
        write_raw(folder / "model.safetensors", tensors, metadata={"format": "pt"}, **kw)
    else:
        per = -(-len(names) // shards)
        weight_map = {}
        for s in range(shards):
            file = f"model-{s + 1:05d}-of-{shards:05d}.safetensors"
            part = {n: tensors[n] for n in names[s * per:(s + 1) * per]}
            write_raw(folder / file, part, metadata={"format": "pt"})
            weight_map.update({n: file for n in part})
        total = sum(a.nbytes for a in tensors.values())
        (folder / "model.safetensors.index.json").write_text(json.dumps(
            {"metadata": {"total_size": total}, "weight_map": weight_map}, indent=2))
    if config is not None:
        (folder / "config.json").write_text(json.dumps(config, indent=2))
    return folder


def tree_hashes(path) -> dict[str, str]:
    """sha256 of every file under path (or of the file): the source must never change."""
    path = Path(path)
    files = [path] if path.is_file() else sorted(p for p in path.rglob("*") if p.is_file())
    return {str(p.relative_to(path.parent if path.is_file() else path)):
            hashlib.sha256(p.read_bytes()).hexdigest() for p in files}


def safe_open_all(folder) -> dict[str, np.ndarray]:
    """Every tensor of every safetensors file under folder, read by the reference library."""
    from safetensors import safe_open

    out = {}
    folder = Path(folder)
    files = [folder] if folder.is_file() else sorted(folder.glob("*.safetensors"))
    for f in files:
        with safe_open(str(f), "np") as r:
            for k in r.keys():
                out[k] = r.get_tensor(k)
    return out


def load_transformers(folder):
    transformers = pytest.importorskip("transformers")
    pytest.importorskip("torch")
    return transformers.AutoModelForCausalLM.from_pretrained(str(folder))


@pytest.fixture
def checked(tmp_path):
    """repair(source, dest, ...) with the guarantees every test needs checked: the source is
    unchanged, the report is ok, untouched tensors are byte-identical and safe_open reads the output."""
    import model_explorer as mx

    def run(source, dest=None, **kw):
        dest = dest or tmp_path / "fixed"
        before = tree_hashes(source)
        report = mx.repair(source, dest, **kw)
        assert tree_hashes(source) == before, "the source changed"
        assert report.ok, str(report)
        for t in report.tensors:
            if not t.changes:
                assert t.identical, f"{t.source_name} was not touched but its bytes differ"
        if str(dest).endswith(".gguf") or report.files and report.files[0].endswith(".gguf"):
            return report
        safe_open_all(dest)
        return report

    return run


@pytest.fixture
def llama_dir(tmp_path):
    return write_folder(tmp_path / "src", llama_tensors())


os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")
