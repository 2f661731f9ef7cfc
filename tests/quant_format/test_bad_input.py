"""Bad input: each finding names the tensor, says what was expected and found, and points at
its bytes; never a traceback, and never packed or unscaled codes passed off as weights."""

from __future__ import annotations

import pytest

import model_explorer as mx

from . import layouts as L

P = "model.layers.0.self_attn.q_proj."


def _open(tmp_path, tensors, quant, with_config=True):
    folder = L.write(tmp_path / "m", tensors, quant, with_config)
    return mx.open(str(folder)), L.offsets(folder)


def _one(ckpt, code):
    hits = [f for f in L.format_findings(ckpt) if f.code == code]
    assert hits, [(f.code, f.message) for f in L.format_findings(ckpt)]
    return hits[0]


def test_gptq_scales_wrong_group_count(tmp_path):
    tensors, quant = L.gptq(4, 32)
    tensors[P + "scales"] = ("F16", (3, 64))  # 64 inputs in groups of 32 is 2 groups
    ckpt, off = _open(tmp_path, tensors, quant)
    f = _one(ckpt, "quant_groups_mismatch")
    assert f.severity == "error" and f.tensor == P + "scales"
    assert (f.offset, f.length) == off[P + "scales"]
    assert f.extra["expected"] == [2, 64] and f.extra["found"] == [3, 64]
    assert "[2, 64]" in f.message and "[3, 64]" in f.message


def test_gptq_qweight_rows_disagree_with_bits(tmp_path):
    """qweight rows x 32 / bits must be in_features: 12 rows at 4 bits is 96, g_idx says 64."""
    tensors, quant = L.gptq(4, 32)
    tensors[P + "qweight"] = ("I32", (12, 64))
    ckpt, off = _open(tmp_path, tensors, quant)
    f = _one(ckpt, "quant_gidx_length")
    assert f.tensor == P + "g_idx" and (f.offset, f.length) == off[P + "g_idx"]
    assert f.extra == {"expected": [96], "found": [64]} and f.fix
    g = _one(ckpt, "quant_groups_mismatch")  # and the scales no longer cover the inputs
    assert g.tensor == P + "scales" and g.extra["expected"] == [3, 64]


def test_gptq_config_bits_disagree_with_zeros(tmp_path):
    tensors, quant = L.gptq(8, 32)
    quant["bits"] = 4
    ckpt, off = _open(tmp_path, tensors, quant)
    f = _one(ckpt, "quant_packed_shape")
    assert f.tensor == P + "qzeros" and (f.offset, f.length) == off[P + "qzeros"]
    assert (f.extra["expected"], f.extra["found"]) == (4, 8)
    assert ckpt.tensors[P + "weight"].label == "GPTQ_Q8"  # read as the tensors say


def test_gptq_gidx_wrong_length(tmp_path):
    tensors, quant = L.gptq(4, 32)
    tensors[P + "g_idx"] = ("I32", (63,))
    ckpt, off = _open(tmp_path, tensors, quant)
    f = _one(ckpt, "quant_gidx_length")
    assert f.severity == "error" and (f.offset, f.length) == off[P + "g_idx"]
    assert (f.extra["expected"], f.extra["found"]) == ([64], [63])


def test_qzeros_without_scales(tmp_path):
    tensors, quant = L.gptq(4, 32)
    del tensors[P + "scales"]
    for with_config in (True, False):
        ckpt, off = _open(tmp_path / str(with_config), tensors, quant, with_config)
        f = _one(ckpt, "quant_missing_companion")
        assert f.severity == "error" and P + "scales" in f.message
        assert f.offset in {o for o, _ in off.values()} and f.tensor.startswith(P)
        assert P + "weight" not in ckpt.tensors and P + "qweight" in ckpt.tensors  # left as stored
        assert not [x for x in L.format_findings(ckpt) if x.code.startswith("mlx_")]


def test_fp8_weight_without_scale(tmp_path):
    tensors, quant = L.fp8_block()
    del tensors["model.layers.0.mlp.proj0.weight_scale_inv"]
    ckpt, off = _open(tmp_path, tensors, quant)
    f = _one(ckpt, "quant_missing_companion")
    name = "model.layers.0.mlp.proj0.weight"
    assert f.tensor == name and (f.offset, f.length) == off[name]
    t = ckpt.tensors[name]
    assert not t.quant.usable and "weight_scale_inv" in t.quant.refusal


