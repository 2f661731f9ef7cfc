"""PEFT adapters, differential against peft: a tiny LoRA on a tiny transformers Llama, saved by
peft itself, then one fault at a time."""

from __future__ import annotations

import json
import os

import numpy as np
import pytest

import model_explorer as mx
from model_explorer.model.adapters import read_adapter

from .conftest import only

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")
peft = pytest.importorskip("peft")

pytestmark = pytest.mark.reference


def tiny_llama(hidden: int = 64, seed: int = 0):
    torch.manual_seed(seed)
    cfg = transformers.LlamaConfig(vocab_size=64, hidden_size=hidden, intermediate_size=96, num_hidden_layers=2,
                                   num_attention_heads=4, num_key_value_heads=2, head_dim=16,
                                   max_position_embeddings=64, tie_word_embeddings=False)
    return transformers.LlamaForCausalLM(cfg)


def save_base(path, hidden: int = 64) -> str:
    tiny_llama(hidden).save_pretrained(str(path))
    return str(path)


def save_adapter(path, trained: bool = True, **lora) -> tuple[str, object]:
    kwargs = dict(r=4, lora_alpha=8, target_modules=["q_proj", "v_proj"], lora_dropout=0.0)
    kwargs.update(lora)
    model = peft.get_peft_model(tiny_llama(), peft.LoraConfig(**kwargs))
    if trained:
        with torch.no_grad():
            for name, p in model.named_parameters():
                if "lora_B" in name:
                    p.normal_(0, 0.05)
    model.save_pretrained(str(path))
    return str(path), model


def test_adapter_summary_matches_peft(tmp_path):
    path, model = save_adapter(tmp_path / "a", rank_pattern={"v_proj": 2})
    info = read_adapter(mx.open(path))
    pc = model.peft_config["default"]
    assert (info.peft_type, info.r, info.alpha) == ("LORA", pc.r, pc.lora_alpha)
    assert info.scaling == pc.lora_alpha / pc.r
    assert sorted(info.target_modules) == sorted(pc.target_modules)
    assert info.rank_pattern == {"v_proj": 2} and info.pairs == 4
    ckpt = mx.open(path)
    assert not [f for f in ckpt.findings if f.code.startswith("adapter")], [str(f) for f in ckpt.findings]
    assert "LORA r=4" in mx.card(path).adapter["summary"]


def test_untrained_adapter(tmp_path):
    path, _ = save_adapter(tmp_path / "a", trained=False)
    f = only(mx.open(path), "adapter_untrained")
    assert f.severity == "warning" and "lora_B" in f.message


def test_rank_disagreeing_with_config(tmp_path):
    path, _ = save_adapter(tmp_path / "a")
    cfg_path = os.path.join(path, "adapter_config.json")
    cfg = json.load(open(cfg_path))
    cfg["r"] = 8
    json.dump(cfg, open(cfg_path, "w"))
    hits = [f for f in mx.open(path).findings if f.code == "adapter_rank_mismatch"]
    assert len(hits) == 4 and "rank 4" in hits[0].message and "r says 8" in hits[0].message
    assert hits[0].fix and hits[0].offset is not None


def test_unpaired_lora_a(tmp_path):
    from safetensors.numpy import load_file, save_file

    path, _ = save_adapter(tmp_path / "a")
    f = os.path.join(path, "adapter_model.safetensors")
    state = load_file(f)
    gone = next(k for k in state if "layers.1.self_attn.q_proj.lora_B" in k)
    del state[gone]
    save_file(state, f)
    hit = only(mx.open(path), "adapter_unpaired")
    assert "model.layers.1.self_attn.q_proj" in hit.message and "no lora_B" in hit.message


def test_checked_against_the_base(tmp_path):
    path, _ = save_adapter(tmp_path / "a")
    ok = mx.open(path, base=save_base(tmp_path / "base"))
    assert not [f for f in ok.findings if f.code.startswith("adapter")], [str(f) for f in ok.findings]
    other = mx.open(path, base=save_base(tmp_path / "wide", hidden=128))
    hits = [f for f in other.findings if f.code == "adapter_base_mismatch"]
    assert len(hits) == 4 and "hidden size 64" in hits[0].message and "[64, 128]" in hits[0].message


def test_delta_norms_match_torch(tmp_path):
    path, model = save_adapter(tmp_path / "a")
    base = save_base(tmp_path / "base")
    table = mx.adapter_deltas(path, base)
    assert list(table["layer"]) == [0, 0, 1, 1]
    want = {}
    for name, module in model.named_modules():
        if hasattr(module, "lora_A") and "default" in getattr(module, "lora_A", {}):
            a, b = module.lora_A["default"].weight, module.lora_B["default"].weight
            key = name.removeprefix("base_model.model.")
            with torch.no_grad():
                want[key] = float((b @ a).norm()) * module.scaling["default"]
    ref = mx.open(base)
    for row in table.itertuples():
        assert row.delta_norm == pytest.approx(want[row.module], rel=1e-5)
        base_norm = float(np.linalg.norm(ref.read(row.module + ".weight").astype(np.float64)))
        assert row.relative == pytest.approx(want[row.module] / base_norm, rel=1e-5)
