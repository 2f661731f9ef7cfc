"""Checkpoint.blocks: stored fields that explain the decoded values, and the error vs a reference."""

from __future__ import annotations

import json

import numpy as np
import pytest
from gguf import GGMLQuantizationType as Q
from gguf import quants

from .conftest import pack_mlx, write_gguf, write_safetensors
from .test_dequant import random_blocks

RNG = np.random.default_rng(5)


def _ckpt(tmp_path, opened, name, n_blocks=8):
    blocks = random_blocks(name, n_blocks, RNG)
    path = write_gguf(tmp_path / "b.gguf", {"w": (blocks.reshape(2, -1), Q[name])})
    return opened(path), blocks


def test_q8_0_fields_explain_values(tmp_path, opened):
    data = RNG.normal(0, 0.02, size=(4, 128)).astype(np.float32)
    raw = quants.quantize(data, Q.Q8_0)
    ckpt = opened(write_gguf(tmp_path / "q.gguf", {"w": (raw, Q.Q8_0)}))
    b = ckpt.blocks("w", reference=data, start=3, count=4)
    assert b.n_blocks == 16 and b.start == 3 and b.codes.shape == (4, 32)
    assert np.array_equal(b.values, b.scale[:, None] * b.codes.astype(np.float32))
    assert np.array_equal(b.error, b.values - data.reshape(-1, 32)[3:7])
    assert b.offsets[0] == ckpt.tensors["w"].offset + 3 * 34
    tbl = b.table()
    assert list(tbl["block"]) == [3, 4, 5, 6] and (tbl["max_abs_error"] < 0.001).all()
    json.dumps(b.to_dict(), allow_nan=False)


def test_q4_0_and_q4_1_formulas(tmp_path, opened):
    ckpt, _ = _ckpt(tmp_path, opened, "Q4_0")
    b = ckpt.blocks("w")
    assert np.array_equal(b.values, b.scale[:, None] * b.codes.astype(np.float32))
    assert b.codes.min() >= -8 and b.codes.max() <= 7
    ckpt2, _ = _ckpt(tmp_path / "x", opened, "Q4_1")
    b = ckpt2.blocks("w")
    assert np.array_equal(b.values, b.scale[:, None] * b.codes + b.min[:, None])


def test_q4_k_sub_scales_and_mins(tmp_path, opened):
    ckpt, _ = _ckpt(tmp_path, opened, "Q4_K")
    b = ckpt.blocks("w", count=3)
    assert b.sub_scales.shape == (3, 8) and b.codes.max() <= 15
    d = (b.scale[:, None] * b.sub_scales.astype(np.float32))[:, :, None]
    m = (b.min[:, None] * b.sub_mins.astype(np.float32))[:, :, None]
    expected = (d * b.codes.reshape(3, 8, 32).astype(np.float32) - m).reshape(3, 256)
    assert np.array_equal(b.values, expected)


@pytest.mark.parametrize("name", ["Q5_0", "Q5_1", "Q2_K", "Q3_K", "Q5_K", "Q6_K", "IQ4_NL", "IQ4_XS",
                                  "TQ2_0", "MXFP4", "IQ2_XXS"])
def test_every_type_gives_fields(tmp_path, opened, name):
    ckpt, _ = _ckpt(tmp_path, opened, name)
    b = ckpt.blocks("w", count=100)
    assert len(b.values) == 8 and b.scale is not None and len(b.scale) == 8
    if name != "IQ2_XXS":
        assert b.codes.shape == b.values.shape


def test_q6_k_codes_are_signed(tmp_path, opened):
    ckpt, _ = _ckpt(tmp_path, opened, "Q6_K")
    b = ckpt.blocks("w")
    assert b.codes.min() >= -32 and b.codes.max() <= 31
    d = (b.scale[:, None] * b.sub_scales.astype(np.float32))[:, :, None]
    assert np.array_equal(b.values, (d * b.codes.reshape(-1, 16, 16).astype(np.float32)).reshape(-1, 256))


def test_mlx_groups(tmp_path, opened):
    codes = RNG.integers(0, 8, size=(4, 96))
    scales = RNG.normal(size=(4, 3)).astype(np.float16)
    biases = RNG.normal(size=(4, 3)).astype(np.float16)
    write_safetensors(tmp_path / "model.safetensors", {
        "l.weight": pack_mlx(codes, 3), "l.scales": scales, "l.biases": biases},
        config={"quantization": {"bits": 3, "group_size": 32}})
    ckpt = opened(str(tmp_path))
    b = ckpt.blocks("l.weight", start=2, count=5)
    assert b.n_blocks == 12 and b.block_elems == 32
    assert np.array_equal(b.codes, codes.reshape(-1, 32)[2:7])
    assert np.array_equal(b.scale, scales.astype(np.float32).ravel()[2:7])
    assert np.array_equal(b.values, b.scale[:, None] * b.codes + b.min[:, None])


def test_plain_tensor_has_no_blocks(tmp_path, opened):
    ckpt = opened(write_gguf(tmp_path / "p.gguf", {"w": np.zeros((2, 32), np.float32)}))
    with pytest.raises(ValueError, match="not quantized"):
        ckpt.blocks("w")


def test_plot_draws_the_histogram(tmp_path, opened):
    import matplotlib

    matplotlib.use("Agg")
    data = RNG.normal(size=(4, 64)).astype(np.float32)
    raw = quants.quantize(data, Q.Q8_0)
    ckpt = opened(write_gguf(tmp_path / "p.gguf", {"w": (raw, Q.Q8_0), "f": data}))
    ax = ckpt.plot("w", bins=16, log=True)
    assert ax.get_yscale() == "log" and "Q8_0" in ax.get_title()
    assert ckpt.plot("w", scales=True).get_title().endswith("block scales)")
    with pytest.raises(ValueError, match="no block scales"):
        ckpt.plot("f", scales=True)
