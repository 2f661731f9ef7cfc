"""Engines as sides of trace and compare_runs (issue 41): transformers with forward hooks against
onnxruntime with the aligned values marked as outputs, on a tiny random BERT and Llama made here
and exported both ways (torch.onnx dynamo=False and the default exporter). The faults are planted
in the ONNX files with the onnx library; which initializer holds which weight is found here by
comparing values with transformers' own parameters, never through this project's alignment."""

from __future__ import annotations

import math

import numpy as np
import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")
onnx = pytest.importorskip("onnx")
pytest.importorskip("onnxruntime")
pytest.importorskip("onnxscript")

import model_explorer as mx  # noqa: E402
from model_explorer.runs.verdict import DRIFT, JUMP, NOISE_REL  # noqa: E402

IDS = [3, 17, 5, 42, 9, 28, 11, 60]


class _Wrap(torch.nn.Module):
    """What an export is made of: the HF model under an attribute, so the scopes read
    `/bert/encoder/layer.0/...` (transformers 5 models take no positional mask in tracing)."""

    def __init__(self, attr: str, model) -> None:
        super().__init__()
        self.attr = attr
        setattr(self, attr, model)

    def forward(self, input_ids, attention_mask):
        kwargs = {"use_cache": False} if self.attr == "model" else {}
        return getattr(self, self.attr)(input_ids=input_ids, attention_mask=attention_mask, return_dict=False,
                                        **kwargs)[0]


def _export(model, attr: str, path, dynamo: bool, output: str):
    ids = torch.tensor([IDS])
    wrap = _Wrap(attr, model).eval()
    kw = {} if dynamo else {"opset_version": 17}
    torch.onnx.export(wrap, (ids, torch.ones_like(ids)), str(path), dynamo=dynamo,
                      input_names=["input_ids", "attention_mask"], output_names=[output], **kw)
    return str(path)


@pytest.fixture(scope="module")
def made(tmp_path_factory):
    """{"bert": folder, "llama": folder, ("bert", "ts"|"dy"): onnx path, ...}."""
    root = tmp_path_factory.mktemp("engines")
    torch.manual_seed(0)
    bert = transformers.BertModel(transformers.BertConfig(
        vocab_size=64, hidden_size=32, num_hidden_layers=2, num_attention_heads=4, intermediate_size=64,
        max_position_embeddings=32)).eval()
    llama = transformers.LlamaForCausalLM(transformers.LlamaConfig(
        vocab_size=64, hidden_size=32, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
        intermediate_size=64, max_position_embeddings=64)).eval()
    out = {"models": {"bert": bert, "llama": llama}}
    for name, model, attr, output in (("bert", bert, "bert", "last_hidden_state"),
                                      ("llama", llama, "model", "logits")):
        model.save_pretrained(root / name)
        out[name] = str(root / name)
        for how, dynamo in (("ts", False), ("dy", True)):
            out[(name, how)] = _export(model, attr, root / f"{name}_{how}.onnx", dynamo, output)
    out["root"] = root
    return out


def _initializer_holding(model_proto, weight: np.ndarray) -> str:
    """The initializer equal to `weight` or its transpose (found here, by values)."""
    from onnx import numpy_helper

    for t in model_proto.graph.initializer:
        a = numpy_helper.to_array(t)
        if a.shape == weight.shape and np.array_equal(a, weight):
            return t.name
        if a.shape == weight.T.shape and np.array_equal(a, weight.T):
            return t.name
    raise AssertionError("no initializer holds the weight")


def _scope_of(node) -> str:
    for p in node.metadata_props:
        if p.key == "pkg.torch.onnx.name_scopes":
            return p.value
    return node.name


