"""`mx.compare_runs`: run two checkpoints on the same token ids and say where they part ways.

    d = mx.compare_runs("model-f32/", "model-q8_0.gguf", prompt="The capital of France is")
    d.table()               # per layer x module: cosine, relative L2, max |a - b| of the activations
    d.first_divergence      # {"layer", "module", "cosine", "rel_l2", "tensor", "offset", ...} or None
    d.kld                   # {"mean", "median", "p99", "max"} of KL(P_a || P_b) per position, nats
    d.top1_agreement        # share of positions whose most likely next token agrees
    mx.compare_runs(a, b, text=open("eval.txt").read()).perplexity   # {"a": ..., "b": ...}
    d.show()                # the widget: heatmap, first divergence explained (runs_widget.py)

Both run through the same decoder (demo/model.py), so an HF folder, a GGUF (llama.cpp's q/k row
order undone at load), a Hub-quantized or an MLX folder record the same named points, and each
point maps to the weight tensors feeding it in each checkpoint (trace.module_tensors).

The first divergence is a jump, not a drift: walking the points in the order the decoder
computes them, the first whose relative L2 error ||b - a|| / ||a|| is at least JUMP_FLOOR and
at least JUMP_FACTOR times the largest relative error of every earlier point (or is NaN/Inf on
one side only). Quantization noise adds a little at every matmul and grows slowly; a wrong
weight, a row order, a norm epsilon or a RoPE base changes one point by far more than all before.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from .model import LAYER_MODULES
from .trace import (
    DEFAULT_PROMPT,
    OUTER,
    finite,
    load,
    module_tensors,
    nonfinite_weight,
    prompt_ids,
    run,
    tensor_place,
    token_texts,
)

JUMP_FLOOR = 0.25   # relative L2 error below this is never a divergence (about cosine 0.97)
JUMP_FACTOR = 4.0   # ... and it must exceed every earlier point's error this many times


def activation_diff(a: np.ndarray | None, b: np.ndarray) -> dict[str, Any]:
    """cosine, rel_l2 = ||b - a|| / ||a|| and max_abs = max |b - a|, in float64; non-finite values
    on one side only make rel_l2 and max_abs inf and cosine NaN."""
    out = {"cosine": math.nan, "rel_l2": math.nan, "max_abs": math.nan,
           "nonfinite_a": 0, "nonfinite_b": int(b.size - np.isfinite(b).sum())}
    if a is None or a.shape != b.shape:
        return out
    out["nonfinite_a"] = int(a.size - np.isfinite(a).sum())
    if out["nonfinite_a"] or out["nonfinite_b"]:
        same = np.array_equal(a, b, equal_nan=True)
        out.update(cosine=1.0 if same else math.nan, rel_l2=0.0 if same else math.inf,
                   max_abs=0.0 if same else math.inf)
        return out
    x, y = a.astype(np.float64).ravel(), b.astype(np.float64).ravel()
    d = y - x
    nx, ny, nd = math.sqrt(x @ x), math.sqrt(y @ y), math.sqrt(d @ d)
    out["cosine"] = float(x @ y / (nx * ny)) if nx and ny else (1.0 if nx == ny else 0.0)
    out["rel_l2"] = nd / nx if nx else (0.0 if nd == 0 else math.inf)
    out["max_abs"] = float(np.abs(d).max()) if d.size else 0.0
    return out


def find_divergence(rows: list[dict[str, Any]]) -> dict[str, Any] | None:
    """The first row that jumps (see the module docstring), or None."""
    worst = 0.0
    for row in rows:
        r = row["rel_l2"]
        if math.isnan(r):
            continue  # not compared (a point one run did not record)
        if r >= JUMP_FLOOR and r >= JUMP_FACTOR * worst:
            return row
        worst = max(worst, r)
    return None


# ModelConfig fields that say how a file stores the model rather than what it computes.
STORAGE_FIELDS = {"architecture", "extra", "gguf_qk_permuted", "max_position_embeddings",
                  "tie_word_embeddings", "fused_projections"}
# Fields two formats spell differently for one model: a GGUF folds Gemma's 1 + w into the norm
# weights and keeps Llama 3's RoPE factors as a tensor, so these are compared within a format only.
FORMAT_FIELDS = {"norm_offset", "rope_scaling"}


def config_differences(cfg_a, cfg_b, same_format: bool = True) -> dict[str, list[Any]]:
    """{field: [a's value, b's value]} for the hyperparameters in which the two models' forward
    passes differ (floats equal to float32 precision count as equal: GGUF stores float32)."""
    out = {}
    for f in dataclasses.fields(cfg_a):
        if f.name in STORAGE_FIELDS or (f.name in FORMAT_FIELDS and not same_format):
            continue
        va, vb = _effective(cfg_a, f.name), _effective(cfg_b, f.name)
        if isinstance(va, float) and isinstance(vb, float) and math.isclose(va, vb, rel_tol=1e-6):
            continue
        if va != vb:
            out[f.name] = [va, vb]
    return out


# Per-layer lists where None means "every layer" (a GGUF reader may spell them out).
EVERY_LAYER = ("rope_layers", "moe_layers", "sliding_layers")


def _effective(cfg, name: str) -> Any:
    """A field as the forward pass uses it: None spelled out where None means a default."""
    value = getattr(cfg, name, None)
    if value is None and name in EVERY_LAYER and (name != "moe_layers" or cfg.experts) and \
            (name != "sliding_layers" or cfg.sliding_window):
        return [True] * cfg.num_layers
    if value is None and name == "attention_scale":
        return float(cfg.head_dim) ** -0.5
    return value


def _config_text(diff: dict[str, list[Any]]) -> str:
    def short(v):
        text = repr(v)
        return text if len(text) <= 40 else text[:37] + "..."
    return ", ".join(f"{k} {short(a)} vs {short(b)}" for k, (a, b) in diff.items())


def explain(row: dict[str, Any], rows: list[dict[str, Any]], config_diff: dict[str, list[Any]] | None = None) -> str:
    """A sentence on what the divergence at `row` most likely comes from."""
    text = _explain_weights(row, rows)
    if config_diff:  # the same bytes under two recipes part ways too: say so first
        return (f"the two configurations differ ({_config_text(config_diff)}), which alone can make "
                f"{'layer ' + str(row['layer']) + ' ' if row['layer'] is not None else ''}{row['module']} "
                f"differ; otherwise: {text}")
    return text


def _explain_weights(row: dict[str, Any], rows: list[dict[str, Any]]) -> str:
    at = f"layer {row['layer']} {row['module']}" if row["layer"] is not None else row["module"]
    if math.isinf(row["rel_l2"]):
        return f"NaN or Inf appear at {at} in one run only: look at {row['tensor']!r} for NaN/Inf values."
    same_layer = {r["module"]: r for r in rows if r["layer"] == row["layer"]}
    inputs_agree = all(same_layer.get(m, {}).get("rel_l2", 0.0) < JUMP_FLOOR for m in ("q", "k", "v"))
    if row["module"] == "attn_out" and inputs_agree:
        return (f"q, k and v of layer {row['layer']} agree but the attention output does not: the attention "
                "itself differs (rope_theta or RoPE scaling, the head layout, the attention scale or "
                f"the mask), or the output projection {row['tensor']!r}.")
    if row["module"] in ("attn_norm", "ffn_norm", "final_norm"):
        return (f"the input of {at} agrees but its output does not: the norm weight {row['tensor']!r} or "
                "rms_norm_eps differs.")
    if row["module"] in ("q", "k"):
        return (f"{at} differs while its input agrees: the weight {row['tensor']!r} differs (another "
                "layer's weight, or q/k rows left in llama.cpp's interleaved RoPE order).")
    names = row.get("tensors") or [row["tensor"]]
    which = f"the weight {names[0]!r}" if len(names) == 1 else f"one of its weights ({', '.join(names)})"
    return f"{at} differs while everything before it agrees: {which} differs."


def kl_per_position(logits_a: np.ndarray, logits_b: np.ndarray) -> np.ndarray:
    """KL(P_a || P_b) at each position, nats, from log-softmax in float64."""
    la, lb = log_softmax(logits_a), log_softmax(logits_b)
    return np.sum(np.exp(la) * (la - lb), axis=-1)


def log_softmax(logits: np.ndarray) -> np.ndarray:
    x = np.asarray(logits, dtype=np.float64)
    x = x - x.max(axis=-1, keepdims=True)
    return x - np.log(np.exp(x).sum(axis=-1, keepdims=True))


def kld_summary(kl: np.ndarray) -> dict[str, float]:
    """llama-perplexity's figures: mean, median, 99th percentile (linear interpolation between
    sorted values, as its `percentile`), max."""
    if kl.size == 0 or not np.all(np.isfinite(kl)):
        return {"mean": math.nan, "median": math.nan, "p99": math.nan, "max": math.nan}
    return {"mean": float(kl.mean()), "median": float(np.median(kl)),
            "p99": float(np.percentile(kl, 99)), "max": float(kl.max())}


def perplexity(logits: np.ndarray, ids: list[int]) -> float:
    """exp of the mean negative log-likelihood of ids[1:], each predicted from the position before."""
    if len(ids) < 2:
        return math.nan
    lp = log_softmax(logits[:-1])
    return float(np.exp(-np.mean(lp[np.arange(len(ids) - 1), np.asarray(ids[1:])])))


class _Keep:
    """Recorder of run a: every activation, as host numpy (copied off a torch device)."""

    def __init__(self, backend) -> None:
        self.backend, self.acts = backend, {}
        self.copy = getattr(backend, "name", "") != "numpy"

    def __call__(self, layer, module, x) -> None:
        a = self.backend.to_numpy(x)
        self.acts[(layer, module)] = np.array(a, copy=True) if self.copy else np.asarray(a)


class _Compare:
    """Recorder of run b: each activation against a's at the same point, which is then dropped."""

    def __init__(self, backend, ref: dict) -> None:
        self.backend, self.ref, self.rows = backend, ref, []

    def __call__(self, layer, module, x) -> None:
        b = np.asarray(self.backend.to_numpy(x))
        self.rows.append({"layer": layer, "module": module,
                          **activation_diff(self.ref.pop((layer, module), None), b)})


