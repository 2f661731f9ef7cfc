"""HDF5 files written by h5py read without h5py: every dataset's values, dtype, shape and byte
range equal h5py's own reading (its get_offset for the byte range), in every layout h5py writes."""

from __future__ import annotations

import numpy as np
import pytest

import model_explorer as mx
from model_explorer.formats.detect import identify

from .builders import PT, TF_NAMES, h5py, keras_weights_h5, kinds_h5, tf_model_h5, to_tf

LAYOUTS = {"default": {}, "latest": {"libver": "latest"}, "userblock": {"userblock_size": 512}}


def _datasets(path) -> dict[str, object]:
    out = {}
    with h5py.File(path, "r") as f:
        f.visititems(lambda name, obj: out.__setitem__(name, obj[()] if isinstance(obj, h5py.Dataset) else None))
        offsets = {}  # h5py's byte range of each dataset stored in one piece
        f.visititems(lambda name, obj: offsets.__setitem__(name, (obj.id.get_offset(), obj.id.get_storage_size()))
                     if isinstance(obj, h5py.Dataset) else None)
    return {k: v for k, v in out.items() if v is not None}, offsets


@pytest.mark.parametrize("layout", list(LAYOUTS))
def test_every_dataset_equals_h5py(tmp_path, layout):
    path = kinds_h5(tmp_path / "kinds.h5", **LAYOUTS[layout])
    ckpt = mx.open(str(path))
    values, offsets = _datasets(path)
    assert ckpt.format == "hdf5" and set(ckpt.tensors) == set(values)
    for name, want in values.items():
        t = ckpt.tensors[name]
        got = ckpt.read(name)
        assert got.shape == np.shape(want), name
        np.testing.assert_array_equal(got, np.asarray(want).astype(got.dtype), err_msg=name)
        if t.extra["layout"] == "contiguous":
            assert (t.offset, t.length) == offsets[name], name
    assert ckpt.tensors["w/i64_big_endian"].byteorder == ">"
    assert ckpt.tensors["w/bf16"].dtype == "BF16" and ckpt.tensors["w/bool"].dtype == "BOOL"
    compact = ckpt.tensors["w/compact"]
    assert compact.extra["layout"] == "compact"
    assert ckpt.read_bytes(compact.offset, compact.length) == np.arange(5, dtype=np.int32).tobytes()
    # chunked and compressed datasets: listed, read through h5py, and said so once
    assert {ckpt.tensors[n].extra["layout"] for n in ("w/chunked", "w/gzip")} == {"chunked"}
    said = [f for f in ckpt.findings if f.code == "h5_chunked"]
    assert len(said) == 1 and "deflate" in said[0].message and said[0].severity == "info"
    assert [f for f in ckpt.findings if f.severity != "info"] == []


def test_contiguous_data_is_read_without_h5py(tmp_path, monkeypatch):
    path = tf_model_h5(tmp_path / "tf_model.h5")
    import sys

    monkeypatch.setitem(sys.modules, "h5py", None)  # import h5py now fails
    ckpt = mx.open(str(path))
    name = TF_NAMES["bert.encoder.layer.0.attention.self.query.weight"]
    np.testing.assert_array_equal(ckpt.read(name), to_tf("bert.encoder.layer.0.attention.self.query.weight",
                                                         PT["bert.encoder.layer.0.attention.self.query.weight"]))


def test_transformers_tf_names_come_from_weight_names(tmp_path):
    path = tf_model_h5(tmp_path / "tf_model.h5")
    ckpt = mx.open(str(path))
    assert list(ckpt.tensors) == sorted(TF_NAMES.values())  # the symbol table's order: by name
    assert ckpt.metadata["keras_version"] == "2.15.0" and ckpt.metadata["backend"] == "tensorflow"
    assert ckpt.metadata["layer_names"] == "bert"
    for pt_name, tf_name in TF_NAMES.items():
        np.testing.assert_array_equal(ckpt.read(tf_name), to_tf(pt_name, PT[pt_name]))
        t = ckpt.tensors[tf_name]
        spans = [s for s in ckpt.spans_for(t.file) if s.kind == "tensor_data" and s.tensor == tf_name]
        assert [(s.offset, s.length) for s in spans] == [(t.offset, t.length)]
    assert ckpt.findings == []


def test_keras3_weights_layout(tmp_path):
    path = keras_weights_h5(tmp_path / "model.weights.h5")
    ckpt = mx.open(str(path))
    values, offsets = _datasets(path)
    assert sorted(ckpt.tensors) == sorted(values) and "layers/dense/vars/0" in values
    for name, want in values.items():
        np.testing.assert_array_equal(ckpt.read(name), want)
        assert (ckpt.tensors[name].offset, ckpt.tensors[name].length) == offsets[name]


def test_identified_by_content_not_name(tmp_path):
    path = tf_model_h5(tmp_path / "weights.bin")
    assert identify(lambda o, n: path.read_bytes()[o:o + n], path.stat().st_size).reads_as == "hdf5"
    ckpt = mx.open(str(path))
    assert ckpt.format == "hdf5" and len(ckpt.tensors) == len(TF_NAMES)
    assert [f.code for f in ckpt.findings] == ["extension_mismatch"]


