"""`mx.trace`: one forward pass, with statistics of every named activation the decoder computes.

    t = mx.trace("model.gguf", prompt="The capital of France is")
    t.table()            # one row per layer x module: norm, absmax, mean, std, NaN, Inf, top |x|
    t.first_nonfinite    # where NaN/Inf first appear (layer, module, weight tensor), or None
    t.massive            # the massive activations: position, channel, value, x the median
    t.plot()             # a matplotlib figure
    t.to_json()          # a plain dict for the widget (see Trace.to_json)
    t.show()             # the widget: absmax / median per cell, NaN/Inf and massive marked

The statistics are computed inside the decoder's recorder (runtime/decoder.py MODULES), so a trace
holds a few numbers per layer and module, never the activations themselves, unless keep=True.
A massive activation is one whose |x| is at least MASSIVE_RATIO (1000) times the median |x| of
its module's whole activation, as Sun et al. 2024 ("Massive activations in large language
models") define them; their other condition, |x| > 100, is left out, since small models live at
other scales. Only the TOP (5) largest |x| of each module are candidates. On the bundled SmolLM2
they are mostly the first token's channel 507 (about 20,000, 10,000x the median) in the residual
stream of the middle and late layers.
"""

from __future__ import annotations

import math
import os
import sys
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ..model.config import UnsupportedModel
from ..runtime.decoder import LAYER_MODULES, MODULES, drain
from ..runtime.streamed import StreamedMatrix

MASSIVE_RATIO = 1000.0
TOP = 5  # largest |x| kept per module
MEDIAN_SAMPLE = 4096  # values the median |x| is taken from (evenly spaced over the activation)
DEFAULT_PROMPT = "The library opens at nine in the morning and closes at six in the evening."
OUTER = ("embed", "final_norm", "logits")  # the points outside the layers (layer None)

# The weight parts (runtime/weights.py names) whose values feed each module's activation, the
# one a divergence points at first; fused and mixture-of-experts families are mapped below.
MODULE_PARTS = {
    "embed": ("embed",), "attn_norm": ("attn_norm",),
    # MLA (DeepSeek) makes q from q_b (or q) over a low-rank q_a, k and v from kv_b over kv_a
    "q": ("q", "q_b", "q_a", "q_bias", "q_a_bias", "q_norm", "q_a_norm"),
    "k": ("k", "kv_b", "kv_a", "k_bias", "kv_a_bias", "k_norm", "kv_a_norm"),
    "v": ("v", "kv_b", "kv_a", "v_bias", "kv_a_bias"), "attn_out": ("o", "o_bias", "sinks"),
    "attn_residual": ("attn_out_norm", "o"), "ffn_norm": ("ffn_norm",),
    "ffn_out": ("down", "gate", "up", "gate_up", "router"), "residual": ("ffn_out_norm", "down"),
    "final_norm": ("norm",), "logits": ("lm_head",),
}


def module_tensors(model, layer: int | None, module: str) -> list[str]:
    """The checkpoint's names of the weights that feed `module` of `layer`, most direct first."""
    from ..runtime.experts import expert_names, fused_names, is_moe, shared_names
    from ..runtime.weights import layer_parts

    w = getattr(model, "weights", None)
    if w is None or not hasattr(w, "name"):
        return []  # an engine (llama.cpp) holds no weights of ours
    cfg = model.config
    parts = MODULE_PARTS[module]
    if layer is None:
        if module == "logits" and w.tied:
            return [w.name("embed")]
        return [w.name(p) for p in parts]
    have = layer_parts(cfg, layer)
    if cfg.fused_projections and module in ("q", "k", "v"):
        parts = ("qkv",) + parts[1:]
    names = [w.name(p, layer) for p in parts if p in have]
    if module == "ffn_out" and is_moe(cfg, layer):  # the experts behind the router, quantized or not
        fused = fused_names(cfg, layer)
        names += ([fused["gate_up"], fused["down"]] if fused else
                  [n for triple in expert_names(cfg, layer) for n in triple])
        names += [n for n in (shared_names(cfg, layer) or ())[:3] if n]
    return [n for n in names if n in w.ckpt.tensors]


