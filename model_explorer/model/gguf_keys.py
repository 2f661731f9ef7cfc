"""The GGUF metadata keys the model layer reads, one table: a name -> its "{arch}." template.

hparams.py (the card, memory, the will-load check) and config_gguf.py (the decoder) both read
through it, so a key is spelled once. The core names come from ggml.Keys; the rest as gguf-py
spells them (tests/runtime/test_gguf_edges.py holds the spelling equal to gguf-py's constants).
"""

from __future__ import annotations

from ..ggml import Keys

# The keys beyond ggml.Keys, as gguf-py spells them
_FALLBACK = ("{arch}.expert_feed_forward_length", "{arch}.expert_weights_norm", "{arch}.attn_logit_softcapping",
             "{arch}.final_logit_softcapping", "{arch}.embedding_scale", "{arch}.residual_scale",
             "{arch}.logit_scale", "{arch}.attention.scale", "{arch}.attention.sliding_window_pattern",
             "{arch}.rope.freq_base_swa", "{arch}.rope.scaling.original_context_length",
             "{arch}.rope.scaling.yarn_beta_fast", "{arch}.rope.scaling.yarn_beta_slow",
             "{arch}.rope.scaling.attn_factor", "{arch}.expert_shared_feed_forward_length",
             "{arch}.attention.layer_norm_epsilon", "{arch}.use_parallel_residual",
             "{arch}.leading_dense_block_count", "{arch}.expert_shared_count", "{arch}.expert_group_count",
             "{arch}.expert_group_used_count", "{arch}.expert_weights_scale", "{arch}.expert_gating_func",
             "{arch}.attention.q_lora_rank", "{arch}.attention.kv_lora_rank", "{arch}.attention.key_length_mla",
             "{arch}.attention.value_length_mla", "{arch}.rope.scaling.yarn_log_multiplier")
# Spelled here, not read from gguf-py at import: opening a model must not pay for importing
# gguf-py (80 ms). tests/runtime/test_gguf_edges.py holds this spelling equal to gguf-py's.
_MORE = _FALLBACK
_MORE_NAMES = ("moe_intermediate", "expert_weights_norm", "attn_softcap", "final_softcap", "embedding_scale",
               "residual_scale", "logit_scale", "attention_scale", "sliding_window_pattern", "rope_freq_base_swa",
               "yarn_original_context", "yarn_beta_fast", "yarn_beta_slow", "yarn_attention_factor",
               "shared_intermediate", "layernorm_eps", "parallel_residual", "leading_dense", "shared_count",
               "group_count", "group_used_count", "weights_scale", "gating_func", "q_lora_rank", "kv_lora_rank",
               "key_length_mla", "value_length_mla", "yarn_log_multiplier")

# name -> "{arch}." template; hparams' names (layers, hidden, heads...) are the card's
GGUF_KEYS: dict[str, str] = {
    "layers": Keys.BLOCK_COUNT,
    "hidden": Keys.EMBEDDING_LENGTH,
    "heads": Keys.HEAD_COUNT,
    "kv_heads": Keys.HEAD_COUNT_KV,
    "head_dim": Keys.KEY_LENGTH,
    "v_head_dim": Keys.VALUE_LENGTH,
    "intermediate": Keys.FEED_FORWARD_LENGTH,
    "vocab": Keys.VOCAB_SIZE,
    "context": Keys.CONTEXT_LENGTH,
    "rope_theta": Keys.ROPE_FREQ_BASE,
    "rope_dims": Keys.ROPE_DIMENSION_COUNT,
    "rope_scaling_type": Keys.ROPE_SCALING_TYPE,
    "rope_scaling_factor": Keys.ROPE_SCALING_FACTOR,
    "sliding_window": Keys.SLIDING_WINDOW,
    "experts": Keys.EXPERT_COUNT,
    "experts_per_token": Keys.EXPERT_USED_COUNT,
    "rms_eps": Keys.RMS_EPS,
    **dict(zip(_MORE_NAMES, _MORE)),
}
# The names hparams.py reads as a hyperparameter, in the card's order
HPARAM_NAMES = ("layers", "hidden", "heads", "kv_heads", "head_dim", "v_head_dim", "intermediate", "moe_intermediate",
                "vocab", "context", "rope_theta", "rope_dims", "sliding_window", "experts", "experts_per_token",
                "kv_lora_rank", "q_lora_rank")


def key(name: str, arch: str) -> str:
    """The full key of `name` for `arch` ("llama.block_count")."""
    return GGUF_KEYS[name].format(arch=arch)


# ModelConfig field -> the GGUF_KEYS names config_gguf.py reads it from, first found first (a
# LayerNorm family's epsilon is layer_norm_epsilon): where a comparison points at a hyperparameter
CONFIG_FIELD_KEYS: dict[str, tuple[str, ...]] = {
    "vocab_size": ("vocab",), "hidden_size": ("hidden",), "intermediate_size": ("intermediate",),
    "num_layers": ("layers",), "num_heads": ("heads",), "num_kv_heads": ("kv_heads",), "head_dim": ("head_dim",),
    "rms_norm_eps": ("rms_eps", "layernorm_eps"), "rope_theta": ("rope_theta",),
    "rope_scaling": ("rope_scaling_type", "rope_scaling_factor"), "rotary_dim": ("rope_dims",),
    "local_rope_theta": ("rope_freq_base_swa",), "sliding_window": ("sliding_window",),
    "sliding_layers": ("sliding_window_pattern",), "attention_scale": ("attention_scale",),
    "attn_softcap": ("attn_softcap",), "final_softcap": ("final_softcap",), "embed_scale": ("embedding_scale",),
    "residual_scale": ("residual_scale",), "logit_scale": ("logit_scale",), "experts": ("experts",),
    "experts_per_token": ("experts_per_token",), "expert_intermediate_size": ("moe_intermediate",),
}


def config_key_place(metadata, field: str, file: str = "") -> dict | None:
    """Where a GGUF stores the hyperparameter behind ModelConfig `field`: {"key", "file",
    "offset", "length"} of its metadata entry (key, type and value), or None when the file has
    no key for it (the family's default then applies)."""
    arch = getattr(metadata.get("general.architecture"), "value", None)
    if not isinstance(arch, str):
        return None
    for name in CONFIG_FIELD_KEYS.get(field, ()):
        kv = metadata.get(key(name, arch))
        if kv is not None:
            return {"key": kv.key, "file": kv.file or file, "offset": int(kv.offset), "length": int(kv.length)}
    return None
