"""GGUF metadata -> config.json for llama GGUFs, and GGUF -> GGUF metadata copies (HF -> GGUF
keys per family: gguf_arch.py)."""

from __future__ import annotations

from typing import Any

import numpy as np

from ..checkpoint import Checkpoint
from ..ggml import Keys
from .common import ConvertError

# GGUF key (after "<arch>.") -> HF LlamaConfig field
_GGUF_CONFIG = {
    "context_length": "max_position_embeddings",
    "embedding_length": "hidden_size",
    "block_count": "num_hidden_layers",
    "feed_forward_length": "intermediate_size",
    "attention.head_count": "num_attention_heads",
    "attention.head_count_kv": "num_key_value_heads",
    "attention.layer_norm_rms_epsilon": "rms_norm_eps",
    "rope.freq_base": "rope_theta",
    "vocab_size": "vocab_size",
}
LLAMA_LIKE = ("llama",)


def config_from_gguf(ckpt: Checkpoint) -> dict:
    """A Hugging Face LlamaConfig dict from a llama GGUF's hyperparameters."""
    arch = ckpt.meta(Keys.ARCHITECTURE)
    if arch not in LLAMA_LIKE:
        raise ConvertError(f"general.architecture is {arch!r}; converting GGUF to safetensors or MLX "
                           f"knows the llama layout only ({', '.join(LLAMA_LIKE)}).")
    config: dict[str, Any] = {"architectures": ["LlamaForCausalLM"], "model_type": "llama",
                              "hidden_act": "silu", "attention_bias": False, "mlp_bias": False}
    for key, field_name in _GGUF_CONFIG.items():
        value = ckpt.meta(f"{arch}.{key}")
        if value is not None:
            config[field_name] = value
    for needed in ("hidden_size", "num_hidden_layers", "num_attention_heads"):
        if needed not in config:
            raise ConvertError(f"The GGUF has no {arch}.* key for {needed}, so no config.json can be "
                               "derived.")
        value = config[needed]
        if not isinstance(value, int) or isinstance(value, bool) or value <= 0:
            raise ConvertError(f"The GGUF states {needed} = {value!r}; a positive integer is needed.")
    config.setdefault("num_key_value_heads", config["num_attention_heads"])
    config.setdefault("rms_norm_eps", 1e-5)
    config.setdefault("rope_theta", 10000.0)
    if "intermediate_size" not in config and "blk.0.ffn_up.weight" in ckpt.tensors:
        config["intermediate_size"] = ckpt.tensors["blk.0.ffn_up.weight"].shape[0]
    if "vocab_size" not in config:
        tokens = ckpt.meta(Keys.TOKENS)
        emb = ckpt.tensors.get("token_embd.weight")
        config["vocab_size"] = len(tokens) if tokens is not None else (emb.shape[0] if emb else 0)
    head_dim = ckpt.meta(Keys.arch(arch, Keys.KEY_LENGTH)) or \
        config["hidden_size"] // config["num_attention_heads"]
    config["head_dim"] = head_dim
    config["rms_norm_eps"] = float(str(np.float32(config["rms_norm_eps"])))  # 1e-05, not 9.99999974e-06
    config["rope_theta"] = float(config["rope_theta"])
    config["rope_parameters"] = {"rope_type": "default", "rope_theta": config["rope_theta"]}
    config["max_position_embeddings"] = config.get("max_position_embeddings", 2048)
    config["tie_word_embeddings"] = "output.weight" not in ckpt.tensors
    config.update(special_token_ids(ckpt))
    return config


def special_token_ids(ckpt: Checkpoint) -> dict:
    """config.json's bos/eos/pad ids from the GGUF tokenizer's, where it states them."""
    out = {}
    for field_name, key in (("bos_token_id", "bos_token_id"), ("eos_token_id", "eos_token_id"),
                            ("pad_token_id", "padding_token_id")):
        value = ckpt.meta(f"tokenizer.ggml.{key}")
        if value is not None:
            out[field_name] = value
    return out


def _copy_gguf_metadata(writer, ckpt: Checkpoint) -> None:
    """Every key of a GGUF source except those the new file states itself."""
    from gguf import GGUFValueType

    skip = {Keys.ARCHITECTURE, Keys.FILE_TYPE, Keys.QUANTIZATION_VERSION, Keys.ALIGNMENT}
    for key, kv in ckpt.metadata.items():
        if key in skip or key.startswith("split.") or not hasattr(kv, "type"):
            continue
        if kv.type.startswith("ARRAY["):
            sub = kv.type[len("ARRAY["):-1]
            if sub == "ARRAY" or kv.value.count == 0:
                continue  # nested arrays are not metadata llama.cpp reads; empty ones cannot be written
            writer.add_key_value(key, kv.value.to_list(), GGUFValueType.ARRAY, GGUFValueType[sub])
        else:
            writer.add_key_value(key, kv.value, GGUFValueType[kv.type])
