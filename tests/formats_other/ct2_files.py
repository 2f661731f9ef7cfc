"""CTranslate2 models written by ctranslate2's own converter from a tiny random GPT-2 built here,
with the converter's spec kept: its variables are exactly what model.bin holds."""

from __future__ import annotations

import json
import struct
from pathlib import Path

import numpy as np


def tiny_gpt2(folder: Path) -> Path:
    import torch
    from transformers import GPT2Config, GPT2LMHeadModel, GPT2Tokenizer

    folder.mkdir(parents=True, exist_ok=True)
    vocab = {"<|endoftext|>": 0, **{chr(97 + i): i + 1 for i in range(26)}}
    (folder / "vocab.json").write_text(json.dumps(vocab))
    (folder / "merges.txt").write_text("#version: 0.2\n")
    GPT2Tokenizer(str(folder / "vocab.json"), str(folder / "merges.txt")).save_pretrained(folder)
    torch.manual_seed(0)
    GPT2LMHeadModel(GPT2Config(vocab_size=27, n_positions=16, n_embd=32, n_layer=1, n_head=2,
                                bos_token_id=0, eos_token_id=0)).save_pretrained(folder)
    return folder


def convert(source: Path, out: Path, quantization: str) -> dict[str, np.ndarray | str]:
    """Convert with ctranslate2's TransformersConverter; returns the spec's variables as written
    (numpy arrays, or the target name of an alias)."""
    from ctranslate2.converters import TransformersConverter

    conv = TransformersConverter(str(source))
    kept = {}
    load = conv._load

    def keep():
        kept["spec"] = load()
        return kept["spec"]

    conv._load = keep
    conv.convert(str(out), quantization=quantization, force=True)
    return {k: v if isinstance(v, str) else v.numpy() for k, v in kept["spec"].variables().items()}


def header(version: int = 6, spec: bytes = b"TransformerSpec", revision: int = 1) -> bytes:
    return struct.pack("<I", version) + string(spec) + struct.pack("<I", revision)


def string(text: bytes) -> bytes:
    return struct.pack("<H", len(text) + 1) + text + b"\0"


def variable(name: bytes, arr: np.ndarray, type_id: int, nbytes: int | None = None) -> bytes:
    raw = arr.tobytes()
    return (string(name) + struct.pack("<B", arr.ndim) + struct.pack(f"<{arr.ndim}I", *arr.shape)
            + struct.pack("<BI", type_id, len(raw) if nbytes is None else nbytes) + raw)
