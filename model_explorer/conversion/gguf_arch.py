"""Hugging Face folder -> GGUF for each family the run cell runs, as llama.cpp's
convert_hf_to_gguf.py writes it: the architecture name, its `{arch}.*` keys, tensor names from
gguf-py's TensorNameMap, and the changes its converter makes to the tensors (q/k rows permuted for
the LlamaModel-based ones, Gemma's norms stored as 1 + w, each projection of every expert stacked
into one [experts, out, in] tensor, Gemma's tied head left out, GPT-2's Conv1D transposed, NeoX's
per-head q/k/v regrouped, gpt-oss's fused experts split into gate / up / down [experts, out, in],
DeepSeek's kv_b split into attn_k_b / attn_v_b).

Where llama.cpp hard-codes what a config.json can vary (Gemma 2/3's sliding layers, Gemma 3's local
RoPE base, SmolLM3's RoPE-less layers), a model that differs is refused rather than written to run
differently; what only load_model reads (a Gemma 2 query scale other than head_dim's, Qwen3-MoE's
dense layers or unnormalised top-k) is stated in the GGUF with a warning.
"""

from __future__ import annotations

import math
import re
import warnings

import numpy as np

from ..model import families, hparams
from ..model.config import from_hf
from ..tensors.names import hf_to_gguf, merged_expert_name, permute_qk
from .common import ConvertError

# HF model_type -> GGUF general.architecture (llama.cpp writes Mistral and Mixtral as llama): the rows'.
GGUF_ARCH = {mt: row.gguf_arch for mt, row in families.FAMILIES.items() if row.gguf_arch}
_EXPERT = re.compile(r"\.experts\.(\d+)\.")


def family_of(config: dict) -> families.Family:
    """The row of config.json's model_type, refused where llama.cpp has no architecture for it."""
    model_type = config.get("model_type")
    if model_type not in GGUF_ARCH:
        raise ConvertError(f"config.json says model_type {model_type!r}; writing GGUF from a Hugging Face "
                           f"model knows {', '.join(GGUF_ARCH)}.")
    return families.FAMILIES[model_type]


def gguf_arch(config: dict) -> str:
    return family_of(config).gguf_arch



def _rope(config: dict) -> tuple[float | None, dict]:
    """rope_theta and the scaling dict (transformers 4.x rope_scaling or 5.x rope_parameters;
    Gemma 3's per layer type: the full-attention layers')."""
    rp = config.get("rope_parameters") if isinstance(config.get("rope_parameters"), dict) else {}
    rp = rp.get("full_attention", rp)
    theta = rp.get("rope_theta", config.get("rope_theta"))
    scaling = dict(config.get("rope_scaling") or rp)
    scaling.pop("rope_theta", None)
    return (None if theta is None else float(theta)), scaling


def rope_heads(hf_name: str, config: dict) -> int | None:
    """Heads llama.cpp permutes a Q or K projection over (weight and bias), else None."""
    if hf_name.endswith(("self_attn.q_proj.weight", "self_attn.q_proj.bias")):
        return int(config["num_attention_heads"])
    if hf_name.endswith(("self_attn.k_proj.weight", "self_attn.k_proj.bias")):
        return int(config.get("num_key_value_heads") or config["num_attention_heads"])
    return None


