"""Fixes that cannot hurt: a rename is offered only when every renamed tensor keeps its role (tower,
module kind, place in the layer pattern, parameter) and the renamed checkpoint loads with nothing
missing. Near misses planted in small checkpoints get no rename; a genuine one still gets its fix."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

import model_explorer as mx
from model_explorer.model import load_findings, load_rules
from model_explorer.model.renames import role, same_role

from .conftest import tiny_cfg, tiny_state, write_folder

transformers = pytest.importorskip("transformers")
torch = pytest.importorskip("torch")


def _renames(ckpt) -> list[dict]:
    return [f.extra["renames"] for f in ckpt.findings if "renames" in f.extra]


def _no_rename_anywhere(src) -> None:
    for cross in (False, True):
        assert _renames(mx.open(src, cross_check=cross)) == []
    assert "rename_expected" not in [f.name for f in mx.repair_plan(src).fixes]


def _misnamed(state: dict, old: str, new: str) -> dict:
    return {k.replace(old, new): v for k, v in state.items()}


def test_pooler_is_not_renamed_into_the_head(tmp_path):
    # a BertForMaskedLM checkpoint whose head transform is stored as a pooler of the same shape
    cfg = transformers.BertConfig(vocab_size=64, hidden_size=16, num_hidden_layers=1, num_attention_heads=2,
                                  intermediate_size=32, max_position_embeddings=32)
    model = transformers.BertForMaskedLM(cfg)
    state = {k: v.detach().numpy().copy() for k, v in model.state_dict().items()}
    state = _misnamed(state, "cls.predictions.transform.dense.", "bert.pooler.dense.")
    config = cfg.to_dict() | {"architectures": ["BertForMaskedLM"]}
    src = write_folder(tmp_path / "m", config, state, tokenizer=None)
    _no_rename_anywhere(src)


def test_the_real_case_base_encoder_under_a_masked_lm_head(tmp_path):
    # sentence-transformers' layout without its modules.json: MPNet's encoder with its pooler,
    # config.json naming MPNetForMaskedLM (whose lm_head.dense has the pooler's shape)
    cfg = transformers.MPNetConfig(vocab_size=64, hidden_size=16, num_hidden_layers=1, num_attention_heads=2,
                                   intermediate_size=32, max_position_embeddings=40)
    state = {k: v.detach().numpy().copy() for k, v in transformers.MPNetModel(cfg).state_dict().items()}
    config = cfg.to_dict() | {"architectures": ["MPNetForMaskedLM"]}
    src = write_folder(tmp_path / "m", config, state, tokenizer=None)
    ckpt = mx.open(src, cross_check=True)
    codes = {f.code: f for f in ckpt.findings if f.code in ("head_initialised", "missing_tensors",
                                                            "unexpected_tensors", "key_prefix", "key_prefix_doubled")}
    assert set(codes) == {"head_initialised"}, [str(f) for f in ckpt.findings]
    assert codes["head_initialised"].severity == "warning"
    assert "pooler.dense.weight" in codes["head_initialised"].extra["ignored"]
    _no_rename_anywhere(src)


def test_key_stored_as_query_of_equal_shape_is_not_renamed(tmp_path):
    cfg = tiny_cfg(num_key_value_heads=4)  # q and k have one shape
    state = _misnamed(tiny_state(cfg), "self_attn.k_proj", "attn.query")
    src = write_folder(tmp_path / "m", cfg, state, tokenizer=None)
    assert any(f.code == "missing_tensors" for f in mx.open(src).findings)
    _no_rename_anywhere(src)


def test_one_layer_stored_under_the_next_layers_number_is_not_renamed(tmp_path):
    cfg = tiny_cfg()
    state = tiny_state(cfg)
    state["model.layers.1.mlp.fc_in.weight"] = state.pop("model.layers.0.mlp.up_proj.weight")
    src = write_folder(tmp_path / "m", cfg, state, tokenizer=None)
    _no_rename_anywhere(src)


def test_vision_tower_is_not_renamed_into_the_text_tower():
    shape = (4, 4)
    vision = "model.vision_tower.layers.0.self_attn.q_proj.weight"
    text = "model.language_model.layers.0.self_attn.q_proj.weight"
    rules = load_rules.LoadRules({vision: shape, text: shape})
    stored = {text: SimpleNamespace(shape=shape), "model.language_model.layers.0.attn.wq.weight":
              SimpleNamespace(shape=shape)}
    # the text tower's q stored twice: one of them is offered as the vision tower's q
    assert load_findings.safe_renames({vision: shape}, ["model.language_model.layers.0.attn.wq.weight"],
                                      stored, rules) == {}
    assert not same_role(text, vision) and role(vision)[0] == "vision"


def test_a_genuine_rename_still_gets_its_fix(tmp_path):
    state = _misnamed(tiny_state(tiny_cfg()), "mlp.down_proj", "mlp.fc_out")
    src = write_folder(tmp_path / "m", tiny_cfg(), state, tokenizer=None)
    for cross in (False, True):
        found = _renames(mx.open(src, cross_check=cross))
        assert found and found[0]["model.layers.0.mlp.fc_out.weight"] == "model.layers.0.mlp.down_proj.weight"
    assert "rename_expected" in [f.name for f in mx.repair_plan(src).fixes]


def test_a_rename_that_would_still_leave_tensors_missing_is_not_offered(tmp_path):
    state = _misnamed(tiny_state(tiny_cfg()), "mlp.down_proj", "mlp.fc_out")
    del state["model.layers.1.self_attn.v_proj.weight"]  # gone for good: no rename brings it back
    src = write_folder(tmp_path / "m", tiny_cfg(), state, tokenizer=None)
    ckpt = mx.open(src, cross_check=True)
    missing = next(f for f in ckpt.findings if f.code == "missing_tensors")
    assert "model.layers.1.self_attn.v_proj.weight" in missing.extra["missing"]
    _no_rename_anywhere(src)


@pytest.mark.parametrize("old,new,same", [
    ("model.layers.1.attn.query.weight", "model.layers.1.self_attn.q_proj.weight", True),
    ("model.layers.0.mlp.fc_out.weight", "model.layers.0.mlp.down_proj.weight", True),
    ("output.weight", "lm_head.weight", True),
    ("encoder.layer.0.attention.output.dense.weight", "encoder.layer.0.attention.self.query.weight", False),
    ("encoder.layer.0.intermediate.dense.weight", "encoder.layer.0.output.dense.weight", False),
    ("pooler.dense.weight", "lm_head.dense.weight", False),
    ("model.layers.0.mlp.up_proj.weight", "model.layers.0.mlp.up_proj.bias", False),
    ("model.norm.weight", "model.layers.0.input_layernorm.weight", False),
    ("model.layers.0.foo.weight", "model.layers.0.bar.weight", False),  # kinds unknown: never
])
def test_roles(old, new, same):
    assert same_role(old, new) is same

