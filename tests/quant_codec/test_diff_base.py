"""mx.diff between a Hub-quantized folder and its float base: the quantized layers are logical
tensors named like the base's, so each row is that layer's quantization error."""

from __future__ import annotations

import numpy as np
import pytest

import model_explorer as mx

from . import layouts as L

LAYERS = ["model.layers.0.self_attn.q_proj", "model.layers.0.mlp.down_proj"]
PLAIN = {"model.embed_tokens.weight": L.weight(32, 64, seed=5),
         "model.layers.0.input_layernorm.weight": np.ones(64, np.float32)}


def _folders(tmp_path, layer, quant):
    base, quantized = dict(PLAIN), dict(PLAIN)
    expected = {}
    for i, name in enumerate(LAYERS):
        w = L.weight(96, 64, seed=i)
        base[name + ".weight"] = w
        t, expected[name + ".weight"] = layer(name, w)
        quantized.update(t)
    return (L.write_folder(tmp_path / "base", base, None),
            L.write_folder(tmp_path / "quant", quantized, quant), base, expected)


SCHEMES = {
    "gptq4": (lambda n, w: L.gptq_layer(n, w, 4, 32), L.gptq_config(4, 32), "GPTQ_Q4", 0.2),
    "fp8_block": (lambda n, w: L.fp8_block_layer(n, w, (32, 32)), L.fp8_config((32, 32)), "FP8_E4M3_B32", 0.05),
}


@pytest.mark.parametrize("scheme", SCHEMES)
def test_diff_against_base_gives_quantization_error(tmp_path, scheme):
    layer, quant, label, bound = SCHEMES[scheme]
    base, quantized, weights, expected = _folders(tmp_path, layer, quant)
    table = mx.diff(base, quantized).set_index("name")
    assert set(table.index) == set(weights) and table["name_b"].notna().all()
    for name in PLAIN:
        assert table.loc[name, "status"] == "same" and table.loc[name, "max_abs_diff"] == 0
    for name, exp in expected.items():
        row = table.loc[name]
        # a dtype change (F32 -> the scheme), values compared: the layer's quantization error
        assert row["status"] == "dtype" and (row["dtype_a"], row["dtype_b"]) == ("F32", label)
        assert row["shape_a"] == row["shape_b"] == [96, 64]
        w = weights[name].astype(np.float64)
        err = np.linalg.norm(w - exp) / np.linalg.norm(w)
        assert row["rel_l2"] == pytest.approx(err, rel=1e-5) and 0 < row["rel_l2"] < bound
        assert row["max_abs_diff"] == pytest.approx(np.abs(w - exp).max(), rel=1e-6)
        assert row["cosine"] > 0.97
    # the table ranks the layers the scheme hurt most
    ranked = table.sort_values("rel_l2", ascending=False)
    assert ranked.index[0] in expected and table["rel_l2"].dtype == np.float64
