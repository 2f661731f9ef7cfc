"""`mx.compare_runs`: run two checkpoints on the same token ids and say where they part ways.

    d = mx.compare_runs("model-f32/", "model-q8_0.gguf", prompt="The capital of France is")
    d.table()               # per layer x module: cosine, relative L2, max |a - b| of the activations
    d.first_divergence      # {"layer", "module", "cosine", "rel_l2", "tensor", "offset", ...} or None
    d.kld                   # {"mean", "median", "p99", "max"} of KL(P_a || P_b) per position, nats
    d.top1_agreement        # share of positions whose most likely next token agrees
    mx.compare_runs(a, b, text=open("eval.txt").read()).perplexity   # {"a": ..., "b": ...}
    d.show()                # the widget: heatmap, first divergence explained (runs_widget.py)

Both run through the same decoder (runtime/decoder.py), so an HF folder, a GGUF (llama.cpp's q/k row
order undone at load), a Hub-quantized or an MLX folder record the same named points, and each
point maps to the weight tensors feeding it in each checkpoint (trace.module_tensors).

The verdict (runs_verdict.py): the runs agree when their logits are equal within float32 noise;
otherwise `first_divergence` names the first point whose difference leaves float noise, a jump
when it steps up from agreement (a wrong weight, a RoPE base, a norm epsilon) and a drift when
it is there from the start or comes from rounding and grows slowly (quantization, a lower
precision), or a later point that jumps far above the drift.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ..runtime.decoder import LAYER_MODULES
from ..runtime.memory_budget import WontFit
from .config_diff import config_differences, config_rows
from .metrics import activation_diff, flatness, kl_per_position, kld_summary, perplexity
from .trace import (
    DEFAULT_PROMPT,
    OUTER,
    finite,
    load,
    module_tensors,
    nonfinite_weight,
    prompt_ids,
    run,
    steps,
    tensor_place,
    token_bound,
    token_texts,
)
from .verdict import (
    AGREE,
    JUMP,
    JUMP_FACTOR,
    JUMP_FLOOR,
    NOISE_KLD,
    NOISE_REL,
    STEP_MIN,
    VERDICT_TITLES,
    agreement_sentence,
    divergence_sentence,
    explain,
    find_divergence,
    largest_before,
    logits_agree,
    onset,
    tokens_text,
    top1_note,
    where,
)


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
    nonfinite_a, nonfinite_b, tensor (b's weight name), tensor_a (a's), tensors (every weight of
    b feeding it), kind and kind_a (how b and a store tensor and tensor_a: F32, Q8_0, ...). tokenizer_mismatch: None,
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
    def agree(self) -> bool:
        """The logits are equal within float32 noise: top-1 agreement 100 % and KL at most
        runs_verdict.NOISE_KLD nats at every position."""
        return logits_agree(self.top1_agreement, self.kld["max"])

    @property
    def first_divergence(self) -> dict[str, Any] | None:
        """Where the runs part, None when they agree (runs_verdict.py): {"kind": "jump" | "drift",
        "layer", "module", "cosine", "rel_l2", "max_abs", "previous_max", "tensor", "tensor_a",
        "tensors", "file", "offset", "length", "explanation", "sentence"}, plus "drift_from"
        ({"layer", "module", "rel_l2"}) when a drift starts before the jump. A jump is the first
        point that steps up from float noise (or far above a drift); a drift names the point
        where the difference starts. tensor: b's weight the point depends on most directly (the
        one holding NaN/Inf when that is the jump); tensors: every weight of b feeding the point;
        previous_max: the largest relative L2 before it; file/offset/length: tensor's bytes in b."""
        found = find_divergence(self.rows, logits_differ=not self.agree)
        if found is None:
            return None
        row, kind = found
        out = {"kind": kind, **{k: row[k] for k in ("layer", "module", "cosine", "rel_l2", "max_abs", "tensor",
                                                   "tensor_a", "tensors")}}
        out["previous_max"] = largest_before(self.rows, row)
        out.update({k: v for k, v in self.places.get(row["tensor"], {}).items() if k != "tensor"})
        out["explanation"] = explain(row, self.rows, self.config_diff, kind)
        start = onset(self.rows)
        if kind == JUMP and start is not None and start is not row:
            out["drift_from"] = {k: start[k] for k in ("layer", "module", "rel_l2")}
        out["sentence"] = divergence_sentence(out, self.rows)
        return out

    @property
    def verdict(self) -> dict[str, str]:
        """{"kind": "agree" | "drift" | "jump", "sentence"}: the comparison's conclusion in words,
        the same in the summary, the CLI and the view."""
        first = self.first_divergence
        note = top1_note(self.top1_agreement, self.kld["max"], flatness(self.logits_a), self.logits_a.shape[-1])
        sentence = first["sentence"] if first is not None else \
            agreement_sentence(self.rows, self.top1_agreement, self.kld["max"])
        return {"kind": first["kind"] if first is not None else AGREE,
                "sentence": f"{sentence} {note}" if note else sentence}

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
        """Heatmap of log10 relative L2 per layer x module, the first divergence (X) or the start
        of a drift (~) marked; the verdict in the title."""
        from .plot import heatmap

        first = self.first_divergence
        marks = ([(first["layer"], first["module"], "X" if first["kind"] == JUMP else "~")]
                 if first and first["layer"] is not None else [])
        values = np.log10(np.clip(self.matrix("rel_l2"), 1e-9, 1e3))
        title = f"{self.b} against {self.a}\n{VERDICT_TITLES[self.verdict['kind']]}"
        top = float(np.nanmax(values)) if np.isfinite(values).any() else 0.0
        # from float noise (dark) to a relative L2 of 1: runs that agree draw a dark map
        return heatmap(values, "log10 relative L2", title, marks, cmap="magma", vmin=math.log10(NOISE_REL),
                       vmax=max(0.0, top))

    def summary(self) -> str:
        first = self.first_divergence
        k = self.kld
        lines = [f"{len(self.ids)} tokens; KLD mean {k['mean']:.6f} median {k['median']:.6f} "
                 f"p99 {k['p99']:.6f} max {k['max']:.6f} nats; top-1 agreement {self.top1_agreement:.1%}"]
        if self.perplexity:
            lines.append(f"perplexity: a {self.perplexity['a']:.4f}, b {self.perplexity['b']:.4f}")
        if first is None:
            lines.append(self.verdict["sentence"][:1].lower() + self.verdict["sentence"][1:])
        else:
            head = "first divergence: " if first["kind"] == JUMP else "drift from "
            on = "" if first["kind"] == JUMP else " on"
            lines.append(f"{head}{where(first)}{on} (cosine {first['cosine']:.4f}, relative L2 "
                         f"{first['rel_l2']:.3g}), tensor {first['tensor']} at byte {first.get('offset')}: "
                         f"{first['explanation']}")
        if self.config_diff:
            lines.append("configurations differ:")
            lines += [f"  {name}: a {va}, b {vb}" for name, va, vb in config_rows(self.config_diff)]
        if self.tokenizer_mismatch:
            m = self.tokenizer_mismatch
            lines.insert(0, f"tokenizers disagree from token {m['position']}: a {tokens_text(m['a_tokens'])}, "
                            f"b {tokens_text(m['b_tokens'])} (both runs use a's ids)")
        return "\n".join(lines)

    def show(self, on_select=None):
        """The "Compare runs" widget of this comparison (widgets/runs_view.py RunsView): the
        heatmap, the first divergence outlined and explained, KLD / top-1 / perplexity."""
        from .display import show

        return show("runs", self, on_select=on_select)

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
         "verdict": {"kind", "sentence"}, "config_diff": {field: [a, b]},
         "config_rows": [[field, a's value, b's value] as text],
         "jump": {"floor", "factor", "noise_rel", "noise_kld", "step_min"}}
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
                "verdict": self.verdict,
                "config_diff": {k: [_jsonable(a), _jsonable(b)] for k, (a, b) in self.config_diff.items()},
                "config_rows": config_rows(self.config_diff),
                "jump": {"floor": JUMP_FLOOR, "factor": JUMP_FACTOR, "noise_rel": NOISE_REL, "noise_kld": NOISE_KLD,
                         "step_min": STEP_MIN}}