def tensor_place(model, name: str | None) -> dict[str, Any]:
    """{"tensor", "file", "offset", "length"} of a weight in the checkpoint, for the hexdump."""
    info = model.weights.ckpt.tensors.get(name) if name else None
    if info is None:
        return {"tensor": name, "file": None, "offset": None, "length": None}
    return {"tensor": name, "file": info.file, "offset": int(info.offset), "length": int(info.length)}


def _held(cfg, layer: dict, module: str) -> list[tuple[str, Any, slice | None]]:
    """(part, held array, its rows) of the weights feeding `module`, as the decoder holds them:
    q, k, v fused into one matrix (rows in that order), gate and up into another."""
    qs, kvs, inter = cfg.q_size, cfg.kv_size, cfg.intermediate_size
    fused = cfg.fused_projections
    rows = {"q": slice(0, qs), "k": slice(qs, qs + kvs), "v": slice(qs + kvs, None)}
    if module in rows:
        return [("qkv" if fused else module, layer["qkv"], rows[module]),
                (f"{module}_bias", layer["qkv_bias"], rows[module]), (f"{module}_norm", layer.get(f"{module}_norm"), None)]
    if module == "ffn_out":
        return [("gate_up" if fused else "gate", layer["gate_up"], slice(0, inter)),
                ("gate_up" if fused else "up", layer["gate_up"], slice(inter, None)), ("down", layer["down"], None)]
    parts = {"attn_norm": ("attn_norm",), "attn_out": ("o", "o_bias"), "attn_residual": ("attn_out_norm",),
             "ffn_norm": ("ffn_norm",), "residual": ("ffn_out_norm",)}[module]
    return [(p, layer.get(p), None) for p in parts]


def nonfinite_weight(model, layer: int | None, module: str) -> str | None:
    """The name of the weight feeding `module` that holds NaN or Inf, as loaded; None if none does
    (or it is held requantized, where NaN/Inf never are: such matrices stay float32)."""
    w, b = model.weights, model.backend
    if not hasattr(w, "layer"):
        return None
    if layer is None:
        top = {"embed": ("embed", w.embed), "final_norm": ("norm", w.norm),
               "logits": ("embed" if w.tied else "lm_head", w.lm_head)}[module]
        held = [(top[0], top[1], None)]
    else:
        held = _held(model.config, w.layer(layer), module)
    for part, array, rows in held:
        if _holds_nonfinite(b, array, rows):
            return w.name(part, layer)
    return None


def _holds_nonfinite(backend, array, rows: slice | None) -> bool:
    """Whether `array` (its `rows`) holds NaN or Inf: a streamed matrix is read block by block
    from the file, never whole; a requantized matrix never holds them (such stay float32)."""
    if isinstance(array, StreamedMatrix):
        lo, hi, _ = (rows or slice(None)).indices(array.shape[0])
        return any(not np.isfinite(block[max(0, lo - start):max(0, hi - start)]).all()
                   for start, block in array.blocks() if start < hi and start + len(block) > lo)
    if array is None or not (isinstance(array, np.ndarray) or hasattr(array, "detach")):
        return False
    a = np.asarray(backend.to_numpy(array))
    return not np.isfinite(a if rows is None else a[rows]).all()


# -- loading and input ids (shared with compare_runs) ------------------------------------------

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
        model, owned = source, False
    else:
        if not isinstance(source, (str, os.PathLike)) and source is not None:
            raise TypeError(f"expected a path or a loaded model (mx.load_model), not {type(source).__name__}")
        model, owned = load_model(source, device=device, backend="torch" if device != "cpu" else None,
                                  stream=stream, context=tokens), True
    if hasattr(model.backend, "forward"):
        raise UnsupportedModel(f"{model.source!r} runs on {model.device}, which computes the forward pass "
                               "itself and cannot be traced; load it with backend='numpy' or 'torch'.")
    return model, owned


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


def run(model, ids: list[int], recorder, progress=None, label: str = "tracing") -> np.ndarray:
    """One forward pass over the whole sequence with `recorder` set; float32 numpy logits.
    progress(label, layers done, layers) is called after each layer (False stops the pass);
    None shows a progress bar when the run streams, False nothing."""
    return drain(steps(model, ids, recorder, progress, label))


