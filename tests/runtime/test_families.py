"""The numpy decoder runs families beyond Llama from config.json alone (families as data), with
logits equal to transformers' float32 forward on tiny random models saved by transformers itself,
on the numpy and the torch backends, and greedy generation equal token for token."""

from __future__ import annotations

import copy
import os

import numpy as np
import pytest

from model_explorer.model.config import UnsupportedModel, from_hf
from model_explorer.runtime import load_model

pytestmark = pytest.mark.reference
transformers = pytest.importorskip("transformers")
torch = pytest.importorskip("torch")

IDS = [1, 7, 33, 2, 60, 15, 15, 9, 41, 3, 27, 50, 12, 8]
SIZES = dict(vocab_size=64, hidden_size=64, intermediate_size=96, num_hidden_layers=3,
             num_attention_heads=4, num_key_value_heads=2, head_dim=16, pad_token_id=0,
             max_position_embeddings=128, initializer_range=0.2, bos_token_id=1, eos_token_id=2)
FAMILIES = {
    "qwen3": {},
    "olmo2": {},
    "granite": dict(embedding_multiplier=6.0, residual_multiplier=0.3, attention_multiplier=0.05,
                    logits_scaling=4.0),
    "smollm3": dict(no_rope_layers=[1, 0, 1]),
    "gemma": {},
    # a window shorter than the prompt, on alternate layers; both softcaps low enough to bite
    "gemma2": dict(sliding_window=4, layer_types=["sliding_attention", "full_attention", "sliding_attention"],
                   attn_logit_softcapping=2.0, final_logit_softcapping=3.0, query_pre_attn_scalar=8),
    # local/global: sliding layers rotate with their own base, full ones with linear scaling
    "gemma3_text": dict(sliding_window=4, layer_types=["sliding_attention", "full_attention", "sliding_attention"],
                        rope_parameters={"sliding_attention": {"rope_type": "default", "rope_theta": 100.0},
                                         "full_attention": {"rope_type": "linear", "factor": 2.0,
                                                            "rope_theta": 10000.0}},
                        query_pre_attn_scalar=8, final_logit_softcapping=5.0,
                        attn_logit_softcapping=1.0),  # which transformers' Gemma 3 ignores
    "llama": dict(attention_bias=True),  # q, k, v and o biases
    # a window shorter than the prompt on the layers from max_window_layers on (layer_types)
    "qwen2/window": dict(use_sliding_window=True, sliding_window=4, max_window_layers=1),
    "phi3": dict(sliding_window=None, partial_rotary_factor=0.5),  # the first half of each head turns
    # LayerNorm with biases, Conv1D weights, fused c_attn, tanh-GELU MLP, learned positions, tied head
    "gpt2": dict(n_embd=64, n_layer=3, n_head=4, n_positions=32, n_inner=96),
    # parallel residual, per-head interleaved query_key_value, exact-GELU MLP, a quarter of each head turns
    "gpt_neox": dict(rotary_pct=0.25, use_parallel_residual=True, hidden_act="gelu"),
    "gpt_neox/sequential": dict(rotary_pct=0.5, use_parallel_residual=False),
    # sinks, clamped SwiGLU experts with biases, top-k-then-softmax router with a bias, sliding window on
    # alternate layers, YaRN; the intermediate size makes gate and up of different experts' columns interleave
    "gpt_oss": dict(num_local_experts=4, num_experts_per_tok=2, sliding_window=4, swiglu_limit=1.5,
                    layer_types=["sliding_attention", "full_attention", "sliding_attention"],
                    rope_parameters={"rope_type": "yarn", "factor": 4.0, "beta_fast": 8.0, "beta_slow": 1.0,
                                     "truncate": False, "original_max_position_embeddings": 16,
                                     "rope_theta": 1000.0}),
    # MLA with a q LoRA rank, interleaved rotary dims, YaRN with mscale (on cos/sin and the softmax scale);
    # sigmoid router with score correction over 2 of 4 groups, scaled, renormalised; a shared expert; a
    # dense first layer. head_dim is what transformers' rotary reads as the rotary part
    "deepseek_v3": dict(num_key_value_heads=4, n_routed_experts=8, num_experts_per_tok=2, moe_intermediate_size=32,
                        n_group=4, topk_group=2, first_k_dense_replace=1, n_shared_experts=1, q_lora_rank=48,
                        kv_lora_rank=32, qk_nope_head_dim=16, qk_rope_head_dim=8, head_dim=8, v_head_dim=24,
                        routed_scaling_factor=2.5, rope_interleave=True,
                        rope_parameters={"rope_type": "yarn", "factor": 4.0, "rope_theta": 1000.0, "mscale": 1.0,
                                         "mscale_all_dim": 0.8, "original_max_position_embeddings": 16,
                                         "beta_fast": 8.0, "beta_slow": 1.0}),
    # a plain q_proj, biases; no nope part (model/will_load.py reads q_proj's rows as heads of head_dim,
    # which DeepSeek's config sets to the rotary part)
    "deepseek_v3/q_proj": dict(num_key_value_heads=4, n_routed_experts=4, num_experts_per_tok=2,
                               moe_intermediate_size=32, n_group=1, topk_group=1, first_k_dense_replace=0,
                               n_shared_experts=2, q_lora_rank=None, kv_lora_rank=16, qk_nope_head_dim=0,
                               qk_rope_head_dim=8, head_dim=8, v_head_dim=16, rope_interleave=False,
                               norm_topk_prob=False, attention_bias=True),
    # RoPE scalings, named "family/variant": YaRN (attention factor on cos/sin, ramped frequencies);
    # dynamic NTK, whose base stretches with the sequence past max_position_embeddings (8 < 14)
    "llama/yarn": dict(rope_parameters={"rope_type": "yarn", "factor": 8.0, "rope_theta": 10000.0,
                                        "original_max_position_embeddings": 16, "beta_fast": 8.0}),
    "llama/dynamic": dict(max_position_embeddings=8,
                          rope_parameters={"rope_type": "dynamic", "factor": 2.0, "rope_theta": 100.0}),
    "mixtral": dict(num_local_experts=4, num_experts_per_tok=2, sliding_window=None),
    # a dense layer among the experts' (mlp_only_layers), top-k not renormalised
    "qwen3_moe": dict(num_experts=4, num_experts_per_tok=2, moe_intermediate_size=32, mlp_only_layers=[1],
                      norm_topk_prob=False),
    # the shared expert and its sigmoid gate beside the routed ones; renormalised top-k; a dense layer
    "qwen2_moe": dict(num_experts=4, num_experts_per_tok=2, moe_intermediate_size=32, norm_topk_prob=True,
                      shared_expert_intermediate_size=48, decoder_sparse_step=1, mlp_only_layers=[2]),
}