def _jsonable(v: Any) -> Any:
    if isinstance(v, float):
        return finite(v)
    return v if v is None or isinstance(v, (bool, int, str, list, dict)) else repr(v)


def _names(model) -> dict[tuple[int | None, str], str | None]:
    points = [(None, "embed")] + [(i, m) for i in range(model.config.num_layers) for m in LAYER_MODULES]
    points += [(None, m) for m in OUTER[1:]]
    return {p: (module_tensors(model, *p) or [None])[0] for p in points}


def _kinds(model, names: dict) -> dict[str, str]:
    """How each named weight is stored (F32, BF16, Q8_0, ...): a step where a and b store the
    weight differently is rounding (runs_verdict.restored)."""
    w = getattr(model, "weights", None)
    tensors = w.ckpt.tensors if w is not None and hasattr(w, "ckpt") else {}
    out = {}
    for name in names.values():
        info = tensors.get(name) if name else None
        if info is not None:
            out[name] = info.label
    return out


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
                 device: str = "cpu", stream: bool | None = None, progress=None) -> RunDiff:
    """Run `a` and `b` (anything `load_model` takes, or loaded Models) on the same token ids and
    compare them point by point. The ids: `ids` as given, else `text` (then each side's perplexity
    of it is computed too) or `prompt` (default: a plain sentence) tokenized by a's tokenizer; b's
    tokenizer is only checked against it (RunDiff.tokenizer_mismatch).

    The two runs go in lock step, layer by layer: a runs a layer, b runs the same layer and
    compares it, and a's activations of that layer are dropped, so two streamed models (each
    read from its files a block at a time) compare in the memory of about one layer of each.
    When b does not fit beside a (memory_budget refuses it), a runs first and goes, then b.
    stream: as in load_model (None: block by block when a model does not fit). progress: called
    as progress(label, layers done, layers) ("running a and b" in lock step, else "running a"
    then "running b"); False stops (RunStopped). None shows a progress bar when a run streams."""
    if text is not None and (prompt is not None or ids is not None):
        raise ValueError("text= is the input the perplexity is measured on: give it alone, without "
                         "prompt= or ids=")
    words = text if text is not None else prompt
    if words is None and ids is None:
        words = DEFAULT_PROMPT
    positions = token_bound(words, ids)
    ma, owned = load(a, device, stream, positions)
    mb = None
    try:
        token_ids = prompt_ids(ma, words, ids)
        side_a = _Side(ma, token_ids)
        mb, owned_b = _load_beside(b, ma, device, stream, positions)
        if mb is not None:
            try:
                keep, cmp, logits_a, logits_b, facts_b = _lockstep(ma, mb, side_a, token_ids, words, ids, progress)
            finally:
                if owned_b:
                    mb.close()
        else:  # one after the other: a's activations are kept until b has compared them
            keep = _Keep(ma.backend)
            logits_a = run(ma, token_ids, keep, progress, "running a")
    finally:
        if owned:
            ma.close()
    if mb is None:
        del ma  # when loaded here, a's weights go before b's arrive
        mb, owned_b = load(b, device, stream, positions)
        try:
            cmp, logits_b, facts_b = _run_b(mb, side_a, keep, token_ids, words, ids, progress)
        finally:
            if owned_b:
                mb.close()
    for row in cmp.rows:
        key = (row["layer"], row["module"])
        row["tensor"], row["tensor_a"] = facts_b.names.get(key), side_a.names.get(key)
        row["tensors"] = facts_b.feeding.get(key, [])
        row["kind"], row["kind_a"] = facts_b.kinds.get(row["tensor"]), side_a.kinds.get(row["tensor_a"])
    return RunDiff(side_a.label, facts_b.label, facts_b.num_layers, token_ids, side_a.tokens, cmp.rows,
                   logits_a, logits_b, facts_b.places, facts_b.mismatch, text, facts_b.config_diff)


