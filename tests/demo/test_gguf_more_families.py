"""GGUF of the families llama.cpp converts through classes of their own (issue #24): Qwen2-MoE's
shared expert, GPT-2, GPT-NeoX, gpt-oss and DeepSeek's latent attention. mx.convert writes a tiny
transformers model as convert_hf_to_gguf.py would, gguf-py's GGUFReader reads llama.cpp's keys and
tensor names back, from_gguf gives the ModelConfig config.json gives, and load_model's logits equal
transformers' float32 ones."""

from __future__ import annotations

import contextlib
import json

import numpy as np
import pytest
from test_gguf_families import (  # a sibling (tests/demo is on sys.path)
    IDS,
    _effective,
    _reader,
    _saved,
    tiny_model,
)

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

# name -> (model_type, GGUF architecture, config changes, a warning mx.convert gives or None)
FAMILIES = {
    # the shared expert and its sigmoid gate; top-k not renormalised, as llama.cpp's qwen2moe
    "qwen2_moe": ("qwen2_moe", "qwen2moe", dict(num_experts=4, num_experts_per_tok=2, moe_intermediate_size=32,
                                                shared_expert_intermediate_size=48, norm_topk_prob=False), None),
    # renormalised top-k: stated in the GGUF (expert_weights_norm), which llama.cpp's qwen2moe ignores
    "qwen2_moe_norm": ("qwen2_moe", "qwen2moe", dict(num_experts=4, num_experts_per_tok=2, moe_intermediate_size=32,
                                                     shared_expert_intermediate_size=48, norm_topk_prob=True),
                       "qwen2moe"),
    # Conv1D weights transposed to [out, in], LayerNorm biases, learned positions, tied head
    "gpt2": ("gpt2", "gpt2", dict(n_inner=96, num_key_value_heads=4), None),
    # q/k/v regrouped from per head to q, k, v; a quarter of each head turns; parallel residual
    "gpt_neox": ("gpt_neox", "gptneox", dict(num_key_value_heads=4, rotary_pct=0.25, use_parallel_residual=True,
                                             hidden_act="gelu"), None),
    "gpt_neox_sequential": ("gpt_neox", "gptneox", dict(num_key_value_heads=4, rotary_pct=0.5,
                                                        use_parallel_residual=False, rope_theta=1000.0), None),
    # sinks, experts with biases split from gate_up's interleaved columns, the router's bias, a window
    # shorter than the prompt on even layers, YaRN as gpt-oss's (truncate false); llama.cpp's clamp at 7
    "gpt_oss": ("gpt_oss", "gpt-oss", dict(num_local_experts=4, num_experts_per_tok=2, sliding_window=4,
                                           rope_parameters={"rope_type": "yarn", "factor": 4.0, "beta_fast": 8.0,
                                                            "beta_slow": 1.0, "truncate": False, "rope_theta": 1000.0,
                                                            "original_max_position_embeddings": 16}), None),
    # MLA with a q LoRA rank (kv_b split into attn_k_b, attn_v_b), interleaved rotary dims, YaRN with mscale;
    # sigmoid router with the choice bias over 2 of 4 groups, scaled, renormalised; a shared expert; a dense
    # first layer (leading_dense_block_count)
    "deepseek_v3": ("deepseek_v3", "deepseek2", dict(
        num_key_value_heads=4, n_routed_experts=8, num_experts_per_tok=2, moe_intermediate_size=32, n_group=4,
        topk_group=2, first_k_dense_replace=1, n_shared_experts=1, q_lora_rank=48, kv_lora_rank=32,
        qk_nope_head_dim=16, qk_rope_head_dim=8, head_dim=8, v_head_dim=24, routed_scaling_factor=2.5,
        rope_parameters={"rope_type": "yarn", "factor": 4.0, "rope_theta": 1000.0, "mscale": 0.8, "mscale_all_dim": 0.8,
                         "original_max_position_embeddings": 16, "beta_fast": 8.0, "beta_slow": 1.0}), None),
    # a plain q (attn_q), no nope part, two shared experts, top-k not renormalised
    "deepseek_v3_q": ("deepseek_v3", "deepseek2", dict(
        num_key_value_heads=4, n_routed_experts=4, num_experts_per_tok=2, moe_intermediate_size=32, n_group=1,
        topk_group=1, first_k_dense_replace=0, n_shared_experts=2, q_lora_rank=None, kv_lora_rank=16,
        qk_nope_head_dim=0, qk_rope_head_dim=8, head_dim=8, v_head_dim=16, norm_topk_prob=False), None),
}


