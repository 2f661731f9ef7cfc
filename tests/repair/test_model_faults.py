"""Key prefixes, a missing lm_head, transposed weights and a config that contradicts the shapes:
each repaired, reopened without the fault, and loaded by transformers."""

from __future__ import annotations

import json

import numpy as np
import pytest

import model_explorer as mx

from .conftest import CONFIG, llama_tensors, load_transformers, safe_open_all, write_folder


@pytest.mark.parametrize("prefix", ["module.", "_orig_mod.", "model."])
def test_strip_prefix(tmp_path, checked, prefix):
    tensors = llama_tensors()
    src = write_folder(tmp_path / "src", {prefix + k: v for k, v in tensors.items()})
    plan = mx.repair_plan(src)
    assert [f.name for f in plan.fixes] == ["strip_prefix"]
    report = checked(src)
    out = safe_open_all(tmp_path / "fixed")
    assert set(out) == set(tensors)
    for k, v in tensors.items():
        np.testing.assert_array_equal(out[k], v)
    assert all(t.identical for t in report.tensors)


def test_prefix_on_shards_rewrites_the_index(tmp_path, checked):
    tensors = llama_tensors()
    src = write_folder(tmp_path / "src", {"module." + k: v for k, v in tensors.items()}, shards=3)
    checked(src)
    index = json.loads((tmp_path / "fixed" / "model.safetensors.index.json").read_text())
    assert set(index["weight_map"]) == set(tensors)
    assert [f for f in mx.open(tmp_path / "fixed").findings if f.code != "no_tokenizer"] == []
    load_transformers(tmp_path / "fixed")


def test_missing_lm_head_tied_in_config(tmp_path, checked):
    tensors = llama_tensors()
    del tensors["lm_head.weight"]
    src = write_folder(tmp_path / "src", tensors)
    report = checked(src)
    assert [f.name for f in report.applied] == ["tie_lm_head"]
    cfg = json.loads((tmp_path / "fixed" / "config.json").read_text())
    assert cfg["tie_word_embeddings"] is True
    # no bytes written: the weights file is a byte copy
    assert (tmp_path / "fixed" / "model.safetensors").read_bytes() == (src / "model.safetensors").read_bytes()
    model = load_transformers(tmp_path / "fixed")
    assert model.lm_head.weight.data_ptr() == model.model.embed_tokens.weight.data_ptr()


def test_missing_lm_head_written_as_a_copy(tmp_path, checked):
    tensors = llama_tensors()
    del tensors["lm_head.weight"]
    src = write_folder(tmp_path / "src", tensors)
    report = checked(src, tie="copy")
    out = safe_open_all(tmp_path / "fixed")
    np.testing.assert_array_equal(out["lm_head.weight"], tensors["model.embed_tokens.weight"])
    head = next(t for t in report.tensors if t.name == "lm_head.weight")
    assert head.identical and head.source_name == "model.embed_tokens.weight"
    assert json.loads((tmp_path / "fixed" / "config.json").read_text())["tie_word_embeddings"] is False
    load_transformers(tmp_path / "fixed")


def test_transposed_weights(tmp_path, checked):
    tensors = llama_tensors()
    flipped = ["model.layers.0.mlp.down_proj.weight", "model.layers.1.self_attn.k_proj.weight"]
    broken = {k: (np.ascontiguousarray(v.T) if k in flipped else v) for k, v in tensors.items()}
    src = write_folder(tmp_path / "src", broken)
    plan = mx.repair_plan(src)
    assert plan.fixes[0].name == "transpose" and sorted(plan.fixes[0].changes["tensors"]) == sorted(flipped)
    report = checked(src)
    out = safe_open_all(tmp_path / "fixed")
    for k, v in tensors.items():
        np.testing.assert_array_equal(out[k], v)
    changed = {t.name for t in report.tensors if not t.identical}
    assert changed == set(flipped)
    load_transformers(tmp_path / "fixed")


