"""Hyperparameters of a decoder the run cell runs, from GGUF metadata or a Hugging Face `config.json`.

One decoder with the features that tell the families apart as data: q/k norms (Qwen3 per head,
OLMo 2 over the whole projection), norms after or around each sublayer (OLMo 2, Gemma 2/3),
Gemma's `(1 + w)` norms, GeGLU and `sqrt(hidden)` embedding scale, Granite's multipliers,
layers without RoPE (SmolLM3), per-layer sliding windows and local RoPE bases (Gemma 3),
RoPE scalings (linear, Llama 3, dynamic NTK, YaRN) and partial rotary, LayerNorm with biases,
plain GELU MLPs, learned positions and the parallel residual (GPT-2, NeoX), attention sinks
(gpt-oss), multi-head latent attention (DeepSeek) and mixtures of experts (softmax, top-k
softmax or grouped sigmoid routers, shared experts). What a family's checkpoint holds comes
from model/families.py. Anything else is refused with a message that names the architecture
and the missing feature, before a single weight is read; a config that contradicts itself is
refused too, never run.
"""

from __future__ import annotations

import math
from typing import Any

from . import families
from .decoder_config import ROPE_PARAMETERS, ROPE_TYPES, ModelConfig, UnsupportedModel, finite_float
from .hf_defaults import with_defaults

__all__ = ["ModelConfig", "UnsupportedModel", "finite_float", "from_hf", "NOT_YET", "HF_MODEL_TYPES",
           "ROPE_TYPES", "ROPE_PARAMETERS"]

# Hugging Face `model_type` values; the `architectures` classes they come with.
HF_MODEL_TYPES = ("llama", "mistral", "qwen2", "qwen3", "olmo2", "granite", "smollm3", "gemma", "gemma2",
                  "gemma3_text", "phi3", "mixtral", "qwen3_moe", "qwen2_moe", "gpt2", "gpt_neox", "gpt_oss", "deepseek_v3")
# What the families in families.py that this decoder does not run yet need, in words.
NOT_YET: dict[str, str] = {}
ACTIVATIONS = {"silu": "silu", "swish": "silu", "gelu_pytorch_tanh": "gelu_tanh"}
# A plain (not gated) GELU MLP's activations: GPT-2's gelu_new is the tanh approximation.
GELU_ACTIVATIONS = {"gelu": "gelu", "gelu_new": "gelu_tanh", "gelu_pytorch_tanh": "gelu_tanh"}
# GPT-2's config.json names its sizes its own way; read as Llama's names.
GPT2_KEYS = {"n_embd": "hidden_size", "n_layer": "num_hidden_layers", "n_head": "num_attention_heads",
             "n_positions": "max_position_embeddings", "activation_function": "hidden_act",
             "layer_norm_epsilon": "rms_norm_eps"}
# Where transformers applies config.json's sliding_window: on every layer; on the layers that
# layer_types marks (always, or with use_sliding_window); elsewhere (Llama, OLMo 2...) never.
WINDOW_EVERYWHERE = ("mistral", "mixtral", "phi3")
LAYER_TYPED = ("gemma2", "gemma3_text", "gpt_oss")
LAYER_TYPED_IF_USED = ("qwen2", "qwen3", "qwen2_moe", "qwen3_moe", "smollm3")


# -- Hugging Face config.json ----------------------------------------------------------------------

