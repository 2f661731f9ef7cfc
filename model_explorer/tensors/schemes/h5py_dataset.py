"""Chunked or compressed HDF5 datasets, whose bytes are not one range of the file: their values
are read through h5py (an optional extra), on the byte source the reader used, a first-axis slice
at a time. The format reader (formats/hdf5) marks them with a Quant of codec "h5py_dataset":
`dataset` (its path) and `window` (start, length: where the HDF5 file is inside the source)."""

from __future__ import annotations

import numpy as np

from ... import dtypes
from ...records import CheckpointRecord, TensorInfo
from ..plan import Plan

# deflate expands at most about 1032 to 1: a chunked dataset claiming more is refused before
# anything is allocated (its dataspace is damaged or hostile)
MAX_EXPANSION = 1032


def plan(ckpt: CheckpointRecord, info: TensorInfo) -> Plan:
    try:
        import h5py
    except ImportError:
        raise ValueError(f"Tensor {info.name!r} is a chunked HDF5 dataset; reading its values needs "
                         "h5py (pip install h5py).") from None
    from ...formats.hdf5.window import SourceFile

    q = info.quant
    if q is None or q.dataset is None or q.window is None:
        raise ValueError(f"Tensor {info.name!r} is marked as a chunked HDF5 dataset without its path.")
    dataset, (start, window) = q.dataset, q.window
    dt = dtypes.numpy_dtype(info.dtype, info.byteorder)
    if dt is None:
        raise ValueError(f"Tensor {info.name!r} has dtype {info.dtype!r}, which this tool cannot decode.")
    shape = info.shape
    if info.numel * dt.itemsize > MAX_EXPANSION * window + (1 << 20):
        raise ValueError(f"Tensor {info.name!r} claims {list(shape)} {info.dtype}: more bytes than a "
                         f"file of {window} bytes can hold even compressed; its shape is not to be trusted.")
    row = int(np.prod(shape[1:])) if len(shape) > 1 else 1

    def gather(idx):
        idx = np.asarray(idx if not isinstance(idx, range) else np.arange(idx.start, idx.stop), np.int64)
        if not len(idx):
            return np.empty((0, dt.itemsize), np.uint8)
        first, last = (int(idx.min()) // row, int(idx.max()) // row + 1) if shape else (0, 1)
        try:
            with h5py.File(SourceFile(ckpt.byte_source(info.file), start, window), "r") as f:
                dset = f[dataset]
                values = np.asarray(dset[first:last] if shape else dset[()], dtype=dt).reshape(-1)
        except (OSError, KeyError, ValueError, TypeError, RuntimeError) as e:  # h5py's errors on a damaged file
            raise ValueError(f"Tensor {info.name!r} is a chunked HDF5 dataset that h5py cannot read: "
                             f"{e}") from None
        if len(values) < (last - first) * row:
            raise ValueError(f"Tensor {info.name!r}: h5py read {len(values)} values where its shape "
                             f"{list(shape)} needs {(last - first) * row}.")
        picked = values[idx - first * row]
        return picked.view(np.uint8).reshape(len(idx), dt.itemsize)

    out = np.dtype(np.float32) if dt.kind == "f" or dt.name == "bfloat16" else dt.newbyteorder("=")

    def decode(raw, idx, o):
        o[...] = raw.reshape(-1).view(dt).reshape(o.shape)

    # data_bytes 0: no byte range of the file is the tensor (the checks of ranges pass over it)
    p = Plan(info, 1, dt.itemsize, info.numel, out, decode, None, info.length, "element")
    p.gather = gather
    return p