@pytest.fixture(scope="module", params=list(FAMILIES))
def family(request, tmp_path_factory):
    key = request.param
    folder = tmp_path_factory.mktemp(key)
    model, ref = tiny_model(FAMILIES[key][0], FAMILIES[key][2], folder)
    warns = FAMILIES[key][3]
    with pytest.warns(UserWarning, match=warns) if warns else contextlib.nullcontext():
        path = mx.convert(folder, folder / f"{key}.F32.gguf", format="gguf", dtype="F32")
    return key, model, str(folder), str(path), ref


def test_config_from_gguf_equals_config_json(family):
    key, _, folder, path, _ = family
    ckpt = mx.open(path)
    ours = from_gguf(ckpt.metadata, set(ckpt.tensors))
    want = from_hf(json.load(open(f"{folder}/config.json")))
    assert _effective(ours) == _effective(want), key


@pytest.mark.parametrize("backend", ["numpy", "torch"])
def test_converted_f32_gguf_logits_equal_transformers(family, backend):
    key, _, _, path, ref = family
    ours = load_model(path, device="cpu", backend=backend).forward(IDS)
    assert np.abs(ours - ref).max() <= 1e-4 * np.abs(ref).max(), key
    assert np.abs(ref).max() > 1.0


def test_gguf_reader_sees_llamacpp_keys_and_names(family):
    key, model, folder, path, _ = family
    mt, arch, changes, _ = FAMILIES[key]
    keys, tensors = _reader(path)
    assert keys["general.architecture"] == arch
    assert keys[f"{arch}.block_count"] == model.config.num_hidden_layers
    kind = next(a for a, n in gguf.MODEL_ARCH_NAMES.items() if n == arch)
    known = {gguf.TENSOR_NAMES[t].format(bid=i) + s for t in gguf.MODEL_TENSORS[kind]
             for i in range(model.config.num_hidden_layers) for s in (".weight", ".bias")}
    assert set(tensors) <= known, set(tensors) - known
    if mt == "qwen2_moe":
        assert keys["qwen2moe.expert_count"] == 4 and keys["qwen2moe.expert_used_count"] == 2
        assert keys["qwen2moe.expert_feed_forward_length"] == 32
        assert keys["qwen2moe.expert_shared_feed_forward_length"] == 48
        assert keys.get("qwen2moe.expert_weights_norm", False) is changes["norm_topk_prob"]
        assert list(tensors["blk.1.ffn_gate_exps.weight"].shape) == [64, 32, 4]
        assert list(tensors["blk.1.ffn_gate_shexp.weight"].shape) == [64, 48]
        assert list(tensors["blk.1.ffn_gate_inp_shexp.weight"].shape) == [64, 1]
        assert "blk.1.attn_q.bias" in tensors
    state = _saved(folder)
    if mt == "gpt2":
        assert keys["gpt2.attention.layer_norm_epsilon"] == pytest.approx(1e-5) and keys["gpt2.context_length"] == 128
        assert "output.weight" not in tensors and "position_embd.weight" in tensors
        for gg, hf in (("attn_qkv", "attn.c_attn"), ("ffn_up", "mlp.c_fc"), ("ffn_down", "mlp.c_proj")):
            np.testing.assert_array_equal(np.asarray(tensors[f"blk.2.{gg}.weight"].data),
                                          state[f"transformer.h.2.{hf}.weight"].T)  # Conv1D [in, out] -> [out, in]
    if mt == "gpt_oss":
        assert keys["gpt-oss.expert_feed_forward_length"] == 96 and keys["gpt-oss.attention.sliding_window"] == 4
        assert keys["gpt-oss.rope.scaling.type"] == "yarn"
        gate_up = state["model.layers.2.mlp.experts.gate_up_proj"]  # [E, in, 2 x out], gate and up interleaved
        np.testing.assert_array_equal(np.asarray(tensors["blk.2.ffn_up_exps.weight"].data),
                                      gate_up[:, :, 1::2].transpose(0, 2, 1))
        np.testing.assert_array_equal(np.asarray(tensors["blk.2.ffn_gate_exps.bias"].data),
                                      state["model.layers.2.mlp.experts.gate_up_proj_bias"][:, ::2])
        assert list(tensors["blk.2.ffn_down_exps.weight"].shape) == [96, 64, 4]
        assert list(tensors["blk.2.attn_sinks.weight"].shape) == [4]
        assert "blk.2.post_attention_norm.weight" in tensors and "blk.2.ffn_gate_inp.bias" in tensors
    if mt == "deepseek_v3":
        assert keys["deepseek2.attention.head_count_kv"] == 1 and keys["deepseek2.expert_gating_func"] == 2
        assert keys["deepseek2.attention.key_length_mla"] == 16 + 8 if key == "deepseek_v3" else 8
        kv_b = state["model.layers.1.self_attn.kv_b_proj.weight"]
        nope, v = (16, 24) if key == "deepseek_v3" else (0, 16)
        heads = kv_b.reshape(4, nope + v, -1)
        np.testing.assert_array_equal(np.asarray(tensors["blk.1.attn_k_b.weight"].data),
                                      heads[:, :nope].transpose(0, 2, 1))
        np.testing.assert_array_equal(np.asarray(tensors["blk.1.attn_v_b.weight"].data), heads[:, nope:])
        assert "blk.1.exp_probs_b.bias" in tensors and "blk.1.ffn_gate_shexp.weight" in tensors
    if mt == "gpt_neox":
        assert keys["gptneox.rope.dimension_count"] == 16 * changes["rotary_pct"]
        assert keys["gptneox.use_parallel_residual"] is changes["use_parallel_residual"]
        qkv = np.asarray(tensors["blk.2.attn_qkv.bias"].data)
        hf = state["gpt_neox.layers.2.attention.query_key_value.bias"].reshape(4, 3, 16)
        np.testing.assert_array_equal(qkv, np.concatenate([hf[:, 0].ravel(), hf[:, 1].ravel(), hf[:, 2].ravel()]))


