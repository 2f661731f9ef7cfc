"""mx.diff of an ONNX export against the safetensors it came from, and of a quantized ONNX
against its float export: names through the exporter's naming, transposed MatMul weights, values
only where one candidate fits."""

from __future__ import annotations

import numpy as np
import pytest

import model_explorer as mx

from . import models

onnx = pytest.importorskip("onnx")
torch = pytest.importorskip("torch")


class Tiny(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.emb = torch.nn.Embedding(10, 8)
        self.norm = torch.nn.LayerNorm(8)
        self.fc = torch.nn.Linear(8, 6)
        self.out = torch.nn.Linear(6, 4, bias=False)

    def forward(self, x):
        return self.out(torch.relu(self.fc(self.norm(self.emb(x)))))


@pytest.fixture(scope="module")
def exported(tmp_path_factory):
    """A tiny torch model saved as safetensors and exported by torch.onnx.export (TorchScript
    exporter: the Linear weights become transposed `onnx::MatMul_N` initializers)."""
    from safetensors.torch import save_file

    d = tmp_path_factory.mktemp("export")
    torch.manual_seed(0)
    model = Tiny().eval()
    save_file(model.state_dict(), str(d / "model.safetensors"))
    with torch.no_grad():
        torch.onnx.export(model, (torch.zeros(1, 3, dtype=torch.long),), str(d / "model.onnx"),
                          dynamo=False, opset_version=17)
    return d


def _rows(table):
    return {(r["name"], r["name_b"]): r for r in table.to_dict("records")}


def test_export_against_its_safetensors(exported):
    st, ox = exported / "model.safetensors", exported / "model.onnx"
    names = {t.name for t in onnx.load(str(ox)).graph.initializer}
    assert any(n.startswith("onnx::MatMul") for n in names)  # the case this is about
    table = mx.diff(str(st), str(ox), tokenizers=False)
    assert set(table["status"]) == {"same"}, table
    rows = _rows(table)
    fc = next(r for (a, b), r in rows.items() if a == "fc.weight")
    assert fc["name_b"].startswith("onnx::MatMul") and fc["shape_b"] == [8, 6]
    assert table.attrs["onnx_names"]["module"] and not table.attrs["onnx_names"]["values"]
    back = mx.diff(str(ox), str(st), tokenizers=False)  # either side may be the ONNX one
    assert set(back["status"]) == {"same"} and len(back) == len(table)


def test_quantized_exports_against_the_float_one(exported, tmp_path):
    from onnxruntime.quantization import QuantType, quantize_dynamic
    from onnxruntime.quantization.matmul_nbits_quantizer import MatMulNBitsQuantizer

    ox = exported / "model.onnx"
    dyn = tmp_path / "model_quantized.onnx"
    quantize_dynamic(str(ox), str(dyn), weight_type=QuantType.QInt8)
    q4 = MatMulNBitsQuantizer(onnx.load(str(ox)), bits=4, block_size=16)
    q4.process()
    onnx.save_model(q4.model.model, str(tmp_path / "model_q4.onnx"))
    for path, kind in ((dyn, "DYN_I8"), (tmp_path / "model_q4.onnx", "MATMULNBITS_Q4")):
        table = mx.diff(str(ox), str(path), tokenizers=False)
        weights = table[table["dtype_b"] == kind]
        assert len(weights) >= 2 and set(weights["status"]) == {"dtype"}, table
        assert (weights["rel_l2"] < 0.2).all() and (weights["cosine"] > 0.98).all()
        # and against the safetensors: the quantized weight is that Linear's, dequantized
        table = mx.diff(str(exported / "model.safetensors"), str(path), tokenizers=False)
        fc = table[table["name"] == "fc.weight"].iloc[0]
        assert fc["dtype_b"] == kind and fc["cosine"] > 0.98


def test_anonymous_names_match_by_values_only_when_unambiguous(tmp_path):
    from onnx import helper, numpy_helper
    from safetensors.numpy import save_file

    w1 = models.RNG.standard_normal((5, 3)).astype(np.float32)
    w2 = models.RNG.standard_normal((5, 3)).astype(np.float32)
    same = models.RNG.standard_normal((4, 4)).astype(np.float32)
    save_file({"a.weight": w1.T.copy(), "b.weight": w2, "c.weight": same, "d.weight": same.copy()},
              str(tmp_path / "m.safetensors"))
    inits = [numpy_helper.from_array(w1, "onnx::MatMul_1"), numpy_helper.from_array(w2, "onnx::MatMul_2"),
             numpy_helper.from_array(same, "onnx::MatMul_3")]
    model = models._model([helper.make_node("Identity", ["onnx::MatMul_1"], ["y"])], inits, [],
                          [models.value("y")])
    onnx.save_model(model, str(tmp_path / "m.onnx"))
    table = mx.diff(str(tmp_path / "m.safetensors"), str(tmp_path / "m.onnx"), tokenizers=False)
    rows = _rows(table)
    assert rows[("a.weight", "onnx::MatMul_1")]["status"] == "same"      # transposed, by values
    assert rows[("b.weight", "onnx::MatMul_2")]["status"] == "same"
    # two safetensors tensors hold the same values: which one was exported cannot be told
    status = dict(zip(table["name"], table["status"]))
    assert status["c.weight"] == status["d.weight"] == "removed" and status["onnx::MatMul_3"] == "added"
    assert sorted(table.attrs["onnx_names"]["values"]) == ["onnx::MatMul_1", "onnx::MatMul_2"]


def test_fp16_export_against_its_float_safetensors(exported, tmp_path):
    """model_fp16.onnx as converters write it: the same initializers in float16."""
    from onnx import numpy_helper

    model = onnx.load(str(exported / "model.onnx"))
    for t in model.graph.initializer:
        if t.data_type == onnx.TensorProto.FLOAT:
            t.CopyFrom(numpy_helper.from_array(numpy_helper.to_array(t).astype(np.float16), t.name))
    onnx.save_model(model, str(tmp_path / "model_fp16.onnx"))
    table = mx.diff(str(exported / "model.safetensors"), str(tmp_path / "model_fp16.onnx"), tokenizers=False)
    assert set(table["status"]) == {"dtype"} and set(table["dtype_b"]) == {"F16"}
    assert (table["rel_l2"] < 1e-3).all()


class Wrapped(torch.nn.Module):
    """A square Linear inside a wrapper module, exported the way people export a model's forward:
    the node names carry the wrapper's scope (`/model/sq/MatMul`), the checkpoint's names don't."""

    def __init__(self) -> None:
        super().__init__()
        self.model = torch.nn.Module()
        self.model.sq = torch.nn.Linear(8, 8, bias=False)
        self.model.scale = torch.nn.Parameter(torch.rand(8) + 0.5)  # kept by name: model.scale
        # the same values in another order: sums alike, so only the name can pair them
        self.model.shift = torch.nn.Parameter(self.model.scale.detach().flip(0).clone())
        self.model.out = torch.nn.Linear(8, 3, bias=False)

    def forward(self, x):
        return self.model.out(torch.relu(self.model.sq(x)) * self.model.scale + self.model.shift)


def test_square_weight_under_a_wrapper_scope_is_paired_transposed(tmp_path):
    from onnx import numpy_helper
    from safetensors.torch import save_file

    torch.manual_seed(1)
    model = Wrapped().eval()
    save_file(model.model.state_dict(), str(tmp_path / "model.safetensors"))  # names without the wrapper
    with torch.no_grad():
        torch.onnx.export(model, (torch.zeros(1, 8),), str(tmp_path / "model.onnx"), dynamo=False,
                          opset_version=17)
    proto = onnx.load(str(tmp_path / "model.onnx"))
    weight = model.model.sq.weight.detach().numpy()
    holder = next(t.name for t in proto.graph.initializer
                  if numpy_helper.to_array(t).shape == (8, 8) and np.array_equal(numpy_helper.to_array(t), weight.T))
    table = mx.diff(str(tmp_path / "model.safetensors"), str(tmp_path / "model.onnx"), tokenizers=False)
    row = _rows(table)[("sq.weight", holder)]
    assert row["status"] == "same" and row["max_abs_diff"] == 0.0
    assert {t.name for t in proto.graph.initializer} >= {"model.scale", "model.shift"}
    rows = _rows(table)
    assert rows[("scale", "model.scale")]["status"] == "same" and rows[("shift", "model.shift")]["status"] == "same"
    assert "sq.weight" in table.attrs["onnx_names"]["module"] or holder in table.attrs["onnx_names"]["module"]