def _randomize_norms(model, seed: int) -> None:
    """Norm weights start at 1 (or 0 for Gemma): give them values, so a wrong norm shows."""
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "norm" in name or name.endswith(("bias", "sinks")):  # gpt-oss: *_proj_bias, sinks
                p.copy_(0.5 + torch.rand(p.shape, generator=g))
        for name, buf in model.named_buffers():  # DeepSeek's router chooses with this one
            if name.endswith("e_score_correction_bias"):
                buf.copy_(0.3 * torch.rand(buf.shape, generator=g))


@pytest.fixture(scope="module", params=list(FAMILIES))
def saved(request, tmp_path_factory):
    mt = request.param
    cfg = transformers.AutoConfig.for_model(mt.split("/")[0], **{**SIZES, **FAMILIES[mt]})
    torch.manual_seed(0)
    model = transformers.AutoModelForCausalLM.from_config(cfg).float().eval()
    _randomize_norms(model, 1)
    folder = tmp_path_factory.mktemp(mt.replace("/", "-"))
    model.save_pretrained(folder)
    with torch.no_grad():
        ref = model(torch.tensor([IDS])).logits[0].numpy()
    return mt, model, str(folder), ref


@pytest.mark.parametrize("backend", ["numpy", "torch", "streamed"])
def test_logits_equal_transformers(saved, backend):
    """"streamed": the numpy engine reading each layer from the file as the pass reaches it."""
    mt, _, folder, ref = saved
    if backend == "streamed":
        ours = load_model(folder, device="cpu", backend="numpy", stream=True).forward(IDS)
    else:
        ours = load_model(folder, device="cpu", backend=backend).forward(IDS)
    assert ours.shape == ref.shape
    assert np.abs(ours - ref).max() <= 1e-4 * np.abs(ref).max(), mt
    assert np.abs(ref).max() > 1.0  # not near-uniform: the comparison means something
    if mt == "gemma2":  # the final softcap bounds the logits, so it was exercised
        assert np.abs(ref).max() < 3.0


