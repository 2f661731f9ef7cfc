"""What transformers assumes for a config.json key the file leaves out, per model_type (each
family's row holds its own: families/table.py).

A config.json written by an older transformers, or by hand, may lack keys a newer reader uses; transformers
then takes its config class's default, which differs by family (Mixtral's rope_theta is 1e6, Gemma's
activation is tanh GELU, DeepSeek-V3 scales routed experts by 2.5). config.from_hf reads a config.json over
these, so the run cell computes what transformers computes for the same file. Only behaviour keys the
decoder reads are listed, not sizes (a file states those, sometimes under an alias, such as num_experts
for num_local_experts, that a default must not override), and only values that are set (a default of
None is the same as a missing key); rope_parameters only where the default is not plain RoPE
(gpt-oss's YaRN, Gemma 3's per-layer bases).
tests/model/test_hf_defaults.py holds the table equal to the installed transformers' config classes.
"""

from __future__ import annotations

from typing import Any

from . import families

# The keys looked up in transformers' config classes (tests/model/test_hf_defaults.py).
# A transformers 4.x config.json says its RoPE in these keys, not in rope_parameters.
ROPE_4X_KEYS = ("rope_theta", "rope_scaling", "rotary_pct", "partial_rotary_factor", "rope_local_base_freq",
                "rotary_emb_base")

KEYS = (
    "hidden_act", "hidden_activation", "activation_function", "rms_norm_eps", "layer_norm_eps",
    "layer_norm_epsilon", "rope_theta", "tie_word_embeddings", "attention_bias", "mlp_bias",
    "sliding_window", "use_sliding_window", "max_window_layers", "partial_rotary_factor", "rotary_pct",
    "norm_topk_prob", "routed_scaling_factor", "rope_interleave", "query_pre_attn_scalar",
    "attn_logit_softcapping", "final_logit_softcapping", "rope_local_base_freq", "sliding_window_pattern",
    "use_parallel_residual", "swiglu_limit", "decoder_sparse_step", "n_group", "topk_group",
    "first_k_dense_replace", "n_shared_experts", "max_position_embeddings", "embedding_multiplier",
    "residual_multiplier", "attention_multiplier", "logits_scaling", "scale_attn_weights",
    "no_rope_layer_interval", "scale_attn_by_inverse_layer_idx", "reorder_and_upcast_attn",
    "rotary_emb_base"
)

# model_type -> its defaults: each family's row holds them (families/table.py, hf_defaults)
DEFAULTS: dict[str, dict[str, Any]] = {mt: row.hf_defaults for mt, row in families.FAMILIES.items()}


def with_defaults(model_type: str | None, config: dict[str, Any]) -> dict[str, Any]:
    """config.json over its family's transformers defaults (unchanged for an unknown family).

    RoPE as transformers 5 reads it: a file's rope_parameters or rope_scaling replaces the default
    wholesale; a file that only names the base (rope_theta) or the rotary share keeps the rest of
    the default (gpt-oss stays YaRN with the file's base)."""
    defaults = dict(DEFAULTS.get(model_type or "", {}))
    rope = defaults.pop("rope_parameters", None)
    merged = {**defaults, **config}
    if rope is None or "rope_parameters" in config or "rope_scaling" in config:
        return merged
    per_layer_type = all(isinstance(v, dict) for v in rope.values())
    if per_layer_type:  # Gemma 3: a 4.x file's rope_theta / rope_local_base_freq say it all
        if not any(k in config for k in ROPE_4X_KEYS):
            merged["rope_parameters"] = rope
        return merged
    rope = dict(rope)
    if "rope_theta" in config:
        rope["rope_theta"] = config["rope_theta"]
    for key in ("partial_rotary_factor", "rotary_pct"):
        if key in config:
            rope["partial_rotary_factor"] = config[key]
    merged["rope_parameters"] = rope
    return merged
