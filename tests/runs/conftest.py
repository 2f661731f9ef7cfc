"""A tiny Llama for the run comparisons, and the faults planted in copies of it.

The model and its tokenizer come from tests/runtime/conftest.py (random float32 weights under
Hugging Face names, a byte-level BPE tokenizer.json written with the `tokenizers` library);
each fault is a copy of its folder with one thing changed, as a broken conversion leaves it.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest
from quant_codec.test_demo import demo_helpers  # tests/runtime/conftest.py's builders

LAYERS = 4
TEXT = ("the cat sat on the mat, and then the hat was in the sun. the rat ate the tea "
        "at ten; a star sat on the sea.")


class Base:
    """The float model: its config.json, weights and folder; `copy` plants a fault in a copy."""

    def __init__(self, root: Path) -> None:
        self.h = demo_helpers()
        self.cfg = self.h.tiny_config("llama", num_hidden_layers=LAYERS)
        self.state = self.h.random_state(self.cfg, seed=3)
        self.root = root
        self.folder = self.h.write_hf_dir(str(root / "base"), self.cfg, self.state)

    def copy(self, name: str, state: dict | None = None, **config) -> str:
        """A copy of the base folder with these weights and config.json keys changed."""
        folder = self.root / name
        if folder.exists():
            shutil.rmtree(folder)
        shutil.copytree(self.folder, folder)
        if state is not None:
            from safetensors.numpy import save_file

            save_file({**self.state, **state}, str(folder / "model.safetensors"), metadata={"format": "pt"})
        if config:
            (folder / "config.json").write_text(json.dumps({**self.cfg, **config}))
        return str(folder)

    def weight(self, layer: int, part: str) -> np.ndarray:
        return self.state[f"model.layers.{layer}.{part}.weight"]

    def reference(self, state: dict | None = None, **config):
        """transformers' model holding the base weights (or these changed ones)."""
        return self.h.hf_model_from({**self.cfg, **config}, {**self.state, **(state or {})})


@pytest.fixture(scope="session")
def base(tmp_path_factory) -> Base:
    pytest.importorskip("safetensors")
    pytest.importorskip("tokenizers")
    return Base(tmp_path_factory.mktemp("runs"))
