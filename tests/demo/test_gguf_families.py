"""GGUF of every family the numpy decoder runs: mx.convert writes a tiny transformers model as
llama.cpp's convert_hf_to_gguf.py would (architecture, `{arch}.*` keys, gguf-py's tensor names,
q/k rows permuted only for LlamaModel-based converters, Gemma's norms as 1 + w, experts stacked),
gguf-py's GGUFReader reads it back, from_gguf gives the ModelConfig config.json gives, and
load_model runs it with transformers' float32 logits (F32) or close to them (Q8_0)."""

from __future__ import annotations

import contextlib
import dataclasses
import json

import numpy as np
import pytest
from test_families import IDS, SIZES, _randomize_norms  # the sibling module (tests/demo is on sys.path)

import model_explorer as mx
from model_explorer.demo import load_model
from model_explorer.model import families
from model_explorer.model.config import from_hf
from model_explorer.model.config_gguf import from_gguf
from model_explorer.tensors import names

pytestmark = [pytest.mark.reference, pytest.mark.filterwarnings("ignore:convert. no tokenizer.json")]
transformers = pytest.importorskip("transformers")
torch = pytest.importorskip("torch")
gguf = pytest.importorskip("gguf")

# name -> (model_type, config changes); what llama.cpp hard-codes is kept as it hard-codes it
FAMILIES = {
    "qwen2": ("qwen2", {}),
    "qwen3": ("qwen3", {}),
    # YaRN with its original context inside the prompt, so the ramp and attention factor show
    "qwen3_yarn": ("qwen3", dict(rope_parameters={"rope_type": "yarn", "factor": 4.0, "rope_theta": 10000.0,
                                                  "original_max_position_embeddings": 8, "beta_fast": 16.0})),
    "llama": ("llama", dict(attention_bias=True)),
    "mistral": ("mistral", dict(sliding_window=4)),  # written as llama, with its window
    # Llama 3's RoPE scaling, stated as llama.cpp does: rope_freqs.weight (smooth and scaled bands)
    "llama3": ("llama", dict(rope_scaling={"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0,
                                           "high_freq_factor": 4.0, "original_max_position_embeddings": 16})),
    "gemma": ("gemma", {}),
    # sliding on even layers, a window shorter than the prompt, both softcaps biting
    "gemma2": ("gemma2", dict(sliding_window=4, layer_types=["sliding_attention", "full_attention",
                                                             "sliding_attention"],
                              attn_logit_softcapping=2.0, final_logit_softcapping=3.0, query_pre_attn_scalar=16)),
    # six layers: llama.cpp's five sliding of every six; linear scaling on the full layers only
    "gemma3": ("gemma3_text", dict(num_hidden_layers=6, sliding_window=4, query_pre_attn_scalar=16,
                                   final_logit_softcapping=5.0,
                                   rope_parameters={"sliding_attention": {"rope_type": "default", "rope_theta": 10000.0},
                                                    "full_attention": {"rope_type": "linear", "factor": 2.0,
                                                                       "rope_theta": 100000.0}})),
    "phi3": ("phi3", dict(sliding_window=None)),
    "olmo2": ("olmo2", {}),
    "granite": ("granite", dict(embedding_multiplier=6.0, residual_multiplier=0.3, attention_multiplier=0.05,
                                logits_scaling=4.0)),
    "smollm3": ("smollm3", dict(num_hidden_layers=4, no_rope_layers=[1, 1, 1, 0])),  # llama.cpp's step 4
    "mixtral": ("mixtral", dict(num_local_experts=4, num_experts_per_tok=2, sliding_window=6)),
    "qwen3_moe": ("qwen3_moe", dict(num_experts=4, num_experts_per_tok=2, moe_intermediate_size=32,
                                    norm_topk_prob=True)),
    # a dense layer and top-k not renormalised: stated in the GGUF, which llama.cpp would not run so
    "qwen3_moe_dense": ("qwen3_moe", dict(num_experts=4, num_experts_per_tok=2, moe_intermediate_size=32,
                                          mlp_only_layers=[1], norm_topk_prob=False)),
}
GGUF_ARCH = {"qwen3_yarn": "qwen3", "llama3": "llama", "mistral": "llama", "mixtral": "llama", "qwen3_moe": "qwen3moe", "qwen3_moe_dense": "qwen3moe", "gemma3": "gemma3"}


