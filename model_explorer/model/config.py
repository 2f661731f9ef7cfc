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

from . import families, hparams
from .decoder_config import ROPE_PARAMETERS, ROPE_TYPES, ModelConfig, UnsupportedModel, finite_float
from .hf_defaults import with_defaults

__all__ = ["ModelConfig", "UnsupportedModel", "finite_float", "from_hf", "NOT_YET", "HF_MODEL_TYPES",
           "ROPE_TYPES", "ROPE_PARAMETERS"]

# Hugging Face `model_type` values (one per row of families/table.py)
HF_MODEL_TYPES = families.HF_MODEL_TYPES
# What the families in families.py that this decoder does not run yet need, in words.
NOT_YET: dict[str, str] = {}


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
    family = families.FAMILIES.get(model_type) if isinstance(model_type, str) else None
    if family is None:
        raise UnsupportedModel(
            f"config.json says model_type {model_type!r} ({', '.join(map(str, classes)) or 'no architectures'}); "
            f"the numpy decoder runs model_type one of {', '.join(HF_MODEL_TYPES)}.")
    # The sizes (and the tie, the context) as the card, memory and the will-load check read them:
    # the one reader, hparams.from_config; the rest below is what only the decoder needs.
    hp = hparams.from_config(config)
    config = with_defaults(model_type, config)  # what transformers assumes for a key left out
    if family.hf_renames:
        config = _renamed_config(family, config)
    acts = family.activations
    act = config.get("hidden_activation") or config.get("hidden_act", "silu")
    if act not in acts:
        raise UnsupportedModel(f"config.json says hidden_act {act!r} for {model_type}; the decoder "
                               f"implements {', '.join(acts)}.")
    if config.get("mlp_bias"):
        raise UnsupportedModel(f"config.json sets mlp_bias ({model_type}): MLP biases are not implemented.")

    def need(name: str, value: Any = None) -> Any:
        value = hp.get(name) if value is None else value
        if value is None:
            raise UnsupportedModel(f"config.json has no {hparams.HF_KEYS[name][0]!r}, which a {model_type} "
                                   "model needs.")
        return value

    hidden, heads = need("hidden"), need("heads")
    split = hidden // heads if isinstance(hidden, int) and isinstance(heads, int) and heads else None
    # GPT-2 and NeoX split hidden_size evenly over full multi-head attention, whatever else is said
    mla = _mla(config, model_type) if family.attention == "mla" else {}
    if family.full_heads and not mla and split is not None and split * heads != hidden:
        raise UnsupportedModel(f"config.json says hidden_size {hidden} over {heads} heads ({model_type}), "
                               "which do not divide it: the q/k/v projections cannot be split into heads.")
    head_dim = split if family.full_heads else hp.get("head_dim")
    head_dim = mla.pop("head_dim", head_dim)
    rope = _rope_fields(family, config, head_dim)
    if mla:  # the rotary part is qk_rope_head_dim, whatever partial_rotary_factor says
        rope["rotary_dim"] = mla.pop("rotary_dim")
    mla_scale = mla.pop("attention_scale", None)
    rope_layers = None
    if family.nope_period:
        said = config.get("no_rope_layers")  # 1: the layer uses RoPE, 0: it does not (NoPE)
        if said is not None and (not isinstance(said, list) or not all(v in (0, 1) for v in said)):
            raise UnsupportedModel(f"config.json no_rope_layers should be a list of 0/1, found {said!r}.")
        rope_layers = [bool(v) for v in said] if said is not None else None
    granite = family.multipliers
    window, sliding_layers = families.window(family, config, rope_layers)
    scalar = config.get("query_pre_attn_scalar") if family.query_scalar else None

    def cap(key: str) -> float | None:
        # Gemma 3 keeps attn_logit_softcapping in its config but transformers never applies it
        v = config.get(key) if key in family.softcaps else None
        return None if v is None else finite_float(v, key)

    return ModelConfig(
        architecture=model_type,
        vocab_size=need("vocab"),
        hidden_size=hidden,
        intermediate_size=need("intermediate", 4 * hidden if family.intermediate_default_x4
                               and isinstance(hidden, int) and hp.get("intermediate") is None else None),
        num_layers=need("layers"),
        num_heads=heads,
        num_kv_heads=heads if family.full_heads else hp.get("kv_heads"),
        head_dim=head_dim,
        **mla,
        rms_norm_eps=finite_float(config.get("layer_norm_eps", config.get("rms_norm_eps", 1e-6)),
                                  "rms_norm_eps"),
        **rope,
        max_position_embeddings=hp.get("context", 2048),
        attention_bias=families.attention_biases(family, config)[0],
        o_bias=families.attention_biases(family, config)[1],
        tie_word_embeddings=bool(hp.get("tied_embeddings", family.tie_default)),
        sliding_window=window or None,
        qk_norm=family.qk_norm,
        post_norms=family.norms == "post",
        norm_offset=family.norm_offset,
        activation=acts[act],
        embed_scale=(float(hidden) ** 0.5 if family.embed_scale_sqrt and isinstance(hidden, int) else
                     finite_float(config.get("embedding_multiplier", 1.0), "embedding_multiplier") if granite else 1.0),
        residual_scale=finite_float(config.get("residual_multiplier", 1.0), "residual_multiplier") if granite else 1.0,
        attention_scale=mla_scale or (finite_float(config.get("attention_multiplier"), "attention_multiplier")
                         if family.attention_multiplier and config.get("attention_multiplier") is not None else
                         finite_float(scalar, "query_pre_attn_scalar") ** -0.5 if scalar is not None else None),
        logit_scale=1.0 / finite_float(config.get("logits_scaling", 1.0), "logits_scaling") if granite else 1.0,
        rope_layers=rope_layers,
        sandwich_norms=family.norms == "sandwich",
        attn_softcap=cap("attn_logit_softcapping"),
        final_softcap=cap("final_logit_softcapping"),
        sliding_layers=sliding_layers,
        fused_projections=family.attention in ("fused", "conv1d", "per_head"),
        norm="layer" if family.norm_bias else "rms",
        mlp="gelu" if family.plain_mlp else "gated",
        positions="learned" if family.learned_positions else "rope",
        parallel_residual=family.parallel_residual and bool(config.get("use_parallel_residual", True)),
        **_moe(family, config),
    ).validate()