def test_ct_weight_without_scale(tmp_path):
    tensors, quant = L.ct_fp8("channel")
    del tensors[P + "weight_scale"]
    ckpt, off = _open(tmp_path, tensors, quant)
    f = _one(ckpt, "quant_missing_companion")
    assert f.tensor == P + "weight" and (f.offset, f.length) == off[P + "weight"]
    assert ckpt.tensors[P + "weight"].quant.usable is False


@pytest.mark.parametrize("blob", [b"not json at all!", b'["a list"]', b'{"quant_type": "nf4"}',
                                  b"\xff\xfe\x00garbage"])
def test_bnb_quant_state_not_json(tmp_path, blob):
    tensors, quant = L.bnb4("nf4", True)
    tensors[P + "weight.quant_state.bitsandbytes__nf4"] = ("U8", (len(blob),), blob)
    ckpt, off = _open(tmp_path, tensors, quant)
    f = _one(ckpt, "quant_state_invalid")
    name = P + "weight.quant_state.bitsandbytes__nf4"
    assert f.tensor == name and (f.offset, f.length) == off[name]
    t = ckpt.tensors[P + "weight"]
    assert not t.quant.usable and t.label == "BNB_NF4"


def test_bnb_absmax_wrong_count(tmp_path):
    tensors, quant = L.bnb4("fp4", False)
    tensors[P + "weight.absmax"] = ("F32", (63,))
    ckpt, off = _open(tmp_path, tensors, quant)
    f = _one(ckpt, "quant_groups_mismatch")
    assert (f.offset, f.length) == off[P + "weight.absmax"]
    assert (f.extra["expected"], f.extra["found"]) == (64, 63)


def test_bnb_packed_bytes_disagree_with_state_shape(tmp_path):
    tensors, quant = L.bnb4("nf4", True)
    tensors[P + "weight"] = ("U8", (1024, 1))  # the state says [64, 64]: 2048 bytes
    ckpt, off = _open(tmp_path, tensors, quant)
    f = _one(ckpt, "quant_packed_shape")
    assert (f.offset, f.length) == off[P + "weight"]
    assert (f.extra["expected"], f.extra["found"]) == (2048, 1024)


def test_ct_scale_wrong_groups(tmp_path):
    tensors, quant = L.ct_pack(4, 32)
    tensors[P + "weight_scale"] = ("BF16", (64, 4))
    ckpt, off = _open(tmp_path, tensors, quant)
    f = _one(ckpt, "quant_groups_mismatch")
    assert (f.offset, f.length) == off[P + "weight_scale"]
    assert (f.extra["expected"], f.extra["found"]) == ([64, 2], [64, 4])


def test_ct_packed_disagrees_with_weight_shape(tmp_path):
    tensors, quant = L.ct_pack(4, 32)
    tensors[P + "weight_packed"] = ("I32", (64, 7))
    ckpt, off = _open(tmp_path, tensors, quant)
    f = _one(ckpt, "quant_packed_shape")
    assert (f.offset, f.length) == off[P + "weight_packed"]
    assert (f.extra["expected"], f.extra["found"]) == ([64, 8], [64, 7])


def test_fp8_block_scale_wrong_grid(tmp_path):
    tensors, quant = L.fp8_block()
    name = "model.layers.0.mlp.proj0.weight_scale_inv"
    tensors[name] = ("F32", (1, 1))  # 200 rows in blocks of 128 need 2
    ckpt, off = _open(tmp_path, tensors, quant)
    f = _one(ckpt, "quant_groups_mismatch")
    assert f.tensor == name and (f.offset, f.length) == off[name]
    assert (f.extra["expected"], f.extra["found"]) == ([2, 1], [1, 1])


def test_mxfp4_without_scales(tmp_path):
    tensors, quant = L.mxfp4()
    name = "model.layers.0.mlp.experts.down_proj_blocks"
    del tensors["model.layers.0.mlp.experts.down_proj_scales"]
    ckpt, off = _open(tmp_path, tensors, quant)
    f = _one(ckpt, "quant_missing_companion")
    assert f.tensor == name and (f.offset, f.length) == off[name]
    assert ckpt.tensors[name].quant.usable is False


def test_sparse_bitmask_wrong_shape(tmp_path):
    tensors, quant = L.ct_sparse()
    tensors[P + "bitmask"] = ("U8", (64, 4))  # 64 columns need 8 bytes a row
    ckpt, off = _open(tmp_path, tensors, quant)
    f = _one(ckpt, "quant_groups_mismatch")
    assert (f.offset, f.length) == off[P + "bitmask"]
    assert (f.extra["expected"], f.extra["found"]) == ([64, 8], [64, 4])