@pytest.mark.parametrize("name", ["bert", "llama"])
@pytest.mark.parametrize("how", ["ts", "dy"])
def test_a_clean_export_agrees_within_float32_noise_at_every_point(made, name, how):
    d = mx.compare_runs(made[name], made[(name, how)], ids=IDS, a_engine="transformers")
    assert (d.engine_a, d.engine_b) == ("transformers", "onnxruntime")
    assert d.agree and d.first_divergence is None and d.verdict["kind"] == "agree"
    assert not d.unpaired
    modules = {r["module"] for r in d.rows}
    assert {"q", "k", "v", "attn_out", "attn_residual", "ffn_out", "residual"} <= modules
    assert len({r["layer"] for r in d.rows if r["layer"] is not None}) == 2
    for r in d.rows:
        assert r["rel_l2"] <= NOISE_REL, r
        assert r["sqnr"] > 100  # dB: float32 rounding only
        assert r["node_b"]
    assert d.has_logits == (name == "llama")


@pytest.mark.parametrize("name", ["bert", "llama"])
@pytest.mark.parametrize("how", ["ts", "dy"])
def test_a_scaled_ffn_initializer_is_found_at_its_layer_and_module(made, name, how):
    model = made["models"][name]
    down = (model.encoder.layer[1].output.dense if name == "bert" else model.model.layers[1].mlp.down_proj)
    proto = onnx.load(made[(name, how)])
    target = _initializer_holding(proto, down.weight.detach().numpy())
    for t in proto.graph.initializer:
        if t.name == target:
            a = onnx.numpy_helper.to_array(t) * np.float32(1.5)
            t.CopyFrom(onnx.numpy_helper.from_array(a, t.name))
    path = made["root"] / f"{name}_{how}_scaled.onnx"
    onnx.save(proto, str(path))
    d = mx.compare_runs(made[name], str(path), ids=IDS, a_engine="transformers")
    first = d.first_divergence
    assert (first["kind"], first["layer"], first["module"]) == (JUMP, 1, "ffn_out")
    assert first["tensor"] == target and first["offset"] is not None and first["length"] > 0
    assert first["node_b"] and first["op_b"] and first["module_a"]
    assert first["tensor_a"].endswith("1.output.dense.weight" if name == "bert" else "1.mlp.down_proj.weight")
    assert first["offset_a"] is not None  # a's weight with its bytes in its safetensors


@pytest.mark.parametrize("how", ["ts", "dy"])
def test_a_changed_layernorm_epsilon_is_found_and_named(made, how):
    proto = onnx.load(made[("bert", how)])
    hits = [n for n in proto.graph.node if n.op_type == "LayerNormalization"
            and "layer.0" in _scope_of(n) and "attention" in _scope_of(n)]
    assert len(hits) == 1
    for attr in hits[0].attribute:
        if attr.name == "epsilon":
            attr.f = 1.0
    path = made["root"] / f"bert_{how}_eps.onnx"
    onnx.save(proto, str(path))
    d = mx.compare_runs(made["bert"], str(path), ids=IDS, a_engine="transformers")
    first = d.first_divergence
    assert (first["kind"], first["layer"], first["module"]) == (JUMP, 0, "attn_residual")
    assert first["op_b"] == "LayerNormalization" and first["node_b"] == hits[0].name
    assert first["attribute"]["name"] == "epsilon"
    assert math.isclose(first["attribute"]["a"], 1e-12) and first["attribute"]["b"] == 1.0
    assert "epsilon" in d.verdict["sentence"]
    record = open(path, "rb").read()[first["node_b_offset"]:first["node_b_offset"] + first["node_b_length"]]
    assert hits[0].name.encode() in record and b"epsilon" in record  # the node's own bytes in b


def test_a_softmax_over_the_wrong_axis_is_named(made):
    proto = onnx.load(made[("bert", "ts")])
    hits = [n for n in proto.graph.node if n.op_type == "Softmax" and "/layer.1/" in n.name]
    assert len(hits) == 1
    for attr in hits[0].attribute:
        if attr.name == "axis":
            attr.i = 2  # the scores are [batch, heads, query, key]: over the queries, not the keys
    path = made["root"] / "bert_ts_softmax.onnx"
    onnx.save(proto, str(path))
    first = mx.compare_runs(made["bert"], str(path), ids=IDS, a_engine="transformers").first_divergence
    assert (first["layer"], first["module"]) == (1, "attn_out")
    assert first["attribute"]["name"] == "axis" and first["attribute"]["b"] == 2