def _load_beside(b, ma, device: str, stream: bool | None, positions: int):
    """(b loaded while a is held, owned), or (None, False) when b is a itself or does not fit
    beside a: then the runs go one after the other."""
    if b is ma:
        return None, False
    try:
        return load(b, device, stream, positions)
    except WontFit:
        return None, False


class _Side:
    """What the comparison keeps of a model once its run is over (its weights may be gone)."""

    def __init__(self, model, token_ids: list[int]) -> None:
        self.names = _names(model)
        self.label, self.config, self.tokens = str(model.source), model.config, token_texts(model, token_ids)
        self.kinds = _kinds(model, self.names)
        self.gguf = getattr(model.weights, "gguf", None)
        self.num_layers = model.config.num_layers


def _checked_b(mb, side_a: _Side, token_ids, words, ids) -> tuple[dict, dict | None]:
    """b's config differences and tokenizer mismatch against a, before b runs."""
    _check_shapes(side_a.config, mb.config)
    config_diff = config_differences(side_a.config, mb.config, same_format=side_a.gguf == getattr(mb.weights, "gguf", None))
    return config_diff, tokenizer_mismatch(side_a.tokens, mb, words if ids is None else None, token_ids)


def _facts_b(mb, cmp: _Compare, config_diff: dict, mismatch: dict | None) -> _Side:
    """b's side after its run: the weights feeding each point, the one holding a NaN/Inf, and
    where each named weight lies in b's files."""
    facts = _Side(mb, [])
    facts.feeding = {p: module_tensors(mb, *p) for p in facts.names}
    broken = next((r for r in cmp.rows if r["nonfinite_b"] and not r["nonfinite_a"]), None)
    if broken is not None:  # point at the weight that holds the NaN/Inf, if one does
        key = (broken["layer"], broken["module"])
        facts.names[key] = nonfinite_weight(mb, *key) or facts.names[key]
        facts.kinds = _kinds(mb, facts.names)
    facts.places = {n: tensor_place(mb, n) for n in facts.names.values() if n}
    facts.config_diff, facts.mismatch = config_diff, mismatch
    return facts


