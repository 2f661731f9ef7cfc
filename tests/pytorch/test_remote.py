"""A torch zip over HTTP: exact offsets from a handful of range requests, not one per tensor."""

from __future__ import annotations

import pytest

import model_explorer as mx

pytestmark = pytest.mark.reference


def test_torch_zip_over_http(served):
    import torch

    root, base, server = served
    state = {f"layers.{i}.weight": torch.full((128, 128), float(i)) for i in range(100)}
    state["tied"] = state["layers.0.weight"]
    torch.save(state, root / "pytorch_model.bin")
    local = mx.open(str(root / "pytorch_model.bin"))
    server.bytes_sent = 0
    server.requests.clear()
    ckpt = mx.open(f"{base}/pytorch_model.bin")
    assert ckpt.format == "pytorch" and not ckpt.errors and not ckpt.warnings
    want = [(t.name, t.offset, t.length, t.storage) for t in local.tensors.values()]
    assert [(t.name, t.offset, t.length, t.storage) for t in ckpt.tensors.values()] == want
    assert len(server.requests) < 40, len(server.requests)
    # The source's first request fetches 64 KiB (its shared prefix); then the directory, a
    # few local headers and data.pkl. The 6.5 MB of storages are never fetched.
    src = ckpt.byte_source()
    assert src.bytes_read < 96 * 1024, src.bytes_read
    assert src.requests < 30, src.requests
    t = ckpt.tensors["layers.99.weight"]
    assert ckpt.read_bytes(t.offset, 8) == torch.full((2,), 99.0).numpy().tobytes()
    zip_details = ckpt.details["files"][f"{base}/pytorch_model.bin"]["zip"]
    assert zip_details["predicted"] > 90


def test_prediction_is_checked_against_real_headers(served):
    """A zip rewritten by another tool (no 64-byte alignment) is read header by header."""
    import zipfile

    import torch

    root, base, server = served
    torch.save({f"w{i}": torch.ones(3) * i for i in range(30)}, root / "orig.pt")
    with zipfile.ZipFile(root / "orig.pt") as src, zipfile.ZipFile(root / "re.pt", "w") as dst:
        for info in src.infolist():
            dst.writestr(info.filename, src.read(info.filename))
    local = mx.open(str(root / "re.pt"))
    ckpt = mx.open(f"{base}/re.pt")
    assert [(t.name, t.offset) for t in ckpt.tensors.values()] == \
        [(t.name, t.offset) for t in local.tensors.values()]
    assert ckpt.details["files"][f"{base}/re.pt"]["zip"]["predicted"] == 0
