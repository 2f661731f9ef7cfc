"""mx.random_model writes a tiny checkpoint of a family from its table alone: transformers loads it
with no missing or unexpected weight and computes the same logits as our decoder; the doctor finds
nothing; what it cannot write is refused with a reason."""

from __future__ import annotations

import numpy as np
import pytest

import model_explorer as mx
from model_explorer.conversion import ConvertError

IDS = [1, 5, 9, 3, 7, 11, 20, 4, 4, 30]
FAMILIES = {
    "llama": {},
    "qwen3": {},
    "gemma2": dict(sliding_window=4, layer_types=["sliding_attention", "full_attention"],
                   attn_logit_softcapping=2.0, final_logit_softcapping=3.0, query_pre_attn_scalar=16),
    "mixtral": dict(num_local_experts=4, num_experts_per_tok=2),
    "phi3": {},
    "gemma3_text": dict(layer_types=["sliding_attention", "full_attention"], sliding_window=4,
                        query_pre_attn_scalar=16),
    "qwen2_moe": dict(num_experts=4, num_experts_per_tok=2, moe_intermediate_size=32,
                      shared_expert_intermediate_size=48),
    "gpt2": dict(n_embd=64, n_layer=2, n_head=4, n_positions=64, n_inner=96),
    "gpt_neox": dict(rotary_pct=0.5),
    "gpt_oss": dict(num_local_experts=4, num_experts_per_tok=2, layer_types=["sliding_attention", "full_attention"],
                    sliding_window=4),
    "deepseek_v3": dict(kv_lora_rank=32, q_lora_rank=24, qk_rope_head_dim=8, qk_nope_head_dim=16, v_head_dim=16,
                        n_routed_experts=4, num_experts_per_tok=2, moe_intermediate_size=32,
                        first_k_dense_replace=1, n_shared_experts=1, n_group=1, topk_group=1),
}


@pytest.mark.parametrize("model_type", list(FAMILIES))
def test_healthy_and_runs(model_type, tmp_path):
    folder = mx.random_model({"model_type": model_type, **FAMILIES[model_type]}, tmp_path / model_type)
    ckpt = mx.open(folder)
    assert [f for f in ckpt.findings if f.severity in ("error", "warning")] == []
    logits = mx.load_model(folder, device="cpu").forward(IDS)
    assert logits.shape == (len(IDS), 128) and np.abs(logits).max() > 1.0  # far from uniform


@pytest.mark.reference
@pytest.mark.parametrize("model_type", list(FAMILIES))
def test_transformers_loads_it_with_the_same_logits(model_type, tmp_path):
    transformers = pytest.importorskip("transformers")
    torch = pytest.importorskip("torch")
    folder = mx.random_model({"model_type": model_type, **FAMILIES[model_type]}, tmp_path / model_type, seed=3)
    model, info = transformers.AutoModelForCausalLM.from_pretrained(folder, output_loading_info=True)
    assert not info["missing_keys"] and not info["unexpected_keys"], info
    with torch.no_grad():
        ref = model.float().eval()(torch.tensor([IDS])).logits[0].numpy()
    ours = mx.load_model(folder, device="cpu").forward(IDS)
    assert np.abs(ours - ref).max() <= 1e-4 * np.abs(ref).max()


def test_seeded(tmp_path):
    a = mx.random_model({"model_type": "llama"}, tmp_path / "a", seed=1)
    b = mx.random_model({"model_type": "llama"}, tmp_path / "b", seed=1)
    assert (tmp_path / "a" / "model.safetensors").read_bytes() == (tmp_path / "b" / "model.safetensors").read_bytes()
    assert mx.open(a).tensors.keys() == mx.open(b).tensors.keys()


def test_refusals(tmp_path):
    with pytest.raises(ConvertError, match="model_type"):
        mx.random_model({}, tmp_path / "none")
    with pytest.raises(ConvertError, match="not one of them"):
        mx.random_model({"model_type": "no_such_family"}, tmp_path / "unknown")
    with pytest.raises(ConvertError, match="not a tiny model"):
        mx.random_model({"model_type": "llama", "hidden_size": 8192, "intermediate_size": 28672,
                         "num_hidden_layers": 8, "num_attention_heads": 64, "head_dim": 128}, tmp_path / "big")
    assert not (tmp_path / "big" / "model.safetensors").exists()


def test_a_latent_attention_trace_names_its_weights(tmp_path):
    """MLA (DeepSeek-V3) has no q_proj/k_proj/v_proj: its q, k and v points name q_b and kv_b."""
    folder = mx.random_model({"model_type": "deepseek_v3", **FAMILIES["deepseek_v3"]}, tmp_path / "ds")
    rows = mx.trace(folder, ids=IDS).table().query("layer == 0").set_index("module")["tensor"]
    assert rows["q"] == "model.layers.0.self_attn.q_b_proj.weight"
    assert rows["k"] == rows["v"] == "model.layers.0.self_attn.kv_b_proj.weight"


@pytest.mark.reference
def test_latent_attention_without_a_q_rank(tmp_path):
    """DeepSeek with q_lora_rank null (a plain q_proj of heads x (nope + rope) rows): the open-time
    check reads a q head as nope + rope wide, and the logits equal transformers'."""
    transformers = pytest.importorskip("transformers")
    torch = pytest.importorskip("torch")
    folder = mx.random_model({"model_type": "deepseek_v3", **FAMILIES["deepseek_v3"], "q_lora_rank": None},
                             tmp_path / "ds")
    assert [f.code for f in mx.open(folder).findings if f.severity != "info"] == []
    model = transformers.AutoModelForCausalLM.from_pretrained(folder).float().eval()
    with torch.no_grad():
        ref = model(torch.tensor([IDS])).logits[0].numpy()
    assert np.abs(mx.load_model(folder, device="cpu").forward(IDS) - ref).max() <= 1e-4 * np.abs(ref).max()
