"""numpy .npy / .npz and torch's legacy tar format get a verdict and their tensors, read
without np.load or torch.load; object arrays' pickles are judged like any pickle."""

from __future__ import annotations

import io
import os
import pickle
import struct
import tarfile
import zipfile

import numpy as np
import pytest

import model_explorer as mx
from model_explorer.cli import main

from .helpers import Reducer, touch_command


def verdict(ckpt, path):
    details = ckpt.details.get("files", {}).get(str(path), {})
    return details["pickle"]["verdict"] if "pickle" in details else "safe"


def codes(ckpt):
    return {f.code for f in ckpt.findings}


# -- npy / npz -------------------------------------------------------------------------------

@pytest.mark.parametrize("dtype", ["<f4", ">f8", "<i8", "|u1", "|b1", "<f2", "<c8"])
@pytest.mark.parametrize("fortran", [False, True])
def test_numeric_npy_matches_np_load(tmp_path, dtype, fortran):
    a = (np.arange(24).reshape(2, 3, 4) % 7).astype(dtype)
    a = np.asfortranarray(a) if fortran else a
    p = tmp_path / "a.npy"
    np.save(p, a)
    ckpt = mx.open(p)
    assert ckpt.format == "numpy" and not ckpt.errors and not ckpt.warnings
    t = ckpt.tensors["(root)"]
    assert t.shape == (2, 3, 4)
    np.testing.assert_array_equal(ckpt.read("(root)"), np.load(p))
    assert verdict(ckpt, p) == "safe"


def test_npz_stored_and_compressed(tmp_path):
    arrays = {"w": np.arange(6, dtype=np.float32).reshape(2, 3), "b": np.ones(3, np.int64)}
    stored, packed = tmp_path / "s.npz", tmp_path / "c.npz"
    np.savez(stored, **arrays)
    np.savez_compressed(packed, **arrays)
    s = mx.open(stored)
    assert set(s.tensors) == {"w", "b"} and not s.errors
    for k, v in arrays.items():
        np.testing.assert_array_equal(s.read(k), v)
    c = mx.open(packed)
    assert set(c.tensors) == {"w", "b"} and not c.errors
    assert all(t.extra.get("compressed") for t in c.tensors.values())


def test_object_npy_is_judged_like_a_pickle(tmp_path):
    marker = tmp_path / "marker"
    a = np.empty(2, dtype=object)
    a[0] = {"ok": 1}
    a[1] = Reducer(os.system, (touch_command(marker),))
    p = tmp_path / "obj.npy"
    np.save(p, a, allow_pickle=True)
    ckpt = mx.open(p)
    assert {"npy_object_array", "dangerous_import"} <= codes(ckpt)
    assert verdict(ckpt, p) == "dangerous"
    assert main(["doctor", str(p)]) == 1
    benign = tmp_path / "benign.npy"
    np.save(benign, np.array([{"a": 1}, [1, 2]], dtype=object), allow_pickle=True)
    b = mx.open(benign)
    assert verdict(b, benign) == "safe" and not b.errors
    assert not marker.exists()


@pytest.mark.parametrize("compressed", [False, True])
def test_object_npz_member_is_judged(tmp_path, compressed):
    marker = tmp_path / "marker"
    a = np.empty(1, dtype=object)
    a[0] = Reducer(os.system, (touch_command(marker),))
    p = tmp_path / "obj.npz"
    (np.savez_compressed if compressed else np.savez)(p, ok=np.ones(2), evil=a)
    ckpt = mx.open(p)
    assert "dangerous_import" in codes(ckpt) and verdict(ckpt, p) == "dangerous"
    assert "ok" in ckpt.tensors
    assert not marker.exists()


@pytest.mark.parametrize("data,code", [
    (b"\x93NUMPY\x09\x00", "npy_bad_version"),
    (b"\x93NUMPY\x01\x00\x10\x00{'descr': '<f4'}\n", "npy_bad_header"),
    (b"\x93NUMPY\x01\x00\x06\x00__import__('os')\n", "npy_bad_header"),
    (b"\x93NUMPY\x01\x00\x40\x00" + b"{'descr': '<f4', 'fortran_order': False, 'shape': (9,), }"
     .ljust(63) + b"\n" + b"\0" * 8, "npy_truncated"),
    (b"\x93NUMPY\x01\x00\x40\x00" + b"{'descr': 'zz', 'fortran_order': False, 'shape': (1,), }"
     .ljust(63) + b"\n", "npy_bad_dtype"),
    (b"\x93NUMPY\x01\x00\xff\xff{", "npy_bad_header"),
])
def test_bad_npy_headers_are_findings(tmp_path, data, code):
    p = tmp_path / "bad.npy"
    p.write_bytes(data)
    assert code in codes(mx.open(p))


# -- torch's legacy tar format ------------------------------------------------------------------