def test_gguf_converts_back_to_the_hugging_face_folder(family, tmp_path):
    """GGUF -> safetensors: Qwen2-MoE's experts split back, its shared expert under HF names, logits
    as the original's; the families whose tensors llama.cpp re-laid (GPT-2, NeoX, gpt-oss, DeepSeek)
    are refused by name."""
    from model_explorer.conversion import ConvertError

    key, _, folder, path, ref = family
    if FAMILIES[key][0] != "qwen2_moe":
        with pytest.raises(ConvertError, match="GGUF -> Hugging Face for .* is not written yet"):
            mx.convert(path, tmp_path / "back", format="safetensors", dtype="F32")
        return
    out = mx.convert(path, tmp_path / "back", format="safetensors", dtype="F32")
    original, back = _saved(folder), _saved(out)
    assert set(back) == set(original)
    for name, a in original.items():
        np.testing.assert_array_equal(back[name], a, err_msg=name)
    assert _effective(from_hf(json.load(open(f"{out}/config.json")))) == \
        _effective(from_hf(json.load(open(f"{folder}/config.json"))))
    model = transformers.AutoModelForCausalLM.from_pretrained(out).float().eval()
    with torch.no_grad():
        logits = model(torch.tensor([IDS])).logits[0].numpy()
    assert np.abs(logits - ref).max() <= 1e-4 * np.abs(ref).max(), key