@dataclass
class RunDiff:
    """Two runs on the same ids, compared point by point (see the module docstring).

    rows: one dict per point in the order computed: layer, module, cosine, rel_l2, max_abs,
    nonfinite_a, nonfinite_b, tensor (b's weight name), tensor_a (a's). tokenizer_mismatch: None,
    or how b's tokenizer splits the text differently ({"position", "a_ids", "b_ids", "a_tokens",
    "b_tokens"}); both runs use a's ids regardless.
    """

    a: str
    b: str
    num_layers: int
    ids: list[int]
    tokens: list[str]
    rows: list[dict[str, Any]]
    logits_a: np.ndarray
    logits_b: np.ndarray
    places: dict[str, dict[str, Any]] = field(default_factory=dict)  # b's tensor -> file/offset/length
    tokenizer_mismatch: dict[str, Any] | None = None
    text: str | None = None
    # {field: [a, b]}: hyperparameters in which the two forward passes differ (config_differences)
    config_diff: dict[str, list[Any]] = field(default_factory=dict)

    @property
    def first_divergence(self) -> dict[str, Any] | None:
        """{"layer", "module", "cosine", "rel_l2", "max_abs", "tensor", "tensor_a", "tensors", "file",
        "offset", "length", "explanation"} where a jump first appears; None when there is none.
        tensor: b's weight the point depends on most directly (the one holding NaN/Inf when that
        is the jump); tensors: every weight of b feeding the point; file/offset/length: tensor's
        bytes in b."""
        row = find_divergence(self.rows)
        if row is None:
            return None
        out = {k: row[k] for k in ("layer", "module", "cosine", "rel_l2", "max_abs", "tensor", "tensor_a",
                                   "tensors")}
        out.update({k: v for k, v in self.places.get(row["tensor"], {}).items() if k != "tensor"})
        out["explanation"] = explain(row, self.rows, self.config_diff)
        return out

    @property
    def kl_divergence(self) -> np.ndarray:
        """KL(P_a || P_b) per position, nats."""
        return kl_per_position(self.logits_a, self.logits_b)

    @property
    def kld(self) -> dict[str, float]:
        """{"mean", "median", "p99", "max"} of KL(P_a || P_b) over positions (llama-perplexity's
        --kl-divergence figures; every position counts, the prompt being one chunk)."""
        return kld_summary(self.kl_divergence)

    @property
    def top1_agreement(self) -> float:
        """Share of positions where both runs' most likely next token is the same."""
        return float(np.mean(self.logits_a.argmax(-1) == self.logits_b.argmax(-1)))

    @property
    def perplexity(self) -> dict[str, float] | None:
        """With text=: each run's perplexity of it (a's ids, every token after the first)."""
        if self.text is None:
            return None
        return {"a": perplexity(self.logits_a, self.ids), "b": perplexity(self.logits_b, self.ids)}

    def table(self):
        """A pandas DataFrame, one row per layer x module, in the order computed."""
        import pandas as pd

        df = pd.DataFrame(self.rows)
        df["layer"] = df["layer"].astype("Int64")
        return df

    def matrix(self, metric: str = "rel_l2") -> np.ndarray:
        m = np.full((self.num_layers, len(LAYER_MODULES)), np.nan)
        for r in self.rows:
            if r["layer"] is not None and r["module"] in LAYER_MODULES:
                m[r["layer"], LAYER_MODULES.index(r["module"])] = r[metric]
        return m

    def plot(self):
        """Heatmap of log10 relative L2 per layer x module, the first divergence marked."""
        from .runs_plot import heatmap

        first = self.first_divergence
        marks = [(first["layer"], first["module"], "X")] if first and first["layer"] is not None else []
        values = np.log10(np.clip(self.matrix("rel_l2"), 1e-9, 1e3))
        return heatmap(values, "log10 relative L2", f"{self.b} against {self.a}", marks, cmap="magma")

    def summary(self) -> str:
        first = self.first_divergence
        k = self.kld
        lines = [f"{len(self.ids)} tokens; KLD mean {k['mean']:.6f} median {k['median']:.6f} "
                 f"p99 {k['p99']:.6f} max {k['max']:.6f} nats; top-1 agreement {self.top1_agreement:.1%}"]
        if self.perplexity:
            lines.append(f"perplexity: a {self.perplexity['a']:.4f}, b {self.perplexity['b']:.4f}")
        if first is None:
            worst = max((r["rel_l2"] for r in self.rows if not math.isnan(r["rel_l2"])), default=0.0)
            lines.append(f"no divergence (largest relative L2 {worst:.3g}, a drift at most)")
        else:
            where = f"layer {first['layer']} {first['module']}" if first["layer"] is not None else first["module"]
            lines.append(f"first divergence: {where} (cosine {first['cosine']:.4f}, relative L2 "
                         f"{first['rel_l2']:.3g}), tensor {first['tensor']} at byte {first.get('offset')}: "
                         f"{first['explanation']}")
        if self.config_diff:
            lines.append(f"configurations differ: {_config_text(self.config_diff)}")
        if self.tokenizer_mismatch:
            m = self.tokenizer_mismatch
            lines.insert(0, f"tokenizers disagree from token {m['position']}: a {m['a_tokens']} b {m['b_tokens']} "
                            "(both runs use a's ids)")
        return "\n".join(lines)

    def show(self, on_select=None):
        """The "Compare runs" widget of this comparison (demo/runs_widget.py RunsView): the
        heatmap, the first divergence outlined and explained, KLD / top-1 / perplexity."""
        from .runs_widget import RunsView

        return RunsView(self, on_select=on_select)

    def __repr__(self) -> str:
        return f"<RunDiff {self.b} against {self.a}\n{self.summary()}>"

    def to_json(self) -> dict[str, Any]:
        """A plain, JSON-ready dict (NaN and Inf as None) for the "Compare runs" widget:

        {"a", "b", "layers": [0..n-1], "modules": LAYER_MODULES, "ids", "tokens",
         "metrics": {"cosine"|"rel_l2"|"max_abs": [[value per module] per layer]},
         "tensors": [[b's weight name per module] per layer], "tensors_a": the same for a,
         "places": {b's tensor name: {"file", "offset", "length"}},
         "outer": [{"module": "embed"|"final_norm"|"logits", "cosine", "rel_l2", "max_abs", "tensor"}],
         "first_divergence": {...} | None, "kld": {"mean", "median", "p99", "max"},
         "top1_agreement", "perplexity": {"a", "b"} | None, "tokenizer_mismatch": {...} | None,
         "jump": {"floor": JUMP_FLOOR, "factor": JUMP_FACTOR}}
        """
        metrics = ("cosine", "rel_l2", "max_abs")
        by_point = {(r["layer"], r["module"]): r for r in self.rows}

        def names(key: str) -> list[list[str | None]]:
            return [[by_point.get((i, m), {}).get(key) for m in LAYER_MODULES] for i in range(self.num_layers)]

        def clean(d):
            return None if d is None else {k: finite(v) for k, v in d.items()}
        return {"a": self.a, "b": self.b, "layers": list(range(self.num_layers)), "modules": list(LAYER_MODULES),
                "ids": list(self.ids), "tokens": list(self.tokens),
                "metrics": {k: [[finite(float(v)) for v in row] for row in self.matrix(k)] for k in metrics},
                "tensors": names("tensor"), "tensors_a": names("tensor_a"),
                "places": {n: {k: v for k, v in p.items() if k != "tensor"} for n, p in self.places.items()},
                "outer": [{"module": r["module"], **{k: finite(r[k]) for k in metrics}, "tensor": r["tensor"]}
                          for r in self.rows if r["layer"] is None],
                "first_divergence": clean(self.first_divergence), "kld": clean(self.kld),
                "top1_agreement": self.top1_agreement, "perplexity": clean(self.perplexity),
                "tokenizer_mismatch": self.tokenizer_mismatch,
                "config_diff": {k: [_jsonable(a), _jsonable(b)] for k, (a, b) in self.config_diff.items()},
                "jump": {"floor": JUMP_FLOOR, "factor": JUMP_FACTOR}}