def test_bfloat16_matrices_stay_as_close_as_transformers_own_bfloat16(saved):
    """The torch engine holding the layer matrices in bfloat16 (what it runs a bf16 file with on
    CUDA; on the CPU unless MODEL_EXPLORER_TEST_DEVICE names another device, as a GPU machine's
    check does): its logits are no further from float32 than transformers' own bfloat16 model's,
    at every family."""
    mt, model, folder, ref = saved
    device = os.environ.get("MODEL_EXPLORER_TEST_DEVICE", "cpu")
    m = load_model(folder, device=device, backend="torch", weights="bfloat16")
    assert "bfloat16" in m.device
    ours = m.forward(IDS)
    with torch.no_grad():
        theirs = copy.deepcopy(model).to(torch.bfloat16)(torch.tensor([IDS])).logits[0].float().numpy()
    scale = np.abs(ref).max()
    assert np.abs(ours - ref).max() <= max(2 * np.abs(theirs - ref).max(), 1e-3 * scale), mt
    assert {row.kind for row in m.weights.report.requantized} == {"bfloat16"}


def test_greedy_generation_equals_transformers(saved):
    mt, model, folder, _ = saved
    with torch.no_grad():
        want = model.generate(torch.tensor([IDS]), max_new_tokens=8, do_sample=False,
                              pad_token_id=0)[0, len(IDS):].tolist()
    ours = load_model(folder, device="cpu")
    cache, ids, got = ours.new_cache(64), list(IDS), []
    logits = ours.forward(ids, cache, last_only=True)
    for _ in range(8):
        nxt = int(np.argmax(logits[-1]))
        got.append(nxt)
        logits = ours.forward([nxt], cache, last_only=True)
    if len(want) < 8:  # transformers stopped at the end-of-sequence token
        assert want[-1] == 2 and got[:len(want)] == want, mt
    else:
        assert got == want, mt


def test_the_model_says_its_family_features(saved):
    mt, _, folder, _ = saved
    features = load_model(folder, device="cpu").config.features()
    expect = {"qwen3": "q/k RMSNorm per head", "olmo2": "norms after attention and MLP",
              "granite": "residual x 0.3", "smollm3": "no RoPE in 1 of 3 layers", "gemma": "GeGLU (tanh GELU)",
              "gemma2": "attention logit softcap 2",
              "gemma3_text": "local RoPE base 100 on sliding layers", "llama": "q/k/v biases", "qwen2/window": "sliding window 4 in 2 of 3 layers",
              "phi3": "partial rotary (8 of 16 dims)",
              "llama/yarn": "yarn RoPE scaling", "llama/dynamic": "dynamic RoPE scaling", "mixtral": "4 experts, top 2 renormalised",
              "qwen3_moe": "4 experts, top 2 in 2 of 3 layers",
              "qwen2_moe": "shared expert with a sigmoid gate", "gpt2": "learned positions",
              "gpt_neox": "parallel residual", "gpt_oss": "attention sinks",
              "deepseek_v3": "MLA (kv rank 32, q rank 48)", "deepseek_v3/q_proj": "MLA (kv rank 16)", "gpt_neox/sequential": "partial rotary (8 of 16 dims)"}[mt]
    assert expect in features, features
    from model_explorer.widgets.run_cell import RunDemo

    w = RunDemo(folder, device="cpu")  # the run cell says it too, once loaded
    w._job_load()
    assert w.family.startswith(f"{mt.split('/')[0]}: ") and expect in w.family and expect in repr(w._model)




def test_gpt_oss_mxfp4_experts_run_as_transformers_does_with_their_decoded_values(tmp_path):
    """gpt-oss as OpenAI ships it: the experts' gate_up_proj / down_proj as MXFP4 blocks of the
    transposed ([experts, out, in]) matrices. transformers, given the decoded values, is the reference."""
    import json

    from quant_codec.layouts import mxfp4_layer  # tests/ is on the path
    from safetensors.numpy import save_file

    cfg = transformers.AutoConfig.for_model("gpt_oss", **{**SIZES, **FAMILIES["gpt_oss"]})
    torch.manual_seed(0)
    model = transformers.AutoModelForCausalLM.from_config(cfg).float().eval()
    _randomize_norms(model, 1)
    model.save_pretrained(tmp_path)
    tensors = {}
    with torch.no_grad():
        for k, p in model.state_dict().items():
            v = p.detach().numpy()
            if k.endswith(("experts.gate_up_proj", "experts.down_proj")):
                packed, decoded = mxfp4_layer(k, np.ascontiguousarray(v.transpose(0, 2, 1)))
                tensors.update(packed)
                p.copy_(torch.from_numpy(np.ascontiguousarray(decoded.transpose(0, 2, 1))))
            else:
                tensors[k] = np.ascontiguousarray(v)
        ref = model(torch.tensor([IDS])).logits[0].numpy()
    save_file(tensors, str(tmp_path / "model.safetensors"))
    config = json.loads((tmp_path / "config.json").read_text())
    config["quantization_config"] = {"quant_method": "mxfp4", "modules_to_not_convert": [
        "model.layers.*.self_attn", "model.layers.*.mlp.router", "model.embed_tokens", "lm_head"]}
    (tmp_path / "config.json").write_text(json.dumps(config))
    ours = load_model(str(tmp_path), device="cpu")
    assert "MXFP4" in ours.weights.report.by_dtype()
    assert np.abs(ours.forward(IDS) - ref).max() <= 1e-4 * np.abs(ref).max()


