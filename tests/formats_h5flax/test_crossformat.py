"""mx.diff across formats: tf_model.h5 and flax_model.msgpack against model.safetensors through
transformers' name conversion and transposes (model/crossformat_names.py).

transformers 5 no longer ships modeling_tf_pytorch_utils or modeling_flax_pytorch_utils, so the
names are checked against pairs written from transformers 4.x's rules; where an older transformers
is installed, its own TF converter is the oracle too."""

from __future__ import annotations

import numpy as np
import pytest
from safetensors.numpy import save_file

import model_explorer as mx
from model_explorer.model.crossformat_names import flax_to_pt, match_names, tf_to_pt

from .builders import FLAX_NAMES, PT, TF_NAMES, flax_model_msgpack, tf_model_h5


def test_tf_names_and_layouts():
    assert tf_to_pt("tf_bert_model/bert/encoder/layer_._0/attention/self/query/kernel:0", (4, 6)) == \
        ("bert.encoder.layer.0.attention.self.query.weight", (1, 0))
    assert tf_to_pt("tf_bert_model/bert/embeddings/LayerNorm/gamma:0", (4,)) == ("bert.embeddings.LayerNorm.weight", None)
    assert tf_to_pt("tf_bert_model/bert/embeddings/LayerNorm/beta:0", (4,)) == ("bert.embeddings.LayerNorm.bias", None)
    assert tf_to_pt("tf_bert_model/bert/embeddings/position_embeddings/embeddings:0", (8, 4)) == \
        ("bert.embeddings.position_embeddings.weight", None)
    assert tf_to_pt("tf_wav2vec2/wav2vec2/conv/kernel:0", (3, 4, 5)) == ("wav2vec2.conv.weight", (2, 1, 0))
    assert tf_to_pt("tf_vit/vit/patch/projection/kernel:0", (2, 2, 3, 5)) == ("vit.patch.projection.weight", (3, 2, 0, 1))
    assert tf_to_pt("tf_model/model/tf_only___shared/weight:0", (4, 4)) == ("model.shared.weight", None)
    assert tf_to_pt("final_logits_bias:0", (1, 4)) == ("final_logits_bias", None)  # a name of one level
    assert tf_to_pt("tf_m/m/sep/pointwise_kernel:0", (1, 4, 4)) == ("m.sep.pointwise.weight", (2, 1, 0))


def test_flax_names_and_layouts():
    assert flax_to_pt("bert/encoder/layer/0/attention/self/query/kernel", (4, 6)) == \
        ("bert.encoder.layer.0.attention.self.query.weight", (1, 0))
    assert flax_to_pt("bert/embeddings/LayerNorm/scale", (4,)) == ("bert.embeddings.LayerNorm.weight", None)
    assert flax_to_pt("bert/embeddings/word_embeddings/embedding", (12, 4)) == \
        ("bert.embeddings.word_embeddings.weight", None)
    assert flax_to_pt("params/conv/kernel", (2, 2, 3, 5)) == ("conv.weight", (3, 2, 0, 1))
    assert flax_to_pt("batch_stats/bn/mean", (5,)) == ("bn.running_mean", None)
    assert flax_to_pt("batch_stats/bn/var", (5,)) == ("bn.running_var", None)
    # a PyTorch parameter literally named kernel keeps its name and layout, as transformers does
    assert flax_to_pt("m/kernel", (3, 3), {"m.kernel"}) == ("m.kernel", None)


def test_prefix_of_the_base_model_on_one_side():
    assert match_names(["embeddings.w", "bert.pooler.w", "x"], {"bert.embeddings.w", "pooler.w"}) == \
        {"embeddings.w": "bert.embeddings.w", "bert.pooler.w": "pooler.w"}


def test_transformers_own_tf_converter_agrees():
    import importlib
    import importlib.util
    from pathlib import Path

    spec = importlib.util.find_spec("transformers")  # without importing it: 5.x has no TF code
    if spec is None or not any((Path(p) / "modeling_tf_pytorch_utils.py").is_file()
                               for p in spec.submodule_search_locations or ()):
        pytest.skip("the installed transformers ships no TensorFlow code (removed in 5.0)")
    utils = importlib.import_module("transformers.modeling_tf_pytorch_utils")
    for pt_name, tf_name in TF_NAMES.items():
        shape = PT[pt_name].shape[::-1] if tf_name.endswith("kernel:0") else PT[pt_name].shape
        name, _ = utils.convert_tf_weight_name_to_pt_weight_name(tf_name, tf_weight_shape=shape)
        assert name == pt_name


@pytest.fixture
def model(tmp_path):
    save_file(PT, str(tmp_path / "model.safetensors"))
    tf_model_h5(tmp_path / "tf_model.h5")
    flax_model_msgpack(tmp_path / "flax_model.msgpack")
    return tmp_path


@pytest.mark.parametrize("other", ["tf_model.h5", "flax_model.msgpack"])
def test_one_model_in_two_formats_is_the_same(model, other):
    for a, b in ((model / other, model / "model.safetensors"), (model / "model.safetensors", model / other)):
        table = mx.diff(str(a), str(b), tokenizers=False)
        assert len(table) == len(PT) and set(table["status"]) == {"same"}, table[["name", "name_b", "status"]]
        pt_col = "name_b" if b.name == "model.safetensors" else "name"
        assert set(table[pt_col]) == set(PT)
        assert (table["shape_a"] == table["shape_b"]).all() and (table["cosine"] == 1.0).all()


def test_tf_against_flax(model):
    table = mx.diff(str(model / "tf_model.h5"), str(model / "flax_model.msgpack"), tokenizers=False)
    assert len(table) == len(PT) and set(table["status"]) == {"same"}
    assert dict(zip(table["name"], table["name_b"])) == {TF_NAMES[n]: FLAX_NAMES[n] for n in PT}


def test_a_changed_weight_and_a_base_model_without_prefix(model, tmp_path):
    changed = dict(PT)
    name = "bert.encoder.layer.0.attention.self.query.weight"
    changed[name] = PT[name].copy()
    changed[name][2, 1] += 0.5
    save_file(changed, str(tmp_path / "changed.safetensors"))
    flax_model_msgpack(tmp_path / "base.msgpack", prefix=False)  # FlaxBertModel: no "bert/" level
    table = mx.diff(str(tmp_path / "base.msgpack"), str(tmp_path / "changed.safetensors"), tokenizers=False)
    rows = table.set_index("name_b")
    assert rows.loc[name, "status"] == "changed" and rows.loc[name, "max_abs_diff"] == pytest.approx(0.5)
    assert set(table["status"]) == {"same", "changed"} and len(table) == len(PT)


def test_a_kernel_stored_without_its_transpose_is_found(tmp_path):
    """An exporter that forgot the transpose: a square kernel keeps its shape, its values differ."""
    w = np.arange(16, dtype=np.float32).reshape(4, 4)
    save_file({"bert.q.weight": w}, str(tmp_path / "model.safetensors"))
    import h5py

    with h5py.File(tmp_path / "tf_model.h5", "w") as f:
        g = f.create_group("bert")
        g.attrs["weight_names"] = np.array([b"tf_bert_model/bert/q/kernel:0"])
        g.create_dataset("tf_bert_model/bert/q/kernel:0", data=w)  # should be w.T
    (row,) = mx.diff(str(tmp_path / "tf_model.h5"), str(tmp_path / "model.safetensors"),
                     tokenizers=False).to_dict("records")
    assert row["status"] == "changed" and row["name_b"] == "bert.q.weight" and row["max_abs_diff"] > 0