def add_metadata(writer, config: dict, name: str) -> None:
    """config.json -> the `{arch}.*` keys llama.cpp's converter writes for this family."""
    fam = family_of(config)
    writer.add_name(name)
    if fam.norm_bias:
        _layer_norm_family(writer, config, fam)
        return
    if fam.attention == "mla":
        _deepseek2(writer, config)
        return
    hp = hparams.from_config(config)  # the sizes as the card, memory and load_model read them
    hidden, heads, head_dim = int(hp.get("hidden")), int(hp.get("heads")), int(hp.get("head_dim"))
    theta, scaling = _rope(config)
    writer.add_context_length(int(hp.get("context", 2048)))
    writer.add_embedding_length(hidden)
    writer.add_block_count(int(hp.get("layers")))
    writer.add_feed_forward_length(int(hp.get("intermediate")))
    writer.add_head_count(heads)
    writer.add_head_count_kv(int(hp.get("kv_heads")))
    writer.add_layer_norm_rms_eps(float(config.get("rms_norm_eps", 1e-5)))
    if theta is not None:
        writer.add_rope_freq_base(theta)
    partial = scaling.pop("partial_rotary_factor", None) or config.get("partial_rotary_factor") or 1.0
    writer.add_rope_dimension_count(int(head_dim * float(partial)))
    if head_dim != hidden // heads or fam.norm_offset:
        writer.add_key_length(head_dim)
        writer.add_value_length(head_dim)
    writer.add_vocab_size(int(hp.get("vocab")))
    kind = scaling.get("rope_type", scaling.get("type", "default"))
    if kind == "linear":
        import gguf

        writer.add_rope_scaling_type(gguf.RopeScalingType.LINEAR)
        writer.add_rope_scaling_factor(float(scaling["factor"]))
    elif kind == "yarn":
        _yarn(writer, config, scaling)
    elif kind not in ("default", None) and not (kind == "llama3" and fam.gguf_rope_freqs):
        raise ConvertError(f"config.json sets {kind!r} RoPE scaling; writing GGUF knows plain, linear and "
                           "(llama) llama3 RoPE.")
    _family_keys(writer, config, fam)


def _layer_norm_family(writer, config: dict, fam: families.Family) -> None:
    """GPT-2 and GPT-NeoX, as llama.cpp's GPT2Model and GPTNeoXModel write them (the MLP's real
    width, where GPT2Model writes 4 x n_embd whatever n_inner says)."""
    cfg, arch = from_hf(config), fam.gguf_arch
    key = "activation_function" if "activation_function" in fam.hf_defaults else "hidden_act"
    act = config.get(key, fam.hf_defaults.get(key))
    if cfg.activation != fam.default_activation:
        raise ConvertError(f"config.json says activation {act!r} ({arch}); a {arch} GGUF cannot state it, and "
                           f"load_model reads it as {fam.default_activation!r}.")
    writer.add_context_length(cfg.max_position_embeddings)
    writer.add_embedding_length(cfg.hidden_size)
    writer.add_block_count(cfg.num_layers)
    writer.add_feed_forward_length(cfg.intermediate_size)
    writer.add_head_count(cfg.num_heads)
    writer.add_layer_norm_eps(cfg.rms_norm_eps)
    writer.add_vocab_size(cfg.vocab_size)
    if not fam.learned_positions:  # NeoX: RoPE
        if cfg.rope_scaling:
            raise ConvertError(f"config.json sets {cfg.rope_scaling.get('rope_type')!r} RoPE scaling ({fam.model_type}): "
                               "not written by this converter.")
        writer.add_rope_dimension_count(cfg.rotary_dim or cfg.head_dim)
        writer.add_rope_freq_base(cfg.rope_theta)  # llama.cpp reads it; its converter leaves 10000 implied
        writer.add_parallel_residual(cfg.parallel_residual)
    elif cfg.attention_scale is not None:
        raise ConvertError(f"config.json sets scale_attn_weights false ({fam.model_type}): llama.cpp scales by "
                           "1/sqrt(head_dim).")