def test_split_keras_attributes_are_joined(tmp_path):
    """Keras splits an attribute over 64 KiB into weight_names0, weight_names1, ..."""
    path = tmp_path / "split.h5"
    with h5py.File(path, "w") as f:
        g = f.create_group("layer")
        names = [f"model/layer/w{i}:0" for i in range(4)]
        g.attrs["weight_names0"] = np.array([n.encode() for n in names[:2]])
        g.attrs["weight_names1"] = np.array([n.encode() for n in names[2:]])
        for n in names:
            g[n] = np.ones(2, np.float32)
        f.attrs["layer_names"] = np.array([b"layer"])
    assert sorted(mx.open(str(path)).tensors) == names


def test_files_h5py_ships_open_cleanly():
    """h5py's own test files, written by other HDF5 builds (one on big-endian s390x): numeric
    datasets equal h5py's reading; strings and compound (complex) ones are an info each."""
    from pathlib import Path

    folder = Path(h5py.__file__).parent / "tests" / "data_files"
    files = sorted(folder.glob("*.h5"))
    if not files:
        pytest.skip("this h5py build ships no test files")
    for path in files:
        ckpt = mx.open(str(path))
        assert {f.severity for f in ckpt.findings} <= {"info"}, [str(f) for f in ckpt.findings]
        assert {f.code for f in ckpt.findings} <= {"h5_dtype_not_read"}
        values, offsets = _datasets(path)
        for name, t in ckpt.tensors.items():
            got = ckpt.read(name)  # floats decode to float32, as for every format
            np.testing.assert_array_equal(got, values[name].astype(got.dtype))
            assert (t.offset, t.length) == offsets[name]
        numeric = {n for n, v in values.items() if np.asarray(v).dtype.kind in "biuf"}
        assert set(ckpt.tensors) == numeric, path.name


def test_sharded_tf_checkpoint_through_its_index(tmp_path):
    """transformers shards big TF models: tf_model-0000k-of-0000n.h5 with datasets named by their
    weight names at the top, and tf_model.h5.index.json mapping each name to its shard."""
    import json

    weight_map = {}
    for i, (pt_name, tf_name) in enumerate(TF_NAMES.items()):
        shard = f"tf_model-0000{i % 2 + 1}-of-00002.h5"
        with h5py.File(tmp_path / shard, "a") as f:
            f.create_dataset(tf_name, data=to_tf(pt_name, PT[pt_name]))
        weight_map[tf_name] = shard
    total = sum(v.nbytes for v in PT.values())
    (tmp_path / "tf_model.h5.index.json").write_text(json.dumps({"metadata": {"total_size": total},
                                                                 "weight_map": weight_map}))
    ckpt = mx.open(str(tmp_path / "tf_model.h5.index.json"))
    assert ckpt.format == "hdf5" and len(ckpt.files) == 2 and sorted(ckpt.tensors) == sorted(TF_NAMES.values())
    assert [f for f in ckpt.findings if f.severity != "info"] == []
    for pt_name, tf_name in TF_NAMES.items():
        np.testing.assert_array_equal(ckpt.read(tf_name), to_tf(pt_name, PT[pt_name]))


def test_over_http_in_few_requests(served):
    """Over http the structures are read in 64 KiB blocks: a handful of requests, not one per
    header, heap and B-tree node; the values equal the local file's."""
    folder, base, server = served
    path = tf_model_h5(folder / "tf_model.h5")
    ckpt = mx.open(f"{base}/tf_model.h5")
    local = mx.open(str(path))
    assert list(ckpt.tensors) == list(local.tensors) and ckpt.findings == []
    assert len(server.requests) <= 4, server.requests
    for name in ckpt.tensors:
        np.testing.assert_array_equal(ckpt.read(name), local.read(name))


def test_a_renamed_dataset_keeps_its_own_spans(tmp_path):
    """A Keras name another dataset already took: the second dataset is named by its path, and
    its data span carries that name and its own bytes, not the first one's."""
    path = tmp_path / "clash.h5"
    with h5py.File(path, "w") as f:
        f["kernel:0"] = np.zeros(4, np.float32)  # a root dataset whose path is the Keras name below
        g = f.create_group("layer")
        g.attrs["weight_names"] = np.array([b"kernel:0"])
        g["kernel:0"] = np.ones(8, np.float32)
    ckpt = mx.open(str(path))
    assert sorted(ckpt.tensors) == ["kernel:0", "layer/kernel:0"]
    _, offsets = _datasets(path)
    for name, info in ckpt.tensors.items():
        data = [s for s in ckpt.spans_for(str(path)) if s.kind == "tensor_data" and s.tensor == name]
        assert [(s.offset, s.length) for s in data] == [(info.offset, info.length)], name
    assert ckpt.tensors["layer/kernel:0"].offset == offsets["layer/kernel:0"][0]


def test_detect_names_hdf5_and_flax_by_their_first_bytes(tmp_path):
    """detect() names every kind a reader takes that its head shows, so assemble hard-codes none."""
    from model_explorer.formats.detect import detect

    from .builders import flax_model_msgpack

    h5 = tf_model_h5(tmp_path / "tf_model.h5")
    fx = flax_model_msgpack(tmp_path / "flax_model.msgpack")
    assert detect(h5.read_bytes()[:512], h5.stat().st_size) == "hdf5"
    assert detect(fx.read_bytes()[:512], fx.stat().st_size) == "flax_msgpack"
    assert mx.open(str(h5)).format == "hdf5" and mx.open(str(fx)).format == "flax"
