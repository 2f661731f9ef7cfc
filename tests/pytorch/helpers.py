"""Shared helpers: small torch checkpoints written by torch.save, and hostile pickles.

Hostile payloads only ever try to create a marker file in the test's temp directory; the
tests assert that the marker never appears, whatever opens the file.
"""

from __future__ import annotations

import io
import os
import struct
import subprocess
import zipfile

import numpy as np

from model_explorer.dtypes import numpy_dtype


def storage_view(ckpt, info) -> np.ndarray:
    """Decode a tensor from exactly the TensorInfo fields: as_strided over the storage bytes."""
    raw = ckpt.read_bytes(info.extra["storage_start"], info.extra["storage_nbytes"])
    if info.dtype == "C128":
        dt = np.dtype(np.complex128).newbyteorder(info.byteorder)
    else:
        dt = numpy_dtype(info.dtype, info.byteorder)
    flat = np.frombuffer(raw, dtype=dt)
    if not info.shape or 0 in info.shape:
        return flat[info.storage_offset:info.storage_offset + (0 if info.shape else 1)].reshape(
            info.shape)
    return np.lib.stride_tricks.as_strided(
        flat[info.storage_offset:], shape=info.shape,
        strides=[s * dt.itemsize for s in info.stride])


def torch_bytes(t) -> bytes:
    """The logical (C-order) bytes of a torch tensor, whatever its dtype."""
    import torch

    c = t.detach().contiguous()
    if c.numel() == 0:
        return b""
    return c.reshape(-1).view(torch.uint8).numpy().tobytes()


def flatten(obj, prefix=""):
    """torch.load output -> {dotted path: tensor}, the naming the reader promises."""
    import torch

    out = {}
    if isinstance(obj, torch.Tensor):
        out[prefix or "(root)"] = obj
    elif isinstance(obj, dict):
        for k, v in obj.items():
            out.update(flatten(v, f"{prefix}.{k}" if prefix else str(k)))
    elif isinstance(obj, (list, tuple)):
        for i, v in enumerate(obj):
            out.update(flatten(v, f"{prefix}.{i}" if prefix else str(i)))
    return out


def rich_state():
    """Every dtype and layout the issue names: bf16, fp16, int64, bool, views, sharing, nesting."""
    import torch

    g = torch.Generator().manual_seed(0)
    base = torch.randn(6, 8, generator=g)
    emb = torch.randn(10, 4, generator=g)
    return {
        "model": {
            "embed.weight": emb,
            "lm_head.weight": emb,  # tied: the same tensor object twice
            "layer.0.weight": torch.randn(4, 4, generator=g).to(torch.bfloat16),
            "layer.0.bias": torch.randn(4, generator=g).to(torch.float16),
            "counts": torch.arange(7, dtype=torch.int64),
            "mask": torch.tensor([True, False, True]),
            "view_offset": base[2:4],  # non-zero storage offset, shares base's storage
            "view_strided": base[:, ::3],  # non-contiguous strides
            "view_t": base.t(),
            "base": base,
            "scalar": torch.tensor(3.5, dtype=torch.float64),
            "empty": torch.zeros(0, 3),
            "i8": torch.tensor([-3, 4], dtype=torch.int8),
            "u8": torch.tensor([250, 4], dtype=torch.uint8),
            "i32": torch.tensor([1 << 20], dtype=torch.int32),
            "i16": torch.tensor([-7], dtype=torch.int16),
        },
        "optimizer": {"state": {0: {"exp_avg": torch.ones(2, 2)}},
                      "param_groups": [{"lr": 0.1, "params": [0]}]},
        "epoch": 3,
        "param": torch.nn.Parameter(torch.full((2,), 0.5)),
    }


# -- hostile pickles ---------------------------------------------------------------------------

class Reducer:
    """pickle.dumps(Reducer(f, args)) makes a pickle that calls f(*args) when loaded."""

    def __init__(self, func, args):
        self.func, self.args = func, args

    def __reduce__(self):
        return self.func, self.args


def touch_command(marker) -> str:
    return f"touch {marker}"


def memo_stack_global(module: str, name: str, arg: str) -> bytes:
    """Protocol 4: module and name pushed, memoized, popped, then fetched back by BINGET."""
    def unicode(s: str) -> bytes:
        b = s.encode()
        return b"\x8c" + bytes([len(b)]) + b

    return (b"\x80\x04" + unicode(module) + b"\x94" + unicode(name) + b"\x94" + b"00"
            + b"h\x00h\x01\x93" + unicode(arg) + b"\x85R.")


def hostile_pickles(marker) -> dict[str, bytes]:
    """Name -> pickle bytes; each would create `marker` if unpickled."""
    import pickle
    import runpy

    cmd = touch_command(marker)
    code = f"open({str(marker)!r}, 'w').close()"
    return {
        "os_system_p0": f"cos\nsystem\n(S'{cmd}'\ntR.".encode(),
        "os_system_p2": pickle.dumps(Reducer(os.system, (cmd,)), protocol=2),
        "builtins_exec": pickle.dumps(Reducer(exec, (code,)), protocol=4),
        "builtins_eval_p0": pickle.dumps(Reducer(eval, (code,)), protocol=0),
        "subprocess_call": pickle.dumps(Reducer(subprocess.call, (["touch", str(marker)],)),
                                        protocol=3),
        "runpy": pickle.dumps(Reducer(runpy._run_code, (code, {})), protocol=5),
        "memo_stack_global": memo_stack_global("os", "system", cmd),
    }


def zip_with_data_pkl(valid_zip, data_pkl: bytes, out) -> None:
    """Copy a torch zip, replacing the bytes of its data.pkl record."""
    with zipfile.ZipFile(valid_zip) as src, zipfile.ZipFile(out, "w", zipfile.ZIP_STORED) as dst:
        for info in src.infolist():
            data = data_pkl if info.filename.endswith("/data.pkl") else src.read(info.filename)
            dst.writestr(info.filename, data)


def u64(n: int) -> bytes:
    return struct.pack("<Q", n)


def bytes_of(path) -> bytes:
    with open(path, "rb") as f:
        return f.read()


def dump_bytes(obj, **kw) -> bytes:
    import torch

    buf = io.BytesIO()
    torch.save(obj, buf, **kw)
    return buf.getvalue()


def tar_of(members: list[tuple[str, bytes]]) -> bytes:
    """A plain tar of (name, bytes) members, built in memory."""
    import io
    import tarfile

    out = io.BytesIO()
    with tarfile.open(fileobj=out, mode="w") as tar:
        for name, data in members:
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return out.getvalue()