def _renamed_config(family: families.Family, config: dict[str, Any]) -> dict[str, Any]:
    """A config.json that names its sizes its own way (GPT-2's n_embd...) in Llama's names
    (n_inner null: 4 x n_embd); the options the decoder does not implement are refused."""
    mt = family.model_type
    for key, why in family.refused:
        if config.get(key):
            raise UnsupportedModel(f"config.json sets {key} ({mt}): the decoder does not implement {family.label} "
                                   f"that {why}.")
    out = dict(config)
    for old, new in family.hf_renames:
        if old in config:
            out[new] = config[old]
    out.setdefault("hidden_act", family.hf_defaults.get("activation_function"))
    if config.get("scale_attn_weights", True) is False:
        out["attention_multiplier"] = 1.0
    return out


def _rope_fields(family: families.Family, config: dict[str, Any], head_dim: Any) -> dict[str, Any]:
    """rope_theta, rope_scaling, local_rope_theta and rotary_dim from transformers 4.x spellings
    (rope_theta, rope_scaling, rope_local_base_freq, partial_rotary_factor / rotary_pct) or 5.x
    (rope_parameters, per layer type for Gemma 3)."""
    rope = config.get("rope_parameters") or {}
    if not isinstance(rope, dict):
        raise UnsupportedModel(f"config.json rope_parameters should be an object, found {rope!r}.")
    local = None
    if family.local_rope_base is not None:
        local = config.get("rope_local_base_freq", family.local_rope_base)
        if "sliding_attention" in rope or "full_attention" in rope:
            sliding = rope.get("sliding_attention") or {}
            kind = sliding.get("rope_type", sliding.get("type", "default"))
            if kind != "default":
                raise UnsupportedModel(f"config.json gives Gemma 3's sliding layers {kind!r} RoPE scaling; "
                                       "the decoder runs plain RoPE there.")
            local = sliding.get("rope_theta", local)
            rope = rope.get("full_attention") or {}
    rope = dict(rope)
    theta = rope.pop("rope_theta", None) or config.get("rope_theta") or config.get("rotary_emb_base") or \
        family.rope_theta_default
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