def _tiny(key: str, folder):
    """A tiny random model of the family saved by transformers, and its float32 logits on IDS."""
    return tiny_model(*FAMILIES[key], folder)


def tiny_model(mt: str, changes: dict, folder):
    """A tiny random `mt` model (SIZES with `changes`) saved in `folder`, and its float32 logits."""
    cfg = transformers.AutoConfig.for_model(mt, **{**SIZES, **changes})
    torch.manual_seed(0)
    model = transformers.AutoModelForCausalLM.from_config(cfg).float().eval()
    _randomize_norms(model, 1)
    model.save_pretrained(folder)
    with torch.no_grad():
        return model, model(torch.tensor([IDS])).logits[0].numpy()


@pytest.fixture(scope="module", params=list(FAMILIES))
def family(request, tmp_path_factory):
    key = request.param
    folder = tmp_path_factory.mktemp(key)
    model, ref = _tiny(key, folder)
    with pytest.warns(UserWarning, match="qwen3moe") if key == "qwen3_moe_dense" else contextlib.nullcontext():
        path = mx.convert(folder, folder / f"{key}.F32.gguf", format="gguf", dtype="F32")
    return key, model, str(folder), str(path), ref


def _effective(cfg) -> dict:
    """The fields that change what the decoder computes, as config.json and GGUF both state them."""
    d = dataclasses.asdict(cfg)
    for k in ("gguf_qk_permuted", "norm_offset", "extra"):  # how the file stores it, not the model
        d.pop(k)
    d["attention_scale"] = cfg.attention_scale or cfg.head_dim ** -0.5
    for k in ("rms_norm_eps", "attention_scale", "embed_scale", "residual_scale", "logit_scale"):
        d[k] = float(np.float32(d[k]))  # GGUF keeps float32
    if d["moe_layers"] is not None and all(d["moe_layers"]):
        d["moe_layers"] = None  # every layer's feed-forward is the experts, said either way
    return d


def test_config_from_gguf_equals_config_json(family):
    key, _, folder, path, _ = family
    ckpt = mx.open(path)
    ours = from_gguf(ckpt.metadata, set(ckpt.tensors))
    want = from_hf(json.load(open(f"{folder}/config.json")))
    if key == "mistral":  # llama.cpp writes Mistral as llama: the file cannot say which it was
        want.architecture = "llama"
    if key == "llama3":  # the GGUF holds the scaling as per-frequency factors (rope_freqs.weight)
        assert ours.extra["rope_freqs_tensor"] == "rope_freqs.weight" and ours.rope_scaling is None
        want.rope_scaling = None
    assert _effective(ours) == _effective(want), key
    assert ours.norm_offset == 0.0  # Gemma's (1 + w) is stored


@pytest.mark.parametrize("backend", ["numpy", "torch"])
def test_converted_f32_gguf_logits_equal_transformers(family, backend, request):
    key, _, _, path, ref = family
    ours = load_model(path, device="cpu", backend=backend).forward(IDS)
    assert np.abs(ours - ref).max() <= 1e-4 * np.abs(ref).max(), key
    assert np.abs(ref).max() > 1.0


def _round_like(model, path: str, arch: str) -> None:
    """Put the GGUF's quantized matrices, decoded, into the transformers model (in HF layout)."""
    ckpt = mx.open(path)
    quantized = {n for n, t in ckpt.tensors.items() if t.kind != "F32"}
    with torch.no_grad():
        for name, p in model.state_dict().items():
            stem = name.rsplit(".experts.", 1)[0]
            i = name.split(".")[2] if name.startswith("model.layers.") else None
            if name.endswith("experts.gate_up_proj"):  # transformers 5 holds them fused: [E, gate + up, in]
                parts = [f"blk.{i}.ffn_gate_exps.weight", f"blk.{i}.ffn_up_exps.weight"]
            elif name.endswith("experts.down_proj"):
                parts = [f"blk.{i}.ffn_down_exps.weight"]
            else:
                parts = [names.hf_to_gguf(name, arch)]
            if not all(g in quantized for g in parts):
                continue
            a = np.concatenate([ckpt.read(g) for g in parts], axis=1 if stem != name else 0)
            heads = names.rope_heads(parts[0], 4, 2) if arch in ("llama", "granite", "smollm3") else None
            p.copy_(torch.from_numpy(names.unpermute_qk(a, heads) if heads else a))