def from_hf(config: dict[str, Any] | None) -> ModelConfig:
    """Read a Hugging Face `config.json` (transformers 4.x and 5.x spellings)."""
    if not isinstance(config, dict):
        raise UnsupportedModel("The directory has no readable config.json, so the model's "
                               "hyperparameters are unknown.")
    model_type = config.get("model_type")
    classes = config.get("architectures") or []
    if model_type in NOT_YET:
        raise UnsupportedModel(f"config.json says model_type {model_type!r} "
                               f"({', '.join(map(str, classes)) or 'no architectures'}): "
                               f"{NOT_YET[model_type]} is not implemented in the numpy decoder yet.")
    if model_type not in HF_MODEL_TYPES:
        raise UnsupportedModel(
            f"config.json says model_type {model_type!r} ({', '.join(map(str, classes)) or 'no architectures'}); "
            f"the numpy decoder runs model_type one of {', '.join(HF_MODEL_TYPES)}.")
    config = with_defaults(model_type, config)  # what transformers assumes for a key left out
    if model_type == "gpt2":
        config = _gpt2_config(config)
    acts = GELU_ACTIVATIONS if model_type in ("gpt2", "gpt_neox") else ACTIVATIONS
    act = config.get("hidden_activation") or config.get("hidden_act", "silu")
    if act not in acts:
        raise UnsupportedModel(f"config.json says hidden_act {act!r} for {model_type}; the decoder "
                               f"implements {', '.join(acts)}.")
    if config.get("mlp_bias"):
        raise UnsupportedModel(f"config.json sets mlp_bias ({model_type}): MLP biases are not implemented.")
    family = families.family(model_type)

    def need(key: str) -> Any:
        if key not in config:
            raise UnsupportedModel(f"config.json has no {key!r}, which a {model_type} model needs.")
        return config[key]

    hidden, heads = need("hidden_size"), need("num_attention_heads")
    split = hidden // heads if isinstance(hidden, int) and isinstance(heads, int) and heads else None
    # GPT-2 and NeoX split hidden_size evenly over full multi-head attention, whatever else is said
    mha = model_type in ("gpt2", "gpt_neox", "deepseek_v3")
    if mha and model_type != "deepseek_v3" and split is not None and split * heads != hidden:
        raise UnsupportedModel(f"config.json says hidden_size {hidden} over {heads} heads ({model_type}), "
                               "which do not divide it: the q/k/v projections cannot be split into heads.")
    head_dim = split if mha else config.get("head_dim") or split
    mla = _mla(config) if model_type == "deepseek_v3" else {}
    head_dim = mla.pop("head_dim", head_dim)
    rope = _rope_fields(model_type, config, head_dim)
    if mla:  # the rotary part is qk_rope_head_dim, whatever partial_rotary_factor says
        rope["rotary_dim"] = mla.pop("rotary_dim")
    mla_scale = mla.pop("attention_scale", None)
    rope_layers = None
    if model_type == "smollm3":
        said = config.get("no_rope_layers")  # 1: the layer uses RoPE, 0: it does not (NoPE)
        if said is not None and (not isinstance(said, list) or not all(v in (0, 1) for v in said)):
            raise UnsupportedModel(f"config.json no_rope_layers should be a list of 0/1, found {said!r}.")
        rope_layers = [bool(v) for v in said] if said is not None else None
    granite, gemma = model_type == "granite", model_type in families.OFFSET_NORMS
    window, sliding_layers = _window(model_type, config, rope_layers)
    scalar = config.get("query_pre_attn_scalar") if gemma else None

    def cap(key: str) -> float | None:
        # Gemma 3 keeps attn_logit_softcapping in its config but transformers never applies it
        used = model_type in ("gemma2", "gemma3_text") and not (key.startswith("attn") and model_type == "gemma3_text")
        v = config.get(key) if used else None
        return None if v is None else finite_float(v, key)

    return ModelConfig(
        architecture=model_type,
        vocab_size=need("vocab_size"),
        hidden_size=hidden,
        intermediate_size=need("intermediate_size"),
        num_layers=need("num_hidden_layers"),
        num_heads=heads,
        num_kv_heads=heads if mha else config.get("num_key_value_heads") or heads,
        head_dim=head_dim,
        **mla,
        rms_norm_eps=finite_float(config.get("layer_norm_eps", config.get("rms_norm_eps", 1e-6)),
                                  "rms_norm_eps"),
        **rope,
        max_position_embeddings=config.get("max_position_embeddings", 2048),
        attention_bias=families.attention_biases(family, config)[0],
        o_bias=families.attention_biases(family, config)[1],
        tie_word_embeddings=bool(config.get("tie_word_embeddings", gemma or model_type in ("smollm3", "gpt2"))),
        sliding_window=window or None,
        qk_norm=family.qk_norm,
        post_norms=family.norms == "post",
        norm_offset=1.0 if gemma else 0.0,
        activation=acts[act],
        embed_scale=(float(hidden) ** 0.5 if gemma and isinstance(hidden, int) else
                     finite_float(config.get("embedding_multiplier", 1.0), "embedding_multiplier") if granite else 1.0),
        residual_scale=finite_float(config.get("residual_multiplier", 1.0), "residual_multiplier") if granite else 1.0,
        attention_scale=mla_scale or (finite_float(config.get("attention_multiplier"), "attention_multiplier")
                         if (granite or model_type == "gpt2") and config.get("attention_multiplier") is not None else
                         finite_float(scalar, "query_pre_attn_scalar") ** -0.5 if scalar is not None else None),
        logit_scale=1.0 / finite_float(config.get("logits_scaling", 1.0), "logits_scaling") if granite else 1.0,
        rope_layers=rope_layers,
        sandwich_norms=family.norms == "sandwich",
        attn_softcap=cap("attn_logit_softcapping"),
        final_softcap=cap("final_logit_softcapping"),
        sliding_layers=sliding_layers,
        fused_projections=family.attention in ("phi3", "gpt2", "neox"),
        norm="layer" if family.norm_bias else "rms",
        mlp="gelu" if family.mlp in ("gpt2", "neox") else "gated",
        positions="learned" if family.learned_positions else "rope",
        parallel_residual=model_type == "gpt_neox" and bool(config.get("use_parallel_residual", True)),
        **_moe(model_type, config),
    ).validate()