def _jsonable(v: Any) -> Any:
    if isinstance(v, float):
        return finite(v)
    return v if v is None or isinstance(v, (bool, int, str, list, dict)) else repr(v)


def _names(model) -> dict[tuple[int | None, str], str | None]:
    points = [(None, "embed")] + [(i, m) for i in range(model.config.num_layers) for m in LAYER_MODULES]
    points += [(None, m) for m in OUTER[1:]]
    return {p: (module_tensors(model, *p) or [None])[0] for p in points}


def _check_shapes(ca, cb) -> None:
    for what in ("num_layers", "hidden_size", "vocab_size"):
        if getattr(ca, what) != getattr(cb, what):
            raise ValueError(f"the two models differ in {what} (a {getattr(ca, what)}, b {getattr(cb, what)}): "
                             "their runs cannot be compared module by module.")


def tokenizer_mismatch(a_tokens: list[str], mb, text: str | None, ids: list[int]) -> dict[str, Any] | None:
    """Where b's tokenizer splits `text` differently from a's ids (None: the same, or no text)."""
    if text is None or mb.tokenizer is None:
        return None
    theirs = mb.encode_prompt(text)
    if theirs == ids:
        return None
    at = next((i for i, (x, y) in enumerate(zip(ids, theirs)) if x != y), min(len(ids), len(theirs)))
    return {"position": at, "a_ids": ids, "b_ids": theirs, "a_tokens": a_tokens[at:at + 4],
            "b_tokens": token_texts(mb, theirs[at:at + 4])}


