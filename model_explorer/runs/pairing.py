"""Two runs' points paired as they are computed: each activation of one run is compared with
the other's at the same point and both are dropped, so a comparison holds about one layer.

`together` runs two Sides at once: the leader runs its pass (b, unless only a cannot yield
per layer), and its recorder advances the follower to each point it needs, never past that
point's layer. A side that records a whole pass in one call (llama.cpp's eval callback fires
inside one decode) can lead while our decoder follows it layer by layer.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from ..runtime.decoder import drain
from .metrics import activation_diff
from .side import Point, Side


class Pairing:
    """Pairs the points of two runs. The leading run's recorder compares each of its points with
    the other run's activation at the same point, held in `ref` until then and dropped after.
    With `pull` set (the runs go together), a missing partner is made by advancing the other
    run one layer at a time, never further than the point's own layer: a side that records a
    whole pass in one call can lead while ours follows, holding about one layer.

    A point that only one run records, or whose shapes differ, is `unpaired`, not a NaN row."""

    def __init__(self, lead_is_b: bool = True) -> None:
        self.ref: dict[Point, np.ndarray] = {}
        self.rows: list[dict[str, Any]] = []
        self.unpaired: list[dict[str, Any]] = []
        self.lead_is_b = lead_is_b
        self.pull = None  # advance the other run one step; False once it has ended
        self.pulled = 0   # steps the other run has taken

    def keep(self, layer, module, x: np.ndarray) -> None:
        """The following run's recorder."""
        self.ref[(layer, module)] = x

    def __call__(self, layer, module, x: np.ndarray) -> None:
        key = (layer, module)
        # embed comes with the first step, layer i with step i + 1, the final points at the end
        need = 1 if module == "embed" else (layer + 1 if layer is not None else math.inf)
        while key not in self.ref and self.pull is not None and self.pulled < need and self.pull():
            self.pulled += 1
        other = self.ref.pop(key, None)
        a, b = (other, x) if self.lead_is_b else (x, other)
        if a is not None and b is not None and a.shape != b.shape and a.size == b.size and a.shape[:1] == b.shape[:1]:
            b = b.reshape(a.shape)  # heads split or not ([T, H] against [T, heads, head_dim]): the same values
        if a is None or b is None or a.shape != b.shape:
            self.unpaired.append(_unpaired(key, a, b))
            return
        self.rows.append({"layer": layer, "module": module, **activation_diff(a, b)})

    def finish(self) -> None:
        """What the following run recorded and the leading one never did."""
        for key, x in self.ref.items():
            self.unpaired.append(_unpaired(key, x if self.lead_is_b else None, None if self.lead_is_b else x))
        self.ref.clear()


def _unpaired(key: Point, a: np.ndarray | None, b: np.ndarray | None) -> dict[str, Any]:
    why = ("only b records it" if a is None else "only a records it" if b is None
           else f"shapes differ: a {list(a.shape)}, b {list(b.shape)}")
    return {"layer": key[0], "module": key[1], "why": why}


def together(side_a: Side, side_b: Side, token_ids, progress):
    """Both runs at once: the leader runs (b, unless only a must run its pass in one call) and
    its recorder advances the other run to each point it needs (Pairing)."""
    lead_is_b = side_a.per_layer or not side_b.per_layer
    lead, follow = (side_b, side_a) if lead_is_b else (side_a, side_b)
    cmp = Pairing(lead_is_b=lead_is_b)
    followed = follow.steps(token_ids, cmp.keep, progress=False)  # the leader reports for both
    done: dict[str, np.ndarray] = {}

    def pull() -> bool:
        if "follow" in done:
            return False
        try:
            next(followed)
        except StopIteration as end:
            done["follow"] = end.value
        return True

    cmp.pull = pull
    try:
        logits_lead = drain(lead.steps(token_ids, cmp, progress, "running a and b"))
        while pull():  # the follower's last points (and any the leader never asked for)
            pass
    finally:
        followed.close()
    cmp.pull = None
    cmp.finish()
    logits_follow = done["follow"]
    return (cmp, logits_follow, logits_lead) if lead_is_b else (cmp, logits_lead, logits_follow)
