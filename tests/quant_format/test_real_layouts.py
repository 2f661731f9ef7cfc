"""Checkpoints written by the libraries themselves on the CPU: transformers + bitsandbytes
`save_pretrained` (NF4 with double quant, FP4, LLM.int8) and compressed-tensors'
ModelCompressor (pack-quantized, naive/float-quantized, NVFP4). Every quantized linear
becomes one logical tensor of the base model's shape, with no false finding."""

from __future__ import annotations

import json

import pytest

import model_explorer as mx

from . import layouts as L

pytestmark = [pytest.mark.reference, pytest.mark.slow]

LINEARS = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")


def _tiny_llama():
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    cfg = transformers.LlamaConfig(vocab_size=128, hidden_size=64, intermediate_size=128,
                                   num_hidden_layers=1, num_attention_heads=4,
                                   num_key_value_heads=2)
    torch.manual_seed(0)
    return transformers.LlamaForCausalLM(cfg)


@pytest.fixture(scope="module")
def base(tmp_path_factory):
    model = _tiny_llama().half()
    path = tmp_path_factory.mktemp("base")
    model.save_pretrained(path)
    return path, mx.open(str(path))


def _check(ckpt, base_ckpt, label):
    assert set(ckpt.tensors) == set(base_ckpt.tensors)
    for name, t in ckpt.tensors.items():
        assert t.shape == base_ckpt.tensors[name].shape, name
        if any(f".{m}." in name for m in LINEARS):
            assert t.label == label, name
    assert ckpt.parameter_count == base_ckpt.parameter_count
    assert not [f for f in L.format_findings(ckpt) if f.severity != "info"], L.format_findings(ckpt)
    s = ckpt.summary()["quantization"]
    assert s["label"] == label and s["mix"][0]["label"] == label


@pytest.mark.parametrize("quant_type,nested,label", [("nf4", True, "BNB_NF4"),
                                                     ("fp4", False, "BNB_FP4"),
                                                     ("int8", False, "BNB_INT8")])
def test_bitsandbytes_save_pretrained(base, tmp_path, quant_type, nested, label):
    pytest.importorskip("bitsandbytes")
    transformers = pytest.importorskip("transformers")
    if quant_type == "int8":
        qc = transformers.BitsAndBytesConfig(load_in_8bit=True)
    else:
        qc = transformers.BitsAndBytesConfig(load_in_4bit=True, bnb_4bit_quant_type=quant_type,
                                             bnb_4bit_use_double_quant=nested)
    try:
        model = transformers.AutoModelForCausalLM.from_pretrained(
            str(base[0]), quantization_config=qc, device_map="cpu")
    except Exception as e:  # a bitsandbytes build without CPU quantization
        pytest.skip(f"bitsandbytes cannot quantize on this CPU: {e}")
    model.save_pretrained(tmp_path)
    ckpt = mx.open(str(tmp_path))
    _check(ckpt, base[1], label)
    q = ckpt.tensors["model.layers.0.self_attn.q_proj.weight"].quant
    if quant_type != "int8":
        assert q.quant_type == quant_type and q.nested is nested and q.group_size == 64
        assert q.dequant_dtype == "float16"


CT = {
    "w4a16": (dict(num_bits=4, type="int", symmetric=True, strategy="group", group_size=32), "CT_W4A16"),
    "w4a16_asym": (dict(num_bits=4, type="int", symmetric=False, strategy="group", group_size=32),
                   "CT_W4A16"),
    "w8_channel": (dict(num_bits=8, type="int", symmetric=True, strategy="channel"), "CT_W8A16"),
    "fp8_tensor": (dict(num_bits=8, type="float", symmetric=True, strategy="tensor"), "FP8_E4M3"),
    "fp8_block": (dict(num_bits=8, type="float", symmetric=True, strategy="block",
                       block_structure=[32, 32]), "FP8_E4M3_B32"),
    "nvfp4": (dict(num_bits=4, type="float", symmetric=True, strategy="tensor_group",
                   group_size=16), "NVFP4"),
}


@pytest.mark.parametrize("case", sorted(CT))
def test_compressed_tensors_compressor(base, tmp_path, case):
    torch = pytest.importorskip("torch")
    ct = pytest.importorskip("compressed_tensors")
    from compressed_tensors.compressors import ModelCompressor
    from compressed_tensors.quantization import (
        QuantizationArgs,
        QuantizationConfig,
        QuantizationScheme,
        QuantizationStatus,
        apply_quantization_config,
    )
    from compressed_tensors.quantization.utils import calculate_qparams
    from compressed_tensors.quantization.utils.helpers import generate_gparam

    wargs, label = CT[case]
    if case == "nvfp4":
        wargs = dict(wargs, scale_dtype=torch.float8_e4m3fn)
    model = _tiny_llama().to(torch.bfloat16)
    qc = QuantizationConfig(config_groups={"group_0": QuantizationScheme(
        targets=["Linear"], weights=QuantizationArgs(**wargs))}, ignore=["lm_head"],
        quantization_status=QuantizationStatus.CALIBRATION)
    apply_quantization_config(model, qc)
    for mod in model.modules():  # min-max scales, as an observer would set them
        a = getattr(getattr(mod, "quantization_scheme", None), "weights", None)
        if a is None:
            continue
        w = mod.weight.data.float()
        gs = None
        if a.strategy == "tensor_group":
            gs = generate_gparam(w.min(), w.max())
            mod.weight_global_scale.data.copy_(gs)
        if a.strategy in ("group", "tensor_group"):
            g = w.reshape(w.shape[0], -1, a.group_size)
            lo, hi = g.amin(-1), g.amax(-1)
        elif a.strategy == "channel":
            lo, hi = w.amin(1, keepdim=True), w.amax(1, keepdim=True)
        elif a.strategy == "block":
            r, c = a.block_structure
            b = w.reshape(w.shape[0] // r, r, w.shape[1] // c, c)
            lo, hi = b.amin((1, 3)), b.amax((1, 3))
        else:
            lo, hi = w.min().reshape(1), w.max().reshape(1)
        scale, zero = calculate_qparams(lo, hi, a, global_scale=gs)
        mod.weight_scale.data.copy_(scale.reshape(mod.weight_scale.shape))
        if hasattr(mod, "weight_zero_point"):
            mod.weight_zero_point.data.copy_(zero.reshape(mod.weight_zero_point.shape))
    compressor = ModelCompressor.from_pretrained_model(model)
    compressor.compress_model(model)
    model.save_pretrained(tmp_path)
    compressor.update_config(str(tmp_path))
    assert json.loads((tmp_path / "config.json").read_text())["quantization_config"]["quant_method"] \
        == "compressed-tensors"
    ckpt = mx.open(str(tmp_path))
    _check(ckpt, base[1], label)
    assert ct.__version__