def test_config_says_gptq_tensors_say_bnb(tmp_path):
    tensors, _ = L.bnb4("nf4", True)
    _, gptq_config = L.gptq(4)
    ckpt, off = _open(tmp_path, tensors, gptq_config)
    f = _one(ckpt, "quant_scheme_mismatch")
    assert f.severity == "error" and f.extra["expected"] == "gptq" and f.extra["found"] == "bnb_4bit"
    assert f.extra["count"] == len(L.PROJ) and (f.offset, f.length) == off[f.tensor]
    assert ckpt.tensors[P + "weight"].label == "BNB_NF4"  # read as the tensors say


def test_config_says_gptq_tensors_say_awq(tmp_path):
    tensors, _ = L.awq()
    _, gptq_config = L.gptq(4)
    ckpt, _ = _open(tmp_path, tensors, gptq_config)
    f = _one(ckpt, "quant_scheme_mismatch")
    assert (f.extra["expected"], f.extra["found"]) == ("gptq", "awq")
    assert ckpt.tensors[P + "weight"].label == "AWQ_Q4"
    assert ckpt.tensors[P + "weight"].shape == (64, 64)


def test_config_scheme_without_tensors(tmp_path):
    _, quant = L.gptq(4)
    ckpt, _ = _open(tmp_path, L.plain(), quant)
    assert [(f.severity, f.code) for f in L.format_findings(ckpt)] == [("warning", "quant_no_tensors")]


def test_invalid_config_bits_fall_back_to_shapes(tmp_path):
    tensors, quant = L.gptq(4, 32)
    quant["bits"] = 5
    ckpt, _ = _open(tmp_path, tensors, quant)
    f = _one(ckpt, "quant_config_invalid")
    assert f.severity == "warning" and "bits = 5" in f.message
    assert ckpt.tensors[P + "weight"].label == "GPTQ_Q4" and not L.format_errors(ckpt)


@pytest.mark.parametrize("junk", [None, 7, "gptq", [1], {"quant_method": 3},
                                  {"quant_method": "gptq", "bits": True, "group_size": "x",
                                   "dynamic": {"(": {}}}])
def test_junk_config_never_raises(tmp_path, junk):
    tensors, _ = L.gptq(4, 32)
    folder = L.write(tmp_path / "m", tensors, None)
    import json

    cfg = json.loads((folder / "config.json").read_text())
    cfg["quantization_config"] = junk
    (folder / "config.json").write_text(json.dumps(cfg))
    ckpt = mx.open(str(folder))
    assert ckpt.tensors[P + "weight"].label == "GPTQ_Q4"


@pytest.mark.parametrize("layout", ["gptq", "awq", "awq_gemv", "bnb4", "bnb8", "ct_pack",
                                    "ct_fp8", "ct_nvfp4", "fp8_block", "mxfp4", "sparse24",
                                    "sparse_bitmask"])
def test_mangled_shapes_and_dtypes_never_raise(tmp_path, layout):
    """Each component of one layer in turn with a wrong rank, a zero or odd dim, or another
    dtype: findings, never a traceback, never a broken logical shape."""
    build = {"gptq": L.gptq, "awq": L.awq, "awq_gemv": lambda: L.awq(version="gemv"),
             "bnb4": L.bnb4, "bnb8": L.bnb8, "ct_pack": L.ct_pack, "ct_fp8": L.ct_fp8,
             "ct_nvfp4": L.ct_nvfp4, "fp8_block": L.fp8_block, "mxfp4": L.mxfp4,
             "sparse24": L.ct_sparse, "sparse_bitmask": lambda: L.ct_sparse("sparse-bitmask")}[layout]
    base, quant = build()
    layer = "model.layers.0.mlp.proj0" if layout == "fp8_block" else \
        "model.layers.0.mlp.experts.down_proj" if layout == "mxfp4" else P[:-1]
    names = [n for n in base if n.startswith(layer) and len(base[n]) == 2]
    mangled = [("I32", ()), ("I32", (0,)), ("I32", (3,)), ("I32", (0, 4)), ("I32", (7, 3)),
               ("I32", (64, 0)), ("I32", (2, 3, 4)), ("U8", (1, 1, 1, 16)), ("U8", (5, 1)),
               ("F16", (64, 64)), ("F8_E4M3", (64, 64)), ("I64", (2,))]
    i = 0
    for name in names:
        for spec in mangled:
            tensors = dict(base)
            tensors[name] = spec
            folder = L.write(tmp_path / str(i), tensors, quant, with_config=i % 3 != 0)
            i += 1
            ckpt = mx.open(str(folder))
            for t in ckpt.tensors.values():
                assert all(type(d) is int and d >= 0 for d in t.shape)
            ckpt.summary()
