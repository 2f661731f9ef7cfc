"""Repository layouts as the Hub serves them, for the fake Hub (fakehub.py): a DeepSeek-V3-shaped
163-shard FP8 index with real headers (data virtual), a split GGUF written by gguf-py, a
GPTQ-quantized folder and a PEFT LoRA adapter."""

from __future__ import annotations

import json
import math
import struct
import tempfile
from pathlib import Path

import numpy as np

try:
    from .fakehub import Virtual
except ImportError:  # imported by path (benchmarks/bench_hub.py)
    from fakehub import Virtual

ITEMSIZE = {"BF16": 2, "F32": 4, "F8_E4M3": 1, "F16": 2, "I32": 4}


def safetensors_head(tensors: dict[str, tuple[str, tuple]], metadata: dict | None = None) -> tuple[bytes, int]:
    """The header bytes of a safetensors file holding `tensors` (name -> (dtype, shape)) in that
    order, and the file's size with its data."""
    header: dict = {"__metadata__": metadata or {"format": "pt"}}
    off = 0
    for name, (dtype, shape) in tensors.items():
        n = math.prod(shape) * ITEMSIZE[dtype]
        header[name] = {"dtype": dtype, "shape": list(shape), "data_offsets": [off, off + n]}
        off += n
    raw = json.dumps(header, separators=(",", ":")).encode()
    raw += b" " * (-len(raw) % 8)
    head = struct.pack("<Q", len(raw)) + raw
    return head, len(head) + off


# DeepSeek-V3 (deepseek-ai/DeepSeek-V3's config.json), FP8 weights in 128x128 blocks.
DEEPSEEK_V3 = {
    "architectures": ["DeepseekV3ForCausalLM"], "model_type": "deepseek_v3", "vocab_size": 129280,
    "hidden_size": 7168, "intermediate_size": 18432, "moe_intermediate_size": 2048,
    "num_hidden_layers": 61, "num_attention_heads": 128, "num_key_value_heads": 128,
    "n_shared_experts": 1, "n_routed_experts": 256, "routed_scaling_factor": 2.5,
    "kv_lora_rank": 512, "q_lora_rank": 1536, "qk_rope_head_dim": 64, "v_head_dim": 128,
    "qk_nope_head_dim": 128, "topk_method": "noaux_tc", "n_group": 8, "topk_group": 4,
    "num_experts_per_tok": 8, "moe_layer_freq": 1, "first_k_dense_replace": 3, "norm_topk_prob": True,
    "scoring_func": "sigmoid", "hidden_act": "silu", "max_position_embeddings": 163840,
    "rms_norm_eps": 1e-6, "rope_theta": 10000, "tie_word_embeddings": False, "torch_dtype": "bfloat16",
    "num_nextn_predict_layers": 0,
    "quantization_config": {"activation_scheme": "dynamic", "fmt": "e4m3", "quant_method": "fp8",
                            "weight_block_size": [128, 128]},
}


def _fp8(t: dict, name: str, out: int, inp: int) -> None:
    t[name + ".weight"] = ("F8_E4M3", (out, inp))
    t[name + ".weight_scale_inv"] = ("F32", (math.ceil(out / 128), math.ceil(inp / 128)))


def deepseek_v3_tensors(cfg: dict = DEEPSEEK_V3) -> dict[str, tuple[str, tuple]]:
    h, heads = cfg["hidden_size"], cfg["num_attention_heads"]
    qk = cfg["qk_nope_head_dim"] + cfg["qk_rope_head_dim"]
    t: dict[str, tuple[str, tuple]] = {"model.embed_tokens.weight": ("BF16", (cfg["vocab_size"], h))}
    for i in range(cfg["num_hidden_layers"]):
        p = f"model.layers.{i}."
        t[p + "input_layernorm.weight"] = ("BF16", (h,))
        _fp8(t, p + "self_attn.q_a_proj", cfg["q_lora_rank"], h)
        t[p + "self_attn.q_a_layernorm.weight"] = ("BF16", (cfg["q_lora_rank"],))
        _fp8(t, p + "self_attn.q_b_proj", heads * qk, cfg["q_lora_rank"])
        _fp8(t, p + "self_attn.kv_a_proj_with_mqa", cfg["kv_lora_rank"] + cfg["qk_rope_head_dim"], h)
        t[p + "self_attn.kv_a_layernorm.weight"] = ("BF16", (cfg["kv_lora_rank"],))
        _fp8(t, p + "self_attn.kv_b_proj", heads * (cfg["qk_nope_head_dim"] + cfg["v_head_dim"]),
             cfg["kv_lora_rank"])
        _fp8(t, p + "self_attn.o_proj", h, heads * cfg["v_head_dim"])
        t[p + "post_attention_layernorm.weight"] = ("BF16", (h,))
        if i < cfg["first_k_dense_replace"]:
            inter = cfg["intermediate_size"]
            _fp8(t, p + "mlp.gate_proj", inter, h)
            _fp8(t, p + "mlp.up_proj", inter, h)
            _fp8(t, p + "mlp.down_proj", h, inter)
            continue
        inter = cfg["moe_intermediate_size"]
        t[p + "mlp.gate.weight"] = ("BF16", (cfg["n_routed_experts"], h))
        t[p + "mlp.gate.e_score_correction_bias"] = ("F32", (cfg["n_routed_experts"],))
        for e in [*(f"experts.{j}" for j in range(cfg["n_routed_experts"])), "shared_experts"]:
            _fp8(t, p + f"mlp.{e}.gate_proj", inter * (1 if e.startswith("experts") else cfg["n_shared_experts"]), h)
            _fp8(t, p + f"mlp.{e}.up_proj", inter * (1 if e.startswith("experts") else cfg["n_shared_experts"]), h)
            _fp8(t, p + f"mlp.{e}.down_proj", h, inter * (1 if e.startswith("experts") else cfg["n_shared_experts"]))
    t["model.norm.weight"] = ("BF16", (h,))
    t["lm_head.weight"] = ("BF16", (cfg["vocab_size"], h))
    return t