def test_a_dropout_left_in_training_mode_is_named(made):
    """The export of a module left in training mode: a Dropout after the embeddings' LayerNorm
    whose training_mode input is true (planted here: an eval() export has none)."""
    proto = onnx.load(made[("bert", "dy")])
    nodes = list(proto.graph.node)
    at, norm = next((i, n) for i, n in enumerate(nodes) if n.op_type == "LayerNormalization"
                    and "bert.embeddings" in _scope_of(n))
    out = norm.output[0]
    for n in nodes[at + 1:]:
        n.input[:] = ["dropped" if v == out else v for v in n.input]
    proto.graph.initializer.extend([onnx.numpy_helper.from_array(np.array(0.5, np.float32), "ratio_half"),
                                    onnx.numpy_helper.from_array(np.array(True), "training_true")])
    drop = onnx.helper.make_node("Dropout", [out, "ratio_half", "training_true"], ["dropped"], name="planted_dropout")
    drop.metadata_props.extend(norm.metadata_props)
    proto.graph.node.insert(at + 1, drop)
    path = made["root"] / "bert_dy_training.onnx"
    onnx.save(proto, str(path))
    first = mx.compare_runs(made["bert"], str(path), ids=IDS).first_divergence
    assert (first["layer"], first["module"]) == (None, "embed")
    assert first["attribute"]["name"] == "training_mode" and first["attribute"]["node"] == drop.name


@pytest.mark.parametrize("name,how", [("bert", "ts"), ("llama", "dy")])
def test_a_dynamically_quantized_export_drifts_with_an_sqnr_per_layer(made, name, how):
    from onnxruntime.quantization import QuantType, quantize_dynamic

    path = made["root"] / f"{name}_{how}_q8.onnx"
    quantize_dynamic(made[(name, how)], str(path), weight_type=QuantType.QInt8)
    d = mx.compare_runs(made[name], str(path), ids=IDS, a_engine="transformers")
    assert d.first_divergence["kind"] == DRIFT and d.verdict["kind"] == DRIFT
    assert not d.unpaired
    by_layer = {r["layer"]: r["sqnr"] for r in d.rows if r["module"] == "residual"}
    assert set(by_layer) == {0, 1} and all(10 < s < 80 for s in by_layer.values())
    if how == "dy":  # quantize_dynamic's nodes keep no scope metadata: q found by its int8 weight
        assert d.nodes[(0, "q")]["how"] == "weight"


def test_an_export_without_scopes_aligns_by_weight_and_lists_the_rest_with_the_reason(made):
    proto = onnx.load(made[("bert", "ts")])
    for i, n in enumerate(proto.graph.node):
        n.name = f"n{i}"
        del n.metadata_props[:]
    path = made["root"] / "bert_ts_anonymous.onnx"
    onnx.save(proto, str(path))
    d = mx.compare_runs(made["bert"], str(path), ids=IDS, a_engine="transformers")
    aligned = {(r["layer"], r["module"]) for r in d.rows}
    assert {(1, "q"), (1, "k"), (1, "v"), (1, "attn_out"), (1, "ffn_out")} <= aligned
    assert all(r["rel_l2"] <= NOISE_REL for r in d.rows)
    assert all(d.nodes[p]["how"] == "weight" for p in aligned if p[1] in ("q", "ffn_out"))
    residual = next(u for u in d.unpaired if (u["layer"], u["module"]) == (1, "residual"))
    assert residual["why"].startswith("not aligned in b:") and "carry no scopes" in residual["why"]


