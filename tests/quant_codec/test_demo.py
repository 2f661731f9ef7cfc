"""mx.load_model runs llama-family folders in Hub quantization schemes through read(): its
logits equal transformers' on the dequantized weights, and on the same folder where
transformers itself loads it on the CPU; what cannot be decoded is refused by name."""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path

import pytest

from model_explorer.model.config import UnsupportedModel
from model_explorer.records import Quant
from model_explorer.runtime import load_model

from . import layouts as L

pytestmark = pytest.mark.reference
IDS = [1, 72, 101, 108, 108, 111, 3, 200, 17, 5, 99, 45]
PROJ = ("self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj", "self_attn.o_proj",
        "mlp.gate_proj", "mlp.up_proj", "mlp.down_proj")


def demo_helpers():
    """tests/runtime/conftest.py's tiny llama, tokenizer and transformers reference helpers."""
    name = "demo_conftest_for_quant"
    if name not in sys.modules:
        path = Path(__file__).parent.parent / "runtime" / "conftest.py"
        spec = importlib.util.spec_from_file_location(name, path)
        mod = importlib.util.module_from_spec(spec)
        sys.modules[name] = mod
        spec.loader.exec_module(mod)
    return sys.modules[name]


@pytest.fixture(autouse=True)
def grouped_open(monkeypatch):
    """Until the format side groups at open, group the components by hand after opening."""
    import model_explorer.opener as opener

    real = opener.open

    def open_and_group(*a, **k):
        ckpt = real(*a, **k)
        L.group(ckpt)
        return ckpt
    monkeypatch.setattr(opener, "open", open_and_group)


def quantized_llama(tmp_path, scheme: str, drop: str | None = None):
    """A tiny llama whose seven projections per layer are quantized; returns the folder, the
    config, and the state with the weights each scheme dequantizes to."""
    h = demo_helpers()
    cfg = h.tiny_config("llama")
    state = h.random_state(cfg)
    tensors, deq = {}, dict(state)
    for name, w in state.items():
        base = name[:-len(".weight")]
        if not any(base.endswith(p) for p in PROJ):
            tensors[name] = w
            continue
        if scheme == "gptq":
            t, exp = L.gptq_layer(base, w, 4, 32, sym=False, desc_act=True)
            quant = L.gptq_config(4, 32, False, True)
        elif scheme == "awq":
            t, exp = L.awq_layer(base, w, 32)
            quant = L.awq_config(32)
        elif scheme == "fp8":
            t, exp = L.fp8_block_layer(base, w, (32, 32))
            quant = L.fp8_config((32, 32))
        elif scheme == "bnb":
            t, exp = L.bnb4_layer_real(base, w, "nf4", True)
            quant = L.bnb_config()
        else:
            args = L.ct_args("pack-quantized", bits=4, strategy="group", group=32, sym=True)
            t, exp = L.ct_layer_real(base, w, "pack-quantized", args)
            quant = L.ct_config("pack-quantized", args)
        tensors.update(t)
        deq[name] = exp
    if drop:
        tensors = {k: v for k, v in tensors.items() if not k.endswith(drop)}
    folder = L.write_folder(tmp_path / scheme, tensors, quant, {**cfg, "torch_dtype": "float32"})
    h.write_tokenizer_files(str(folder), h.tiny_vocab(cfg["vocab_size"]))
    return folder, cfg, deq, h


@pytest.mark.parametrize("scheme", ["gptq", "awq", "fp8", "bnb", "ct"])
def test_logits_match_transformers_on_dequantized_weights(tmp_path, scheme):
    pytest.importorskip("torch")
    pytest.importorskip("transformers")
    if scheme == "bnb":
        pytest.importorskip("bitsandbytes")
    if scheme == "ct":
        pytest.importorskip("compressed_tensors")
    folder, cfg, deq, h = quantized_llama(tmp_path, scheme)
    model = load_model(folder, device="cpu")
    ours = model.forward(IDS)
    ref = h.reference_logits(h.hf_model_from(cfg, deq), IDS)
    assert h.rel_error(ours, ref) < 1e-4
    assert {r.dtype for r in model.dequant.rows if "proj" in r.name} != {"F32"}


@pytest.mark.slow
@pytest.mark.parametrize("scheme", ["fp8", "ct"])
def test_logits_match_transformers_loading_the_same_folder(tmp_path, scheme):
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    if scheme == "ct":
        pytest.importorskip("compressed_tensors")
    folder, cfg, deq, h = quantized_llama(tmp_path, scheme)
    try:
        hf = transformers.AutoModelForCausalLM.from_pretrained(str(folder), dtype=torch.float32,
                                                               device_map="cpu")
    except Exception as e:  # a transformers build that cannot load this scheme on the CPU
        pytest.skip(f"transformers cannot load {scheme} on the CPU here: {e}")
    hf.eval()
    ref = h.reference_logits(hf, IDS)
    ours = load_model(folder, device="cpu").forward(IDS)
    assert h.rel_error(ours, ref) < 1e-4


def test_unscaled_fp8_is_refused_by_name(tmp_path):
    """FP8 codes whose scales are missing: today's silent unscaled run is refused, naming FP8
    (as raw F8_E4M3 codes before the format side groups, as an unusable FP8 layer after)."""
    folder, *_ = quantized_llama(tmp_path, "fp8", drop="_scale_inv")
    with pytest.raises(UnsupportedModel, match=r"(?s)(F8_E4M3|FP8).*(unscaled|cannot)"):
        load_model(folder, device="cpu")


def test_undecodable_scheme_is_refused_by_name(tmp_path, monkeypatch):
    import model_explorer.opener as opener

    folder, *_ = quantized_llama(tmp_path, "gptq")
    grouped = opener.open

    def mark_unusable(*a, **k):
        ckpt = grouped(*a, **k)
        info = ckpt.tensors["model.layers.0.mlp.up_proj.weight"]
        info.quant = Quant(codec="gptq", label="GPTQ_Q4", refusal="qzeros missing")
        return ckpt
    monkeypatch.setattr(opener, "open", mark_unusable)
    with pytest.raises(UnsupportedModel, match="GPTQ_Q4.*qzeros missing"):
        load_model(folder, device="cpu")
    cfg = json.loads((folder / "config.json").read_text())
    assert cfg["quantization_config"]["quant_method"] == "gptq"