def _deepseek2(writer, config: dict) -> None:
    """DeepSeek-V3 as llama.cpp's DeepseekV2Model writes it: MLA as MQA (head_count_kv 1, key_length
    kv_lora_rank + rope, value_length kv_lora_rank, the real sizes in *_mla), the experts' keys, the
    sigmoid gating; YaRN's mscale_all_dim as yarn_log_multiplier = 0.1 x it."""
    import gguf

    cfg = from_hf(config)
    if cfg.attention_bias:
        raise ConvertError("config.json sets attention_bias (deepseek_v3): llama.cpp's deepseek2 reads no q/kv biases.")
    if not cfg.rope_interleave:
        raise ConvertError("config.json sets rope_interleave false (deepseek_v3): llama.cpp's deepseek2 rotates "
                           "adjacent pairs, so this model would run differently there.")
    rope, rank = cfg.rotary_dim, cfg.kv_lora_rank
    writer.add_context_length(cfg.max_position_embeddings)
    writer.add_embedding_length(cfg.hidden_size)
    writer.add_block_count(cfg.num_layers)
    writer.add_feed_forward_length(cfg.intermediate_size)
    writer.add_head_count(cfg.num_heads)
    writer.add_head_count_kv(1)
    writer.add_layer_norm_rms_eps(cfg.rms_norm_eps)
    writer.add_rope_freq_base(cfg.rope_theta)
    writer.add_vocab_size(cfg.vocab_size)
    writer.add_leading_dense_block_count(sum(1 for m in cfg.moe_layers or [] if not m))
    if cfg.moe_layers and list(cfg.moe_layers) != sorted(cfg.moe_layers):
        raise ConvertError("config.json: DeepSeek's dense layers must lead (first_k_dense_replace).")
    if cfg.q_lora_rank:
        writer.add_q_lora_rank(cfg.q_lora_rank)
    writer.add_kv_lora_rank(rank)
    writer.add_key_length(rank + rope)
    writer.add_value_length(rank)
    writer.add_key_length_mla(cfg.head_dim)
    writer.add_value_length_mla(cfg.value_head_dim)
    writer.add_expert_feed_forward_length(cfg.expert_intermediate_size)
    writer.add_expert_count(cfg.experts)
    writer.add_expert_used_count(cfg.experts_per_token)
    writer.add_expert_shared_count(cfg.shared_expert_size // cfg.expert_intermediate_size)
    writer.add_expert_weights_scale(cfg.routed_scaling)
    if cfg.renormalize_top_k:  # llama.cpp's converter writes it only when true
        writer.add_expert_weights_norm(True)
    writer.add_expert_group_count(cfg.expert_groups)
    writer.add_expert_group_used_count(cfg.topk_groups)
    writer.add_expert_gating_func(gguf.ExpertGatingFuncType.SIGMOID)
    writer.add_rope_dimension_count(rope)
    scaling = dict(cfg.rope_scaling or {})
    kind = scaling.get("rope_type", "default")
    if kind == "yarn":
        mscale, all_dim = scaling.pop("mscale", None), scaling.pop("mscale_all_dim", None)
        if (mscale or all_dim) and mscale != all_dim:
            raise ConvertError(f"config.json sets YaRN mscale {mscale} and mscale_all_dim {all_dim}: a deepseek2 "
                               "GGUF states one (yarn_log_multiplier), so they must be equal.")
        _yarn(writer, config, scaling)
        if all_dim:
            writer.add_rope_scaling_yarn_log_mul(0.1 * float(all_dim))
    elif kind != "default":
        raise ConvertError(f"config.json sets {kind!r} RoPE scaling (deepseek_v3); writing GGUF knows plain and YaRN.")


def _deepseek_kv_b(t, config: dict, tensor_cls) -> list:
    """kv_b_proj [heads x (nope + v), rank] as llama.cpp's converter splits it for MLA's absorption:
    attn_k_b [heads, rank, nope] (per head transposed) and attn_v_b [heads, v, rank]."""
    heads, nope, v = (int(config[k]) for k in ("num_attention_heads", "qk_nope_head_dim", "v_head_dim"))
    rank = t.shape[1]
    i = t.name.split(".")[2]

    def k_b(w: np.ndarray) -> np.ndarray:
        return np.ascontiguousarray(w.reshape(heads, nope + v, rank)[:, :nope].transpose(0, 2, 1))

    def v_b(w: np.ndarray) -> np.ndarray:
        return np.ascontiguousarray(w.reshape(heads, nope + v, rank)[:, nope:])
    return [tensor_cls(f"blk.{i}.attn_k_b.weight", t.source, (heads, rank, nope), k_b),
            tensor_cls(f"blk.{i}.attn_v_b.weight", t.source, (heads, v, rank), v_b)]


def _yarn(writer, config: dict, scaling: dict) -> None:
    import gguf

    fam = family_of(config)
    untruncated = not fam.gguf_yarn_truncate  # load_model reads gpt-oss's as its config.json says
    if (scaling.get("truncate") is False) != untruncated:
        raise ConvertError(f"config.json sets YaRN with truncate {scaling.get('truncate', True)}; llama.cpp always "
                           "rounds the correction range" + (f", and load_model reads a {fam.label} GGUF's YaRN as "
                                                            f"{fam.label}'s, truncate false." if untruncated else "."))
    writer.add_rope_scaling_type(gguf.RopeScalingType.YARN)
    writer.add_rope_scaling_factor(float(scaling["factor"]))
    writer.add_rope_scaling_orig_ctx_len(int(scaling.get("original_max_position_embeddings")
                                             or config.get("original_max_position_embeddings")
                                             or config["max_position_embeddings"]))
    for key, add in (("beta_fast", writer.add_rope_scaling_yarn_beta_fast),
                     ("beta_slow", writer.add_rope_scaling_yarn_beta_slow),
                     ("attention_factor", writer.add_rope_scaling_attn_factors)):
        if scaling.get(key) is not None:
            add(float(scaling[key]))
    if scaling.get("mscale") or scaling.get("mscale_all_dim"):
        raise ConvertError("config.json sets YaRN mscale / mscale_all_dim: not written by this converter.")


def _granite(writer, config: dict) -> None:
    # llama.cpp renames the multipliers to scales and writes each only when set
    for key, add in (("attention_multiplier", writer.add_attention_scale),
                     ("embedding_multiplier", writer.add_embedding_scale),
                     ("residual_multiplier", writer.add_residual_scale), ("logits_scaling", writer.add_logit_scale)):
        if config.get(key):
            add(float(config[key]))


def _gemma2(writer, config: dict, fam: families.Family) -> None:
    """Gemma 2 and 3: softcaps, the window, and what llama.cpp hard-codes checked."""
    arch = fam.gguf_arch
    layers = int(config["num_hidden_layers"])
    want = families.llamacpp_sliding(fam, layers)
    types = config.get("layer_types") or [("sliding_attention" if s else "full_attention") for s in want]
    if [t == "sliding_attention" for t in types] != want:
        raise ConvertError(f"config.json layer_types {types!r}: llama.cpp's {arch} slides on "
                           f"{_sliding_words(fam.sliding_period)} only, so this model would run differently there.")
    for key in (*fam.softcaps, "sliding_window"):
        if config.get(key) is not None:
            getattr(writer, "add_" + key)(config[key])
    if fam.local_rope_base is not None:
        rp = config.get("rope_parameters") or {}
        base = fam.local_rope_base
        local = (rp.get("sliding_attention") or {}).get("rope_theta", config.get("rope_local_base_freq", base))
        if float(local) != base:
            raise ConvertError(f"{fam.label}'s sliding layers rotate with base {local}; llama.cpp's {arch} uses "
                               f"{base:g} there, so this model would run differently.")
    head_dim = int(config.get("head_dim") or config["hidden_size"] // config["num_attention_heads"])
    scalar = config.get("query_pre_attn_scalar")
    llamacpp = config["hidden_size"] / config["num_attention_heads"] if layers in fam.gguf_width_scale_layers \
        else head_dim  # 27B
    if scalar is not None and scalar != llamacpp:
        # gemma2.attention.scale states it; llama.cpp scales by 1/sqrt(head_dim) whatever the file says
        writer.add_attention_scale(float(scalar) ** -0.5)
        warnings.warn(f"convert: query_pre_attn_scalar {scalar} differs from llama.cpp's {llamacpp:g}; the GGUF "
                      f"states the scale ({arch}.attention.scale), which llama.cpp ignores.", stacklevel=4)


def _sliding_words(period: int) -> str:
    """llama.cpp's sliding layers in words: "the even layers", "five layers of every six"."""
    words = ("none", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine", "ten")
    if period == 2:
        return "the even layers"
    return f"{words[period - 1]} layers of every {words[period]}" if period < len(words) else \
        f"{period - 1} layers of every {period}"


def _experts(writer, config: dict, fam: families.Family) -> None:
    n = config.get("num_local_experts") or config.get("num_experts")
    writer.add_expert_count(int(n))
    writer.add_expert_used_count(int(config["num_experts_per_tok"]))
    if fam.mlp == "experts":  # Mixtral: llama's experts, every layer, no keys of their own
        return
    writer.add_expert_feed_forward_length(int(config[fam.expert_width_key]))
    norm = bool(config.get("norm_topk_prob", False))
    llamacpp = fam.gguf_renormalize  # llama.cpp's qwen3moe renormalises, its qwen2moe does not
    if fam.shared_expert == "gated":
        # llama.cpp's converter writes the shared width; its qwen2moe always gates the shared expert
        writer.add_expert_shared_feed_forward_length(int(config["shared_expert_intermediate_size"]))
        if norm:  # llama.cpp hard-codes no renormalisation: stated only where the model differs
            writer.add_expert_weights_norm(norm)
    else:
        writer.add_expert_weights_norm(norm)
    dense = config.get("mlp_only_layers") or (config.get("decoder_sparse_step") or 1) != 1
    if norm != llamacpp or dense:
        arch = fam.gguf_arch
        warnings.warn(f"convert: llama.cpp's {arch} {'renormalises' if llamacpp else 'does not renormalise'} the "
                      "top-k weights and runs experts in every layer; this model "
                      + (("does not renormalise" if llamacpp else "renormalises") if norm != llamacpp
                         else "has dense layers") + " (stated in the GGUF, read by load_model).", stacklevel=4)


def _gpt_oss(writer, config: dict, fam: families.Family) -> None:
    """gpt-oss as llama.cpp's GptOssModel writes it; what its graph hard-codes is checked."""
    cfg = from_hf(config)
    limit, alpha = fam.swiglu
    if (cfg.swiglu_limit, cfg.swiglu_alpha) != (limit, alpha):
        raise ConvertError(f"config.json sets swiglu_limit {cfg.swiglu_limit} and swiglu_alpha {cfg.swiglu_alpha}; "
                           f"llama.cpp's {fam.gguf_arch} clamps at {limit:g} with alpha {alpha}, so this model would "
                           "run differently there.")
    want = families.llamacpp_sliding(fam, cfg.num_layers)
    if cfg.sliding_window and (cfg.sliding_layers or want) != want:
        raise ConvertError(f"config.json layer_types: llama.cpp's {fam.gguf_arch} slides on the even layers only, "
                           "so this model would run differently there.")
    writer.add_expert_count(cfg.experts)
    writer.add_expert_used_count(cfg.experts_per_token)
    writer.add_expert_feed_forward_length(cfg.expert_intermediate_size)
    writer.add_sliding_window(int(cfg.sliding_window or 0))


def _phi3(writer, config: dict) -> None:
    _, scaling = _rope(config)
    if scaling.get("long_factor") or scaling.get("rope_type", scaling.get("type")) in ("longrope", "su"):
        raise ConvertError("config.json sets LongRoPE (rope_factors_long/short): not written by this converter.")
    original = config.get("original_max_position_embeddings") or scaling.get("original_max_position_embeddings")
    if original:
        writer.add_rope_scaling_orig_ctx_len(int(original))
    writer.add_sliding_window(int(config.get("sliding_window") or 0))  # 0: none (how llama.cpp tells Phi-4)


def _mistral(writer, config: dict) -> None:
    # llama.cpp's llama ignores it; load_model reads it, as config.json's Mistral/Mixtral has it
    if config.get("sliding_window"):
        writer.add_sliding_window(int(config["sliding_window"]))


def _smollm3(writer, config: dict, fam: families.Family) -> None:
    layers, step = int(config["num_hidden_layers"]), fam.nope_period
    said = config.get("no_rope_layers")
    want = [int((i + 1) % step != 0) for i in range(layers)]
    if said is not None and list(said) != want:
        raise ConvertError(f"config.json no_rope_layers {said!r}: llama.cpp's {fam.gguf_arch} skips RoPE in every "
                           f"{step}th layer only, so this model would run differently there.")


def _family_keys(writer, config: dict, fam: families.Family) -> None:
    """The keys (and checks) of what the family adds to a llama: from its row's features."""
    if fam.multipliers:
        _granite(writer, config)
    if fam.norms == "sandwich":
        _gemma2(writer, config, fam)
    if fam.mlp in ("experts", "sparse_experts"):
        _experts(writer, config, fam)
    if fam.mlp == "fused_experts":
        _gpt_oss(writer, config, fam)
    if fam.gguf_original_context:
        _phi3(writer, config)
    elif fam.window == "all":  # Mistral's, Mixtral's window
        _mistral(writer, config)
    if fam.nope_period:
        _smollm3(writer, config, fam)


def tensor_plan(src, tensor_cls) -> tuple[str, list]:
    """(GGUF architecture, the output tensors in GGUF names with their transforms)."""
    config = src.config
    fam = family_of(config)
    arch = fam.gguf_arch
    gemma = bool(fam.norm_offset)  # llama.cpp's Gemma: norms stored 1 + w, no output tensor
    permuted = fam.gguf_qk_permuted
    plan, stacks = [], {}
    for t in src.tensors:
        if gemma and t.name == "lm_head.weight":
            if config.get("tie_word_embeddings") is False:
                raise ConvertError(f"this {config.get('model_type')} model has its own lm_head (tie_word_embeddings "
                                   f"false), but llama.cpp's {arch} has no output tensor: it would run the "
                                   "embedding as the head. Refused rather than written wrong.")
            continue  # llama.cpp's Gemma has no output tensor: the head is the embedding
        merged = merged_expert_name(t.name)
        if merged is not None:  # one projection of one expert: stacked with the others below
            stacks.setdefault(merged, []).append((int(_EXPERT.search(t.name)[1]), t))
            continue
        if fam.mlp == "fused_experts" and ".mlp.experts." in t.name:
            plan += _gpt_oss_experts(t, tensor_cls)
            continue
        if fam.attention == "mla" and t.name.endswith("self_attn.kv_b_proj.weight"):
            plan += _deepseek_kv_b(t, config, tensor_cls)
            continue
        name = hf_to_gguf(t.name, arch, fam.gguf_names)
        if fam.router == "sigmoid_groups" and t.name.endswith(".mlp.gate.e_score_correction_bias"):
            name = f"blk.{t.name.split('.')[2]}.exp_probs_b.bias"
        if name is not None and t.name.endswith(".self_attn.sinks"):
            name += ".weight"  # llama.cpp's converter names the sinks as a weight
        if name is None:
            warnings.warn(f"convert: {t.name!r} has no GGUF {arch} name; left out.", stacklevel=4)
            continue
        heads = rope_heads(t.name, config) if permuted else None
        inner, shape = _layout(fam, config, t)
        plan.append(tensor_cls(name, t.source, shape, _transform(inner, heads,
                                                                 gemma and t.name.endswith("norm.weight"))))
    factors = llama3_rope_factors(config)
    if factors is not None:  # llama.cpp's converter states Llama 3's scaling as per-frequency divisors
        plan.append(tensor_cls("rope_freqs.weight", "", factors.shape, data=factors))
    for merged, parts in stacks.items():
        parts.sort(key=lambda p: p[0])
        if [e for e, _ in parts] != list(range(len(parts))):
            raise ConvertError(f"The experts of {merged!r} are not numbered 0..{len(parts) - 1}.")
        first = parts[0][1]
        if any(p.shape != first.shape or p.transform is not None for _, p in parts):
            raise ConvertError(f"The experts of {merged!r} differ in shape; they cannot be stacked.")
        plan.append(tensor_cls(hf_to_gguf(merged, arch, fam.gguf_names), first.source, (len(parts), *first.shape),
                               stack=tuple(p.source for _, p in parts)))
    return arch, plan


def llama3_rope_factors(config: dict) -> np.ndarray | None:
    """rope_freqs.weight for Llama 3's RoPE scaling, as llama.cpp's LlamaModel computes it: per
    rotary frequency 1 (short wavelengths), `factor` (long ones) or the smooth step between."""
    theta, scaling = _rope(config)
    if scaling.get("rope_type", scaling.get("type")) != "llama3" or not family_of(config).gguf_rope_freqs:
        return None
    heads = int(config["num_attention_heads"])
    dim = int(config.get("head_dim") or int(config["hidden_size"]) // heads)
    factor, low, high = (float(scaling.get(k, d)) for k, d in (("factor", 8.0), ("low_freq_factor", 1.0),
                                                              ("high_freq_factor", 4.0)))
    old = float(scaling.get("original_max_position_embeddings", 8192))
    freqs = 1.0 / ((theta or 10000.0) ** (np.arange(0, dim, 2, dtype=np.float32) / dim))
    wavelen = 2 * math.pi / freqs
    smooth = (old / wavelen - low) / (high - low)
    out = np.where(wavelen < old / high, 1.0, np.where(wavelen > old / low, factor,
                                                        1.0 / ((1 - smooth) / factor + smooth)))
    return out.astype(np.float32)


def _gpt_oss_experts(t, tensor_cls) -> list:
    """gpt-oss's fused experts as llama.cpp's GptOssModel splits them: gate_up_proj [E, in, 2 x out]
    with gate and up columns interleaved -> ffn_gate_exps, ffn_up_exps [E, out, in]; down_proj
    [E, in, out] -> ffn_down_exps [E, out, in]; the biases likewise."""
    m = re.match(r"^model\.layers\.(\d+)\.mlp\.experts\.(gate_up_proj|down_proj)(_bias)?$", t.name)
    if m is None or t.transform is not None:
        raise ConvertError(f"{t.name!r}: gpt-oss experts stored otherwise than as plain float gate_up_proj / "
                           "down_proj (Hub MXFP4 blocks and scales) are not written by this converter.")
    i, kind, bias = m[1], m[2], bool(m[3])
    suffix = "bias" if bias else "weight"
    if kind == "down_proj":
        if bias:
            return [tensor_cls(f"blk.{i}.ffn_down_exps.bias", t.source, t.shape)]
        e, f, h = t.shape
        return [tensor_cls(f"blk.{i}.ffn_down_exps.weight", t.source, (e, h, f),
                           lambda w, s=t.shape: np.ascontiguousarray(w.reshape(s).transpose(0, 2, 1)))]
    def columns(start: int):
        def pick(w: np.ndarray) -> np.ndarray:  # [E, in, 2 x out] or [E, 2 x out] -> every other output
            w = w.reshape(t.shape)
            return np.ascontiguousarray((w if bias else w.transpose(0, 2, 1))[:, start::2])
        return pick

    shape = (t.shape[0], t.shape[1] // 2) if bias else (t.shape[0], t.shape[2] // 2, t.shape[1])
    return [tensor_cls(f"blk.{i}.ffn_{role}_exps.{suffix}", t.source, shape, columns(start))
            for role, start in (("gate", 0), ("up", 1))]


def _layout(fam: families.Family, config: dict, t) -> tuple:
    """(transform, shape) of a tensor as llama.cpp's converter stores it: GPT-2's Conv1D [in, out]
    transposed to [out, in]; NeoX's query_key_value regrouped from per head [q, k, v] to q, k, v."""
    inner = t.transform
    if families.is_in_out(fam.model_type, t.name):
        stored = t.shape  # _Source.read reshapes to the plan's shape first: undone here
        return _then(inner, lambda w: np.ascontiguousarray(w.reshape(stored).T)), tuple(reversed(stored))
    if fam.attention == "per_head" and t.name.endswith(("attention.query_key_value.weight",
                                                         "attention.query_key_value.bias")):
        heads = int(config["num_attention_heads"])

        def regroup(w: np.ndarray) -> np.ndarray:
            grouped = w.reshape(heads, 3, w.shape[0] // heads // 3, *w.shape[1:]).swapaxes(0, 1)
            return np.ascontiguousarray(grouped.reshape(w.shape))
        return _then(inner, regroup), t.shape
    return inner, t.shape


def _then(inner, outer):
    return outer if inner is None else (lambda w: outer(inner(w)))


def _transform(inner, heads: int | None, plus_one: bool):
    if not heads and not plus_one:
        return inner

    def transform(w: np.ndarray) -> np.ndarray:
        w = inner(w) if inner else w
        if heads:
            w = permute_qk(w, heads)
        return w + np.float32(1.0) if plus_one else w  # Gemma stores w, llama.cpp's file 1 + w
    return transform
