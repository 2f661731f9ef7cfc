"""One side of a run: a model that runs token ids and shows what it computed on the way.

What `mx.trace` and `mx.compare_runs` need of a run, whatever runs it (the `Side` interface):

- `label`, `config`, `num_layers`; `points()`: the named points it records, in the order it
  computes them ((layer, module), layer None outside the layers: model/decoder_points.py MODULES);
- `steps(ids, recorder, progress, label)`: a generator that yields each layer's index as the
  layer ends and returns the float32 numpy logits; `recorder(layer, module, x)` is handed in for
  this pass only and gets host numpy arrays it may keep;
- `per_layer`: whether `steps` yields between layers. A side that cannot (llama.cpp's eval
  callback fires inside one decode call) runs its whole pass in its first step; compare_runs
  then lets it lead and pulls the other side one layer at a time as its points arrive, so
  neither side's activations are held past one layer (pairing.py);
- `weights(point)`: the checkpoint tensors feeding a point, most direct first; `place(name)`:
  their bytes; `kind(name)`: how each is stored (F32, Q8_0); `nonfinite_weight(point)`: the one
  holding NaN/Inf, if one does;
- `ids(prompt, ids)`, `encode(text)`, `tokens(ids)`: its tokenizer; `close()`.

`DecoderSide` is the first implementation: our decoder on numpy or torch (points.py maps its
points to weights). The others (transformers, onnxruntime, LiteRT, llama.cpp) and the choice
between them are in engines.py (`open_side`). Optional on a Side: `engine` (its name),
`has_logits` (False: an encoder, whose last hidden state is its output), `node(point)` (the
module or graph node behind a point, its op and attributes such as a norm's epsilon).
"""

from __future__ import annotations

import os
import sys
from typing import Any, Protocol

import numpy as np

from ..model.config import ModelConfig, UnsupportedModel
from ..model.decoder_points import LAYER_MODULES
from .points import config_place, module_tensors, nonfinite_weight, tensor_place

DEFAULT_PROMPT = "The library opens at nine in the morning and closes at six in the evening."
OUTER = ("embed", "final_norm", "logits")  # the points outside the layers (layer None)

Point = tuple[int | None, str]


def decoder_points(num_layers: int) -> list[Point]:
    """Our decoder's points in the order it computes them."""
    return ([(None, "embed")] + [(i, m) for i in range(num_layers) for m in LAYER_MODULES]
            + [(None, m) for m in OUTER[1:]])


class Side(Protocol):
    """One run's side (see the module docstring)."""

    label: str
    config: ModelConfig
    num_layers: int
    per_layer: bool
    gguf: bool | None  # whether its weights came from a GGUF (the configurations compare alike)
    engine_label: str  # what runs it, in words ("cpu (numpy)", "llama.cpp via ..., KV cache F32, ...")

    def points(self) -> list[Point]: ...
    def steps(self, ids: list[int], recorder, progress=None, label: str = "tracing"): ...
    def weights(self, point: Point) -> list[str]: ...
    def place(self, name: str | None) -> dict[str, Any]: ...
    def kind(self, name: str | None) -> str | None: ...
    def nonfinite_weight(self, point: Point) -> str | None: ...
    def ids(self, prompt: str | None, ids) -> list[int]: ...
    def encode(self, text: str) -> list[int] | None: ...
    def tokens(self, ids: list[int]) -> list[str]: ...
    def close(self) -> None: ...


class StoredWeights:
    """`place` and `kind` of a side that runs a file of its own (an export, a TFLite file, an HF
    folder on transformers): the file opened with this project's reader when first asked, for
    its tensors' bytes. `_stored` names the path; `_close_stored()` closes it."""

    _stored: str
    _ckpt: Any = None

    def _checkpoint(self):
        if self._ckpt is None:
            from ..opener import open as open_checkpoint

            self._ckpt = open_checkpoint(self._stored)
        return self._ckpt

    def _close_stored(self) -> None:
        if self._ckpt is not None:
            self._ckpt.close()
            self._ckpt = None

    def place(self, name: str | None) -> dict[str, Any]:
        info = self._checkpoint().tensors.get(name) if name else None
        if info is None:
            return {"tensor": name, "file": None, "offset": None, "length": None}
        return {"tensor": name, "file": info.file, "offset": int(info.offset), "length": int(info.length)}

    def kind(self, name: str | None) -> str | None:
        info = self._checkpoint().tensors.get(name) if name else None
        return None if info is None else info.label


