"""MLX-quantized safetensors: `.weight/.scales/.biases` triples read as one quantized tensor."""

from __future__ import annotations

import json

import numpy as np
import pytest
import safetensors.numpy

import model_explorer as mx

from .conftest import codes, finding, mlx_dir, write_index

W = "model.layers.0.mlp.up_proj.weight"
S = "model.layers.0.mlp.up_proj.scales"
B = "model.layers.0.mlp.up_proj.biases"


def test_triple_grouped_as_one_quantized_tensor(tmp_path):
    d, tensors = mlx_dir(tmp_path, bits=4, group=64)
    ckpt = mx.open(str(d))
    assert ckpt.findings == [], [str(f) for f in ckpt.findings]
    assert list(ckpt.tensors) == [W, "model.norm.weight"] or set(ckpt.tensors) == {W, "model.norm.weight"}
    t = ckpt.tensors[W]
    assert (t.label, t.dtype, t.shape, t.extra["packed_shape"]) == ("MLX_Q4", "U32", (8, 128), (8, 16))
    assert (t.quant.bits, t.quant.group_size) == (4, 64)
    assert t.quant.parts["scales"].name == S and t.quant.parts["biases"].name == B
    assert t.quant.parts["scales"].shape == (8, 2)
    assert ckpt.read_bytes(t.offset, t.length) == tensors[W].tobytes()
    assert ckpt.details["mlx"] == {"bits": 4, "group_size": 64}
    assert ckpt.metadata["config.json"]["quantization"] == {"group_size": 64, "bits": 4}


def test_quantization_config_key_and_single_file_open(tmp_path):
    d, _ = mlx_dir(tmp_path, bits=8, group=32,
                   config={"quantization_config": {"group_size": 32, "bits": 8}})
    ckpt = mx.open(str(d / "model.safetensors"))  # the file, not the folder: config.json still read
    assert ckpt.findings == []
    assert (ckpt.tensors[W].label, ckpt.tensors[W].shape) == ("MLX_Q8", (8, 128))


def test_per_layer_override(tmp_path):
    cfg = {"quantization": {"group_size": 64, "bits": 4,
                            "model.layers.0.mlp.up_proj": {"group_size": 32, "bits": 8}}}
    d, _ = mlx_dir(tmp_path, bits=8, group=32, config=cfg)
    ckpt = mx.open(str(d))
    assert ckpt.findings == []
    t = ckpt.tensors[W]
    assert (t.quant.bits, t.quant.group_size, t.shape) == (8, 32, (8, 128))
    assert t.quant.inferred is False


def test_sharded_mlx_directory(tmp_path):
    d, tensors = mlx_dir(tmp_path)
    (d / "model.safetensors").rename(d / "model-00001-of-00001.safetensors")
    write_index(d, {"metadata": {"total_size": sum(a.nbytes for a in tensors.values())},
                    "weight_map": {k: "model-00001-of-00001.safetensors" for k in tensors}})
    ckpt = mx.open(str(d))
    assert ckpt.findings == [], [str(f) for f in ckpt.findings]
    assert ckpt.tensors[W].label == "MLX_Q4"


def test_missing_scales(tmp_path):
    d, _ = mlx_dir(tmp_path, drop=(S, B))
    ckpt = mx.open(str(d))
    f = finding(ckpt, "mlx_missing_scales")
    w = ckpt.tensors[W]
    assert (f.offset, f.tensor, f.file) == (w.offset, W, w.file)


def test_missing_biases(tmp_path):
    d, _ = mlx_dir(tmp_path, drop=(B,))
    ckpt = mx.open(str(d))
    f = finding(ckpt, "mlx_missing_biases")
    assert (f.offset, f.tensor) == (ckpt.tensors[W].offset, W)
    assert ckpt.tensors[W].label == "MLX_Q4"  # still grouped: the scales are there


def test_scales_contradict_bits_and_group_size(tmp_path):
    # stored 8-bit, but the config says 4-bit (a per-layer override went missing)
    d, _ = mlx_dir(tmp_path, bits=8, group=64, config={"quantization": {"group_size": 64, "bits": 4}})
    ckpt = mx.open(str(d))
    f = finding(ckpt, "mlx_scales_shape")
    scales = ckpt.tensors[W].quant.parts["scales"]
    assert (f.offset, f.tensor) == (scales.offset, S)
    assert "bits=8, group_size=64" in f.message  # shapes alone are ambiguous: the stated group wins
    t = ckpt.tensors[W]
    assert (t.quant.bits, t.quant.group_size, t.quant.inferred, t.shape) == (8, 64, True, (8, 128))


@pytest.mark.parametrize("bits, group", [(4.0, 64), (4, 64.0), (True, 64)])
def test_non_integer_bits_or_group_size(tmp_path, bits, group):
    # 4.0 == 4, so a float passed the checks and made the logical shape (8, 128.0): read() then
    # raised TypeError. Now the config is wrong and the shapes decide.
    d, _ = mlx_dir(tmp_path, config={"quantization": {"group_size": group, "bits": bits}})
    ckpt = mx.open(str(d))
    assert finding(ckpt, "mlx_scales_shape").tensor == S
    t = ckpt.tensors[W]
    assert (type(t.quant.bits), t.quant.inferred, t.shape) == (int, True, (8, 128))
    assert ckpt.read(W).shape == (8, 128)


def test_scales_rows_do_not_match_weight(tmp_path):
    d = tmp_path / "bad"
    d.mkdir()
    safetensors.numpy.save_file({W: np.zeros((8, 16), np.uint32), S: np.ones((4, 2), np.float16),
                                 B: np.ones((4, 2), np.float16)}, str(d / "model.safetensors"))
    (d / "config.json").write_text(json.dumps({"quantization": {"group_size": 64, "bits": 4}}))
    ckpt = mx.open(str(d))
    f = finding(ckpt, "mlx_scales_shape")
    assert f.tensor == S and f.offset == mx.open(str(d / "model.safetensors")).findings[0].offset
    assert S in ckpt.tensors  # not grouped: shown as stored


def test_no_config_infers_bits_and_group(tmp_path):
    d, _ = mlx_dir(tmp_path, bits=4, group=64)
    (d / "config.json").unlink()
    ckpt = mx.open(str(d))
    assert finding(ckpt, "mlx_no_config").severity == "warning"
    t = ckpt.tensors[W]
    assert (t.quant.bits, t.quant.group_size) == (4, 64)


def test_float_mode_needs_no_biases(tmp_path):
    cfg = {"quantization": {"group_size": 32, "bits": 4, "mode": "mxfp4"}}
    d, _ = mlx_dir(tmp_path, bits=4, group=32, config=cfg, drop=(B,))
    ckpt = mx.open(str(d))
    assert "mlx_missing_biases" not in codes(ckpt)
    assert ckpt.tensors[W].quant.codec == "mlx_mxfp4"


def test_gptq_quantization_config_is_not_mlx(tmp_path):
    d, _ = mlx_dir(tmp_path, config={"quantization_config": {"bits": 4, "quant_method": "gptq"}})
    ckpt = mx.open(str(d))
    assert "mlx_missing_scales" not in codes(ckpt)
