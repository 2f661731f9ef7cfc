"""The one-pass grouping of block-FP8 layers (DeepSeek-V3 has 46,848) makes exactly what the
per-layer way makes: the same logical tensors, findings and summary, whatever mix of regular
and unusual layers a folder holds. Each case is opened twice, with the one-pass grouping and
with it turned off."""

from __future__ import annotations

import pytest

import model_explorer as mx
from model_explorer.formats.hubquant import fp8

from . import layouts as L


def _opened(folder, monkeypatch, fast: bool):
    with monkeypatch.context() as m:
        if not fast:
            m.setattr(fp8, "group_regular", lambda *a: ([], []))
        ckpt = mx.open(folder)
    tensors = [(name, t.to_dict(), t.label, t.extra.get("packed_shape")) for name, t in ckpt.tensors.items()]
    findings = [f.to_dict() for f in ckpt.findings]
    return tensors, findings, ckpt.details["quantization"]


def _case(name):
    t, q = L.fp8_block(block=(128, 64) if name == "block_128x64" else (128, 128))
    p = "model.layers.0.mlp."
    if name == "e5m2":
        t[p + "proj0.weight"] = ("F8_E4M3", (200, 64))
        t["model.layers.0.mlp.proj2.weight"] = ("F16", (4, 4))  # a non-FP8 weight beside
    if name == "wrong_grid":
        t[p + "proj1.weight_scale_inv"] = ("F32", (5, 5))
    if name == "no_weight":
        del t[p + "proj0.weight"]
    if name == "crowded":
        t[p + "proj0.weight_scale"] = ("F32", (200, 1))
    if name == "three_d":
        t[p + "experts.weight"] = ("F8_E4M3", (2, 128, 128))
        t[p + "experts.weight_scale_inv"] = ("F32", (2, 1, 1))
    if name == "scale_first":
        t = {k: t[k] for k in sorted(t, key=lambda k: not k.endswith("_scale_inv"))}
    if name == "orphan":
        t[p + "proj9.weight"] = ("F8_E4M3", (64, 64))
    if name == "not_fp8":
        t[p + "proj0.weight"] = ("F16", (200, 64))
    if name == "no_block":
        q = {k: v for k, v in q.items() if k != "weight_block_size"}
    return t, q


CASES = ["regular", "block_128x64", "e5m2", "wrong_grid", "no_weight", "crowded", "three_d",
         "scale_first", "orphan", "not_fp8", "no_block"]


@pytest.mark.parametrize("compact", [True, False], ids=["columns", "records"])
@pytest.mark.parametrize("case", CASES)
def test_one_pass_equals_per_layer(tmp_path, monkeypatch, case, compact):
    t, q = _case(case)
    folder = L.write(tmp_path / case, t, q, compact=compact)
    assert _opened(folder, monkeypatch, True) == _opened(folder, monkeypatch, False)


def test_one_pass_takes_the_regular_layers(tmp_path, monkeypatch):
    # Not a path that never runs: the regular layer is folded in one pass, the one with a
    # wrong scale grid is left to the per-layer way, which reports it.
    t, q = _case("wrong_grid")
    folder = L.write(tmp_path / "m", t, q, compact=True)
    seen = []
    real = fp8.group_regular
    monkeypatch.setattr(fp8, "group_regular", lambda *a: seen.append(real(*a)) or seen[-1])
    ckpt = mx.open(folder)
    (fast, parts), = seen
    assert [i.name for i in fast] == ["model.layers.0.mlp.proj0.weight"]
    assert parts == ["model.layers.0.mlp.proj0.weight", "model.layers.0.mlp.proj0.weight_scale_inv"]
    assert [f.tensor for f in ckpt.findings if f.code == "quant_groups_mismatch"] == \
        ["model.layers.0.mlp.proj1.weight_scale_inv"]