def _gpt2_config(config: dict[str, Any]) -> dict[str, Any]:
    """GPT-2's config.json in Llama's names (n_inner null: 4 x n_embd); what GPT-2 options the
    decoder does not implement are refused."""
    for key, why in (("scale_attn_by_inverse_layer_idx", "scales attention by 1 / layer index"),
                     ("reorder_and_upcast_attn", "reorders and upcasts attention"),
                     ("add_cross_attention", "has cross-attention")):
        if config.get(key):
            raise UnsupportedModel(f"config.json sets {key} (gpt2): the decoder does not implement GPT-2 "
                                   f"that {why}.")
    out = dict(config)
    for old, new in GPT2_KEYS.items():
        if old in config:
            out[new] = config[old]
    embd = out.get("hidden_size")
    out["intermediate_size"] = config.get("n_inner") or (4 * embd if isinstance(embd, int) else None)
    out.setdefault("hidden_act", "gelu_new")
    if config.get("scale_attn_weights", True) is False:
        out["attention_multiplier"] = 1.0
    return out


def _window(model_type: str, config: dict[str, Any], rope_layers: list[bool] | None
            ) -> tuple[Any, list[bool] | None]:
    """(sliding_window, per layer whether it slides or None for all) as transformers applies them."""
    window = config.get("sliding_window")
    if model_type in WINDOW_EVERYWHERE:
        return window, None
    if model_type in LAYER_TYPED_IF_USED and config.get("use_sliding_window"):
        return window, (None if model_type == "qwen3_moe" else _layer_types(model_type, config, rope_layers))
    if model_type in LAYER_TYPED:
        return window, _layer_types(model_type, config, rope_layers)
    return None, None


def _layer_types(model_type: str, config: dict[str, Any], rope_layers: list[bool] | None = None) -> list[bool]:
    """Per layer, whether it slides: config.json's layer_types, or as transformers derives them
    for older configs (Gemma 2 and gpt-oss alternate, Gemma 3's sliding_window_pattern, Qwen's
    max_window_layers, SmolLM3's NoPE layers)."""
    types = config.get("layer_types")
    layers = config.get("num_hidden_layers")
    n = range(min(layers, 1 << 16)) if isinstance(layers, int) else range(0)
    if types is None and model_type == "gemma3_text":
        pattern = config.get("sliding_window_pattern", 6)
        if not isinstance(pattern, int) or isinstance(pattern, bool) or pattern <= 0:
            raise UnsupportedModel(f"config.json sliding_window_pattern should be a positive integer, "
                                   f"found {pattern!r}.")
        return [bool((i + 1) % pattern) for i in n]
    if types is None and model_type in ("gemma2", "gpt_oss"):  # alternating, sliding first
        return [bool((i + 1) % 2) for i in n]
    top = config.get("max_window_layers")
    if types is None and model_type in ("qwen2", "qwen3", "qwen2_moe") and isinstance(top, int):
        if model_type == "qwen2_moe":
            return [i % 2 == 0 and i < top for i in n]
        return [i >= top for i in n]
    if types is None and model_type == "smollm3":
        return [not (rope_layers[i] if rope_layers and i < len(rope_layers) else (i + 1) % 4 != 0) for i in n]
    other = sorted({str(t) for t in types if t not in ("sliding_attention", "full_attention")}
                   ) if isinstance(types, list) else []
    if other:
        raise UnsupportedModel(f"config.json layer_types names {', '.join(map(repr, other))} layers ({model_type}): "
                               "the decoder implements sliding_attention and full_attention only.")
    if not isinstance(types, list):
        raise UnsupportedModel(f"config.json layer_types should list sliding_attention / full_attention "
                               f"per layer for {model_type}, found {types!r}.")
    return [t == "sliding_attention" for t in types]


