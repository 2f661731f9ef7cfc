"""The layer profile on a real trained model: no warning on the healthy one, and faults planted
into its real statistics still flagged at the right layer and role.

SmolLM2-135M (the bundled sample) is trained, so its layers are what healthy looks like: layer 0's
norms sit 2-4x below every other layer's. That is `layer_unusual` (info, with the numbers), never
a `layer_outlier` warning; a zeroed tensor, one scaled 100x, a copied layer or a NaN is."""

from __future__ import annotations

import numpy as np
import pytest

import model_explorer as mx
from model_explorer.checks.layers import layer_findings, layer_role

STATS = ["norm", "std", "absmax"]


@pytest.fixture(scope="module")
def table():
    try:
        path = mx.sample_path()
    except Exception:  # noqa: BLE001 - the sample package is installed by make
        pytest.skip("the SmolLM2 sample is not installed")
    ckpt = mx.open(path)
    names = [n for n in ckpt.tensors if layer_role(n)]
    return ckpt.stats_table(names, progress=False)


def _row(table, name):
    return table.index[table["name"] == name][0]


def _warnings(table, stat="norm"):
    return {(f.code, f.extra.get("layer"), f.extra.get("role")) for f in layer_findings(table, stat)
            if f.severity != "info"}


@pytest.mark.parametrize("stat", STATS)
def test_healthy_trained_model_gets_no_warning(table, stat):
    found = layer_findings(table, stat)
    assert not [str(f) for f in found if f.severity != "info"]
    for f in found:  # the unusual ones say their numbers
        assert f.code == "layer_unusual" and "range" in f.message and "median" in f.message


def test_layer_0_of_smollm2_is_unusual_not_damaged(table):
    unusual = {(f.extra["layer"], f.extra["role"]) for f in layer_findings(table, "norm")}
    assert (0, "attn_norm") in unusual  # 0.96 against 4.0-10.0 elsewhere


@pytest.mark.parametrize("name,how,expect", [
    ("blk.14.ffn_down.weight", "zero", 14),  # an interior layer zeroed
    ("blk.0.attn_v.weight", "zero", 0),  # zeros are damage at the edge too
    ("blk.29.attn_output.weight", "x100", 29),  # the last layer exploded
    ("blk.7.ffn_up.weight", "x100", 7),
    ("blk.21.attn_q.weight", "/100", 21),
])
def test_planted_faults_in_real_statistics_are_warnings(table, name, how, expect):
    t = table.copy()
    i = _row(t, name)
    if how == "zero":
        for c in ("min", "max", "mean", "std", "mean_abs"):
            if c in t:
                t.loc[i, c] = 0.0
    else:
        f = 100.0 if how == "x100" else 0.01
        for c in ("min", "max", "mean", "std", "mean_abs"):
            if c in t:
                t.loc[i, c] = t.loc[i, c] * f
    role = layer_role(name)[1]
    assert _warnings(t) == {("layer_outlier", expect, role)}


def test_a_copied_layer_in_real_statistics_is_a_warning(table):
    t = table.copy()
    src, dst = _row(t, "blk.3.ffn_gate.weight"), _row(t, "blk.17.ffn_gate.weight")
    cols = [c for c in ("min", "max", "mean", "std", "mean_abs", "absmax") if c in t]
    t.loc[dst, cols] = t.loc[src, cols].to_numpy()
    assert ("layer_duplicate", 17, "gate") in _warnings(t)


def test_a_nan_in_real_statistics_is_a_warning(table):
    t = table.copy()
    i = _row(t, "blk.9.attn_k.weight")
    t.loc[i, "nan"] = 3
    t.loc[i, ["mean", "std"]] = np.nan
    assert _warnings(t) == {("layer_outlier", 9, "k")}
    f = next(f for f in layer_findings(t, "norm") if f.severity == "warning")
    assert "3 NaN" in f.message and f.tensor == "blk.9.attn_k.weight" and f.offset is None or f.offset >= 0