class _OlderDeepseekWriter:
    """What llama.cpp's converter wrote before MLA's absorption: key/value_length the MHA head sizes,
    no *_mla keys, kv_b whole (attn_kv_b)."""

    def __init__(self, writer, head_dim: int, value_dim: int):
        self.writer, self.head_dim, self.value_dim = writer, head_dim, value_dim

    def __getattr__(self, name):
        return getattr(self.writer, name)

    def add_key_length(self, _):
        self.writer.add_key_length(self.head_dim)

    def add_value_length(self, _):
        self.writer.add_value_length(self.value_dim)

    def add_key_length_mla(self, _):
        pass

    def add_value_length_mla(self, _):
        pass


def test_older_deepseek2_gguf_with_attn_kv_b_runs(tmp_path, monkeypatch):
    from model_explorer.conversion import gguf_arch

    mt, _, changes, _ = FAMILIES["deepseek_v3"]
    _, ref = tiny_model(mt, changes, tmp_path)
    write = gguf_arch._deepseek2
    monkeypatch.setattr(gguf_arch, "_deepseek2", lambda w, c: write(_OlderDeepseekWriter(w, 24, 24), c))
    monkeypatch.setattr(gguf_arch, "_deepseek_kv_b", lambda t, c, cls: [cls(
        f"blk.{t.name.split('.')[2]}.attn_kv_b.weight", t.source, t.shape, t.transform)])
    path = str(mx.convert(tmp_path, tmp_path / "old.gguf", format="gguf", dtype="F32"))
    keys, tensors = _reader(path)
    assert "blk.1.attn_kv_b.weight" in tensors and "blk.1.attn_k_b.weight" not in tensors
    assert "deepseek2.attention.key_length_mla" not in keys and keys["deepseek2.attention.key_length"] == 24
    ours = load_model(path, device="cpu").forward(IDS)
    assert np.abs(ours - ref).max() <= 1e-4 * np.abs(ref).max()


def test_q8_0_gguf_runs_near_the_reference(family, tmp_path):
    """Q8_0 (norms, biases and an empty k_b stay F32): logits within the rounding's reach; DeepSeek's
    grouped routing of a tiny random model flips experts under any such noise (transformers too), so
    there only that it runs."""
    key, _, folder, _, ref = family
    warns = FAMILIES[key][3]
    with pytest.warns(UserWarning, match=warns) if warns else contextlib.nullcontext():
        path = str(mx.convert(folder, tmp_path / "m.Q8_0.gguf", format="gguf", dtype="Q8_0"))
    assert mx.open(path).dtype_mix().get("Q8_0", 0) > 0
    ours = load_model(path, device="cpu").forward(IDS)
    assert np.isfinite(ours).all()
    if not key.startswith("deepseek"):
        assert np.abs(ours - ref).max() <= 0.05 * np.abs(ref).max(), key


def test_built_in_names_agree_with_gguf_py(family):
    """Without gguf-py, the built-in tables name these families' tensors as gguf-py does (what
    llama.cpp's converter re-lays itself, gpt-oss's experts and sinks, DeepSeek's choice bias, aside)."""
    key, _, folder, _, _ = family
    arch = FAMILIES[key][1]
    for hf in _saved(folder):
        merged = names.merged_expert_name(hf) or hf
        want = names.hf_to_gguf(merged, arch)
        if want is not None and want.endswith((".weight", ".bias")):
            assert names._builtin_hf_to_gguf(merged, families.by_gguf_arch(arch).gguf_names) == want, hf