def _moe(family: families.Family, config: dict[str, Any]) -> dict[str, Any]:
    """The mixture-of-experts fields: Mixtral (every layer, renormalised top-k) and Qwen2/3-MoE
    (decoder_sparse_step / mlp_only_layers, norm_topk_prob; Qwen2-MoE's gated shared expert)."""
    if family.mlp == "fused_experts":
        return _gpt_oss(family, config)
    if family.mlp == "routed_experts":
        return _deepseek_moe(family, config)
    if not family.has_experts:
        return {}
    n = config.get(family.experts_key)
    if n is None:
        n = config.get("num_local_experts")
    k = config.get("num_experts_per_tok")
    width = config.get(family.expert_width_key)
    layers = config.get("num_hidden_layers")
    if not all(isinstance(v, int) and not isinstance(v, bool) for v in (n, k, width, layers)):
        raise UnsupportedModel(f"config.json of {family.model_type} lacks the expert count, top-k or width.")
    moe_layers = None
    if family.moe_layers_rule == "sparse_step":
        step = config.get("decoder_sparse_step", 1) or 1
        dense = set(config.get("mlp_only_layers") or [])
        moe_layers = [i not in dense and (i + 1) % step == 0 for i in range(min(layers, 1 << 16))]
    shared = config.get("shared_expert_intermediate_size") if family.shared_expert == "gated" else 0
    if not isinstance(shared, int) or isinstance(shared, bool) or shared < 0:
        raise UnsupportedModel(f"config.json shared_expert_intermediate_size should be a non-negative "
                               f"integer, found {shared!r}.")
    renormalize = family.renormalize if family.renormalize is not None else bool(config.get("norm_topk_prob", False))
    return {"experts": n, "experts_per_token": k, "expert_intermediate_size": width,
            "renormalize_top_k": renormalize, "moe_layers": moe_layers, "shared_expert_size": shared,
            "shared_expert_gate": bool(shared)}


def _gpt_oss(family: families.Family, config: dict[str, Any]) -> dict[str, Any]:
    """gpt-oss: every layer's feed-forward is experts of intermediate_size, top-k router logits
    (with a bias) softmaxed, clamped SwiGLU experts with biases; attention sinks."""
    keys = (family.experts_key, "num_experts_per_tok", family.expert_width_key)
    n, k, width = (config.get(key) for key in keys)
    if not all(isinstance(v, int) and not isinstance(v, bool) for v in (n, k, width)):
        raise UnsupportedModel(f"config.json of {family.model_type} lacks {', '.join(keys[:2])} or {keys[2]}.")
    limit, alpha = family.swiglu
    return {"experts": n, "experts_per_token": k, "expert_intermediate_size": width, "router": family.router,
            "expert_bias": True, "swiglu_limit": finite_float(config.get("swiglu_limit", limit), "swiglu_limit"),
            "swiglu_alpha": finite_float(config.get("swiglu_alpha", alpha), "swiglu_alpha"),
            "attention_sinks": family.sinks}


def _ints(config: dict[str, Any], keys: tuple[str, ...], model_type: str) -> list[int]:
    values = [config.get(k) for k in keys]
    bad = [k for k, v in zip(keys, values) if not isinstance(v, int) or isinstance(v, bool) or v < 0]
    if bad:
        raise UnsupportedModel(f"config.json of {model_type} needs {', '.join(bad)} as non-negative integers, "
                               f"found {', '.join(repr(config.get(k)) for k in bad)}.")
    return values


def _mla(config: dict[str, Any], mt: str) -> dict[str, Any]:
    """DeepSeek's multi-head latent attention: q and k are [nope, rope] per head, the decoupled
    rope key shared by every head; softmax scale 1/sqrt(qk head dim), times YaRN's mscale^2."""
    kv, nope, rope, v = _ints(config, ("kv_lora_rank", "qk_nope_head_dim", "qk_rope_head_dim", "v_head_dim"), mt)
    q = config.get("q_lora_rank") or 0
    _ints({"q_lora_rank": q}, ("q_lora_rank",), mt)
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


def _deepseek_moe(family: families.Family, config: dict[str, Any]) -> dict[str, Any]:
    """DeepSeek-V3's experts: dense MLPs in the first first_k_dense_replace layers, then routed
    experts (sigmoid router, group-limited) beside n_shared_experts always-on ones."""
    n, k, width, layers, first, shared = _ints(config, (
        "n_routed_experts", "num_experts_per_tok", "moe_intermediate_size", "num_hidden_layers",
        "first_k_dense_replace", "n_shared_experts"), family.model_type)
    groups, topk_groups = config.get("n_group") or 1, config.get("topk_group") or 1
    return {"experts": n, "experts_per_token": k, "expert_intermediate_size": width, "router": family.router,
            "renormalize_top_k": bool(config.get("norm_topk_prob", True)), "expert_groups": groups,
            "topk_groups": topk_groups, "moe_layers": [i >= first for i in range(min(layers, 1 << 16))],
            "routed_scaling": finite_float(config.get("routed_scaling_factor", 1.0), "routed_scaling_factor"),
            "shared_expert_size": width * shared}