def _contradicted(tmp_path, model_type: str, changes: dict) -> str:
    """A tiny model of the family saved by transformers, then its config.json changed."""
    import json

    cfg = transformers.AutoConfig.for_model(model_type, **{**SIZES, **FAMILIES[model_type]})
    transformers.AutoModelForCausalLM.from_config(cfg).save_pretrained(tmp_path)
    config = json.loads((tmp_path / "config.json").read_text())
    config.update(changes)
    (tmp_path / "config.json").write_text(json.dumps(config))
    return str(tmp_path)


@pytest.mark.parametrize("model_type,changes,message", [
    # heads x head_dim against q_proj's rows (the open's cross-check says it first, naming the tensor)
    ("llama", {"head_dim": 8}, r"num_attention_heads = 4, but 'model\.layers\.0\.self_attn\.q_proj\.weight' has 64 rows"),
    # GPT-2's fused c_attn: heads that do not divide the width
    ("gpt2", {"n_head": 3}, r"hidden_size 64 over 3 heads \(gpt2\), which do not divide it"),
    ("gemma2", {"layer_types": ["sliding_attention", "full_attention"]}, r"layer_types has 2 entries for 3 layers"),
    ("gemma3_text", {"layer_types": ["sliding_attention", "chunked_attention", "full_attention"]},
     r"layer_types names 'chunked_attention' layers \(gemma3_text\)"),
    ("llama", {"rope_parameters": {"rope_type": "longrope", "rope_theta": 10000.0}},
     r"rope scaling 'longrope' is not implemented for llama"),
    ("llama", {"rope_parameters": {"rope_type": "yarn", "rope_theta": 10000.0}}, r"yarn rope scaling needs a positive factor"),
    ("gemma3_text", {"rope_parameters": {"sliding_attention": {"rope_type": "linear", "factor": 2.0, "rope_theta": 10.0},
                                         "full_attention": {"rope_type": "default", "rope_theta": 1e4}}},
     r"Gemma 3's sliding layers 'linear' RoPE scaling"),
    ("gpt2", {"scale_attn_by_inverse_layer_idx": True}, r"scale_attn_by_inverse_layer_idx \(gpt2\)"),
    ("deepseek_v3", {"n_group": 3}, r"8 experts in n_group 3 groups .* cannot route"),
    ("phi3", {"partial_rotary_factor": 1.5, "rope_parameters": None}, r"partial_rotary_factor should be in \(0, 1\]"),
])
def test_a_self_contradicting_or_unimplemented_config_is_refused_by_name(tmp_path, model_type, changes, message):
    folder = _contradicted(tmp_path, model_type, changes)
    with pytest.raises(UnsupportedModel, match=message):
        load_model(folder, device="cpu")


def test_layer_types_and_window_as_transformers_derives_them():
    """Older configs without layer_types: Gemma 3's sliding_window_pattern and rope_local_base_freq,
    Qwen2's max_window_layers; Llama ignores a sliding_window, Mistral applies it to every layer."""
    base = dict(SIZES, model_type="gemma3_text", sliding_window=4, sliding_window_pattern=2,
                rope_theta=1e6, rope_local_base_freq=10.0, num_hidden_layers=4)
    cfg = from_hf(base)
    assert cfg.sliding_layers == [True, False, True, False] and cfg.local_rope_theta == 10.0
    assert cfg.rope_theta == 1e6
    qwen = from_hf(dict(SIZES, model_type="qwen2", use_sliding_window=True, sliding_window=4, max_window_layers=2))
    assert qwen.sliding_window == 4 and qwen.sliding_layers == [False, False, True]
    assert from_hf(dict(SIZES, model_type="llama", use_sliding_window=True, sliding_window=4)).sliding_window is None
    mistral = from_hf(dict(SIZES, model_type="mistral", sliding_window=4))
    assert mistral.sliding_window == 4 and mistral.sliding_layers is None