def steps(model, ids: list[int], recorder, progress=None, label: str = "tracing"):
    """`run` one layer at a time: a generator yielding each layer's index as it ends and
    returning the float32 numpy logits (compare_runs advances two of them in lock step)."""
    dec = model.decoder
    progress, bar = _progress_for(model, progress, label)
    dec.recorder = with_progress(recorder, progress, label, model.config.num_layers)
    try:
        logits = yield from dec.steps(ids, model.new_cache(len(ids)))
        return model.backend.to_numpy(logits)
    finally:
        dec.recorder = None
        if bar is not None:
            bar.close()


def finite(value) -> Any:
    """JSON has no NaN or Infinity: None stands for them."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    return value


# -- statistics ----------------------------------------------------------------------------------

@dataclass
class ModuleStats:
    """Statistics of one activation; `top`: the TOP largest |x| as (value, position, channel)."""

    layer: int | None
    module: str
    shape: tuple[int, ...]
    norm: float
    absmax: float
    mean: float
    std: float
    nan: int
    inf: int
    median_abs: float
    top: list[tuple[float, int, int]] = field(default_factory=list)

    def massive(self, ratio: float = MASSIVE_RATIO) -> list[tuple[float, int, int]]:
        if not self.median_abs > 0:
            return []
        return [t for t in self.top if abs(t[0]) >= ratio * self.median_abs]


def activation_stats(layer: int | None, module: str, x: np.ndarray, top: int = TOP) -> ModuleStats:
    """Statistics of x (positions first); only finite values count toward norm/mean/std/median.

    Cheap enough to run at every point of a forward pass (tracing costs <= 1.3x a plain pass):
    sums in float64, the sum of squares by BLAS in float32, and the median |x| from at most
    MEDIAN_SAMPLE evenly spaced values (an exact median of the logits would cost 10 ms)."""
    flat = x.reshape(x.shape[0], -1) if x.ndim > 1 else x.reshape(1, -1)
    f = flat.reshape(-1)
    nan = inf = 0
    total = float(f.sum(dtype=np.float64))
    if not math.isfinite(total):  # NaN/Inf are counted, and left out of the other statistics
        nan, inf = int(np.isnan(f).sum()), int(np.isinf(f).sum())
        f = np.where(np.isfinite(f), f, np.float32(0))
        total = float(f.sum(dtype=np.float64))
    n = max(1, f.size - nan - inf)
    a = np.abs(f)
    sq = float(np.dot(f, f))
    mean = total / n
    cols = flat.shape[1]
    idx = top_indices(a, cols, min(top, a.size))
    tops = [(float(f[i]), int(i // cols), int(i % cols)) for i in idx]
    sample = a[::max(1, a.size // MEDIAN_SAMPLE)]
    median = float(np.partition(sample, sample.size // 2)[sample.size // 2]) if sample.size else 0.0
    return ModuleStats(layer, module, tuple(int(s) for s in x.shape), math.sqrt(sq),
                       float(a[idx[0]]) if idx.size else 0.0, mean, math.sqrt(max(0.0, sq / n - mean * mean)),
                       nan, inf, median, tops)


def top_indices(a: np.ndarray, cols: int, k: int) -> np.ndarray:
    """Flat indices of the k largest values of `a` (rows of `cols`), largest first. The k-th
    largest row maximum bounds the k-th largest value from below, so only the few values above it
    are sorted (a partition of the whole activation cost more than the rest of the statistics)."""
    if k <= 0:
        return np.zeros(0, np.int64)
    row_max = a.reshape(-1, cols).max(axis=1)
    bound = np.partition(row_max, row_max.size - k)[row_max.size - k] if row_max.size >= k else -np.inf
    idx = np.flatnonzero(a >= bound)
    idx = idx[np.argpartition(a[idx], idx.size - k)[idx.size - k:]]
    return idx[np.argsort(-a[idx], kind="stable")]


class StatsRecorder:
    """The decoder's recorder for a trace: statistics per call; the activation too if `keep`."""

    def __init__(self, backend, keep: bool = False, top: int = TOP) -> None:
        self.backend, self.keep, self.top = backend, keep, top
        self.stats: list[ModuleStats] = []
        self.activations: dict[tuple[int | None, str], np.ndarray] = {}

    def __call__(self, layer, module, x) -> None:
        a = np.asarray(self.backend.to_numpy(x))
        self.stats.append(activation_stats(layer, module, a, self.top))
        if self.keep:
            self.activations[(layer, module)] = np.array(a, dtype=np.float32, copy=True)