def compare_runs(a, b, prompt: str | None = None, ids=None, text: str | None = None, *,
                 device: str = "cpu") -> RunDiff:
    """Run `a` and `b` (anything `load_model` takes, or loaded Models) on the same token ids and
    compare them point by point. The ids: `ids` as given, else `text` (then each side's perplexity
    of it is computed too) or `prompt` (default: a plain sentence) tokenized by a's tokenizer; b's
    tokenizer is only checked against it (RunDiff.tokenizer_mismatch). Given paths, one model is
    held at a time: a's activations are kept until b's run has compared them."""
    if text is not None and (prompt is not None or ids is not None):
        raise ValueError("text= is the input the perplexity is measured on: give it alone, without "
                         "prompt= or ids=")
    words = text if text is not None else prompt
    if words is None and ids is None:
        words = DEFAULT_PROMPT
    ma, owned = load(a, device)
    try:
        token_ids = prompt_ids(ma, words, ids)
        keep = _Keep(ma.backend)
        logits_a = run(ma, token_ids, keep)
        names_a, label_a, cfg_a, tokens = _names(ma), str(ma.source), ma.config, token_texts(ma, token_ids)
        gguf_a = getattr(ma.weights, "gguf", None)
    finally:
        if owned:
            ma.close()
    del ma  # when loaded here, a's weights go before b's arrive
    mb, owned_b = load(b, device)
    try:
        _check_shapes(cfg_a, mb.config)
        config_diff = config_differences(cfg_a, mb.config, same_format=gguf_a == getattr(mb.weights, "gguf", None))
        mismatch = tokenizer_mismatch(tokens, mb, words if ids is None else None, token_ids)
        cmp = _Compare(mb.backend, keep.acts)
        logits_b = run(mb, token_ids, cmp)
        names_b = _names(mb)
        feeding = {p: module_tensors(mb, *p) for p in names_b}
        broken = next((r for r in cmp.rows if r["nonfinite_b"] and not r["nonfinite_a"]), None)
        if broken is not None:  # point at the weight that holds the NaN/Inf, if one does
            key = (broken["layer"], broken["module"])
            names_b[key] = nonfinite_weight(mb, *key) or names_b[key]
        places = {n: tensor_place(mb, n) for n in names_b.values() if n}
    finally:
        if owned_b:
            mb.close()
    for row in cmp.rows:
        key = (row["layer"], row["module"])
        row["tensor"], row["tensor_a"] = names_b.get(key), names_a.get(key)
        row["tensors"] = feeding.get(key, [])
    return RunDiff(label_a, str(mb.source), mb.config.num_layers, token_ids, tokens, cmp.rows,
                   logits_a, logits_b, places, mismatch, text, config_diff)