class DecoderSide:
    """Our decoder (numpy or torch) as a Side: it yields after every layer."""

    per_layer = True

    def __init__(self, model, owned: bool = False) -> None:
        if model.is_engine:
            if owned:
                model.close()
            raise UnsupportedModel(f"{model.source!r} runs on {model.device}, which computes the forward "
                                   "pass itself and cannot be traced; load it with backend='numpy' or 'torch'.")
        self.model, self.owned = model, owned
        self.label, self.config = str(model.source), model.config
        self.num_layers = model.config.num_layers
        self.gguf = getattr(model.weights, "gguf", None)
        self.engine_label = model.device
        self._copy = getattr(model.backend, "name", "") != "numpy"  # torch may reuse its memory

    def points(self) -> list[Point]:
        return decoder_points(self.num_layers)

    def steps(self, ids: list[int], recorder, progress=None, label: str = "tracing"):
        """One forward pass, a layer a step; returns the float32 numpy logits. progress(label,
        layers done, layers) after each layer (False stops: RunStopped); None shows a progress
        bar when the run streams, False nothing."""
        model = self.model
        progress, bar = _progress_for(model, progress, label)
        to_numpy = model.backend.to_numpy

        def host(layer, module, x) -> None:
            a = to_numpy(x)
            recorder(layer, module, np.array(a, copy=True) if self._copy else np.asarray(a))

        try:
            logits = yield from model.decoder.steps(ids, model.new_cache(len(ids)),
                                                    recorder=with_progress(host, progress, label, self.num_layers))
            return to_numpy(logits)
        finally:
            if bar is not None:
                bar.close()

    def weights(self, point: Point) -> list[str]:
        return module_tensors(self.model, *point)

    def place(self, name: str | None) -> dict[str, Any]:
        return tensor_place(self.model, name)

    def config_place(self, field: str) -> dict[str, Any] | None:
        return None if self.model.is_engine else config_place(self.model.weights.ckpt, field)

    def kind(self, name: str | None) -> str | None:
        info = self.model.weights.ckpt.tensors.get(name) if name else None
        return None if info is None else info.label

    def nonfinite_weight(self, point: Point) -> str | None:
        return nonfinite_weight(self.model, *point)

    def ids(self, prompt: str | None, ids) -> list[int]:
        return prompt_ids(self.model, prompt, ids)

    def encode(self, text: str) -> list[int] | None:
        return None if self.model.tokenizer is None else self.model.encode_prompt(text)

    def tokens(self, ids: list[int]) -> list[str]:
        return token_texts(self.model, ids)

    def close(self) -> None:
        if self.owned:
            self.model.close()


def token_bound(prompt: str | None, ids) -> int:
    """At most how many positions a run over `ids` or `prompt` has, known before any tokenizer
    is loaded: a byte-level tokenizer never makes more tokens than bytes, and a few are added
    (BOS, a template's markers). The memory plan of the run is made for this many."""
    if ids is not None:
        return max(1, len(ids))
    return len((DEFAULT_PROMPT if prompt is None else prompt).encode()) + 8


def load(source, device: str = "cpu", stream: bool | None = None, tokens: int = 2048):
    """(model, owned): a Model as it is, or anything `load_model` takes, loaded on our decoder
    (on the CPU: in memory when it fits, else streamed layer by layer, else refused before
    loading, planned for `tokens` positions: runtime/memory_budget.py)."""
    from ..runtime.api import Model, load_model

    if isinstance(source, Model):
        return source, False
    if not isinstance(source, (str, os.PathLike)) and source is not None:
        raise TypeError(f"expected a path or a loaded model (mx.load_model), not {type(source).__name__}")
    return load_model(source, device=device, backend="torch" if device != "cpu" else None,
                      stream=stream, context=tokens), True


def prompt_ids(model, prompt: str | None, ids) -> list[int]:
    """Token ids: `ids` as given, else the prompt (default: a plain sentence) tokenized."""
    if ids is not None:
        if prompt is not None:
            raise ValueError("give either prompt= or ids=, not both")
        return model._check_ids(ids)
    text = DEFAULT_PROMPT if prompt is None else prompt
    got = model.encode_prompt(text)
    if not got:
        raise ValueError(f"the prompt {text!r} encodes to no tokens")
    return model._check_ids(got)


def token_texts(model, ids: list[int]) -> list[str]:
    tok = model.tokenizer
    return [tok.token_text(i) if tok is not None else str(i) for i in ids]


def check_room(need: int, what: str) -> None:
    """Refuse, before it starts, a run whose recorded values need more memory than is free
    (an engine that records a whole pass at once: the numbers are said)."""
    from ..runtime.memory_budget import HEADROOM, RunPlan, WontFit, available_bytes

    room = available_bytes()
    if room is not None and need > room * HEADROOM:
        raise WontFit(RunPlan("refused", need, need, room, f"{what} needs about {need / 2**30:.2f} GiB; "
                                                           f"{room / 2**30:.2f} GiB is free."))


class RunStopped(Exception):
    """A run's `progress` callback returned False: the pass ended between two layers."""


def with_progress(recorder, progress, label: str, layers: int):
    """`recorder`, also calling progress(label, layers done, layers) as each layer ends; a False
    from progress stops the pass there (RunStopped), the way the widgets' Stop button works."""
    if not progress:
        return recorder

    def record(layer, module, x) -> None:
        recorder(layer, module, x)
        if module == "residual" and layer is not None and progress(label, layer + 1, layers) is False:
            raise RunStopped(f"{label} stopped after layer {layer} of {layers}")
    return record


class _Bar:
    """A tqdm bar over the layers of a streamed run (minutes at real sizes), in a script's
    terminal or a notebook's output, when the caller gave no progress callback."""

    def __init__(self, label: str, layers: int) -> None:
        from tqdm.auto import tqdm

        self.bar = tqdm(total=layers, desc=label, unit="layer", file=sys.stderr, leave=False)

    def __call__(self, label: str, done: int, total: int) -> bool:
        self.bar.update(done - self.bar.n)
        return True

    def close(self) -> None:
        self.bar.close()


def _progress_for(model, progress, label: str):
    """(the progress callback, a bar to close): the caller's; else a bar when the run streams;
    progress=False: none."""
    plan = getattr(model, "run_plan", None)
    if progress is None and plan is not None and plan.streams:
        bar = _Bar(label, model.config.num_layers)
        return bar, bar
    return progress, None
