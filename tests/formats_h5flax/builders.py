"""Small files in each format, written by the format's own library (h5py, keras, msgpack with
flax.serialization's ext type), in the layouts transformers and Keras give them."""

from __future__ import annotations

import zipfile
from pathlib import Path

import ml_dtypes
import msgpack
import numpy as np

h5py = __import__("pytest").importorskip("h5py")

RNG = np.random.default_rng(7)

# A BERT-shaped PyTorch state dict and its transformers TF names (kernels stored transposed).
PT = {
    "bert.embeddings.word_embeddings.weight": RNG.standard_normal((12, 4)).astype(np.float32),
    "bert.embeddings.position_embeddings.weight": RNG.standard_normal((8, 4)).astype(np.float32),
    "bert.embeddings.LayerNorm.weight": RNG.standard_normal(4).astype(np.float32),
    "bert.embeddings.LayerNorm.bias": RNG.standard_normal(4).astype(np.float32),
    "bert.encoder.layer.0.attention.self.query.weight": RNG.standard_normal((6, 4)).astype(np.float32),
    "bert.encoder.layer.0.attention.self.query.bias": RNG.standard_normal(6).astype(np.float32),
    "bert.encoder.layer.1.output.dense.weight": RNG.standard_normal((4, 6)).astype(np.float32),
    "bert.conv.weight": RNG.standard_normal((5, 3, 2, 2)).astype(np.float32),
}
TF_NAMES = {
    "bert.embeddings.word_embeddings.weight": "tf_bert_model/bert/embeddings/word_embeddings/weight:0",
    "bert.embeddings.position_embeddings.weight": "tf_bert_model/bert/embeddings/position_embeddings/embeddings:0",
    "bert.embeddings.LayerNorm.weight": "tf_bert_model/bert/embeddings/LayerNorm/gamma:0",
    "bert.embeddings.LayerNorm.bias": "tf_bert_model/bert/embeddings/LayerNorm/beta:0",
    "bert.encoder.layer.0.attention.self.query.weight": "tf_bert_model/bert/encoder/layer_._0/attention/self/query/kernel:0",
    "bert.encoder.layer.0.attention.self.query.bias": "tf_bert_model/bert/encoder/layer_._0/attention/self/query/bias:0",
    "bert.encoder.layer.1.output.dense.weight": "tf_bert_model/bert/encoder/layer_._1/output/dense/kernel:0",
    "bert.conv.weight": "tf_bert_model/bert/conv/kernel:0",
}
FLAX_NAMES = {
    "bert.embeddings.word_embeddings.weight": "bert/embeddings/word_embeddings/embedding",
    "bert.embeddings.position_embeddings.weight": "bert/embeddings/position_embeddings/embedding",
    "bert.embeddings.LayerNorm.weight": "bert/embeddings/LayerNorm/scale",
    "bert.embeddings.LayerNorm.bias": "bert/embeddings/LayerNorm/bias",
    "bert.encoder.layer.0.attention.self.query.weight": "bert/encoder/layer/0/attention/self/query/kernel",
    "bert.encoder.layer.0.attention.self.query.bias": "bert/encoder/layer/0/attention/self/query/bias",
    "bert.encoder.layer.1.output.dense.weight": "bert/encoder/layer/1/output/dense/kernel",
    "bert.conv.weight": "bert/conv/kernel",
}


def to_tf(name: str, value: np.ndarray) -> np.ndarray:
    """The PyTorch array in TensorFlow's layout, as transformers' PT -> TF loader stores it."""
    if TF_NAMES[name].endswith("kernel:0"):
        return value.transpose(2, 3, 1, 0) if value.ndim == 4 else value.T
    return value


def to_flax(name: str, value: np.ndarray) -> np.ndarray:
    if FLAX_NAMES[name].endswith("kernel"):
        return value.transpose(2, 3, 1, 0) if value.ndim == 4 else value.T
    return value


def tf_model_h5(path: Path, pt: dict | None = None, **h5kw) -> Path:
    """transformers' tf_model.h5 (Keras 2 save_weights): root attributes layer_names, backend and
    keras_version; a group per layer whose weight_names attribute names its datasets."""
    pt = PT if pt is None else pt
    names = [TF_NAMES[n] for n in pt]
    with h5py.File(path, "w", **h5kw) as f:
        f.attrs["layer_names"] = np.array([b"bert"])
        f.attrs["backend"] = b"tensorflow"
        f.attrs["keras_version"] = b"2.15.0"
        g = f.create_group("bert")
        g.attrs["weight_names"] = np.array([n.encode() for n in names])
        for pt_name, tf_name in zip(pt, names):
            g.create_dataset(tf_name, data=to_tf(pt_name, pt[pt_name]))
    return path


def kinds_h5(path: Path, **h5kw) -> Path:
    """One dataset of each kind the reader meets: dtypes, byte orders, scalar, chunked, compressed,
    compact."""
    with h5py.File(path, "w", **h5kw) as f:
        g = f.create_group("w")
        g["f16"] = np.arange(6, dtype=np.float16).reshape(2, 3)
        g["f64"] = RNG.standard_normal((3, 2))
        g["i8"] = np.arange(-4, 4, dtype=np.int8)
        g["u16"] = np.arange(5, dtype=np.uint16)
        g["i64_big_endian"] = np.arange(6, dtype=">i8")
        g["f32_big_endian"] = RNG.standard_normal(5).astype(">f4")
        g["bool"] = np.array([True, False, True])
        _bf16(g, "bf16", RNG.standard_normal(4).astype(ml_dtypes.bfloat16))
        g["scalar"] = np.float64(3.5)
        g.create_dataset("chunked", data=np.arange(60, dtype=np.float32).reshape(6, 10), chunks=(2, 5))
        g.create_dataset("gzip", data=RNG.standard_normal((7, 3)).astype(np.float32), compression="gzip",
                         shuffle=True)
        _compact(g, "compact", np.arange(5, dtype=np.int32))
        g.create_group("empty_group")
    return path