@pytest.mark.parametrize("key", ["qwen3", "gemma2", "granite", "mixtral", "qwen3_moe"])
def test_q8_0_gguf_runs_its_rounded_weights_exactly(key, tmp_path_factory, request):
    """Q8_0 changes the logits only by the rounding: transformers given the file's decoded
    matrices computes what load_model computes."""
    folder = tmp_path_factory.mktemp(key + "-q8")
    model, ref = _tiny(key, folder)
    path = str(mx.convert(folder, folder / "m.Q8_0.gguf", format="gguf", dtype="Q8_0"))
    assert mx.open(path).dtype_mix().get("Q8_0", 0) > 0
    _round_like(model, path, GGUF_ARCH.get(key, key))
    with torch.no_grad():
        rounded = model(torch.tensor([IDS])).logits[0].numpy()
    assert 0 < np.abs(rounded - ref).max() < 0.5 * np.abs(ref).max()  # rounded, not something else
    ours = load_model(path, device="cpu").forward(IDS)
    assert np.abs(ours - rounded).max() <= 1e-4 * np.abs(rounded).max(), key


def _reader(path):
    r = gguf.GGUFReader(path)
    keys = {k: f.contents() for k, f in r.fields.items() if not k.startswith("GGUF.")}
    tensors = {t.name: t for t in r.tensors}
    return keys, tensors


def _saved(folder: str) -> dict[str, np.ndarray]:
    """The tensors as save_pretrained wrote them (transformers 5 fuses experts in memory only)."""
    from safetensors.numpy import load_file

    return load_file(f"{folder}/model.safetensors")


def test_gguf_reader_sees_llamacpp_keys_names_and_shapes(family):
    key, model, folder, path, _ = family
    mt, changes = FAMILIES[key]
    arch = GGUF_ARCH.get(key, mt)
    keys, tensors = _reader(path)
    cfg = model.config
    assert keys["general.architecture"] == arch
    assert keys[f"{arch}.block_count"] == cfg.num_hidden_layers
    assert keys[f"{arch}.embedding_length"] == 64
    assert keys[f"{arch}.attention.head_count"] == 4 and keys[f"{arch}.attention.head_count_kv"] == 2
    assert keys["general.file_type"] == gguf.LlamaFileType.ALL_F32
    # every name is one llama.cpp knows for the architecture (gguf-py's MODEL_TENSORS)
    kind = next(a for a, n in gguf.MODEL_ARCH_NAMES.items() if n == arch)
    known = {gguf.TENSOR_NAMES[t].format(bid=i) + s for t in gguf.MODEL_TENSORS[kind]
             for i in range(cfg.num_hidden_layers) for s in (".weight", ".bias")}
    dense = {n for n in tensors if key == "qwen3_moe_dense" and n.startswith("blk.1.ffn_")}
    assert set(tensors) - dense <= known, set(tensors) - known
    state = _saved(folder)
    for name, t in tensors.items():
        assert t.tensor_type == gguf.GGMLQuantizationType.F32, name
    if arch in ("gemma", "gemma2", "gemma3"):
        assert "output.weight" not in tensors  # the head is the embedding
        np.testing.assert_array_equal(np.asarray(tensors["blk.0.attn_norm.weight"].data),
                                      state["model.layers.0.input_layernorm.weight"] + np.float32(1))
    if key != "phi3":  # Phi-3's q is part of attn_qkv
        q, hf_q = np.asarray(tensors["blk.1.attn_q.weight"].data), state["model.layers.1.self_attn.q_proj.weight"]
        permuted = arch in ("llama", "granite", "smollm3")
        want = names.permute_qk(hf_q, 4) if permuted else hf_q
        np.testing.assert_array_equal(q, want, err_msg=f"{key}: q rows {'not ' if permuted else ''}permuted")
    if key == "gemma2":
        assert keys["gemma2.attn_logit_softcapping"] == pytest.approx(2.0)
        assert keys["gemma2.final_logit_softcapping"] == pytest.approx(3.0)
        assert keys["gemma2.attention.sliding_window"] == 4
        assert keys["gemma2.attention.key_length"] == 16
        np.testing.assert_array_equal(np.asarray(tensors["blk.2.post_attention_norm.weight"].data),
                                      state["model.layers.2.post_attention_layernorm.weight"] + np.float32(1))
        np.testing.assert_array_equal(np.asarray(tensors["blk.2.ffn_norm.weight"].data),
                                      state["model.layers.2.pre_feedforward_layernorm.weight"] + np.float32(1))
    if key in ("mixtral", "qwen3_moe"):
        width = 96 if key == "mixtral" else 32
        assert keys[f"{arch}.expert_count"] == 4 and keys[f"{arch}.expert_used_count"] == 2
        # ggml lists dims fastest first: [hidden, width, experts] is numpy's [experts, width, hidden]
        assert list(tensors["blk.2.ffn_gate_exps.weight"].shape) == [64, width, 4]
        assert list(tensors["blk.2.ffn_down_exps.weight"].shape) == [width, 64, 4]
        assert list(tensors["blk.2.ffn_gate_inp.weight"].shape) == [64, 4]
        down = np.asarray(tensors["blk.2.ffn_down_exps.weight"].data)
        hf = ("model.layers.2.block_sparse_moe.experts.3.w2.weight" if key == "mixtral"
              else "model.layers.2.mlp.experts.3.down_proj.weight")
        np.testing.assert_array_equal(down[3], state[hf])
    if key == "qwen3_moe":
        assert keys["qwen3moe.expert_feed_forward_length"] == 32
        assert keys["qwen3moe.expert_weights_norm"] is True
    if key == "granite":
        assert keys["granite.logit_scale"] == pytest.approx(4.0)
        assert keys["granite.embedding_scale"] == pytest.approx(6.0)
    if key == "phi3":
        assert list(tensors["blk.0.attn_qkv.weight"].shape) == [64, 128]
        assert list(tensors["blk.0.ffn_up.weight"].shape) == [64, 192]  # gate rows, then up


