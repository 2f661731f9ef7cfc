"""GGUF -> Hugging Face for every family the run cell reads from GGUF (the llama layout keeps
gguf_meta.config_from_gguf): config.json from the ModelConfig from_gguf reads, each tensor's HF
name, and llama.cpp's converter undone (q/k rows back to HF order where it permuted them,
Gemma's 1 + w norms back to w, stacked experts split into one tensor per expert)."""

from __future__ import annotations

import re
import warnings

import numpy as np

from ..checkpoint import Checkpoint
from ..model import families
from ..model.config import ModelConfig, UnsupportedModel
from ..model.config_gguf import from_gguf
from ..tensors.names import gguf_to_hf, rope_heads, unpermute_qk
from .common import ConvertError
from .gguf_meta import special_token_ids

# The families whose GGUF this module turns back into a folder (the rest keep llama.cpp's layout).
GGUF_TO_HF = tuple(mt for mt, row in families.FAMILIES.items() if row.gguf_to_hf)
_STACKED = re.compile(r"^blk\.(\d+)\.ffn_(gate|up|down)_exps\.weight$")
_ROUTER = re.compile(r"^blk\.(\d+)\.ffn_gate_inp\.weight$")
_GGUF_ONLY = ("rope_freqs.weight",)  # llama.cpp derives it from the rope scaling config.json states


def read_config(ckpt: Checkpoint) -> ModelConfig:
    try:
        return from_gguf(ckpt.metadata, set(ckpt.tensors))
    except UnsupportedModel as e:
        raise ConvertError(f"{ckpt.source!r}: {e}") from None


def hf_config(cfg: ModelConfig, ckpt: Checkpoint) -> dict:
    """config.json for `cfg` in the family's own keys (what transformers and from_hf read)."""
    mt = cfg.architecture
    fam = families.family(mt)
    if mt not in GGUF_TO_HF:  # gpt2, gpt_neox, gpt_oss, deepseek_v3: load_model runs their GGUF
        raise ConvertError(f"GGUF -> Hugging Face for {ckpt.meta('general.architecture')!r} is not written yet: "
                           "undoing what llama.cpp's converter did to its tensors (its own layout) is the missing "
                           f"piece; the numpy decoder runs the GGUF itself (load_model).")
    gemma = bool(fam.norm_offset)
    rope = {"rope_type": "default", "rope_theta": cfg.rope_theta}
    if cfg.rope_scaling:
        rope = {**cfg.rope_scaling, "rope_theta": cfg.rope_theta}
    config = {"architectures": [families.CAUSAL_LM[mt]], "model_type": mt, "hidden_size": cfg.hidden_size,
              "intermediate_size": cfg.intermediate_size, "num_hidden_layers": cfg.num_layers,
              "num_attention_heads": cfg.num_heads, "num_key_value_heads": cfg.num_kv_heads,
              "head_dim": cfg.head_dim, "rms_norm_eps": float(str(np.float32(cfg.rms_norm_eps))),
              "rope_theta": cfg.rope_theta, "rope_parameters": rope,
              "max_position_embeddings": cfg.max_position_embeddings, "vocab_size": cfg.vocab_size,
              "tie_word_embeddings": "output.weight" not in ckpt.tensors,
              ("hidden_activation" if gemma else "hidden_act"): "gelu_pytorch_tanh" if gemma else "silu"}
    if fam.bias_from_config:  # Qwen2's q/k/v biases are fixed, not configured
        config["attention_bias"] = cfg.attention_bias
    if cfg.rotary_dim:
        config["partial_rotary_factor"] = cfg.rotary_dim / cfg.head_dim
    if cfg.sliding_window and fam.window in ("all", "layer_types"):
        config["sliding_window"] = cfg.sliding_window
    original = ckpt.meta(f"{ckpt.meta('general.architecture')}.rope.scaling.original_context_length")
    if original is not None and fam.gguf_original_context:
        config["original_max_position_embeddings"] = original
    if fam.norms == "sandwich":
        scale = cfg.attention_scale or cfg.head_dim ** -0.5
        scalar = float(scale) ** -2
        config["query_pre_attn_scalar"] = round(scalar) if abs(scalar - round(scalar)) < 1e-3 else scalar
        config["layer_types"] = ["sliding_attention" if s else "full_attention"
                                 for s in cfg.sliding_layers or [False] * cfg.num_layers]
        config["final_logit_softcapping"] = cfg.final_softcap
        config["attn_logit_softcapping"] = cfg.attn_softcap
    if fam.local_rope_base is not None:
        config["rope_parameters"] = {"full_attention": rope, "sliding_attention": {
            "rope_type": "default", "rope_theta": cfg.local_rope_theta}}
    if fam.multipliers:
        config.update(embedding_multiplier=cfg.embed_scale, residual_multiplier=cfg.residual_scale,
                      attention_multiplier=cfg.attention_scale or cfg.head_dim ** -0.5,
                      logits_scaling=1.0 / cfg.logit_scale)
    if fam.nope_period and cfg.rope_layers is not None:
        config["no_rope_layers"] = [int(r) for r in cfg.rope_layers]
    if fam.mlp == "experts":
        config.update(num_local_experts=cfg.experts, num_experts_per_tok=cfg.experts_per_token)
    if fam.shared_expert == "gated":
        config.update(shared_expert_intermediate_size=cfg.shared_expert_size, qkv_bias=cfg.attention_bias)
    if fam.mlp == "sparse_experts":
        config.update(num_experts=cfg.experts, num_experts_per_tok=cfg.experts_per_token,
                      moe_intermediate_size=cfg.expert_intermediate_size, norm_topk_prob=cfg.renormalize_top_k,
                      decoder_sparse_step=1, mlp_only_layers=[i for i, m in enumerate(cfg.moe_layers or []) if not m])
    config["pad_token_id"] = None  # stated, so no family's default id (Phi-3's 32000) outruns the vocabulary
    config.update(special_token_ids(ckpt))
    return config


