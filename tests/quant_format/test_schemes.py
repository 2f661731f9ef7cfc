"""Every Hub scheme is recognised from config.json: one logical tensor per layer, its kind,
components, logical parameter count, summary, and no false findings."""

from __future__ import annotations

import math

import pytest

import model_explorer as mx

from . import layouts as L

PLAIN_PARAMS = 2 * L.VOCAB * L.HIDDEN + 3 * L.HIDDEN
LINEAR_PARAMS = sum(o * i for o, i in L.PROJ.values())
Q = "model.layers.0.self_attn.q_proj.weight"

CASES = {
    # name: (builder, label, kind, main dtype, roles)
    "gptq4": (lambda: L.gptq(4), "GPTQ_Q4", "gptq", "I32", {"qweight", "qzeros", "scales", "g_idx"}),
    "gptq2": (lambda: L.gptq(2), "GPTQ_Q2", "gptq", "I32", {"qweight", "qzeros", "scales", "g_idx"}),
    "gptq3": (lambda: L.gptq(3), "GPTQ_Q3", "gptq", "I32", {"qweight", "qzeros", "scales", "g_idx"}),
    "gptq8_v2_nogroup": (lambda: L.gptq(8, -1, g_idx=False, version="gptq_v2"), "GPTQ_Q8", "gptq",
                         "I32", {"qweight", "qzeros", "scales"}),
    "awq_gemm": (lambda: L.awq(), "AWQ_Q4", "awq", "I32", {"qweight", "qzeros", "scales"}),
    "awq_gemv": (lambda: L.awq(version="gemv"), "AWQ_Q4", "awq", "I32", {"qweight", "qzeros", "scales"}),
    "bnb_nf4": (lambda: L.bnb4("nf4", True), "BNB_NF4", "bnb_4bit", "U8",
                {"weight", "absmax", "quant_map", "nested_absmax", "nested_quant_map", "quant_state"}),
    "bnb_fp4": (lambda: L.bnb4("fp4", False), "BNB_FP4", "bnb_4bit", "U8",
                {"weight", "absmax", "quant_map", "quant_state"}),
    "bnb_int8": (L.bnb8, "BNB_INT8", "bnb_int8", "I8", {"weight", "SCB", "weight_format"}),
    "ct_w4a16": (lambda: L.ct_pack(4), "CT_W4A16", "ct_pack", "I32",
                 {"weight_packed", "weight_scale", "weight_shape"}),
    "ct_w4a16_asym": (lambda: L.ct_pack(4, sym=False), "CT_W4A16", "ct_pack", "I32",
                      {"weight_packed", "weight_scale", "weight_shape", "weight_zero_point"}),
    "ct_w8a8": (L.ct_int8, "CT_W8A8", "ct_int", "I8", {"weight", "weight_scale"}),
    "ct_fp8_channel": (lambda: L.ct_fp8("channel"), "FP8_E4M3", "ct_float", "F8_E4M3",
                       {"weight", "weight_scale"}),
    "ct_fp8_tensor": (lambda: L.ct_fp8("tensor"), "FP8_E4M3", "ct_float", "F8_E4M3",
                      {"weight", "weight_scale"}),
    "ct_fp8_block": (lambda: L.ct_fp8("block"), "FP8_E4M3_B32", "ct_float", "F8_E4M3",
                     {"weight", "weight_scale"}),
    "ct_nvfp4": (L.ct_nvfp4, "NVFP4", "ct_nvfp4", "U8",
                 {"weight_packed", "weight_scale", "weight_global_scale"}),
    "ct_sparse24": (L.ct_sparse, "CT_SPARSE_24", "ct_sparse_24", "BF16",
                    {"compressed", "bitmask", "shape"}),
    "ct_sparse24_fp8": (lambda: L.ct_sparse(quantized=True), "CT_SPARSE_24", "ct_sparse_24",
                        "F8_E4M3", {"compressed", "bitmask", "shape", "weight_scale"}),
    "ct_sparse_bitmask": (lambda: L.ct_sparse("sparse-bitmask"), "CT_SPARSE", "ct_sparse_bitmask",
                          "BF16", {"compressed", "bitmask", "shape", "row_offsets"}),
}


@pytest.mark.parametrize("case", sorted(CASES))
@pytest.mark.parametrize("with_config", [True, False])
def test_scheme_recognised(tmp_path, case, with_config):
    build, label, codec, dtype, roles = CASES[case]
    tensors, quant = build()
    ckpt = mx.open(str(L.write(tmp_path / case, tensors, quant, with_config=with_config)))
    t = ckpt.tensors[Q]
    if not with_config and label.startswith("CT_W"):
        label = label[:-3] if label.endswith("A16") else label[:-2]  # activations: config only
    assert t.label == label
    assert t.quant.codec == codec
    assert t.dtype == dtype
    assert t.shape == L.PROJ["self_attn.q_proj"]
    assert set(t.quant.parts) == roles
    # components left ckpt.tensors; the logical tensors took their place
    assert not [n for n in ckpt.tensors if n.endswith((".qweight", ".scales", ".absmax", ".SCB",
                                                        "_scale", "_packed", "quant_map",
                                                        ".bitmask", ".compressed", ".shape"))]
    assert set(ckpt.tensors) == set(L.plain()) | {f"model.layers.0.{m}.weight" for m in L.PROJ}
    assert ckpt.parameter_count == PLAIN_PARAMS + LINEAR_PARAMS
    bad = [f for f in L.format_findings(ckpt) if f.severity in ("error", "warning")]
    assert not bad, bad
    inferred = [f for f in L.format_findings(ckpt) if f.code == "quant_inferred"]
    assert bool(inferred) != with_config
    if inferred:
        assert label in inferred[0].message and inferred[0].offset is not None
        assert t.quant.inferred is True
    s = ckpt.summary()["quantization"]
    assert s["label"] == label and s["codec"] == codec
    assert s["bits"] == t.quant.bits
    assert "lm_head" in s["unquantized_modules"]
    assert 2 < s["bits_per_weight"] < 20  # tiny layers: GEMV pads its scales; sparse BF16
    row = next(r for r in s["mix"] if r["label"] == label)
    assert row["parameters"] == LINEAR_PARAMS
    assert math.isclose(sum(r["share_parameters"] for r in s["mix"]), 1.0)
    assert s["text"].startswith(f"{s['bits_per_weight']:.3g} bits per weight: {label}")