def test_built_in_names_agree_with_gguf_py(family):
    """Without gguf-py, the built-in tables name every tensor the decoder reads as gguf-py does."""
    key, _, folder, _, _ = family
    arch = GGUF_ARCH.get(key, FAMILIES[key][0])
    for hf in _saved(folder):
        merged = names.merged_expert_name(hf) or hf
        want = names.hf_to_gguf(merged, arch)
        if want is not None:
            assert names._builtin_hf_to_gguf(merged, families.by_gguf_arch(arch).gguf_names) == want, hf


def test_gguf_converts_back_to_the_hugging_face_folder(family, tmp_path):
    """GGUF -> safetensors undoes what llama.cpp's converter did (q/k order, 1 + w norms, stacked
    experts): the original tensors under their names, a config.json from_hf reads as the original,
    and transformers loads the folder with the original logits."""
    key, _, folder, path, ref = family
    if key in ("llama", "llama3"):
        pytest.skip("the llama layout has its own path, tested in test_convert.py")
    out = mx.convert(path, tmp_path / "back", format="safetensors", dtype="F32")
    original, back = _saved(folder), _saved(out)
    gemma = FAMILIES[key][0].startswith("gemma")
    assert set(back) == set(original) - ({"lm_head.weight"} if gemma else set())
    for name, a in original.items():
        if name in back:  # Gemma's norms went through 1 + w and back: one float32 rounding
            np.testing.assert_allclose(back[name], a, rtol=0, atol=2.4e-7 if gemma and "norm" in name else 0,
                                       err_msg=name)
    if key == "mistral":
        return  # llama.cpp's file says llama: its config.json is a Llama's, without the window
    config = json.load(open(f"{out}/config.json"))
    want = from_hf(json.load(open(f"{folder}/config.json")))
    assert _effective(from_hf(config)) == _effective(want), key
    model = transformers.AutoModelForCausalLM.from_pretrained(out).float().eval()
    with torch.no_grad():
        logits = model(torch.tensor([IDS])).logits[0].numpy()
    assert np.abs(logits - ref).max() <= 1e-4 * np.abs(ref).max(), key
