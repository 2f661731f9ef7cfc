"""`random_model(config, dest)`: a tiny checkpoint of any family the explorer knows, random weights.

For teaching and for tests that must not download weights: write a config.json, and a
model.safetensors holding exactly the tensors the family's table (model/families.py) expects for
it, drawn from a seeded normal distribution. Weights are wider than a trained model's init
(std 0.2 by default) so the logits are far from uniform and a change anywhere shows in them;
norm weights sit around their neutral value (1, or 0 where the family scales by 1 + w), biases
around 0.5, so a norm or bias read wrongly shows too.

    folder = mx.random_model({"model_type": "gemma2", "num_hidden_layers": 2}, "tiny-gemma2")
    mx.load_model(folder).generate("...")
"""

from __future__ import annotations

import json
import os
from typing import Any

import numpy as np

from ..model import expected, families, hparams
from ..opener import open as open_checkpoint
from .common import ConvertError
from .writers import write_safetensors

# A key left out means the family's transformers default (model/hf_defaults.py), for both readers.
# Small enough to run anywhere in milliseconds; every family's numbers are overridable.
TINY = {"vocab_size": 128, "hidden_size": 64, "intermediate_size": 96, "num_hidden_layers": 2,
        "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 16, "max_position_embeddings": 256,
        "rms_norm_eps": 1e-6, "bos_token_id": 1, "eos_token_id": 2, "torch_dtype": "float32",
        "tie_word_embeddings": False, "pad_token_id": 0, "rope_theta": 10000.0, "sliding_window": None}
# Where the family says: its own names for the sizes (GPT-2's n_embd...: no head_dim, kv heads or
# the Llama-only keys); every head with its own k and v (no smaller kv head count); DeepSeek's MLA,
# whose head_dim is the rotary part (qk_rope_head_dim).
_LLAMA_ONLY = ("head_dim", "num_key_value_heads", "intermediate_size", "rms_norm_eps", "rope_theta", "sliding_window",
               "tie_word_embeddings")


def tiny(fam: families.Family | None) -> dict[str, Any]:
    """TINY in the family's own keys."""
    if fam is None:
        return dict(TINY)
    if fam.hf_renames:
        renamed = {new: old for old, new in fam.hf_renames}
        out = {renamed.get(k, k): v for k, v in TINY.items() if k not in _LLAMA_ONLY}
        if fam.intermediate_default_x4:
            out["n_inner"] = TINY["intermediate_size"]
        return {k: v for k, v in out.items() if k not in ("hidden_act", "rms_norm_eps")}
    if fam.attention == "mla":
        return {**{k: v for k, v in TINY.items() if k != "head_dim"}, "num_key_value_heads": TINY["num_attention_heads"]}
    return dict(TINY)

MAX_PARAMETERS = 50_000_000  # a tiny model; a typo in a size should not fill the disk


def random_model(config: dict[str, Any], dest: str | os.PathLike, seed: int = 0, std: float = 0.2) -> str:
    """Write `config` (completed with TINY's sizes) and random weights of its family to the folder
    `dest`; returns the folder. Refuses a family the built-in tables do not know."""
    model_type = config.get("model_type")
    if not isinstance(model_type, str):
        raise ConvertError("random_model needs config['model_type'] (e.g. 'llama', 'gemma2').")
    fam = families.family(model_type)
    cfg = {**tiny(fam), **config}
    cfg.setdefault("architectures", [fam.causal_lm if fam else model_type.title() + "ForCausalLM"])
    os.makedirs(dest, exist_ok=True)
    with open(os.path.join(dest, "config.json"), "w") as f:
        json.dump(cfg, f, indent=1)
    shapes = _expected_shapes(str(dest), cfg)
    total = sum(int(np.prod(s)) for s in shapes.values())
    if total > MAX_PARAMETERS:
        raise ConvertError(f"{total:,} parameters is not a tiny model (random_model writes at most "
                           f"{MAX_PARAMETERS:,}); lower the sizes in the config.")
    rng = np.random.default_rng(seed)
    neutral = 1.0 - (fam.norm_offset if fam else 0.0)
    items = [(name, "F32", tuple(shape)) for name, shape in shapes.items()]

    def produce(i: int) -> np.ndarray:
        name, _, shape = items[i]
        if len(shape) == 1 and "norm" in name:
            return (neutral + rng.uniform(-0.5, 0.5, shape)).astype(np.float32)
        if name.endswith(".bias"):
            return rng.uniform(0.0, 1.0, shape).astype(np.float32)
        return (rng.standard_normal(shape) * std).astype(np.float32)

    write_safetensors(os.path.join(dest, "model.safetensors"), items, produce, metadata={"format": "pt"})
    return str(dest)


def _expected_shapes(folder: str, cfg: dict[str, Any]) -> dict[str, tuple[int, ...]]:
    """The family table's tensors for this config, the head left out when it is tied."""
    with open_checkpoint(folder) as ckpt:  # config.json alone: the table needs no weights
        hp = hparams.read_hparams(ckpt)
        table = expected.builtin(hp, config=cfg)
    if table is None:
        raise ConvertError(f"random_model knows the families of model/families.py; "
                           f"{cfg.get('model_type')!r} is not one of them, or a size it needs is missing.")
    shapes = dict(table.shapes)
    if table.head in shapes and table.head in table.tied:
        del shapes[table.head]
    return shapes