def _compact(group, name: str, values: np.ndarray) -> None:
    dcpl = h5py.h5p.create(h5py.h5p.DATASET_CREATE)
    dcpl.set_layout(h5py.h5d.COMPACT)
    space = h5py.h5s.create_simple(values.shape)
    dset = h5py.h5d.create(group.id, name.encode(), h5py.h5t.NATIVE_INT32, space, dcpl=dcpl)
    dset.write(h5py.h5s.ALL, h5py.h5s.ALL, values)


def _bf16(group, name: str, values: np.ndarray) -> None:
    """bfloat16 as HDF5 spells it: a 2-byte float of 8 exponent and 7 mantissa bits (h5py reads
    it back converted to float32)."""
    t = h5py.h5t.IEEE_F32LE.copy()
    t.set_fields(15, 7, 8, 0, 7)
    t.set_offset(0)
    t.set_precision(16)
    t.set_size(2)
    t.set_ebias(127)
    dset = h5py.h5d.create(group.id, name.encode(), t, h5py.h5s.create_simple(values.shape))
    dset.write(h5py.h5s.ALL, h5py.h5s.ALL, values.view(np.uint16), mtype=t)


def keras_weights_h5(path: Path) -> Path:
    """Keras 3's model.weights.h5 layout: layers/<name>/vars/<i>, plus an optimizer group."""
    with h5py.File(path, "w") as f:
        for layer, shapes in (("dense", [(4, 3), (3,)]), ("layer_normalization", [(3,), (3,)]),
                              ("dense_1", [(3, 2), (2,)])):
            v = f.create_group(f"layers/{layer}/vars")
            for i, s in enumerate(shapes):
                v[str(i)] = RNG.standard_normal(s).astype(np.float32)
        f.create_group("optimizer/vars")
    return path


def keras_zip(path: Path, weights: Path, compress: int = zipfile.ZIP_STORED) -> Path:
    """A .keras archive as Keras 3 writes it (its members stored uncompressed), around `weights`."""
    with zipfile.ZipFile(path, "w", compression=compress) as z:
        z.writestr("metadata.json", '{"keras_version": "3.15.1", "date_saved": "2026-01-01@00:00:00"}')
        z.writestr("config.json", '{"module": "keras", "class_name": "Sequential"}')
        z.write(weights, "model.weights.h5")
    return path


# -- Flax ----------------------------------------------------------------------------------------
# flax.serialization (flax 0.12) writes an array as ExtType(1, packb((shape, dtype.name,
# tobytes('C')), use_bin_type=True)), a numpy scalar as ExtType(3, same), a complex as
# ExtType(2, packb((real, imag))), all through packb(tree, default=..., strict_types=True).
# flax itself needs jax; these are its functions, as its source has them.

def flax_ext_pack(x):
    if isinstance(x, np.ndarray):
        return msgpack.ExtType(1, msgpack.packb((x.shape, x.dtype.name, x.tobytes("C")), use_bin_type=True))
    if isinstance(x, np.generic):
        a = np.asarray(x)
        return msgpack.ExtType(3, msgpack.packb((a.shape, a.dtype.name, a.tobytes("C")), use_bin_type=True))
    if isinstance(x, complex):
        return msgpack.ExtType(2, msgpack.packb((x.real, x.imag)))
    return x


def flax_ext_unpack(code, data):
    """flax.serialization._msgpack_ext_unpack: the reference reading of the ext types."""
    if code in (1, 3):
        shape, dtype_name, buffer = msgpack.unpackb(data, raw=True)
        dt = ml_dtypes.bfloat16 if dtype_name == b"bfloat16" else np.dtype(dtype_name.decode())
        arr = np.frombuffer(buffer, dtype=dt).reshape(shape)
        return arr if code == 1 else arr[()]
    if code == 2:
        re_, im = msgpack.unpackb(data)
        return complex(re_, im)
    return msgpack.ExtType(code, data)


def flax_serialize(tree) -> bytes:
    return msgpack.packb(tree, default=flax_ext_pack, strict_types=True)


def flax_restore(data: bytes):
    return msgpack.unpackb(data, ext_hook=flax_ext_unpack, raw=False)


def nest(flat: dict[str, np.ndarray]) -> dict:
    tree: dict = {}
    for name, value in flat.items():
        *parents, leaf = name.split("/")
        node = tree
        for p in parents:
            node = node.setdefault(p, {})
        node[leaf] = value
    return tree


def flax_model_msgpack(path: Path, pt: dict | None = None, prefix: bool = True) -> Path:
    pt = PT if pt is None else pt
    flat = {}
    for name, value in pt.items():
        key = FLAX_NAMES[name]
        flat[key if prefix else key.split("/", 1)[1]] = to_flax(name, value)
    path.write_bytes(flax_serialize(nest(flat)))
    return path


def flatten(tree, prefix: str = "") -> dict:
    out = {}
    for k, v in tree.items():
        name = f"{prefix}/{k}" if prefix else str(k)
        out.update(flatten(v, name) if isinstance(v, dict) else {name: v})
    return out