def test_transpose_asked_explicitly_and_one_that_is_not_there(tmp_path, checked):
    tensors = llama_tensors()
    src = write_folder(tmp_path / "src", tensors)
    report = checked(src, transpose=["model.norm.weight", "nope"], fixes=["transpose"])
    assert report.applied == []
    assert any("nope" in n for n in report.notes) and any("model.norm.weight" in n for n in report.notes)


def test_config_corrected_from_shapes(tmp_path, checked):
    wrong = dict(CONFIG, vocab_size=48, num_hidden_layers=3, intermediate_size=20, num_key_value_heads=4)
    src = write_folder(tmp_path / "src", llama_tensors(), config=wrong)
    before = [f for f in mx.open(src, deep=True).findings if f.code == "config_mismatch"]
    assert before
    report = checked(src)
    fix = next(f for f in report.applied if f.name == "correct_config")
    assert sorted(fix.changes["keys"]) == ["intermediate_size", "num_hidden_layers", "num_key_value_heads",
                                           "vocab_size"]
    cfg = json.loads((tmp_path / "fixed" / "config.json").read_text())
    assert {k: cfg[k] for k in fix.changes["keys"]} == {k: CONFIG[k] for k in fix.changes["keys"]}
    assert not [f for f in mx.open(tmp_path / "fixed", deep=True).findings if f.code == "config_mismatch"]
    assert len([n for n in report.notes if n.startswith("config.json")]) == 4
    load_transformers(tmp_path / "fixed")


def test_conflicting_renames_are_refused_before_writing(tmp_path):
    tensors = {"module." + k: v for k, v in llama_tensors().items()}
    src = write_folder(tmp_path / "src", tensors)
    with pytest.raises(mx.repairs.RepairError) as e:
        mx.repair(src, tmp_path / "out", rename={"module.model.norm.weight": "model.final_norm.weight"})
    assert "strip_prefix" in str(e.value) and "rename" in str(e.value)
    assert not (tmp_path / "out").exists()


def test_a_fix_for_a_problem_the_checkpoint_does_not_have_is_skipped(tmp_path, checked, llama_dir):
    report = checked(llama_dir, fixes=["strip_prefix", "missing_tensor"], strip_prefix="module.")
    assert report.applied == []
    assert any("strip_prefix" in s for s in report.skipped)
    assert any("module." in n for n in report.notes)
    out = tmp_path / "fixed"
    assert (out / "model.safetensors").read_bytes() == (llama_dir / "model.safetensors").read_bytes()


def _misnamed(tensors: dict, renames: dict[str, str], prefix: str = "") -> dict:
    out = {}
    for k, v in tensors.items():
        for old, new in renames.items():
            k2 = k.replace(old, new)
            if k2 != k:
                break
        out[prefix + (k2 if k2 != k else k)] = v
    return out


def test_one_module_renamed_in_every_layer(tmp_path, checked):
    tensors = llama_tensors()
    src = write_folder(tmp_path / "src", _misnamed(tensors, {"self_attn.q_proj": "attn.query",
                                                             "mlp.down_proj": "mlp.fc_out"}))
    ckpt = mx.open(src)
    missing = next(f for f in ckpt.findings if f.code == "missing_tensors")
    assert missing.extra["renames"]["model.layers.1.attn.query.weight"] == "model.layers.1.self_attn.q_proj.weight"
    assert "attn.N.query" not in missing.message and "model.layers.N.attn.query.weight -> " \
        "model.layers.N.self_attn.q_proj.weight" in missing.message and "rename_expected" in missing.fix
    plan = mx.repair_plan(src)
    assert [f.name for f in plan.fixes] == ["rename_expected"]
    assert len(plan.fixes[0].renames) == 4
    report = checked(src)
    out = safe_open_all(tmp_path / "fixed")
    assert set(out) == set(tensors)
    for k, v in tensors.items():
        np.testing.assert_array_equal(out[k], v)
    assert all(t.identical for t in report.tensors)  # renamed, not rewritten
    assert not {f.code for f in mx.open(tmp_path / "fixed").findings} & {"missing_tensors", "unexpected_tensors"}
    load_transformers(tmp_path / "fixed")


