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
