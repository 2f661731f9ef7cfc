"""model/hf_defaults.py: what transformers assumes for a key config.json leaves out, per family.
The table equals the installed transformers' config classes; from_hf reads a file over it, so a
sparse config.json runs as transformers runs it (RoPE keys of transformers 4.x files included)."""

from __future__ import annotations

import pytest

from model_explorer.model.config import HF_MODEL_TYPES, from_hf
from model_explorer.model.hf_defaults import DEFAULTS, KEYS, with_defaults

SIZES = {"vocab_size": 64, "hidden_size": 64, "intermediate_size": 96, "num_hidden_layers": 2,
         "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 16}


@pytest.mark.reference
@pytest.mark.parametrize("model_type", HF_MODEL_TYPES)
def test_the_table_is_transformers_defaults(model_type):
    transformers = pytest.importorskip("transformers")
    d = transformers.CONFIG_MAPPING[model_type]().to_dict()
    rope = d.get("rope_parameters") or {}
    if "rope_theta" not in d and isinstance(rope, dict) and rope.get("rope_theta") is not None:
        d["rope_theta"] = rope["rope_theta"]
    want = {k: d[k] for k in KEYS if d.get(k) is not None}
    plain = set(rope) <= {"rope_type", "rope_theta"} and rope.get("rope_type", "default") == "default"
    if rope and not plain:
        want["rope_parameters"] = rope
    assert DEFAULTS[model_type] == want


def test_a_sparse_config_reads_as_transformers_would():
    assert from_hf({"model_type": "mixtral", **SIZES, "num_local_experts": 4, "num_experts_per_tok": 2}).rope_theta == 1e6
    assert from_hf({"model_type": "gemma2", **SIZES}).activation == "gelu_tanh"
    gemma2 = from_hf({"model_type": "gemma2", **SIZES})
    assert (gemma2.attn_softcap, gemma2.final_softcap) == (50.0, 30.0)
    assert from_hf({"model_type": "llama", **SIZES}).rope_theta == 10000.0
    assert from_hf({"model_type": "deepseek_v3", **SIZES, "kv_lora_rank": 32, "q_lora_rank": None,
                    "qk_rope_head_dim": 8, "qk_nope_head_dim": 16, "v_head_dim": 16, "n_routed_experts": 8,
                    "num_experts_per_tok": 2, "moe_intermediate_size": 32, "n_group": 2,
                    "topk_group": 1}).routed_scaling == 2.5


def test_rope_keys_of_a_4x_file_are_kept():
    # gpt-oss's default is YaRN: a file naming only its base keeps YaRN with that base
    merged = with_defaults("gpt_oss", {"rope_theta": 5e5})
    assert merged["rope_parameters"]["rope_type"] == "yarn" and merged["rope_parameters"]["rope_theta"] == 5e5
    # a file's own rope_scaling replaces the default wholesale
    assert "rope_parameters" not in with_defaults("gpt_oss", {"rope_scaling": {"rope_type": "linear", "factor": 2.0}})
    # NeoX's default rotary share is 0.25; a 4.x file's rotary_pct wins
    assert with_defaults("gpt_neox", {"rotary_pct": 0.5})["rope_parameters"]["partial_rotary_factor"] == 0.5
    # Gemma 3 per layer type: only when the file says nothing of its RoPE
    assert "rope_parameters" in with_defaults("gemma3_text", {})
    assert "rope_parameters" not in with_defaults("gemma3_text", {"rope_theta": 1e6, "rope_local_base_freq": 1e4})
    assert with_defaults("no_such_family", {"a": 1}) == {"a": 1}
