"""Hyperparameters of a decoder the run cell runs, from a GGUF file's `{arch}.*` metadata.

The Hugging Face side (config.json) is config.py; both fill the one ModelConfig the decoder reads,
so a model converted by llama.cpp's convert_hf_to_gguf.py (or mx.convert) gets the config its
config.json gives, whatever llama.cpp's conventions moved:
- q/k rows are permuted for llama.cpp's interleaved RoPE only by its LlamaModel-based converters
  (llama, mistral, mixtral, granite, smollm3); qwen2/3, gemma, phi3 and olmo2 keep HF's order.
- Gemma's norms are stored as (1 + w) already, so norm_offset is 0 here.
- What llama.cpp hard-codes rather than stores is restated here: Gemma's sqrt(hidden) embedding
  scale and GeGLU, Gemma 2's sliding window on even layers and Gemma 3's on five of six (local
  RoPE base 10000), SmolLM3's RoPE-less every 4th layer, renormalised top-k for Mixtral and
  Qwen3-MoE and not for Qwen2-MoE (unless `expert_weights_norm` says otherwise), Qwen2-MoE's
  sigmoid-gated shared expert, GPT-2's tanh-GELU and NeoX's exact one, gpt-oss's even-layer window,
  clamp 7 / alpha 1.702 and YaRN without truncation, DeepSeek's adjacent-pair (interleaved) rotary.
- DeepSeek's MLA is written as llama.cpp's MQA (head_count_kv 1, key_length kv_lora_rank + rope);
  the model's own sizes are `*_mla` (older files: key_length / value_length), kv_b whole or split
  into attn_k_b / attn_v_b; YaRN's mscale_all_dim is 10 x yarn_log_multiplier.
"""

from __future__ import annotations

from typing import Any

from ..ggml import Keys
from . import families, gguf_keys
from .config import NOT_YET, ModelConfig, UnsupportedModel, _mla, finite_float
from .gguf_keys import GGUF_KEYS

# GGUF `general.architecture` values this decoder runs (every row's gguf_archs). llama.cpp writes
# Mistral and Mixtral as "llama" (Mixtral with `llama.expert_count`).
GGUF_ARCHITECTURES = families.GGUF_ARCHITECTURES
# Families the decoder knows from config.json but not yet from GGUF (config.NOT_YET says why).
GGUF_NOT_YET: dict[str, str] = {}
# Architectures whose converter permutes q/k rows (LlamaModel and its subclasses), and those whose
# converter stores every norm weight as 1 + w (the model scales by 1 + w): the rows say; these
# tuples are for readers that hold an architecture name only (checks/diff.py).
QK_PERMUTED = families.gguf_archs_where(lambda row: row.gguf_qk_permuted)
NORMS_PLUS_ONE = families.gguf_archs_where(lambda row: row.norm_offset != 0)
GGUF_KV_B_SPLIT = "gguf_kv_b_split"  # ModelConfig.extra: DeepSeek's kv_b as llama.cpp's attn_k_b, attn_v_b
SIGMOID_GATING = 2  # llama.cpp's LLAMA_EXPERT_GATING_FUNC_TYPE_SIGMOID (expert_gating_func)

# The keys beyond ggml.Keys: the model layer's one GGUF key table (gguf_keys.py), which hparams reads too
(EXPERT_FEED_FORWARD_LENGTH, EXPERT_WEIGHTS_NORM, ATTN_SOFTCAP, FINAL_SOFTCAP, EMBEDDING_SCALE, RESIDUAL_SCALE,
 LOGIT_SCALE, ATTENTION_SCALE, SLIDING_WINDOW_PATTERN, ROPE_FREQ_BASE_SWA, YARN_ORIGINAL_CONTEXT, YARN_BETA_FAST,
 YARN_BETA_SLOW, YARN_ATTENTION_FACTOR, SHARED_FEED_FORWARD_LENGTH, LAYERNORM_EPS, PARALLEL_RESIDUAL,
 LEADING_DENSE, SHARED_COUNT, GROUP_COUNT, GROUP_USED_COUNT, WEIGHTS_SCALE, GATING_FUNC, Q_LORA_RANK, KV_LORA_RANK,
 KEY_LENGTH_MLA, VALUE_LENGTH_MLA, YARN_LOG_MULTIPLIER) = (GGUF_KEYS[name] for name in gguf_keys._MORE_NAMES)

_MISSING = object()


