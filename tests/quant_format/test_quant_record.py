"""The Quant record: one word per concept (codec, label, stored dtype), frozen, and what a
TensorInfo derives from it (label, stored bytes, plain export)."""

from __future__ import annotations

import dataclasses

import pytest

from model_explorer.records import Quant, TensorInfo


def _t(name: str, dtype: str, shape: tuple[int, ...], offset: int, length: int, quant=None):
    return TensorInfo(name, dtype, shape, "m.safetensors", offset, length, quant=quant)


def test_label_codec_and_stored_dtype_are_three_things():
    qw, sc = _t("l.qweight", "I32", (8, 64), 0, 2048), _t("l.scales", "F16", (1, 64), 2048, 128)
    q = Quant(codec="gptq", label="GPTQ_Q4", bits=4, parts={"qweight": qw, "scales": sc})
    t = _t("l.weight", "I32", (64, 64), 0, 2048, q)
    assert (t.quant.codec, t.label, t.dtype) == ("gptq", "GPTQ_Q4", "I32")
    assert _t("x", "BF16", (2,), 0, 4).label == "BF16"  # no quantization: the stored dtype
    assert t.stored_bytes == 2048 + 128  # the main component is counted once


def test_frozen_and_keyword_only():
    q = Quant(codec="mxfp4", label="MXFP4", group_size=32)
    with pytest.raises(dataclasses.FrozenInstanceError):
        q.codec = "gptq"
    with pytest.raises(TypeError):
        Quant("mxfp4", "MXFP4")
    assert dataclasses.replace(q, inferred=True).inferred and not q.inferred


def test_refusal_is_a_status_not_a_codec():
    q = Quant(codec="bnb_4bit", label="BNB_NF4", refusal="missing absmax")
    assert not q.usable and q.codec == "bnb_4bit"
    assert Quant(codec="bnb_4bit", label="BNB_NF4").usable


def test_plain_export():
    s = _t("w.scale", "F32", (2, 2), 512, 16)
    q = Quant(codec="fp8_block", label="FP8_E4M3_B128", bits=8, sym=True, block=(128, 128),
              scale_dtype="F32", parts={"weight_scale_inv": s})
    d = _t("w", "F8_E4M3", (200, 64), 0, 512, q).to_dict()["quant"]
    assert d == {"codec": "fp8_block", "label": "FP8_E4M3_B128", "bits": 8, "group_size": None,
                 "sym": True, "block": [128, 128], "scale_dtype": "F32",
                 "parts": {"weight_scale_inv": "w.scale"}}


def test_every_scheme_parameter_is_exported():
    """A field added to Quant joins SCHEME_PARAMS, so params() and to_dict() carry it."""
    from model_explorer.records import SCHEME_PARAMS

    own = {"codec", "label", "parts", "bits", "group_size", "sym", "inferred", "refusal"}
    assert set(SCHEME_PARAMS) == {f.name for f in dataclasses.fields(Quant)} - own
    assert len(SCHEME_PARAMS) == len(set(SCHEME_PARAMS))


def test_affine_and_hdf5_parameters_export_as_plain_values():
    s, z = _t("w.scale", "F16", (4, 1), 64, 8), _t("w.zero", "U4", (4, 1), 72, 2)
    q = Quant(codec="affine", label="OV_U4", bits=4, signed=False, divide=False,
              parts={"scale": s, "zero_point": z}, scale_shape=(4, 1), zero_shape=(4, 1),
              round_to="F16")
    d = _t("w", "U4", (4, 16), 0, 32, q).to_dict()["quant"]
    assert d["scale_shape"] == [4, 1] and d["signed"] is False and d["round_to"] == "F16"
    assert d["parts"] == {"scale": "w.scale", "zero_point": "w.zero"} and "axis" not in d
    h = Quant(codec="h5py_dataset", label="F32", dataset="/model/dense/kernel", window=(0, 4096),
              filters=("deflate",))
    assert h.params() == {"dataset": "/model/dense/kernel", "window": [0, 4096], "filters": ["deflate"]}