def hf_tensors(cfg: ModelConfig, ckpt: Checkpoint, tensor_cls) -> list:
    """The HF tensors of the GGUF: (name, source, shape, transform, row of a stacked tensor)."""
    mt, fam = cfg.architecture, families.family(cfg.architecture)
    gemma = bool(fam.norm_offset)  # llama.cpp's file holds 1 + w
    experts = fam.expert_names if fam.mlp in ("experts", "sparse_experts") else None  # (router, gate, up, down)
    out = []
    for name, info in ckpt.tensors.items():
        shape = tuple(info.shape)
        if (m := _STACKED.match(name)) and experts:
            template = experts[1 + ("gate", "up", "down").index(m[2])]
            out += [tensor_cls(template.format(i=m[1], e=e), name, shape[1:], row=e) for e in range(shape[0])]
            continue
        m = _ROUTER.match(name)
        hf = experts[0].format(i=m[1]) if m and experts else gguf_to_hf(name, fam.gguf_names)
        if hf is None:
            if name not in _GGUF_ONLY:
                warnings.warn(f"convert: {name!r} has no Hugging Face {mt} name; left out.", stacklevel=4)
            continue
        heads = rope_heads(name, cfg.num_heads, cfg.num_kv_heads) if fam.gguf_qk_permuted else None
        out.append(tensor_cls(hf, name, shape, _undo(heads, gemma and name.endswith("norm.weight"))))
    return out


def _undo(heads: int | None, minus_one: bool):
    if not heads and not minus_one:
        return None

    def transform(w: np.ndarray) -> np.ndarray:
        if heads:
            w = unpermute_qk(w, heads)
        return w - np.float32(1.0) if minus_one else w  # llama.cpp's file holds Gemma's 1 + w
    return transform