def _rope_fields(model_type: str, config: dict[str, Any], head_dim: Any) -> dict[str, Any]:
    """rope_theta, rope_scaling, local_rope_theta and rotary_dim from transformers 4.x spellings
    (rope_theta, rope_scaling, rope_local_base_freq, partial_rotary_factor / rotary_pct) or 5.x
    (rope_parameters, per layer type for Gemma 3)."""
    rope = config.get("rope_parameters") or {}
    if not isinstance(rope, dict):
        raise UnsupportedModel(f"config.json rope_parameters should be an object, found {rope!r}.")
    local = None
    if model_type == "gemma3_text":
        local = config.get("rope_local_base_freq", 10000.0)
        if "sliding_attention" in rope or "full_attention" in rope:
            sliding = rope.get("sliding_attention") or {}
            kind = sliding.get("rope_type", sliding.get("type", "default"))
            if kind != "default":
                raise UnsupportedModel(f"config.json gives Gemma 3's sliding layers {kind!r} RoPE scaling; "
                                       "the decoder runs plain RoPE there.")
            local = sliding.get("rope_theta", local)
            rope = rope.get("full_attention") or {}
    rope = dict(rope)
    theta = rope.pop("rope_theta", None) or config.get("rope_theta") or config.get("rotary_emb_base") or (
        1_000_000.0 if model_type == "gemma3_text" else 10000.0)
    partial = rope.pop("partial_rotary_factor", None)
    for key in ("partial_rotary_factor", "rotary_pct"):
        partial = config.get(key) if partial is None else partial
    partial = 1.0 if partial is None else finite_float(partial, "partial_rotary_factor")
    scaling = config.get("rope_scaling") or rope
    if scaling and not isinstance(scaling, dict):
        raise UnsupportedModel(f"config.json rope_scaling should be an object, found {scaling!r}.")
    scaling = dict(scaling) if scaling else None
    if scaling is not None:
        scaling["rope_type"] = scaling.get("rope_type", scaling.get("type", "default"))
        if scaling["rope_type"] == "default":
            scaling = None
        elif scaling["rope_type"] in ("llama3", "yarn"):  # as transformers' standardize_rope_params
            scaling["original_max_position_embeddings"] = config.get(
                "original_max_position_embeddings", scaling.get("original_max_position_embeddings",
                                                                config.get("max_position_embeddings")))
    if not 0 < partial <= 1:
        raise UnsupportedModel(f"config.json partial_rotary_factor should be in (0, 1], found {partial!r}.")
    rotary = int(head_dim * partial) if isinstance(head_dim, int) and partial != 1 else None
    return {"rope_theta": finite_float(theta, "rope_theta"), "rope_scaling": scaling,
            "local_rope_theta": None if local is None else finite_float(local, "rope_local_base_freq"),
            "rotary_dim": rotary}


def _moe(model_type: str, config: dict[str, Any]) -> dict[str, Any]:
    """The mixture-of-experts fields: Mixtral (every layer, renormalised top-k) and Qwen2/3-MoE
    (decoder_sparse_step / mlp_only_layers, norm_topk_prob; Qwen2-MoE's gated shared expert)."""
    if model_type == "gpt_oss":
        return _gpt_oss(config)
    if model_type == "deepseek_v3":
        return _deepseek_moe(config)
    if model_type not in ("mixtral", "qwen3_moe", "qwen2_moe"):
        return {}
    n = config.get("num_local_experts")
    if model_type != "mixtral" and config.get("num_experts") is not None:  # the Hub's spelling
        n = config["num_experts"]
    k = config.get("num_experts_per_tok")
    width = config.get("intermediate_size") if model_type == "mixtral" else config.get("moe_intermediate_size")
    layers = config.get("num_hidden_layers")
    if not all(isinstance(v, int) and not isinstance(v, bool) for v in (n, k, width, layers)):
        raise UnsupportedModel(f"config.json of {model_type} lacks the expert count, top-k or width.")
    moe_layers = None
    if model_type != "mixtral":
        step = config.get("decoder_sparse_step", 1) or 1
        dense = set(config.get("mlp_only_layers") or [])
        moe_layers = [i not in dense and (i + 1) % step == 0 for i in range(min(layers, 1 << 16))]
    shared = config.get("shared_expert_intermediate_size") if model_type == "qwen2_moe" else 0
    if not isinstance(shared, int) or isinstance(shared, bool) or shared < 0:
        raise UnsupportedModel(f"config.json shared_expert_intermediate_size should be a non-negative "
                               f"integer, found {shared!r}.")
    return {"experts": n, "experts_per_token": k, "expert_intermediate_size": width,
            "renormalize_top_k": True if model_type == "mixtral" else bool(config.get("norm_topk_prob", False)),
            "moe_layers": moe_layers, "shared_expert_size": shared, "shared_expert_gate": bool(shared)}