# -- the trace ---------------------------------------------------------------------------------

@dataclass
class Trace:
    """What one forward pass computed, per layer and module (see the module docstring).

    stats: ModuleStats in the order the decoder computed them; tensors: (layer, module) -> the
    weight names feeding it; activations: (layer, module) -> float32 numpy, only with keep=True.
    """

    source: str
    architecture: str
    num_layers: int
    ids: list[int]
    tokens: list[str]
    stats: list[ModuleStats]
    tensors: dict[tuple[int | None, str], list[str]]
    logits: np.ndarray
    activations: dict[tuple[int | None, str], np.ndarray] = field(default_factory=dict)
    massive_ratio: float = MASSIVE_RATIO
    nonfinite_tensor: str | None = None  # the weight holding NaN/Inf where they first appear

    def __getitem__(self, key: tuple[int | None, str]) -> ModuleStats:
        for s in self.stats:
            if (s.layer, s.module) == tuple(key):
                return s
        raise KeyError(key)

    @property
    def first_nonfinite(self) -> dict[str, Any] | None:
        """{"layer", "module", "nan", "inf", "tensor"} of the first activation holding NaN or Inf;
        "tensor" is the weight feeding it that holds NaN/Inf (else the module's main weight: an
        overflow, not a stored NaN)."""
        s = self._first_nonfinite()
        if s is None:
            return None
        name = self.nonfinite_tensor or (self.tensors.get((s.layer, s.module)) or [None])[0]
        return {"layer": s.layer, "module": s.module, "nan": s.nan, "inf": s.inf, "tensor": name}

    def _first_nonfinite(self) -> ModuleStats | None:
        return next((s for s in self.stats if s.nan or s.inf), None)

    @property
    def massive(self) -> list[dict[str, Any]]:
        """Activations with |x| >= massive_ratio x their module's median |x|, largest first."""
        out = [{"layer": s.layer, "module": s.module, "position": pos, "channel": ch, "value": v,
                "token": self.tokens[pos] if pos < len(self.tokens) else None,
                "ratio": abs(v) / s.median_abs}
               for s in self.stats for v, pos, ch in s.massive(self.massive_ratio)]
        return sorted(out, key=lambda m: -m["ratio"])

    def table(self):
        """A pandas DataFrame, one row per layer x module, in the order they were computed."""
        import pandas as pd

        rows = [{"layer": s.layer, "module": s.module, "norm": s.norm, "absmax": s.absmax, "mean": s.mean,
                 "std": s.std, "nan": s.nan, "inf": s.inf, "median_abs": s.median_abs,
                 "massive": len(s.massive(self.massive_ratio)),
                 "top": [(round(v, 4), p, c) for v, p, c in s.top],
                 "tensor": (self.tensors.get((s.layer, s.module)) or [None])[0]} for s in self.stats]
        df = pd.DataFrame(rows)
        df["layer"] = df["layer"].astype("Int64")
        return df

    def matrix(self, metric: str) -> np.ndarray:
        """(num_layers, len(LAYER_MODULES)) of one statistic; NaN where a module was not seen."""
        m = np.full((self.num_layers, len(LAYER_MODULES)), np.nan)
        for s in self.stats:
            if s.layer is not None and s.module in LAYER_MODULES:
                m[s.layer, LAYER_MODULES.index(s.module)] = float(getattr(s, metric))
        return m

    def plot(self, metric: str = "absmax"):
        """A heatmap of layers x modules (log10 of `metric`), NaN/Inf and massive ones marked."""
        from .plot import heatmap

        marks = [(m["layer"], m["module"], "M") for m in self.massive if m["layer"] is not None]
        first = self.first_nonfinite
        if first and first["layer"] is not None:
            marks.append((first["layer"], first["module"], "NaN" if first["nan"] else "Inf"))
        return heatmap(np.log10(np.maximum(self.matrix(metric), 1e-30)), f"log10 {metric}",
                       f"trace of {os.path.basename(self.source)}: {metric} per layer and module", marks)

    def to_json(self) -> dict[str, Any]:
        """A plain, JSON-ready dict (NaN and Inf as None) for the widget:

        {"source", "architecture", "layers": [0..n-1], "modules": LAYER_MODULES, "ids", "tokens",
         "metrics": {"norm"|"absmax"|"mean"|"std"|"nan"|"inf": [[value per module] per layer]},
         "tensors": [[weight name per module] per layer],
         "outer": [{"module": "embed"|"final_norm"|"logits", "norm", ..., "tensor"}],
         "first_nonfinite": {...} | None, "massive": [{"layer", "module", "position", "channel",
         "value", "token", "ratio"}], "massive_ratio"}
        """
        metrics = ("norm", "absmax", "mean", "std", "nan", "inf")
        tensors = [[(self.tensors.get((i, m)) or [None])[0] for m in LAYER_MODULES] for i in range(self.num_layers)]
        outer = [{"module": s.module, **{k: finite(float(getattr(s, k))) for k in metrics},
                  "tensor": (self.tensors.get((None, s.module)) or [None])[0]}
                 for s in self.stats if s.layer is None]
        return {"source": self.source, "architecture": self.architecture,
                "layers": list(range(self.num_layers)), "modules": list(LAYER_MODULES),
                "ids": list(self.ids), "tokens": list(self.tokens),
                "metrics": {k: [[finite(float(v)) for v in row] for row in self.matrix(k)] for k in metrics},
                "tensors": tensors, "outer": outer, "first_nonfinite": self.first_nonfinite,
                "massive": [{k: finite(v) for k, v in m.items()} for m in self.massive],
                "massive_ratio": self.massive_ratio}

    def show(self, on_select=None):
        """This trace as a widget (widgets/runs_view.py RunsView): absmax / median per layer and
        module, massive activations and the first NaN/Inf marked."""
        from .display import show

        return show("runs", self, on_select=on_select)

    def __repr__(self) -> str:
        first = self.first_nonfinite
        where = (f"; NaN/Inf first at layer {first['layer']} {first['module']}" if first else "")
        return (f"<Trace {self.architecture} {self.num_layers} layers, {len(self.ids)} tokens, "
                f"{len(self.stats)} activations, {len(self.massive)} massive{where}>")


