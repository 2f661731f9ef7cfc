"""RunDiff: two runs compared point by point (what `mx.compare_runs` returns): the rows per point,
the verdict and the first divergence explained, KLD / top-1 / perplexity from the logits, the
summary for people and the JSON the "Compare runs" view draws. compare_runs.py runs the sides."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any

import numpy as np

from ..model.decoder_points import LAYER_MODULES
from .config_diff import config_rows, where_text
from .engine_notes import aligned_points, graph_sentence, output_agrees, output_sentence, place_in_graphs
from .metrics import flatness, kl_per_position, kld_summary, perplexity
from .side import Point
from .trace import finite
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
    places_a: dict[str, dict[str, Any]] = field(default_factory=dict)  # a's tensor -> file/offset/length
    # points not compared: {"layer", "module", "why"} ("only a records it", "shapes differ: ...")
    unpaired: list[dict[str, Any]] = field(default_factory=list)
    engine_a: str = "decoder"  # what ran each side (runs/engines.py)
    engine_b: str = "decoder"
    # the same in words: "cpu (numpy)", or llama.cpp with its KV cache type and attention path
    engine_labels: dict[str, str | None] = field(default_factory=dict)
    # False: an encoder; logits_a/logits_b hold the last hidden states, judged by relative L2
    has_logits: bool = True
    # the module or graph node behind each point, per side: {"node"|"module", "op"|"class", ...}
    nodes: dict[Point, dict[str, Any]] = field(default_factory=dict)
    nodes_a: dict[Point, dict[str, Any]] = field(default_factory=dict)
    # {field: {"a": place, "b": place}}: the GGUF metadata entry stating each differing field
    # ({"key", "file", "offset", "length"}; None where a side's file has none)
    config_places: dict[str, dict[str, Any]] = field(default_factory=dict)

    @property
    def agree(self) -> bool:
        """The logits are equal within float32 noise: top-1 agreement 100 % and KL at most
        verdict.NOISE_KLD nats at every position (without logits: the outputs' relative L2 at
        most verdict.NOISE_REL)."""
        if not self.has_logits:
            return output_agrees(self.logits_a, self.logits_b)
        return logits_agree(self.top1_agreement, self.kld["max"])

    @property
    def first_divergence(self) -> dict[str, Any] | None:
        """Where the runs part, None when they agree (verdict.py): {"kind": "jump" | "drift",
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
        out["sqnr"] = row.get("sqnr")
        out.update(place_in_graphs(self.nodes_a.get((row["layer"], row["module"])),
                                   self.nodes.get((row["layer"], row["module"])), self.places_a.get(row["tensor_a"] or "")))
        out["previous_max"] = largest_before(self.rows, row)
        out.update({k: v for k, v in self.places.get(row["tensor"], {}).items() if k != "tensor"})
        out["explanation"] = explain(row, self.rows, self.config_diff, kind, self.config_places)
        if out.get("attribute"):  # the node is told to compute something else: that, not a weight
            out["explanation"] = out["attribute"]["sentence"]
        start = onset(self.rows)
        if kind == JUMP and start is not None and start is not row:
            out["drift_from"] = {k: start[k] for k in ("layer", "module", "rel_l2")}
        out["sentence"] = divergence_sentence(out, self.rows) + graph_sentence(out, self.engine_a, self.engine_b)
        return out

    @property
    def verdict(self) -> dict[str, str]:
        """{"kind": "agree" | "drift" | "jump", "sentence"}: the comparison's conclusion in words,
        the same in the summary, the CLI and the view."""
        first = self.first_divergence
        if not self.has_logits and first is None:
            return {"kind": AGREE, "sentence": output_sentence(self.rows, self.logits_a, self.logits_b)}
        note = "" if not self.has_logits else top1_note(self.top1_agreement, self.kld["max"], flatness(self.logits_a), self.logits_a.shape[-1])
        sentence = first["sentence"] if first is not None else \
            agreement_sentence(self.rows, self.top1_agreement, self.kld["max"])
        return {"kind": first["kind"] if first is not None else AGREE,
                "sentence": f"{sentence} {note}" if note else sentence}

    @cached_property
    def kl_divergence(self) -> np.ndarray:
        """KL(P_a || P_b) per position, nats (a float64 log-softmax of both logits: computed
        once, not on every look at the verdict)."""
        if not self.has_logits:
            return np.full(self.logits_a.shape[0] if self.logits_a.ndim else 0, np.nan)
        return kl_per_position(self.logits_a, self.logits_b)

    @property
    def kld(self) -> dict[str, float]:
        """{"mean", "median", "p99", "max"} of KL(P_a || P_b) over positions (llama-perplexity's
        --kl-divergence figures; every position counts, the prompt being one chunk)."""
        return kld_summary(self.kl_divergence)

    @property
    def top1_agreement(self) -> float:
        """Share of positions where both runs' most likely next token is the same (NaN without logits)."""
        if not self.has_logits:
            return math.nan
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
        lines = [f"{self.engine_a} (a) against {self.engine_b} (b); {len(self.ids)} tokens; the outputs "
                 "have no logits (an encoder or a graph's own output): judged by their relative L2"] if not self.has_logits else \
            [f"{len(self.ids)} tokens; KLD mean {k['mean']:.6f} median {k['median']:.6f} "
                 f"p99 {k['p99']:.6f} max {k['max']:.6f} nats; top-1 agreement {self.top1_agreement:.1%}"]
        if self.has_logits and (self.engine_a, self.engine_b) != ("decoder", "decoder"):
            lines.insert(0, f"{self.engine_a} (a) against {self.engine_b} (b)")
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
            if first.get("node_b") or first.get("module_a"):
                lines.append(f"  a ({self.engine_a}): {first.get('module_a') or '-'}; b ({self.engine_b}): "
                             f"{first.get('node_b') or '-'} ({first.get('op_b') or '?'})")
        if self.unpaired:
            shown = "; ".join(f"{where(u)}: {u['why']}" for u in self.unpaired[:3])
            more = f" (and {len(self.unpaired) - 3} more)" if len(self.unpaired) > 3 else ""
            lines.append(f"{len(self.unpaired)} point(s) not compared: {shown}{more}")
        if self.config_diff:
            lines.append("configurations differ:")
            for name, va, vb in config_rows(self.config_diff):
                stated = where_text(self.config_places.get(name))
                lines.append(f"  {name}: a {va}, b {vb}" + (f" ({stated})" if stated else ""))
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
         "places": {b's tensor name: {"file", "offset", "length"}}, "places_a": the same for a,
         "unpaired": [{"layer", "module", "why"}]: points not compared,
         "outer": [{"module": "embed"|"final_norm"|"logits", "cosine", "rel_l2", "max_abs", "tensor"}],
         "first_divergence": {...} | None, "kld": {"mean", "median", "p99", "max"},
         "top1_agreement", "perplexity": {"a", "b"} | None, "tokenizer_mismatch": {...} | None,
         "verdict": {"kind", "sentence"}, "config_diff": {field: [a, b]},
         "config_rows": [[field, a's value, b's value] as text], "config_where": [where each
         side's file states it, as text, per config row ("" where neither does)],
         "config_places": {field: {"a", "b": {"key", "file", "offset", "length"} | None}},
         "jump": {"floor", "factor", "noise_rel", "noise_kld", "step_min"},
         "engines": [a's, b's] (runs/engines.py), "has_logits",
         "aligned": [{"layer", "module", "a", "b", "op", "how"}]: what stands for each point on each side}
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
                "places": _bare(self.places), "places_a": _bare(self.places_a), "unpaired": list(self.unpaired),
                "outer": [{"module": r["module"], **{k: finite(r[k]) for k in metrics}, "tensor": r["tensor"]}
                          for r in self.rows if r["layer"] is None],
                "first_divergence": clean(self.first_divergence), "kld": clean(self.kld),
                "top1_agreement": self.top1_agreement, "perplexity": clean(self.perplexity),
                "tokenizer_mismatch": self.tokenizer_mismatch,
                "verdict": self.verdict,
                "config_diff": {k: [_jsonable(a), _jsonable(b)] for k, (a, b) in self.config_diff.items()},
                "config_rows": config_rows(self.config_diff),
                "config_where": [where_text(self.config_places.get(k)) for k in self.config_diff],
                "config_places": self.config_places,
                "engines": [self.engine_a, self.engine_b], "engine_labels": self.engine_labels,
                "has_logits": self.has_logits,
                "aligned": aligned_points(self.nodes_a, self.nodes),
                "jump": {"floor": JUMP_FLOOR, "factor": JUMP_FACTOR, "noise_rel": NOISE_REL, "noise_kld": NOISE_KLD,
                         "step_min": STEP_MIN}}


def _jsonable(v: Any) -> Any:
    if isinstance(v, float):
        return finite(v)
    return v if v is None or isinstance(v, (bool, int, str, list, dict)) else repr(v)


def _bare(places: dict[str, dict[str, Any]]) -> dict[str, dict[str, Any]]:
    return {n: {k: v for k, v in p.items() if k != "tensor"} for n, p in places.items()}