def unsupported_architecture(arch: Any) -> UnsupportedModel:
    """The refusal for a GGUF whose architecture the numpy decoder does not run."""
    if arch is None:
        return UnsupportedModel("The GGUF metadata has no 'general.architecture', so the model type is unknown.")
    hf = GGUF_NOT_YET.get(arch)
    if hf in NOT_YET:
        return UnsupportedModel(f"GGUF architecture {arch!r}: {NOT_YET[hf]} is not implemented "
                                "in the numpy decoder yet.")
    if hf is not None:
        return UnsupportedModel(f"GGUF architecture {arch!r}: the numpy decoder runs {hf} from a Hugging Face "
                                "folder (config.json) but does not read its GGUF hyperparameters yet.")
    return UnsupportedModel(f"GGUF architecture {arch!r} is not supported: the numpy decoder runs "
                            f"general.architecture one of {', '.join(GGUF_ARCHITECTURES)}.")


def from_gguf(metadata: dict[str, Any], tensor_names: set[str] | None = None) -> ModelConfig:
    """Read `{arch}.*` keys; `metadata` maps key -> KeyValue (with `.value`) or plain value.
    `tensor_names` decide what only the tensors say (biases, a tied head, which layers are MoE)."""

    arch = metadata.get(Keys.ARCHITECTURE)
    arch = getattr(arch, "value", arch)

    def get(key: str, default: Any = _MISSING) -> Any:
        kv = metadata.get(key.format(arch=arch))
        if kv is None:
            if default is _MISSING:
                raise UnsupportedModel(f"The GGUF metadata has no {key.format(arch=arch)!r}, which a {arch} "
                                       "model needs.")
            return default
        return getattr(kv, "value", kv)

    def count(key: str, default: Any = _MISSING) -> Any:
        """An integer key (a size, a count); `default` when absent."""
        value = get(key, default)
        if value is default and default is not _MISSING:
            return value
        if isinstance(value, (list, tuple)) or hasattr(value, "to_list"):
            raise UnsupportedModel(f"{key.format(arch=arch)} gives one value per layer; the decoder needs one "
                                   "for all.")
        if isinstance(value, bool) or not isinstance(value, int) or value < 0:
            raise UnsupportedModel(f"{key.format(arch=arch)} should be a non-negative integer, found {value!r}.")
        return value

    fam = families.by_gguf_arch(arch, experts=bool(get(GGUF_KEYS["experts"], 0))) if isinstance(arch, str) else None
    if fam is None:
        raise unsupported_architecture(arch)
    hidden = count(GGUF_KEYS["hidden"])
    heads = count(GGUF_KEYS["heads"])
    kv_heads = count(GGUF_KEYS["kv_heads"], heads)
    rotary = count(GGUF_KEYS["rope_dims"], None)
    head_dim = count(GGUF_KEYS["head_dim"], None)
    if head_dim is None and isinstance(hidden, int) and isinstance(heads, int) and heads:
        # no key_length: hidden / heads, unless RoPE turns more dims than that (Mistral Nemo's head_dim)
        head_dim = max(hidden // heads, rotary if isinstance(rotary, int) else 0)
    rotary = None if rotary == head_dim else rotary  # partial rotary: the first `rotary` dims of a head
    rope_scaling = None
    scaling_type = get(GGUF_KEYS["rope_scaling_type"], None)
    if scaling_type is not None and not isinstance(scaling_type, str):
        raise UnsupportedModel(f"{arch}.rope.scaling.type should be a name, found {scaling_type!r}.")
    if scaling_type == "linear":
        rope_scaling = {"rope_type": "linear", "factor": finite_float(get(GGUF_KEYS["rope_scaling_factor"]),
                                                                 "rope.scaling.factor")}
    elif scaling_type == "yarn":
        rope_scaling = {"rope_type": "yarn", "factor": finite_float(get(GGUF_KEYS["rope_scaling_factor"]), "rope.scaling.factor"),
                        "original_max_position_embeddings": count(YARN_ORIGINAL_CONTEXT)}
        for key, name in ((YARN_BETA_FAST, "beta_fast"), (YARN_BETA_SLOW, "beta_slow"),
                          (YARN_ATTENTION_FACTOR, "attention_factor")):
            if get(key, None) is not None:
                rope_scaling[name] = finite_float(get(key), key.format(arch=arch))
    elif scaling_type not in (None, "none"):
        rope_scaling = {"rope_type": scaling_type}
    names = tensor_names or set()
    if "rope_factors_long.weight" in names:
        raise UnsupportedModel(f"The {arch} GGUF holds rope_factors_long/short (LongRoPE): not implemented.")
    extra = {}
    if "rope_freqs.weight" in names:
        # Llama 3.x stores its per-frequency RoPE divisors as a tensor; weights.py reads it.
        extra["rope_freqs_tensor"] = "rope_freqs.weight"
    mla: dict[str, Any] = {}
    if fam.attention == "mla":  # as DeepseekV2Model writes it: llama.cpp's MQA sizes, the MLA ones in *_mla
        mla = _deepseek2_attention(fam, get, count, rope_scaling, names, extra)
        head_dim, rotary, kv_heads = mla.pop("head_dim"), mla.pop("rotary_dim"), heads
    vocab = count(GGUF_KEYS["vocab"], None)
    if vocab is None:
        tokens = metadata.get(Keys.TOKENS)
        vocab = len(getattr(tokens, "value", tokens)) if tokens is not None else None
    layers = count(GGUF_KEYS["layers"])
    # only where a window means one to llama.cpp (and to mx.convert's Mistral/Mixtral)
    window = count(GGUF_KEYS["sliding_window"], None) or None if fam.gguf_window else None
    model_type = fam.model_type
    # what llama.cpp hard-codes for the family rather than stores: the row says
    fields: dict[str, Any] = {"qk_norm": fam.qk_norm, "post_norms": fam.norms == "post",
                              "fused_projections": fam.attention in ("fused", "conv1d", "per_head"),
                              "activation": fam.default_activation}
    if fam.nope_period and isinstance(layers, int):
        fields["rope_layers"] = [(i + 1) % fam.nope_period != 0 for i in range(min(layers, 1 << 16))]
    if fam.multipliers:
        fields.update(embed_scale=_scalar(get(EMBEDDING_SCALE, None), arch, "embedding_scale"),
                      residual_scale=_scalar(get(RESIDUAL_SCALE, None), arch, "residual_scale"),
                      logit_scale=1.0 / _scalar(get(LOGIT_SCALE, None), arch, "logit_scale"))
    eps = get(GGUF_KEYS["rms_eps"], 1e-5)
    if fam.norm_bias:  # LayerNorm with biases, q/k/v fused, a plain GELU MLP with biases
        eps = get(LAYERNORM_EPS, 1e-5)
        fields.update(norm="layer", mlp="gelu", positions="learned" if fam.learned_positions else "rope",
                      parallel_residual=fam.parallel_residual and bool(get(PARALLEL_RESIDUAL, True)))
    if fam.mlp == "fused_experts":  # gpt-oss: llama.cpp's LLM_FFN_SWIGLU_OAI_MOE, every other layer slides
        fields.update(router=fam.router, expert_bias=True, swiglu_limit=fam.swiglu[0], swiglu_alpha=fam.swiglu[1],
                      attention_sinks=fam.sinks,
                      sliding_layers=families.llamacpp_sliding(fam, layers) if isinstance(layers, int) else None)
    if not fam.gguf_yarn_truncate and rope_scaling and rope_scaling["rope_type"] == "yarn":
        rope_scaling["truncate"] = False  # as the family's config.json says (llama.cpp rounds)
    if fam.embed_scale_sqrt:
        fields["embed_scale"] = float(hidden) ** 0.5 if isinstance(hidden, int) else 1.0
    if fam.norms == "sandwich":
        fields.update(sandwich_norms=True, final_softcap=_cap(get(FINAL_SOFTCAP, None), arch, "final"),
                      attn_softcap=_cap(get(ATTN_SOFTCAP, None), arch, "attn")
                      if "attn_logit_softcapping" in fam.softcaps else None,
                      sliding_layers=_sliding_layers(get(SLIDING_WINDOW_PATTERN, None), layers, fam))
    if fam.local_rope_base is not None:
        fields["local_rope_theta"] = finite_float(get(ROPE_FREQ_BASE_SWA, fam.local_rope_base), "rope.freq_base_swa")
    if isinstance(layers, int) and layers in fam.gguf_width_scale_layers and isinstance(hidden, int) \
            and isinstance(heads, int):
        # llama.cpp: Gemma 2 and 3 27B scale by their query_pre_attn_scalar, hidden / heads
        fields["attention_scale"] = (hidden / heads) ** -0.5
    scale = get(ATTENTION_SCALE, None)
    if scale is not None:
        fields["attention_scale"] = finite_float(scale, f"{arch}.attention.scale")
    fields.update(mla)
    experts = count(GGUF_KEYS["experts"], 0)
    if experts:
        if not fam.has_experts:
            raise UnsupportedModel(f"The {arch} GGUF has {experts} experts; mixtures of experts run for "
                                   f"{', '.join(families.gguf_archs_where(lambda row: row.has_experts))} "
                                   "(llama: Mixtral).")
        moe = [f"blk.{i}.ffn_gate_inp.weight" in names for i in range(min(layers, 1 << 16))] \
            if names and isinstance(layers, int) else None
        fields.update(experts=experts, experts_per_token=count(GGUF_KEYS["experts_per_token"], 0),
                      expert_intermediate_size=count(EXPERT_FEED_FORWARD_LENGTH, None)
                      or count(GGUF_KEYS["intermediate"]),
                      renormalize_top_k=bool(get(EXPERT_WEIGHTS_NORM, fam.gguf_renormalize)),
                      moe_layers=None if moe is None or all(moe) else moe)
        if fam.router == "sigmoid_groups":
            fields.update(_deepseek2_router(get, count, layers, fields["expert_intermediate_size"]))
        if fam.shared_expert == "gated":  # llama.cpp: the shared expert is always there, gated by a sigmoid
            shared = count(SHARED_FEED_FORWARD_LENGTH, None) or count(GGUF_KEYS["intermediate"])
            fields.update(shared_expert_size=shared, shared_expert_gate=True)
    feed_forward = count(GGUF_KEYS["intermediate"], None) if experts else count(GGUF_KEYS["intermediate"])
    return ModelConfig(
        architecture=model_type,
        vocab_size=vocab,
        hidden_size=hidden,
        intermediate_size=feed_forward or fields.get("expert_intermediate_size"),
        num_layers=layers,
        num_heads=heads,
        num_kv_heads=kv_heads,
        head_dim=head_dim,
        rms_norm_eps=finite_float(eps, "layer_norm_epsilon"),
        rope_theta=finite_float(get(GGUF_KEYS["rope_theta"], 10000.0), "rope.freq_base"),
        rope_scaling=rope_scaling,
        max_position_embeddings=count(GGUF_KEYS["context"], 2048),
        attention_bias=bool(names) and ("blk.0.attn_q.bias" in names or "blk.0.attn_qkv.bias" in names),
        o_bias=bool(names) and "blk.0.attn_output.bias" in names,
        tie_word_embeddings=bool(names) and "output.weight" not in names,
        sliding_window=window,
        gguf_qk_permuted=fam.gguf_qk_permuted,
        rotary_dim=rotary,
        extra=extra,
        **fields,
    ).validate()


def _deepseek2_attention(fam: families.Family, get, count, rope_scaling: dict | None, names: set[str], extra: dict
                         ) -> dict[str, Any]:
    """DeepSeek's latent attention from the GGUF: key_length_mla / value_length_mla (older files: the
    key_length / value_length llama.cpp then read as MHA sizes), the ranks, the rotary part; YaRN's
    mscale_all_dim from yarn_log_multiplier (0.1 x it, as the converter writes), mscale taken equal.
    llama.cpp rotates adjacent pairs (DeepSeek's interleaved rotary dims) and has no q/kv biases."""
    if any(n.endswith((".attn_q_a.bias", ".attn_kv_a_mqa.bias")) for n in names):
        raise UnsupportedModel("The deepseek2 GGUF holds attention biases, which llama.cpp's deepseek2 does not read.")
    new = get(KEY_LENGTH_MLA, None) is not None
    head = count(KEY_LENGTH_MLA) if new else count(GGUF_KEYS["head_dim"])
    value = count(VALUE_LENGTH_MLA) if new else count(GGUF_KEYS["v_head_dim"], head)
    rope = count(GGUF_KEYS["rope_dims"])
    if rope_scaling and rope_scaling["rope_type"] == "yarn" and get(YARN_LOG_MULTIPLIER, None):
        # the file's float32 of 0.1 x mscale_all_dim: back to the decimals config.json gives
        mscale = round(finite_float(get(YARN_LOG_MULTIPLIER), "yarn_log_multiplier") * 10, 6)
        rope_scaling.update(mscale=mscale, mscale_all_dim=mscale)
    if "blk.0.attn_k_b.weight" in names and "blk.0.attn_kv_b.weight" not in names:
        extra[GGUF_KV_B_SPLIT] = True
    return _mla({"kv_lora_rank": count(KV_LORA_RANK), "qk_nope_head_dim": head - rope, "qk_rope_head_dim": rope,
                 "v_head_dim": value, "q_lora_rank": count(Q_LORA_RANK, 0), "rope_scaling": rope_scaling,
                 "rope_interleave": True}, fam.model_type)


def _deepseek2_router(get, count, layers: Any, width: int) -> dict[str, Any]:
    """DeepSeek-V3's router: sigmoid scores (expert_gating_func), groups, the choice bias, scaling;
    dense leading layers; the shared experts, expert_shared_count of the experts' width."""
    gating = get(GATING_FUNC, None)
    if gating != SIGMOID_GATING:
        raise UnsupportedModel(f"The deepseek2 GGUF's expert_gating_func is {gating!r}: DeepSeek-V2's softmax router "
                               "is not implemented; the numpy decoder runs DeepSeek-V3's sigmoid one (2).")
    dense = count(LEADING_DENSE, 0)
    return {"router": "sigmoid_groups", "expert_groups": count(GROUP_COUNT, 1) or 1,
            "topk_groups": count(GROUP_USED_COUNT, 1) or 1,
            "routed_scaling": finite_float(get(WEIGHTS_SCALE, 1.0) or 1.0, "expert_weights_scale"),
            "moe_layers": [i >= dense for i in range(min(layers, 1 << 16))] if isinstance(layers, int) else None,
            "shared_expert_size": width * count(SHARED_COUNT, 0)}


def _scalar(value: Any, arch: str, key: str) -> float:
    """A Granite multiplier; llama.cpp writes each only when it is set (absent: 1)."""
    if value is None or value == 0:
        return 1.0
    return finite_float(value, f"{arch}.{key}")


def _cap(value: Any, arch: str, which: str) -> float | None:
    if value is None or value == 0:
        return None
    return finite_float(value, f"{arch}.{which}_logit_softcapping")


def _sliding_layers(pattern: Any, layers: Any, fam: families.Family) -> list[bool] | None:
    """Which layers slide: the file's per-layer pattern, else llama.cpp's rule (the row's period)."""
    arch = fam.gguf_arch
    if not isinstance(layers, int) or layers <= 0:
        return None
    if isinstance(pattern, int) and not isinstance(pattern, bool) and pattern > 0:  # a period, as llama.cpp's
        return [(i + 1) % pattern != 0 for i in range(min(layers, 1 << 16))]
    if pattern is not None:
        said = pattern.to_list() if hasattr(pattern, "to_list") else pattern
        if isinstance(said, (list, tuple)) and len(said) == layers and all(isinstance(v, (bool, int)) for v in said):
            return [bool(v) for v in said]
        raise UnsupportedModel(f"{arch}.attention.sliding_window_pattern should list {layers} booleans (or give "
                               f"a period), found {said!r}.")
    return families.llamacpp_sliding(fam, layers)


def engine_config(metadata: dict[str, Any], tensor_names: set[str] | None = None) -> ModelConfig:
    """What `Model` needs of a GGUF that an engine (llama.cpp) runs by itself: the vocabulary to
    check ids against and the sizes its description shows. Not validated: whatever llama.cpp
    reads the file with, this decoder is not asked to run it."""
    def get(key: str, default: Any = None) -> Any:
        kv = metadata.get(key.format(arch=arch))
        value = default if kv is None else getattr(kv, "value", kv)
        if hasattr(value, "to_list"):  # per-layer arrays (head counts): the largest
            value = max(value.to_list(), default=default)
        return value if isinstance(value, int) and not isinstance(value, bool) else default

    arch = metadata.get(Keys.ARCHITECTURE)
    arch = str(getattr(arch, "value", arch))
    tokens = metadata.get(Keys.TOKENS)
    vocab = get(GGUF_KEYS["vocab"]) or (len(getattr(tokens, "value", tokens)) if tokens is not None else 0)
    hidden, heads = get(GGUF_KEYS["hidden"], 0), get(GGUF_KEYS["heads"], 0)
    return ModelConfig(architecture=arch, vocab_size=vocab, hidden_size=hidden,
                       intermediate_size=get(GGUF_KEYS["intermediate"], 0), num_layers=get(GGUF_KEYS["layers"], 0),
                       num_heads=heads, num_kv_heads=get(GGUF_KEYS["kv_heads"], heads),
                       head_dim=get(GGUF_KEYS["head_dim"]) or (hidden // heads if heads else 0),
                       max_position_embeddings=get(GGUF_KEYS["context"], 2048),
                       tie_word_embeddings="output.weight" not in (tensor_names or ()),
                       experts=get(GGUF_KEYS["experts"], 0), experts_per_token=get(GGUF_KEYS["experts_per_token"], 0))