def token_texts(model, ids: list[int]) -> list[str]:
    tok = model.tokenizer
    return [tok.token_text(i) if tok is not None else str(i) for i in ids]


def trace(source=None, prompt: str | None = None, ids=None, *, keep: bool = False, device: str = "cpu",
          stream: bool | None = None, progress=None,
          massive_ratio: float = MASSIVE_RATIO, top: int = TOP) -> Trace:
    """Run one forward pass of `source` (anything `load_model` takes, or a loaded Model; None:
    the bundled sample) over `prompt` (tokenized) or `ids`, recording statistics per layer and
    module. keep=True also keeps every activation (float32) in `Trace.activations`.
    device "cpu" runs the numpy reference; "cuda"/"mps" run torch. stream: None streams the
    weights layer by layer when the model does not fit in memory (load_model's `stream`).
    progress: called as progress("tracing", layers done, layers) after each layer; returning
    False stops the pass (RunStopped). None shows a progress bar when the run streams."""
    model, owned = load(source, device, stream, token_bound(prompt, ids))
    try:
        token_ids = prompt_ids(model, prompt, ids)
        rec = StatsRecorder(model.backend, keep, top)
        logits = run(model, token_ids, rec, progress)
        tensors = {(layer, m): module_tensors(model, layer, m)
                   for layer in [None, *range(model.config.num_layers)]
                   for m in (OUTER if layer is None else LAYER_MODULES)}
        out = Trace(model.source, model.config.architecture, model.config.num_layers, token_ids,
                    token_texts(model, token_ids), rec.stats, tensors, logits, rec.activations, massive_ratio)
        first = out._first_nonfinite()
        if first is not None:
            out.nonfinite_tensor = nonfinite_weight(model, first.layer, first.module)
        return out
    finally:
        if owned:
            model.close()


__all__ = ["trace", "Trace", "ModuleStats", "MASSIVE_RATIO", "MODULES"]
