"""Tiny configs of the families the explorer knows, as transformers writes them (config.json).

`tiny_config(model_type, **overrides)` is the config class's own `to_dict()` with small sizes:
every key a real config.json of that family carries, so the tests see what users' files hold.
"""

from __future__ import annotations

COMMON = dict(vocab_size=64, hidden_size=32, intermediate_size=48, num_hidden_layers=3,
              num_attention_heads=4, num_key_value_heads=2, head_dim=8, pad_token_id=0,
              max_position_embeddings=128)
MOE = dict(num_experts_per_tok=2, moe_intermediate_size=16)
SIZES: dict[str, dict] = {
    "llama": {}, "mistral": {}, "qwen2": {}, "qwen3": {}, "gemma": {}, "gemma2": {},
    "gemma3_text": {}, "phi3": {}, "olmo2": {}, "smollm3": {}, "granite": {},
    "mixtral": dict(num_local_experts=4, num_experts_per_tok=2),
    "qwen2_moe": dict(num_experts=4, shared_expert_intermediate_size=24, **MOE),
    "qwen3_moe": dict(num_experts=4, **MOE),
    "gpt2": dict(n_embd=32, n_layer=3, n_head=4, vocab_size=64, n_positions=128),
    "gpt_neox": dict(hidden_size=32, num_hidden_layers=3, num_attention_heads=4, intermediate_size=48,
                     vocab_size=64, max_position_embeddings=128),
    "gpt_oss": dict(num_local_experts=4, num_experts_per_tok=2,
                    layer_types=["sliding_attention", "full_attention", "sliding_attention"]),
    "deepseek_v3": dict(n_routed_experts=4, n_shared_experts=1, first_k_dense_replace=1,
                        q_lora_rank=16, kv_lora_rank=8, qk_rope_head_dim=4, qk_nope_head_dim=8,
                        v_head_dim=8, n_group=2, topk_group=1, **MOE),
}
OWN_SIZES = ("gpt2", "gpt_neox")  # configs whose keys differ from COMMON's


def tiny_config(model_type: str, **overrides) -> dict:
    from transformers import AutoConfig

    kwargs = dict(SIZES[model_type]) if model_type in OWN_SIZES else {**COMMON, **SIZES[model_type]}
    kwargs.update(overrides)
    cfg = AutoConfig.for_model(model_type, **kwargs).to_dict()
    cfg["model_type"] = model_type
    return cfg