def torch_tar(tensors: dict, obj_extra=None, pickle_member: bytes | None = None) -> bytes:
    """The tar torch.save wrote before 0.4: contiguous float32 tensors, one storage each."""
    import torch

    class Key:
        def __init__(self, k):
            self.k = k

    class Saver(pickle.Pickler):
        def persistent_id(self, obj):
            return str(obj.k) if isinstance(obj, Key) else None

    storages = pickle.dumps(len(tensors), protocol=2)
    records = pickle.dumps(len(tensors), protocol=2)
    obj = {}
    for i, (name, t) in enumerate(tensors.items()):
        t = t.contiguous().float()
        storages += pickle.dumps((100 + i, "cpu", torch.FloatStorage), protocol=2)
        storages += struct.pack("<q", t.numel()) + t.numpy().tobytes()
        records += pickle.dumps((i, 100 + i, torch.FloatTensor), protocol=2)
        records += struct.pack("<i", t.dim()) + b"\0" * 4
        records += struct.pack(f"<{t.dim()}q", *t.shape) + struct.pack(f"<{t.dim()}q", *t.stride())
        records += struct.pack("<q", 0)
        obj[name] = Key(i)
    storages += pickle.dumps([], protocol=2)
    if obj_extra:
        obj.update(obj_extra)
    if pickle_member is None:
        buf = io.BytesIO()
        Saver(buf, protocol=2).dump(obj)
        pickle_member = buf.getvalue()
    info = pickle.dumps({"protocol_version": 1001, "little_endian": True,
                         "type_sizes": {"short": 2, "int": 4, "long": 8}}, protocol=2)
    out = io.BytesIO()
    with tarfile.open(fileobj=out, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for name, data in (("sys_info", info), ("storages", storages), ("tensors", records),
                           ("pickle", pickle_member)):
            ti = tarfile.TarInfo(name)
            ti.size = len(data)
            tar.addfile(ti, io.BytesIO(data))
    return out.getvalue()


@pytest.mark.reference
def test_legacy_tar_lists_tensors_like_torch_load(tmp_path):
    import torch

    state = {"a.weight": torch.arange(6.0).reshape(2, 3), "b": torch.ones(4)}
    p = tmp_path / "old.pt"
    p.write_bytes(torch_tar(state))
    ckpt = mx.open(p)
    assert ckpt.format == "pytorch" and not ckpt.errors and not ckpt.warnings, ckpt.findings
    assert verdict(ckpt, p) == "safe"
    loaded = torch.load(p, weights_only=False)  # our own benign file: torch reads it back
    assert set(loaded) == set(ckpt.tensors) == set(state)
    for name, t in state.items():
        np.testing.assert_array_equal(ckpt.read(name), t.numpy())
        np.testing.assert_array_equal(loaded[name].numpy(), t.numpy())


@pytest.mark.reference
def test_legacy_tar_with_a_payload_is_dangerous(tmp_path):
    import torch

    marker = tmp_path / "marker"
    p = tmp_path / "evil.pt"
    p.write_bytes(torch_tar({"w": torch.ones(2)},
                            {"x": Reducer(os.system, (touch_command(marker),))}))
    ckpt = mx.open(p)
    assert "dangerous_import" in codes(ckpt) and verdict(ckpt, p) == "dangerous"
    assert list(ckpt.tensors) == ["w"]
    assert main(["doctor", str(p)]) == 1
    assert not marker.exists()


@pytest.mark.reference
@pytest.mark.parametrize("evil_last", [True, False])
def test_legacy_tar_duplicate_pickle_members_are_all_judged(tmp_path, evil_last):
    import torch

    marker = tmp_path / "marker"
    evil = pickle.dumps(Reducer(os.system, (touch_command(marker),)), protocol=2)
    benign = pickle.dumps({"w": 1}, protocol=2)
    with tarfile.open(fileobj=io.BytesIO(torch_tar({"w": torch.ones(2)}))) as t:
        members = [(m.name, t.extractfile(m).read()) for m in t.getmembers() if m.name != "pickle"]
    members += [("pickle", benign), ("pickle", evil)] if evil_last else \
        [("pickle", evil), ("pickle", benign)]
    out = io.BytesIO()
    with tarfile.open(fileobj=out, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for name, data in members:
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    p = tmp_path / "dup.pt"
    p.write_bytes(out.getvalue())
    with tarfile.open(p) as t:  # tarfile, and so torch.load, reads the last one
        assert t.extractfile("pickle").read() == (evil if evil_last else benign)
    ckpt = mx.open(p)
    assert "zip_duplicate_entry" in codes(ckpt) and verdict(ckpt, p) == "dangerous"
    assert not marker.exists()


def test_tar_without_torch_members(tmp_path):
    out = io.BytesIO()
    with tarfile.open(fileobj=out, mode="w") as tar:
        ti = tarfile.TarInfo("readme.txt")
        ti.size = 2
        tar.addfile(ti, io.BytesIO(b"hi"))
    p = tmp_path / "x.tar"
    p.write_bytes(out.getvalue())
    ckpt = mx.open(p)
    assert "tar_not_torch" in codes(ckpt) and "internal_error" not in codes(ckpt)


def test_npz_detected_by_its_first_member_name(tmp_path):
    p = tmp_path / "long.npz"
    np.savez(p, **{"x" * 300: np.ones(2)})
    ckpt = mx.open(p)
    assert ckpt.format == "numpy"
    assert list(ckpt.tensors) == ["x" * 300] and not ckpt.errors
    assert zipfile.is_zipfile(p)


def test_npy_cut_inside_its_version_is_a_finding(tmp_path):
    import model_explorer as mx

    p = tmp_path / "cut.npy"
    p.write_bytes(b"\x93NUMPY\x01")
    ckpt = mx.open(p)
    assert [f.code for f in ckpt.errors] == ["npy_truncated"]
