"""The corpora an audit is held to doctor's word on: hostile pickles (tests/pytorch's gadgets and
payloads, this folder's own), files other libraries write (torch.save zip and legacy,
torch.jit.save, numpy, safetensors, gguf-py), names that lie, and the real checkpoints that
`make dev` installs (found with importlib.util.find_spec, never imported)."""

from __future__ import annotations

import pickle
import struct
from pathlib import Path

import numpy as np
import realfiles  # tests/ is on the path
from pytorch.gadgets import (
    AUTHOR_CLASS_PICKLES,
    frame_straddle,
    gadget_pickles,
    nested_frames,
)
from pytorch.helpers import hostile_pickles
from pytorch.odd_starts import archive_pickles, odd_start_pickles

from .synth import hostile_pickle, small_tensors, write_gguf


def hostile(folder: Path, marker: Path) -> list[Path]:
    """Every hostile pickle of the tests, one file each; none may ever create `marker`."""
    folder.mkdir(parents=True, exist_ok=True)
    blobs = {**{f"gadget_{k}": v for k, v in gadget_pickles(marker).items()},
             **{f"payload_{k}": v for k, v in hostile_pickles(marker).items()},
             **{f"author_{k}": v for k, v in AUTHOR_CLASS_PICKLES.items()},
             **{f"start_{k}": v for k, v in odd_start_pickles(marker).items()},
             "frame_straddle": frame_straddle(marker), "nested_frames": nested_frames(marker)}
    out = []
    for name, data in blobs.items():
        p = folder / f"{name}.pkl"
        p.write_bytes(data)
        out.append(p)
    for name, data in archive_pickles(marker).items():  # pickles under other names (issue 43)
        p = folder / f"hidden_{name}"
        p.write_bytes(data)
        out.append(p)
    out.append(Path(hostile_pickle(folder / "synth_hostile.bin", marker)))
    return out


def tiny_scripted():
    import torch

    class Tiny(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.proj = torch.nn.Linear(4, 3)

        def forward(self, x):
            return torch.relu(self.proj(x))

    torch.manual_seed(0)
    return torch.jit.script(Tiny())


def peer(folder: Path) -> list[Path]:
    """Files other libraries write, and names that lie about them."""
    import torch

    folder.mkdir(parents=True, exist_ok=True)
    t = small_tensors(1, 2, 8)
    state = {k: torch.from_numpy(v) for k, v in t.items()}
    files = {
        "torch_zip.pt": lambda p: torch.save(state, p),
        "torch_legacy.pt": lambda p: torch.save(state, p, _use_new_zipfile_serialization=False),
        "model.jit": lambda p: torch.jit.save(tiny_scripted(), p),
        "arrays.npz": lambda p: np.savez(p, **t),
        "array.npy": lambda p: np.save(p, t["layers.0.weight"]),
        "lib.safetensors": lambda p: _safetensors_lib(p, t),
        "gguf_py.gguf": lambda p: write_gguf(p, t),
        "pickle_p0.pkl": lambda p: p.write_bytes(pickle.dumps({"a": [1, 2.5, "x"]}, protocol=0)),
        # names that lie: audited as what they are, with extension_mismatch
        "pickle_named.safetensors": lambda p: p.write_bytes(pickle.dumps(t, protocol=4)),
        "gguf_named.bin": lambda p: write_gguf(p, t),
        "zip_named.onnx": lambda p: torch.save(state, p),
    }
    out = []
    for name, write in files.items():
        p = folder / name
        write(p)
        out.append(p)
    return out


def _safetensors_lib(path: Path, tensors: dict) -> None:
    from safetensors.numpy import save_file

    save_file(tensors, str(path))


def real(folder: Path) -> list[Path]:
    """The real checkpoints installed for the tests (tests/realfiles.py; those present):
    all-MiniLM-L6-v2's folder, the SmolLM2 GGUF sample, Gemma 3 270M joined from its chunk
    packages, and silero-vad's TorchScript archive and safetensors."""
    silero = realfiles.silero_folder()
    folder.mkdir(parents=True, exist_ok=True)
    found = [realfiles.minilm_folder(), realfiles.smollm2_gguf(), realfiles.gemma3_gguf(folder),
             *((silero / n) for n in ("silero_vad.jit", "silero_vad_16k.safetensors") if silero)]
    return [p for p in found if p is not None and p.exists()]


def onnx_bytes(producer: str = "pytorch") -> bytes:
    """The first fields of an ONNX ModelProto as exporters write them: ir_version 8, the producer
    name and version, then an empty graph."""
    def field(tag: int, data: bytes) -> bytes:
        return bytes([tag]) + _varint(len(data)) + data

    return (b"\x08\x08" + field(0x12, producer.encode()) + field(0x1A, b"2.4.0")
            + field(0x3A, field(0x12, b"main_graph")) + field(0x42, b"\x10\x11"))


def _varint(n: int) -> bytes:
    out = bytearray()
    while True:
        b = n & 0x7F
        n >>= 7
        out.append(b | (0x80 if n else 0))
        if not n:
            return bytes(out)


def not_read_yet(folder: Path) -> dict[str, str]:
    """One file of each weight format this version identifies but does not read: name -> kind."""
    folder.mkdir(parents=True, exist_ok=True)
    files = {
        "model.onnx": (onnx_bytes(), "onnx"),
        "model.tflite": (b"\x1c\x00\x00\x00TFL3" + bytes(64), "tflite"),
        "ggml-model-q4_0.bin": (b"tjgg" + struct.pack("<I", 3) + bytes(64), "ggml"),
        "openvino_model.xml": (b'<?xml version="1.0"?>\n<net name="torch_jit" version="11">\n</net>\n', "openvino"),
    }
    for name, (data, _) in files.items():
        (folder / name).write_bytes(data)
    (folder / "openvino_model.bin").write_bytes(bytes(range(256)) * 4)  # raw weights: no magic
    return {name: kind for name, (_, kind) in files.items()}