def sharded(tensors: dict[str, tuple[str, tuple]], shards: int, config: dict) -> dict:
    """Files of a sharded safetensors repo: tensors split in order into `shards` files of about
    equal bytes, their index, and config.json."""
    sizes = {n: math.prod(s) * ITEMSIZE[d] for n, (d, s) in tensors.items()}
    total = sum(sizes.values())
    per = total / shards
    groups: list[dict] = [{} for _ in range(shards)]
    acc = 0
    for name, spec in tensors.items():
        k = min(shards - 1, int(acc // per))
        groups[k][name] = spec
        acc += sizes[name]
    files: dict = {"config.json": json.dumps(config, indent=2).encode()}
    weight_map = {}
    for k, group in enumerate(groups, 1):
        fname = f"model-{k:05d}-of-{shards:05d}.safetensors"
        head, size = safetensors_head(group)
        files[fname] = Virtual(head, size)
        weight_map.update(dict.fromkeys(group, fname))
    files["model.safetensors.index.json"] = json.dumps(
        {"metadata": {"total_size": total}, "weight_map": weight_map}, indent=2).encode()
    return files


def deepseek_v3(shards: int = 163) -> dict:
    return sharded(deepseek_v3_tensors(), shards, DEEPSEEK_V3)


def _folder_files(folder: Path) -> dict:
    return {p.relative_to(folder).as_posix(): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


def split_gguf(splits: int = 3) -> dict:
    """A llama GGUF split by gguf-py into `splits` files (m-0000i-of-0000n.gguf)."""
    import gguf

    with tempfile.TemporaryDirectory() as d:
        w = gguf.GGUFWriter(str(Path(d) / "m.gguf"), "llama", split_max_tensors=1)
        w.add_name("split test model")
        w.add_block_count(1)
        for i in range(splits):
            w.add_tensor(f"blk.0.t{i}.weight", np.full((4, 8), i, np.float32))
        w.write_header_to_file()
        w.write_kv_data_to_file()
        w.write_tensors_to_file()
        w.close()
        return _folder_files(Path(d))


def gptq(bits: int = 4) -> dict:
    """A GPTQ-quantized llama folder (model.safetensors + config.json's quantization_config)."""
    import importlib.util

    spec = importlib.util.spec_from_file_location(
        "_quant_layouts", Path(__file__).resolve().parents[1] / "quant_format" / "layouts.py")
    qlayouts = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(qlayouts)
    with tempfile.TemporaryDirectory() as d:
        tensors, quant = qlayouts.gptq(bits=bits)
        qlayouts.write(Path(d), tensors, quant)
        return _folder_files(Path(d))


def lora_adapter(r: int = 8, hidden: int = 64) -> dict:
    """A PEFT LoRA adapter: adapter_config.json + adapter_model.safetensors, q/v projections."""
    cfg = {"peft_type": "LORA", "base_model_name_or_path": "org/base", "r": r, "lora_alpha": 16,
           "target_modules": ["q_proj", "v_proj"], "lora_dropout": 0.0, "bias": "none",
           "task_type": "CAUSAL_LM", "fan_in_fan_out": False}
    header: dict = {"__metadata__": {"format": "pt"}}
    blobs, off = [], 0
    rng = np.random.default_rng(0)
    for layer in range(2):
        for m in ("q_proj", "v_proj"):
            for part, shape in (("lora_A", (r, hidden)), ("lora_B", (hidden, r))):
                a = rng.standard_normal(shape).astype(np.float32) * 0.01
                name = f"base_model.model.model.layers.{layer}.self_attn.{m}.{part}.weight"
                header[name] = {"dtype": "F32", "shape": list(shape), "data_offsets": [off, off + a.nbytes]}
                blobs.append(a.tobytes())
                off += a.nbytes
    raw = json.dumps(header).encode()
    raw += b" " * (-len(raw) % 8)
    return {"adapter_config.json": json.dumps(cfg).encode(),
            "adapter_model.safetensors": struct.pack("<Q", len(raw)) + raw + b"".join(blobs),
            "README.md": b"# a LoRA adapter\n"}
