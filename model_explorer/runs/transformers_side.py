"""transformers itself as a Side: a Hugging Face folder run by its own modeling code, with
forward hooks on the modules that are named points (hf_modules.py says which module is which).

The reference run of an export: `mx.compare_runs("bert/", "bert.onnx")` runs a here and the
ONNX file on onnxruntime. Encoders (BERT, ViT) have no logits head: the last hidden state is
their output, and the comparison judges it instead of the logits (`has_logits` False).

Only code transformers ships runs: a folder whose config.json (or tokenizer_config.json) has an
`auto_map` asks for its own Python, and is refused before anything is loaded; transformers is
always called with trust_remote_code=False.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ..model.config import UnsupportedModel
from .hf_modules import Point, layer_of, module_points, point_order
from .side import DEFAULT_PROMPT, StoredWeights, check_room

MAX_CONFIG = 4 * 2**20  # bytes of a config.json read to look for auto_map
INPUT_TOKENS = 8  # the generated input when a model has no tokenizer and no ids are given


@dataclass
class EngineConfig:
    """What a comparison asks of a model an engine runs (our ModelConfig's fields that it reads)."""

    architecture: str
    num_layers: int
    hidden_size: int | None
    vocab_size: int | None
    epsilon: float | None = None  # the config's norm epsilon (layer_norm_eps, rms_norm_eps)
    extra: dict[str, Any] = field(default_factory=dict)


def remote_code(folder: str) -> str | None:
    """The side file whose `auto_map` asks to run the folder's own Python, or None."""
    for name in ("config.json", "tokenizer_config.json"):
        path = os.path.join(folder, name)
        if not os.path.isfile(path) or os.path.getsize(path) > MAX_CONFIG:
            continue
        try:
            with open(path, encoding="utf-8") as f:
                data = json.load(f)
        except (OSError, ValueError):
            continue
        if isinstance(data, dict) and data.get("auto_map"):
            return name
    return None


def generated_ids(vocab: int | None, n: int = INPUT_TOKENS) -> list[int]:
    """A small deterministic input for a model without a tokenizer: spread over the vocabulary,
    never id 0 (often padding)."""
    v = max(2, int(vocab or 2))
    return [1 + (i * 7) % (v - 1) for i in range(n)]


class TransformersSide(StoredWeights):
    """A Hugging Face folder run by transformers with forward hooks (see the module docstring).
    Its pass is one call of the model: it records every point in that call (per_layer False)."""

    per_layer = False
    engine = "transformers"
    gguf = None

    def __init__(self, folder, tokens: int = 2048) -> None:
        folder = os.fspath(folder)
        if not os.path.isdir(folder):
            raise UnsupportedModel(f"{folder!r} is not a folder: transformers runs a Hugging Face folder "
                                   "(config.json beside the weights).")
        asked = remote_code(folder)
        if asked is not None:
            raise UnsupportedModel(f"{folder!r}: its {asked} has an auto_map, which asks transformers to import "
                                   "Python from the folder; that code is never run here (trust_remote_code stays "
                                   "False). Read it with mx.open(folder) instead.")
        import torch
        import transformers

        cfg = transformers.AutoConfig.from_pretrained(folder, trust_remote_code=False)
        archs = " ".join(getattr(cfg, "architectures", None) or [])
        causal = "CausalLM" in archs or "LMHeadModel" in archs
        auto = transformers.AutoModelForCausalLM if causal else transformers.AutoModel
        self.model = auto.from_pretrained(folder, trust_remote_code=False, dtype=torch.float32).eval()
        self.folder = self.label = self._stored = folder
        self.tokenizer = _tokenizer(folder)
        text_cfg = cfg.get_text_config() if hasattr(cfg, "get_text_config") else cfg
        named = dict(self.model.named_modules())
        self.modules = module_points(named)
        layers = {layer_of(p)[0] for p in named if layer_of(p) is not None}
        eps = next((getattr(text_cfg, k) for k in ("layer_norm_eps", "rms_norm_eps", "layer_norm_epsilon",
                                                   "norm_eps") if isinstance(getattr(text_cfg, k, None), float)), None)
        self.config = EngineConfig(archs or type(self.model).__name__, (max(layers) + 1) if layers else 0,
                                   getattr(text_cfg, "hidden_size", None), getattr(text_cfg, "vocab_size", None), eps)
        self.num_layers = self.config.num_layers
        self.has_logits = causal
        self.tokens_bound = tokens
        self._named = named

    # -- the run -------------------------------------------------------------------------------

    def points(self) -> list[Point]:
        return point_order(self.modules)

    def check_memory(self, n: int) -> None:
        """Refuse, with the numbers, a pass whose recorded points cannot fit (all of one pass are
        held at once when this side follows: it cannot stop between layers)."""
        width = max(int(getattr(self.model.config, k, 0) or 0) for k in ("hidden_size", "intermediate_size",
                                                                          "vocab_size", "d_model"))
        check_room(len(self.modules) * n * max(width, 1) * 4,
                   f"recording {len(self.modules)} points of {n} tokens (up to {width} wide, float32)")

    def steps(self, ids: list[int], recorder, progress=None, label: str = "tracing"):
        """One call of the model with hooks recording each point; yields once at the end, returns
        the float32 logits (the last hidden state for a model without a logits head)."""
        import torch

        self.check_memory(len(ids))
        handles = []
        for point, (path, side) in self.modules.items():
            module = self._named[path]
            if side == "input":
                handles.append(module.register_forward_pre_hook(_pre_hook(recorder, point), with_kwargs=True))
            else:
                handles.append(module.register_forward_hook(_hook(recorder, point)))
        try:
            x = torch.tensor([ids], dtype=torch.long)
            with torch.no_grad():
                out = self.model(input_ids=x, attention_mask=torch.ones_like(x))
        finally:
            for h in handles:
                h.remove()
        result = out.logits if getattr(out, "logits", None) is not None else out.last_hidden_state
        if progress:
            progress(label, self.num_layers, self.num_layers)
        yield max(0, self.num_layers - 1)
        return result[0].detach().float().numpy()

    # -- what feeds a point --------------------------------------------------------------------

    def weights(self, point: Point) -> list[str]:
        """The checkpoint's names of the module's own parameters, most direct first: a norm that
        ends the module (post-norm), then matrices; a layer's residual: its last norm if it
        ends in one, then what feeds its ffn_out; pre-norm attn_residual: attn_out's."""
        found = self.modules.get(point)
        if found is None:
            return []
        path, side = found
        layer, module = point
        if side == "input":
            return self.weights((layer, "attn_out")) if module == "attn_residual" else []
        params = [n for n, _ in self._named[path].named_parameters(recurse=True)]
        if module == "residual":
            tail = [n for n in params if n.startswith("output.") and "norm" in n.lower()]
            return [self._file_name(f"{path}.{n}") for n in tail] + \
                [n for n in self.weights((layer, "ffn_out")) if n not in tail]
        params.sort(key=lambda n: ("norm" not in n.lower(), not n.endswith("weight"), n.count("."), n))
        if module != "attn_residual":
            params.sort(key=lambda n: (not n.endswith("weight"), n.count("."), n))
        return [self._file_name(f"{path}.{n}" if path else n) for n in params]

    def node(self, point: Point) -> dict[str, Any] | None:
        """{"module", "class", "epsilon"?} of the module behind a point: what an export's node
        should reproduce (an epsilon differing is a finding)."""
        found = self.modules.get(point)
        if found is None:
            return None
        path, side = found
        module = self._named[path]
        out: dict[str, Any] = {"module": path + (" (its input)" if side == "input" else ""),
                               "class": type(module).__name__}
        eps = _module_eps(module)
        if eps is not None:
            out["epsilon"] = eps
        return out

    def parameter(self, name: str) -> np.ndarray | None:
        """A parameter's values as float32 numpy, by its checkpoint name (weight identity)."""
        params = dict(self.model.named_parameters())
        for key in (name, *(k for k in params if name.endswith("." + k))):
            if key in params:
                return params[key].detach().float().numpy()
        return None

    def named_weights(self) -> dict[str, np.ndarray]:
        """Every parameter as float32 numpy under its checkpoint name (for weight identity)."""
        return {self._file_name(n): p.detach().float().numpy() for n, p in self.model.named_parameters()}

    def nonfinite_weight(self, point: Point) -> str | None:
        for name in self.weights(point):
            a = self.parameter(name)
            if a is not None and not np.isfinite(a).all():
                return name
        return None

    # -- tokens --------------------------------------------------------------------------------

    def ids(self, prompt: str | None, ids) -> list[int]:
        if ids is not None:
            if prompt is not None:
                raise ValueError("give either prompt= or ids=, not both")
            out = [int(i) for i in ids]
            vocab = self.config.vocab_size
            if not out or (vocab and not all(0 <= i < vocab for i in out)):
                raise ValueError(f"ids must be a non-empty list of token ids below {vocab}")
            return out
        if self.tokenizer is None:
            if prompt is not None:
                raise ValueError(f"{self.label!r} has no tokenizer: give ids= instead of a prompt")
            return generated_ids(self.config.vocab_size)
        got = self.encode(DEFAULT_PROMPT if prompt is None else prompt)
        if not got:
            raise ValueError("the prompt encodes to no tokens")
        return got

    def encode(self, text: str) -> list[int] | None:
        return None if self.tokenizer is None else list(self.tokenizer(text)["input_ids"])

    def tokens(self, ids: list[int]) -> list[str]:
        if self.tokenizer is None:
            return [str(i) for i in ids]
        return [str(t) for t in self.tokenizer.convert_ids_to_tokens(list(ids))]

    def close(self) -> None:
        self.model = None
        self._named = {}
        self._close_stored()

    # -- helpers -------------------------------------------------------------------------------


    def _file_name(self, name: str) -> str:
        """A parameter's name as the checkpoint spells it (a head class adds or drops `bert.`)."""
        names = self._checkpoint().tensors
        if name in names:
            return name
        return next((n for n in names if n.endswith("." + name) or name.endswith("." + n)), name)


def _module_eps(module) -> float | None:
    """A norm's epsilon; for a block ending in a norm (BERT's attention.output, a post-norm
    layer) its last norm's."""
    for m in [module] + [m for _, m in module.named_modules()][::-1]:
        if "norm" not in type(m).__name__.lower():
            continue
        for attr in ("eps", "variance_epsilon", "epsilon"):
            v = getattr(m, attr, None)
            if isinstance(v, float):
                return v
    return None


def _tensor(x):
    while isinstance(x, (tuple, list)) and x:
        x = x[0]
    return x if hasattr(x, "detach") else None


def _host(x) -> np.ndarray:
    a = x.detach().float().numpy()
    return np.array(a[0] if a.ndim > 1 and a.shape[0] == 1 else a, dtype=np.float32, copy=True)


def _hook(recorder, point: Point):
    def hook(module, args, output) -> None:
        t = _tensor(output)
        if t is not None:
            recorder(point[0], point[1], _host(t))
    return hook


def _pre_hook(recorder, point: Point):
    def hook(module, args, kwargs) -> None:
        t = _tensor(args) if args else _tensor(kwargs.get("hidden_states"))
        if t is not None:
            recorder(point[0], point[1], _host(t))
    return hook


def _tokenizer(folder: str):
    """transformers' tokenizer of the folder, or None when it has none (trust_remote_code False)."""
    if not any(os.path.isfile(os.path.join(folder, n)) for n in ("tokenizer.json", "tokenizer.model", "vocab.txt")):
        return None
    try:
        import transformers

        return transformers.AutoTokenizer.from_pretrained(folder, trust_remote_code=False)
    except Exception:  # noqa: BLE001 - a folder whose tokenizer does not load runs on ids
        return None