def _run_b(mb, side_a: _Side, keep: _Keep, token_ids, words, ids, progress):
    config_diff, mismatch = _checked_b(mb, side_a, token_ids, words, ids)
    cmp = _Compare(mb.backend, keep.acts)
    logits_b = run(mb, token_ids, cmp, progress, "running b")
    return cmp, logits_b, _facts_b(mb, cmp, config_diff, mismatch)


def _lockstep(ma, mb, side_a: _Side, token_ids, words, ids, progress):
    """Both runs layer by layer: a's layer, then b's, which compares it and drops a's copy."""
    config_diff, mismatch = _checked_b(mb, side_a, token_ids, words, ids)
    keep = _Keep(ma.backend)
    cmp = _Compare(mb.backend, keep.acts)
    run_a = steps(ma, token_ids, keep, progress=False)  # b's run reports for both
    run_b = steps(mb, token_ids, cmp, progress, "running a and b")
    logits: dict[str, np.ndarray] = {}
    try:
        while len(logits) < 2:
            for key, gen in (("a", run_a), ("b", run_b)):
                if key not in logits:
                    try:
                        next(gen)
                    except StopIteration as done:
                        logits[key] = done.value
    finally:
        run_a.close()
        run_b.close()
    return keep, cmp, logits["a"], logits["b"], _facts_b(mb, cmp, config_diff, mismatch)
