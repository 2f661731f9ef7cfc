"""Keras 3 .keras archives: model.weights.h5 read in place inside the zip, each tensor's byte range
absolute in the .keras file; a real archive written by Keras (torch backend) when keras installs."""

from __future__ import annotations

import io
import os
import zipfile

import numpy as np
import pytest

import model_explorer as mx

from .builders import h5py, keras_weights_h5, keras_zip


def _inner_values(path) -> dict[str, np.ndarray]:
    """The weights as h5py reads them from the archive's model.weights.h5."""
    with zipfile.ZipFile(path) as z:
        data = z.read("model.weights.h5")
    out = {}
    with h5py.File(io.BytesIO(data), "r") as f:
        f.visititems(lambda n, o: out.__setitem__(n, o[()]) if isinstance(o, h5py.Dataset) else None)
    return out


def _check(path) -> mx.Checkpoint:
    ckpt = mx.open(str(path))
    want = _inner_values(path)
    assert ckpt.format == "keras" and sorted(ckpt.tensors) == sorted(want)
    raw = path.read_bytes()
    for name, values in want.items():
        t = ckpt.tensors[name]
        np.testing.assert_array_equal(ckpt.read(name), values)
        assert raw[t.offset:t.end] == np.ascontiguousarray(values).tobytes()  # absolute in the .keras
    return ckpt


def test_keras_archive_as_keras_writes_it(tmp_path):
    weights = keras_weights_h5(tmp_path / "model.weights.h5")
    ckpt = _check(keras_zip(tmp_path / "model.keras", weights))
    assert ckpt.metadata["keras_version"] == "3.15.1"
    assert [f for f in ckpt.findings if f.severity != "info"] == []
    kinds = {s.kind for s in ckpt.spans_for(ckpt.files[0])}
    assert {"zip_header", "magic", "tensor_data"} <= kinds


def test_compressed_weights_are_said_not_read(tmp_path):
    weights = keras_weights_h5(tmp_path / "model.weights.h5")
    ckpt = mx.open(str(keras_zip(tmp_path / "model.keras", weights, zipfile.ZIP_DEFLATED)))
    assert [f.code for f in ckpt.findings] == ["keras_compressed"] and len(ckpt.tensors) == 0


def test_a_zip_without_weights_and_a_broken_zip(tmp_path):
    path = tmp_path / "model.keras"
    with zipfile.ZipFile(path, "w") as z:
        z.writestr("config.json", "{}")
        z.writestr("x.weights.h5", b"\x89HDF\r\n\x1a\n")  # named as Keras names it, but cut short
    ckpt = mx.open(str(path))
    assert ckpt.format == "keras" and ckpt.findings and "internal_error" not in {f.code for f in ckpt.findings}
    path.write_bytes(path.read_bytes()[:-30])  # the end of the central directory is gone
    ckpt = mx.open(str(path))
    assert "internal_error" not in {f.code for f in ckpt.findings}


@pytest.mark.slow
def test_real_keras_archive(tmp_path):
    """Keras 3 itself (torch backend, already installed for the rest of the suite) writes it."""
    os.environ.setdefault("KERAS_BACKEND", "torch")
    keras = pytest.importorskip("keras")
    if keras.backend.backend() != "torch":
        pytest.skip("keras is set to another backend")
    model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(3), keras.layers.LayerNormalization(),
                              keras.layers.Dense(2)])
    path = tmp_path / "model.keras"
    model.save(path)
    ckpt = _check(path)
    by_shape = sorted(tuple(t.shape) for t in ckpt.tensors.values())
    assert by_shape == sorted(tuple(w.shape) for w in model.weights)
    for w in model.weights:  # the layer's variables, in the order Keras saves them
        hits = [n for n, t in ckpt.tensors.items() if np.array_equal(ckpt.read(n), np.asarray(w.numpy()))]
        assert hits, w.path
