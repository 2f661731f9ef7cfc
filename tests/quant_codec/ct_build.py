"""A tiny llama quantized and saved by compressed-tensors' own ModelCompressor (on the CPU),
and the same library's decompression of it as the reference values."""

from __future__ import annotations

import pytest

CT = {
    "w4a16": dict(num_bits=4, type="int", symmetric=True, strategy="group", group_size=32),
    "w4a16_asym": dict(num_bits=4, type="int", symmetric=False, strategy="group", group_size=32),
    "w3_asym_channel": dict(num_bits=3, type="int", symmetric=False, strategy="channel"),
    "w8_channel": dict(num_bits=8, type="int", symmetric=True, strategy="channel"),
    "fp8_tensor": dict(num_bits=8, type="float", symmetric=True, strategy="tensor"),
    "fp8_channel": dict(num_bits=8, type="float", symmetric=True, strategy="channel"),
    "fp8_block": dict(num_bits=8, type="float", symmetric=True, strategy="block",
                      block_structure=[32, 32]),
    "nvfp4": dict(num_bits=4, type="float", symmetric=True, strategy="tensor_group", group_size=16),
}


def tiny_llama():
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    cfg = transformers.LlamaConfig(vocab_size=128, hidden_size=64, intermediate_size=128,
                                   num_hidden_layers=1, num_attention_heads=4,
                                   num_key_value_heads=2)
    torch.manual_seed(0)
    return transformers.LlamaForCausalLM(cfg)


def save(path, case: str, dtype=None):
    """Quantize with min-max scales, compress, save; returns (model compressed, compressor)."""
    torch = pytest.importorskip("torch")
    pytest.importorskip("compressed_tensors")
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

    wargs = CT[case]
    if case == "nvfp4":
        wargs = dict(wargs, scale_dtype=torch.float8_e4m3fn)
    model = tiny_llama().to(dtype or torch.float32)
    qc = QuantizationConfig(config_groups={"group_0": QuantizationScheme(
        targets=["Linear"], weights=QuantizationArgs(**wargs))}, ignore=["lm_head"],
        quantization_status=QuantizationStatus.CALIBRATION)
    apply_quantization_config(model, qc)
    for mod in model.modules():
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
    model.save_pretrained(path)
    compressor.update_config(str(path))
    return model, compressor
