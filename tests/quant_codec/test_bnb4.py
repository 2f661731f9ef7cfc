"""bitsandbytes NF4/FP4, plain and double-quantized: quantized and serialized by bitsandbytes
itself (QuantState.as_dict(packed=True), the tensors save_pretrained writes), read back equal
to bitsandbytes' own dequantize_4bit on the CPU."""

from __future__ import annotations

import numpy as np
import pytest
from quant_format import layouts as L

import model_explorer as mx

P = "model.layers.0.mlp.down_proj."


@pytest.mark.parametrize("qt,nested", [("nf4", True), ("nf4", False), ("fp4", True), ("fp4", False)])
def test_bnb4_equals_dequantize_4bit(tmp_path, qt, nested):
    torch = pytest.importorskip("torch")
    F = pytest.importorskip("bitsandbytes.functional")
    st_torch = pytest.importorskip("safetensors.torch")
    torch.manual_seed(0)
    w = torch.randn(64, 128) * 0.05
    try:
        packed, state = F.quantize_4bit(w, blocksize=64, quant_type=qt, compress_statistics=nested)
    except Exception as e:  # a bitsandbytes build without CPU 4-bit
        pytest.skip(f"bitsandbytes cannot quantize on this CPU: {e}")
    want = F.dequantize_4bit(packed, state).float().numpy()
    tensors = {k: torch.zeros(v[1], dtype=torch.float16) for k, v in L.plain().items()}
    tensors[P + "weight"] = packed
    for k, v in state.as_dict(packed=True).items():
        tensors[P + "weight." + k] = v
    tmp_path.mkdir(exist_ok=True)
    st_torch.save_file(tensors, str(tmp_path / "model.safetensors"))
    (tmp_path / "config.json").write_text(__import__("json").dumps(L.config(
        {"quant_method": "bitsandbytes", "load_in_4bit": True, "bnb_4bit_quant_type": qt,
         "bnb_4bit_use_double_quant": nested})))
    ck = mx.open(str(tmp_path))
    assert ck.tensors[P + "weight"].kind == f"BNB_{qt.upper()}"
    got = ck.read(P + "weight")
    np.testing.assert_array_equal(got, want)
    np.testing.assert_array_equal(ck.read(P + "weight", rows=slice(7, 30, 3)), want[7:30:3])
