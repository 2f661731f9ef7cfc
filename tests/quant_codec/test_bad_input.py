"""Broken quantized layers give a clear ValueError naming the tensor, never packed or unscaled
values: g_idx out of range, NaN/Inf/zero scales, component shapes that do not fit, kinds the
format side marked unusable or that have no decoder."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from model_explorer.records import Quant
from model_explorer.tensors.read import Undecodable

from . import layouts as L

BASE = "model.layers.0.mlp.down_proj"
NAME = BASE + ".weight"


def gptq(tmp_path, edit):
    t, _ = L.gptq_layer(BASE, L.weight(96, 64), 4, 32)
    edit(t)
    return L.open_grouped(L.write_folder(tmp_path / "m", t, L.gptq_config(4, 32)))


def refused(ckpt, match, name=NAME):
    with pytest.raises(ValueError, match=match) as e:
        ckpt.read(name)
    # found while planning: an Undecodable carrying the finding; while decoding: a ValueError
    # naming the component (Checkpoint turns both into an `undecodable` finding)
    assert BASE in str(e.value)
    if isinstance(e.value, Undecodable):
        assert e.value.finding.tensor == name
    with pytest.raises(ValueError, match=match):
        ckpt.stats(name)


def test_g_idx_out_of_range(tmp_path):
    def edit(t):
        t[BASE + ".g_idx"][7] = 9
    refused(gptq(tmp_path, edit), r"g_idx'\[7\] = 9 is out of range")


@pytest.mark.parametrize("bad", [np.nan, np.inf, 0.0])
def test_bad_gptq_scale(tmp_path, bad):
    def edit(t):
        t[BASE + ".scales"][1, 3] = bad
    refused(gptq(tmp_path, edit), "scale of .*cannot give weights")


def test_qweight_shape_that_does_not_fit(tmp_path):
    def edit(t):
        t[BASE + ".qweight"] = t[BASE + ".qweight"][:-1]
    ckpt = gptq(tmp_path, edit)
    ckpt.tensors[NAME] = L._logical(NAME, ckpt.tensors[NAME].quant.parts["qweight"], (96, 64),
                                    ckpt.tensors[NAME].quant)
    refused(ckpt, "qweight.*packs into")


def test_scales_with_wrong_groups(tmp_path):
    def edit(t):
        t[BASE + ".scales"] = t[BASE + ".scales"][:, :-1]
    refused(gptq(tmp_path, edit), "GPTQ scales are")


def test_missing_component(tmp_path):
    ckpt = gptq(tmp_path, lambda t: None)
    q = ckpt.tensors[NAME].quant
    ckpt.tensors[NAME].quant = dataclasses.replace(
        q, parts={r: t for r, t in q.parts.items() if r != "qzeros"})
    refused(ckpt, "'qzeros' component is missing")


def test_fp8_nan_block_scale(tmp_path):
    t, _ = L.fp8_block_layer(BASE, L.weight(96, 64), (32, 32))
    t[BASE + ".weight_scale_inv"][2, 1] = np.nan
    ckpt = L.open_grouped(L.write_folder(tmp_path / "m", t, L.fp8_config((32, 32))))
    refused(ckpt, "NaN")
    np.testing.assert_array_equal(ckpt.read(NAME, rows=slice(0, 32)).shape, (32, 64))  # others fine


def test_fp8_scale_grid_that_does_not_fit(tmp_path):
    t, _ = L.fp8_block_layer(BASE, L.weight(96, 64), (32, 32))
    t[BASE + ".weight_scale_inv"] = t[BASE + ".weight_scale_inv"][:2]
    refused(L.open_grouped(L.write_folder(tmp_path / "m", t, L.fp8_config((32, 32)))), "needs")


def test_unusable_and_unknown_kinds_name_the_scheme(tmp_path):
    ckpt = gptq(tmp_path, lambda t: None)
    info = ckpt.tensors[NAME]
    info.quant = Quant(codec="fp8_block", label="FP8_E4M3", refusal="no weight_scale_inv")
    refused(ckpt, r"\(FP8_E4M3\) cannot be dequantized: no weight_scale_inv")
    info.quant = Quant(codec="ct_sparse_24", label="CT_SPARSE_24")
    refused(ckpt, "CT_SPARSE_24.*not decoded")


def test_bnb_state_not_json(tmp_path):
    pytest.importorskip("bitsandbytes")
    import model_explorer as mx

    t, _ = L.bnb4_layer_real(BASE, L.weight(32, 64))
    qs = next(k for k in t if ".quant_state." in k)
    t[qs] = np.frombuffer(b"{not json" + bytes(len(t[qs]) - 9), np.uint8)
    L.write_folder(tmp_path / "m", t, L.bnb_config())

    raw = mx.open(str(tmp_path / "m"))
    q = Quant(codec="bnb_4bit", label="BNB_NF4", group_size=64,
              parts={**{r: raw.tensors[NAME + "." + r] for r in ("absmax", "quant_map")},
                     "weight": raw.tensors[NAME], "quant_state": raw.tensors[qs]})
    raw.tensors[NAME] = L._logical(NAME, raw.tensors[NAME], (32, 64), q)
    refused(raw, "quant state as JSON")
