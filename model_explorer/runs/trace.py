"""`mx.trace`: one forward pass, with statistics of every named activation the decoder computes.

    t = mx.trace("model.gguf", prompt="The capital of France is")
    t.table()            # one row per layer x module: norm, absmax, mean, std, NaN, Inf, top |x|
    t.first_nonfinite    # where NaN/Inf first appear (layer, module, weight tensor), or None
    t.massive            # the massive activations: position, channel, value, x the median
    t.plot()             # a matplotlib figure
    t.to_json()          # a plain dict for the widget (see Trace.to_json)
    t.show()             # the widget: absmax / median per cell, NaN/Inf and massive marked

The statistics are computed inside the decoder's recorder (model/decoder_points.py MODULES), so a trace
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
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ..model.decoder_points import LAYER_MODULES, MODULES
from ..runtime.decoder import drain
from .engines import open_side
from .side import RunStopped, token_bound

MASSIVE_RATIO = 1000.0
TOP = 5  # largest |x| kept per module
MEDIAN_SAMPLE = 4096  # values the median |x| is taken from (evenly spaced over the activation)

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
    """A side's recorder for a trace: statistics per call; the activation too if `keep`."""

    def __init__(self, keep: bool = False, top: int = TOP) -> None:
        self.keep, self.top = keep, top
        self.stats: list[ModuleStats] = []
        self.activations: dict[tuple[int | None, str], np.ndarray] = {}

    def __call__(self, layer, module, a: np.ndarray) -> None:
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
    engine: str = "decoder"  # what ran it (runs/engines.py)
    # the same in words: "cpu (numpy)", or llama.cpp with its KV cache type and attention path
    engine_label: str | None = None

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
         "value", "token", "ratio"}], "massive_ratio", "engine": what ran it (runs/engines.py), "engine_label": the same in words}
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
                "massive_ratio": self.massive_ratio, "engine": self.engine,
                "engine_label": self.engine_label}

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


def trace(source=None, prompt: str | None = None, ids=None, *, keep: bool = False, device: str = "cpu",
          stream: bool | None = None, progress=None, engine: str | None = None,
          massive_ratio: float = MASSIVE_RATIO, top: int = TOP) -> Trace:
    """Run one forward pass of `source` (anything `load_model` takes, or a loaded Model; None:
    the bundled sample) over `prompt` (tokenized) or `ids`, recording statistics per layer and
    module. keep=True also keeps every activation (float32) in `Trace.activations`.
    device "cpu" runs the numpy reference; "cuda"/"mps" run torch. stream: None streams the
    weights layer by layer when the model does not fit in memory (load_model's `stream`).
    progress: called as progress("tracing", layers done, layers) after each layer; returning
    False stops the pass (RunStopped). None shows a progress bar when the run streams.
    engine: "decoder", "transformers", "onnxruntime", "litert", "llama.cpp" (runs/engines.py);
    None picks by format (an .onnx runs on onnxruntime, a BERT folder on transformers)."""
    side = open_side(source, engine, device, stream, token_bound(prompt, ids))
    try:
        token_ids = side.ids(prompt, ids)
        rec = StatsRecorder(keep, top)
        logits = drain(side.steps(token_ids, rec, progress))
        tensors = {p: side.weights(p) for p in side.points()}
        out = Trace(side.label, side.config.architecture, side.num_layers, token_ids,
                    side.tokens(token_ids), rec.stats, tensors, logits, rec.activations, massive_ratio)
        out.engine = getattr(side, "engine", "decoder")
        out.engine_label = getattr(side, "engine_label", None)
        first = out._first_nonfinite()
        if first is not None:
            out.nonfinite_tensor = side.nonfinite_weight((first.layer, first.module))
        return out
    finally:
        side.close()


__all__ = ["trace", "Trace", "ModuleStats", "MASSIVE_RATIO", "MODULES", "RunStopped"]
