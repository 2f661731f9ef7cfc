"""PyTorch pickles to safetensors without running them."""

from __future__ import annotations

import json
import os
import pickle
import zipfile

import numpy as np
import pytest

import model_explorer as mx

from .conftest import CONFIG, llama_tensors, load_transformers, safe_open_all

torch = pytest.importorskip("torch")


def _state(tensors):
    return {k: torch.from_numpy(v.copy()) for k, v in tensors.items()}


def test_bin_folder_to_safetensors(tmp_path, checked):
    tensors = llama_tensors()
    src = tmp_path / "src"
    src.mkdir()
    state = _state(tensors)
    state["model.layers.0.self_attn.k_proj.weight"] = state["model.layers.0.self_attn.k_proj.weight"].t().contiguous().t()  # a view with strides
    torch.save(state, src / "pytorch_model.bin")
    (src / "config.json").write_text(json.dumps(CONFIG))
    report = checked(src)
    fixed = tmp_path / "fixed"
    assert sorted(p.name for p in fixed.iterdir()) == ["config.json", "model.safetensors"]
    out = safe_open_all(fixed)
    for k, v in tensors.items():
        np.testing.assert_array_equal(out[k], v)
    assert report.applied[0].name == "pickle_to_safetensors"
    load_transformers(fixed)


def test_sharded_bins_get_an_index(tmp_path, checked):
    tensors = llama_tensors()
    src = tmp_path / "src"
    src.mkdir()
    names = list(tensors)
    wm = {}
    for i, part in enumerate((names[:10], names[10:]), start=1):
        file = f"pytorch_model-{i:05d}-of-00002.bin"
        torch.save({k: torch.from_numpy(tensors[k]) for k in part}, src / file)
        wm.update({k: file for k in part})
    (src / "pytorch_model.bin.index.json").write_text(json.dumps({"metadata": {}, "weight_map": wm}))
    (src / "config.json").write_text(json.dumps(CONFIG))
    checked(src)
    fixed = tmp_path / "fixed"
    index = json.loads((fixed / "model.safetensors.index.json").read_text())
    assert set(index["weight_map"].values()) == {"model-00001-of-00002.safetensors",
                                                 "model-00002-of-00002.safetensors"}
    assert not list(fixed.glob("*.bin*"))
    load_transformers(fixed)


class Payload:
    def __init__(self, marker):
        self.marker = marker

    def __reduce__(self):
        return (os.system, (f"touch {self.marker}",))


def test_hostile_pickle_is_converted_without_running_it(tmp_path, checked):
    marker = tmp_path / "pwned"
    src = tmp_path / "hostile.pt"
    torch.save({"w": torch.ones(3, 4), "hook": Payload(marker)}, src)
    assert any(f.code == "dangerous_import" for f in mx.open(src).findings)
    report = checked(src, tmp_path / "out" / "hostile.safetensors")
    assert not marker.exists()
    assert any(n.startswith("removed:") and "system" in n for n in report.notes)
    out = safe_open_all(tmp_path / "out" / "hostile.safetensors")
    np.testing.assert_array_equal(out["w"], np.ones((3, 4), np.float32))
    assert not [f for f in mx.open(tmp_path / "out" / "hostile.safetensors").findings
                if f.code == "dangerous_import"]


def test_hand_made_zip_with_only_a_payload(tmp_path):
    marker = tmp_path / "pwned"
    src = tmp_path / "payload.pt"
    with zipfile.ZipFile(src, "w") as z:
        z.writestr("archive/data.pkl", pickle.dumps({"weight": Payload(marker)}, protocol=2))
        z.writestr("archive/byteorder", "little")
    report = mx.repair(src, tmp_path / "out")
    assert not marker.exists()
    assert report.ok and any("system" in n for n in report.notes)