def _gpt_oss(config: dict[str, Any]) -> dict[str, Any]:
    """gpt-oss: every layer's feed-forward is experts of intermediate_size, top-k router logits
    (with a bias) softmaxed, clamped SwiGLU experts with biases; attention sinks."""
    n, k, width = config.get("num_local_experts"), config.get("num_experts_per_tok"), config.get("intermediate_size")
    if not all(isinstance(v, int) and not isinstance(v, bool) for v in (n, k, width)):
        raise UnsupportedModel("config.json of gpt_oss lacks num_local_experts, num_experts_per_tok or "
                               "intermediate_size.")
    return {"experts": n, "experts_per_token": k, "expert_intermediate_size": width, "router": "topk_softmax",
            "expert_bias": True, "swiglu_limit": finite_float(config.get("swiglu_limit", 7.0), "swiglu_limit"),
            "swiglu_alpha": finite_float(config.get("swiglu_alpha", 1.702), "swiglu_alpha"),
            "attention_sinks": True}


def _ints(config: dict[str, Any], keys: tuple[str, ...], model_type: str) -> list[int]:
    values = [config.get(k) for k in keys]
    bad = [k for k, v in zip(keys, values) if not isinstance(v, int) or isinstance(v, bool) or v < 0]
    if bad:
        raise UnsupportedModel(f"config.json of {model_type} needs {', '.join(bad)} as non-negative integers, "
                               f"found {', '.join(repr(config.get(k)) for k in bad)}.")
    return values


def _mla(config: dict[str, Any]) -> dict[str, Any]:
    """DeepSeek's multi-head latent attention: q and k are [nope, rope] per head, the decoupled
    rope key shared by every head; softmax scale 1/sqrt(qk head dim), times YaRN's mscale^2."""
    kv, nope, rope, v = _ints(config, ("kv_lora_rank", "qk_nope_head_dim", "qk_rope_head_dim", "v_head_dim"),
                              "deepseek_v3")
    q = config.get("q_lora_rank") or 0
    _ints({"q_lora_rank": q}, ("q_lora_rank",), "deepseek_v3")
    scale = float(nope + rope) ** -0.5 if nope + rope else None
    params = config.get("rope_scaling") or config.get("rope_parameters") or {}
    if isinstance(params, dict) and params.get("rope_type", params.get("type", "default")) != "default" \
            and params.get("mscale_all_dim") and scale:
        factor = finite_float(params.get("factor"), "rope factor")
        mscale = 1.0 if factor <= 1 else 0.1 * float(params["mscale_all_dim"]) * math.log(factor) + 1.0
        scale *= mscale * mscale
    return {"kv_lora_rank": kv, "q_lora_rank": q, "qk_nope_head_dim": nope, "head_dim": nope + rope,
            "value_head_dim": v, "rotary_dim": rope, "rope_interleave": bool(config.get("rope_interleave", True)),
            "attention_scale": scale}


def _deepseek_moe(config: dict[str, Any]) -> dict[str, Any]:
    """DeepSeek-V3's experts: dense MLPs in the first first_k_dense_replace layers, then routed
    experts (sigmoid router, group-limited) beside n_shared_experts always-on ones."""
    n, k, width, layers, first, shared = _ints(config, (
        "n_routed_experts", "num_experts_per_tok", "moe_intermediate_size", "num_hidden_layers",
        "first_k_dense_replace", "n_shared_experts"), "deepseek_v3")
    groups, topk_groups = config.get("n_group") or 1, config.get("topk_group") or 1
    return {"experts": n, "experts_per_token": k, "expert_intermediate_size": width, "router": "sigmoid_groups",
            "renormalize_top_k": bool(config.get("norm_topk_prob", True)), "expert_groups": groups,
            "topk_groups": topk_groups, "moe_layers": [i >= first for i in range(min(layers, 1 << 16))],
            "routed_scaling": finite_float(config.get("routed_scaling_factor", 1.0), "routed_scaling_factor"),
            "shared_expert_size": width * shared}