def test_a_run_that_cannot_fit_is_refused_before_it_starts(made, monkeypatch):
    from model_explorer.runtime import memory_budget
    from model_explorer.runtime.memory_budget import WontFit

    monkeypatch.setattr(memory_budget, "available_bytes", lambda: 1000)
    with pytest.raises(WontFit, match=r"needs about .* GiB; 0\.00 GiB is free"):
        mx.trace(made[("bert", "ts")], ids=IDS)


def test_transformers_and_our_decoder_agree_on_a_llama(made):
    d = mx.compare_runs(made["llama"], made["llama"], ids=IDS, b_engine="transformers")
    assert (d.engine_a, d.engine_b) == ("decoder", "transformers")
    assert d.agree and not d.unpaired  # q/k/v split into heads on one side only: the same values


def test_engines_are_picked_by_format_and_named_on_the_trace(made):
    from model_explorer.runs.engines import engine_for

    assert engine_for(made[("bert", "ts")]) == "onnxruntime"
    assert engine_for(made["bert"]) == "transformers"  # no family of our decoder
    assert engine_for(made["llama"]) == "decoder"
    t = mx.trace(made[("bert", "dy")])
    assert t.engine == "onnxruntime" and t.num_layers == 2 and len(t.stats) == 15
    with pytest.raises(ValueError, match="unknown engine"):
        mx.trace(made["bert"], engine="tensorrt")


def test_a_folder_asking_for_its_own_code_is_refused_before_loading(made, tmp_path):
    import json
    import shutil

    from model_explorer.model.config import UnsupportedModel

    folder = tmp_path / "remote"
    shutil.copytree(made["bert"], folder)
    cfg = json.loads((folder / "config.json").read_text())
    cfg["auto_map"] = {"AutoModel": "modeling_evil.EvilModel"}
    (folder / "config.json").write_text(json.dumps(cfg))
    (folder / "modeling_evil.py").write_text("raise SystemExit('imported')\n")
    with pytest.raises(UnsupportedModel, match="auto_map"):
        mx.trace(str(folder), engine="transformers")


def test_the_cli_and_the_view_name_the_engines_and_the_node(made, capsys):
    from model_explorer.cli import main
    from model_explorer.runs.state import runs_state

    scaled = made["root"] / "bert_ts_scaled.onnx"  # written by the scaled-initializer test
    if not scaled.exists():
        pytest.skip("runs after test_a_scaled_ffn_initializer_is_found_at_its_layer_and_module")
    ids = ",".join(map(str, IDS))
    code = main(["compare-runs", made["bert"], str(scaled), "--b-engine", "onnxruntime", "--ids", ids])
    out = capsys.readouterr().out
    assert code == 1
    assert "(transformers)" in out and "(onnxruntime)" in out
    assert "/bert/encoder/layer.1/output/dense/Add (Add)" in out  # b's node and its op
    assert main(["trace", made[("llama", "dy")], "--engine", "onnxruntime"]) == 0
    assert "onnxruntime" in capsys.readouterr().out

    d = mx.compare_runs(made["bert"], str(scaled), ids=IDS, a_engine="transformers")
    state = runs_state(d)
    assert state["engines"] == ["transformers", "onnxruntime"] and state["aligned_count"] == 15
    cell = state["aligned"][1][state["modules"].index("ffn_out")]
    assert "encoder.layer.1.output.dense" in cell and "/bert/encoder/layer.1/output/dense/Add" in cell


def test_a_file_no_engine_can_read_is_said_not_raised(made, tmp_path, capsys):
    from model_explorer.cli import main
    from model_explorer.model.config import UnsupportedModel

    bad = tmp_path / "cut.onnx"
    bad.write_bytes(open(made[("bert", "ts")], "rb").read()[:1000])
    with pytest.raises(UnsupportedModel, match="cut.onnx"):
        mx.trace(str(bad), ids=IDS)
    assert main(["compare-runs", made["bert"], str(bad), "--ids", "1,2,3"]) == 2
    assert "cannot compare the runs" in capsys.readouterr().err