def test_gpt_oss_gguf_with_mxfp4_experts_runs_their_decoded_values(tmp_path, monkeypatch):
    """llama.cpp ships gpt-oss's experts as ggml MXFP4: the reader decodes them as gguf-py does, and
    load_model's logits equal transformers' given those decoded experts."""
    from gguf.quants import dequantize

    from model_explorer.conversion import writers

    mt, _, changes, _ = FAMILIES["gpt_oss"]
    model, _ = tiny_model(mt, changes, tmp_path)
    plain = writers._gguf_type
    monkeypatch.setattr(writers, "_gguf_type", lambda name, shape, dtype: gguf.GGMLQuantizationType.MXFP4
                        if name.endswith("_exps.weight") else plain(name, shape, dtype))
    path = str(mx.convert(tmp_path, tmp_path / "m.gguf", format="gguf", dtype="F32"))
    ckpt, (_, tensors) = mx.open(path), _reader(path)
    assert ckpt.tensors["blk.0.ffn_gate_exps.weight"].kind == "MXFP4"
    with torch.no_grad():
        for i, layer in enumerate(model.model.layers):
            gate, up, down = (ckpt.read(f"blk.{i}.ffn_{p}_exps.weight") for p in ("gate", "up", "down"))
            raw = tensors[f"blk.{i}.ffn_down_exps.weight"]
            np.testing.assert_array_equal(down, dequantize(raw.data, raw.tensor_type).reshape(down.shape))
            gate_up = np.empty((gate.shape[0], gate.shape[2], 2 * gate.shape[1]), np.float32)
            gate_up[:, :, ::2], gate_up[:, :, 1::2] = gate.transpose(0, 2, 1), up.transpose(0, 2, 1)
            layer.mlp.experts.gate_up_proj.copy_(torch.from_numpy(gate_up))
            layer.mlp.experts.down_proj.copy_(torch.from_numpy(down.transpose(0, 2, 1).copy()))
        ref = model(torch.tensor([IDS])).logits[0].numpy()
    ours = load_model(path, device="cpu").forward(IDS)
    assert np.abs(ours - ref).max() <= 1e-4 * np.abs(ref).max()


@pytest.mark.parametrize("key", ["qwen2_moe", "gpt_oss"])
def test_gguf_with_fused_gate_up_experts_runs(key, tmp_path, monkeypatch):
    """llama.cpp's converter with --fuse-gate-up-exps: ffn_gate_up_exps [experts, gate + up, in] (and
    gpt-oss's bias likewise) in place of ffn_gate_exps and ffn_up_exps."""
    from model_explorer.conversion import gguf_arch

    mt, _, changes, warns = FAMILIES[key]
    _, ref = tiny_model(mt, changes, tmp_path)
    plan_of = gguf_arch.tensor_plan

    def fused_plan(src, cls):
        arch, plan = plan_of(src, cls)
        by_name = {t.name: t for t in plan}
        for i in range(3):
            for kind in ("weight", "bias"):
                gate, up = (by_name.pop(f"blk.{i}.ffn_{p}_exps.{kind}", None) for p in ("gate", "up"))
                if gate is not None:
                    data = np.concatenate([src.read(gate), src.read(up)], axis=1)
                    by_name[f"blk.{i}.ffn_gate_up_exps.{kind}"] = cls(f"blk.{i}.ffn_gate_up_exps.{kind}", "",
                                                                      data.shape, data=data)
        return arch, list(by_name.values())
    monkeypatch.setattr(gguf_arch, "tensor_plan", fused_plan)
    with pytest.warns(UserWarning, match=warns) if warns else contextlib.nullcontext():
        path = str(mx.convert(tmp_path, tmp_path / "m.gguf", format="gguf", dtype="F32"))
    tensors = mx.open(path).tensors
    assert "blk.1.ffn_gate_up_exps.weight" in tensors and "blk.1.ffn_gate_exps.weight" not in tensors
    ours = load_model(path, device="cpu").forward(IDS)
    assert np.abs(ours - ref).max() <= 1e-4 * np.abs(ref).max(), key
