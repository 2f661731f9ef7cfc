"""What a comparison keeps of each side once its run is over (its weights may be gone), and
b's points that its graph could not be aligned to, with the reason (compare_runs)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from ..model.gguf_keys import CONFIG_FIELD_KEYS
from .pairing import Pairing
from .side import Point, Side


@dataclass
class Facts:
    """What the comparison keeps of a side once its run is over (its weights may be gone)."""

    label: str
    config: Any
    gguf: bool | None
    tokens: list[str]
    names: dict[Point, str | None]  # the weight each point depends on most directly
    feeding: dict[Point, list[str]]  # every weight feeding each point
    kinds: dict[str, str]  # how each named weight is stored (F32, Q8_0): rounding, not a fault
    places: dict[str, dict[str, Any]]
    engine: str = "decoder"
    has_logits: bool = True
    nodes: dict[Point, dict[str, Any]] = field(default_factory=dict)  # the node/module behind each point
    engine_label: str | None = None  # the engine in words: its device, llama.cpp's KV cache and attention path
    # ModelConfig field -> where the file holds it ({"key", "file", "offset", "length"}: a GGUF's metadata)
    config_places: dict[str, dict[str, Any]] = field(default_factory=dict)

    @classmethod
    def of(cls, side: Side, ids: list[int], nonfinite: Point | None = None) -> Facts:
        """`side`'s facts; `nonfinite`: the point where its NaN/Inf first appear, which is then
        blamed on the weight that holds one, if one does."""
        feeding = {p: side.weights(p) for p in side.points()}
        names = {p: (w or [None])[0] for p, w in feeding.items()}
        if nonfinite is not None and nonfinite in names:
            names[nonfinite] = side.nonfinite_weight(nonfinite) or names[nonfinite]
        kinds = {n: k for n in names.values() if n and (k := side.kind(n)) is not None}
        places = {n: side.place(n) for n in names.values() if n}
        node = getattr(side, "node", None)
        nodes = {p: got for p in feeding if node is not None and (got := node(p))}
        return cls(side.label, side.config, side.gguf, side.tokens(ids), names, feeding, kinds, places,
                   getattr(side, "engine", "decoder"), getattr(side, "has_logits", True), nodes,
                   getattr(side, "engine_label", None), _config_places(side))


def _config_places(side: Side) -> dict[str, dict[str, Any]]:
    """Where `side`'s file holds each hyperparameter it states (a GGUF's metadata keys)."""
    place = getattr(side, "config_place", None)
    if place is None:
        return {}
    return {f: got for f in CONFIG_FIELD_KEYS if (got := place(f)) is not None}


def why_unaligned(unpaired: list[dict[str, Any]], unaligned: list[dict[str, Any]]) -> None:
    """A point b's graph could not be aligned to says why (align.py), not just "only a records it"."""
    why = {(u["layer"], u["module"]): u["why"] for u in unaligned}
    for u in unpaired:
        reason = why.get((u["layer"], u["module"]))
        if reason and u["why"] == "only a records it":
            u["why"] = f"not aligned in b: {reason}"


def facts_after_run(side_b: Side, cmp: Pairing, token_ids) -> Facts:
    """b's facts after its run, its first NaN/Inf that a does not have blamed on its weight."""
    broken = next((r for r in cmp.rows if r["nonfinite_b"] and not r["nonfinite_a"]), None)
    return Facts.of(side_b, [], None if broken is None else (broken["layer"], broken["module"]))