def test_gptq_params(tmp_path):
    tensors, quant = L.gptq(4, 32)
    quant.update(desc_act=True, sym=False)
    ckpt = mx.open(str(L.write(tmp_path / "m", tensors, quant)))
    q = ckpt.tensors[Q].quant
    assert (q.bits, q.group_size, q.sym, q.act_order, q.checkpoint_format) == \
        (4, 32, False, True, "gptq")
    s = ckpt.summary()["quantization"]
    assert s["scheme"] == "gptq" and s["act_order"] is True and s["sym"] is False
    assert s["group_size"] == 32
    # 4 bits + fp16 scale and packed 4-bit zero per 32 weights + int32 g_idx per input column
    down = ckpt.tensors["model.layers.0.mlp.down_proj.weight"]
    assert down.shape == (64, 128) and down.extra["packed_shape"] == (16, 64)
    assert down.stored_bytes == 16 * 64 * 4 + 4 * 64 * 2 + 4 * 8 * 4 + 128 * 4


def test_gptq_dynamic_per_layer_bits(tmp_path):
    """GPTQModel's `dynamic` overrides: one layer at 8 bits, the rest at 4."""
    t4, quant = L.gptq(4, 32)
    t8, _ = L.gptq(8, 32)
    k = "model.layers.0.self_attn.k_proj."
    for r in ("qweight", "qzeros", "scales", "g_idx"):
        t4[k + r] = t8[k + r]
    quant["dynamic"] = {r"+:.*k_proj": {"bits": 8}}
    ckpt = mx.open(str(L.write(tmp_path / "m", t4, quant)))
    assert ckpt.tensors["model.layers.0.self_attn.k_proj.weight"].label == "GPTQ_Q8"
    assert ckpt.tensors[Q].label == "GPTQ_Q4"
    assert not L.format_errors(ckpt)


def test_fp8_block_partial_edges(tmp_path):
    tensors, quant = L.fp8_block()
    ckpt = mx.open(str(L.write(tmp_path / "m", tensors, quant)))
    t = ckpt.tensors["model.layers.0.mlp.proj0.weight"]
    assert t.label == "FP8_E4M3_B128" and t.shape == (200, 64)
    assert t.quant.block == (128, 128)
    assert set(t.quant.parts) == {"weight", "weight_scale_inv"}
    assert not [f for f in L.format_findings(ckpt) if f.severity != "info"]
    assert ckpt.summary()["quantization"]["block_size"] == [128, 128]
    # without config.json: still 128 x 128, and said so
    ckpt = mx.open(str(L.write(tmp_path / "n", tensors, quant, with_config=False)))
    assert ckpt.tensors["model.layers.0.mlp.proj1.weight"].label == "FP8_E4M3_B128"
    assert [f.code for f in L.format_findings(ckpt)] == ["quant_inferred"]


def test_mxfp4_gpt_oss(tmp_path):
    tensors, quant = L.mxfp4()
    ckpt = mx.open(str(L.write(tmp_path / "m", tensors, quant)))
    t = ckpt.tensors["model.layers.0.mlp.experts.gate_up_proj"]
    assert t.label == "MXFP4" and t.shape == (2, 128, 64) and t.quant.group_size == 32
    assert set(t.quant.parts) == {"blocks", "scales"}
    assert ckpt.tensors["model.layers.0.mlp.experts.down_proj"].shape == (2, 64, 64)
    assert "model.layers.0.mlp.experts.gate_up_proj_bias" in ckpt.tensors
    assert not [f for f in L.format_findings(ckpt) if f.severity != "info"]


@pytest.mark.parametrize("method", ["hqq", "quanto", "torchao", "eetq", "aqlm", "vptq", "higgs"])
def test_other_methods_named_not_decoded(tmp_path, method):
    tensors = L.plain()
    tensors["model.layers.0.self_attn.q_proj.W_q"] = ("U8", (2048, 1))
    ckpt = mx.open(str(L.write(tmp_path / "m", tensors, {"quant_method": method, "nbits": 4})))
    assert [(f.severity, f.code) for f in L.format_findings(ckpt)] == [("warning", "quant_not_decoded")]
    assert method in L.format_findings(ckpt)[0].message
    s = ckpt.summary()["quantization"]
    assert s["scheme"] == method and s["decoded"] is False


def test_gptq_is_not_mlx(tmp_path):
    """The bug of issue 11: GPTQ .scales sent the model down the MLX path."""
    tensors, quant = L.gptq(4)
    for with_config in (True, False):
        ckpt = mx.open(str(L.write(tmp_path / str(with_config), tensors, quant, with_config)))
        assert not [f for f in L.format_findings(ckpt) if f.code.startswith("mlx_")]
        assert not L.format_errors(ckpt)


def test_unquantized_model_has_no_quant_summary(tmp_path):
    tensors = L.plain()
    ckpt = mx.open(str(L.write(tmp_path / "m", tensors, None)))
    assert ckpt.summary()["quantization"] is None
    assert not L.format_findings(ckpt)