def test_rename_composes_with_a_prefix(tmp_path, checked):
    tensors = llama_tensors()
    src = write_folder(tmp_path / "src", _misnamed(tensors, {"mlp.down_proj": "mlp.fc_out"}, prefix="module."))
    assert [f.name for f in mx.repair_plan(src).fixes] == ["strip_prefix", "rename_expected"]
    checked(src)
    assert set(safe_open_all(tmp_path / "fixed")) == set(tensors)


@pytest.mark.parametrize("renames", [{"self_attn.q_proj": "attn.a", "self_attn.o_proj": "attn.b"},
                                     {"mlp.gate_proj": "mlp.w1", "mlp.up_proj": "mlp.w3"}])
def test_renames_the_shapes_cannot_tell_apart_are_not_guessed(tmp_path, renames):
    # q and o (gate and up) have one shape here: pairing them would be a coin toss.
    src = write_folder(tmp_path / "src", _misnamed(llama_tensors(), renames))
    ckpt = mx.open(src)
    assert all("renames" not in f.extra for f in ckpt.findings)
    assert "rename_expected" not in [f.name for f in mx.repair_plan(src).fixes]


def test_head_stored_under_another_name(tmp_path, checked):
    tensors = llama_tensors()
    src = write_folder(tmp_path / "src", _misnamed(tensors, {"lm_head.weight": "output.weight"}))
    codes = {f.code for f in mx.open(src).findings}
    assert "lm_head_missing" not in codes and "missing_tensors" in codes
    assert [f.name for f in mx.repair_plan(src).fixes] == ["rename_expected"]
    checked(src)
    assert set(safe_open_all(tmp_path / "fixed")) == set(tensors)


def test_transposed_weight_in_gpt_neox(tmp_path, checked):
    # GPT-NeoX names and shapes come from the model layer (its family table at open, transformers'
    # meta-device build in the cross-check), not from a table of the repair's own; its state
    # dict names the head lm_head.weight, which transformers loads as embed_out.weight too.
    from model_explorer.model import expected

    transformers = pytest.importorskip("transformers")
    torch = pytest.importorskip("torch")
    if not expected.transformers_available():
        pytest.skip("the model layer was told not to use transformers (MODEL_EXPLORER_TRANSFORMERS=0)")
    cfg = transformers.GPTNeoXConfig(vocab_size=32, hidden_size=16, num_hidden_layers=2,
                                     num_attention_heads=4, intermediate_size=40,
                                     max_position_embeddings=64)
    torch.manual_seed(0)
    model = transformers.GPTNeoXForCausalLM(cfg)
    tensors = {k: v.detach().numpy().copy() for k, v in model.state_dict().items()}
    name = "gpt_neox.layers.1.mlp.dense_h_to_4h.weight"
    broken = dict(tensors, **{name: np.ascontiguousarray(tensors[name].T)})
    config = cfg.to_dict() | {"architectures": ["GPTNeoXForCausalLM"]}
    src = write_folder(tmp_path / "src", broken, config=config)
    assert any(f.code == "transposed_weight" and f.tensor == name
               for f in mx.open(src, cross_check=True).findings)
    assert [(f.name, f.changes["tensors"]) for f in mx.repair_plan(src).fixes] == [("transpose", [name])]
    checked(src)
    np.testing.assert_array_equal(safe_open_all(tmp_path / "fixed")[name], tensors[name])
    load_transformers(tmp_path / "fixed")


def test_prefix_found_from_names_alone_uses_the_model_layers_list():
    # A pickle converted on the way has no model check of its own: its prefix is read from the
    # names, with the wrappers the model layer knows (one list for both).
    from model_explorer.repairs.plan import detect_key_prefix

    names = ["model.embed_tokens.weight", "model.layers.0.mlp.up_proj.weight", "lm_head.weight"]
    for p in ("module.", "_orig_mod.", "base_model.model."):
        assert detect_key_prefix([p + n for n in names]) == p
    assert detect_key_prefix(names) is None  # "model." alone is the model's own
    assert detect_key_prefix(["model." + n for n in names]) == "model."
    assert detect_key_prefix([]) is None
