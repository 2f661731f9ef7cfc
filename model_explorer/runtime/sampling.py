"""Choosing the next token from logits: greedy, or temperature / top-k / top-p sampling."""

from __future__ import annotations

import numpy as np


def choose(logits: np.ndarray, temperature: float = 0.0, top_k: int = 0, top_p: float = 1.0,
           rng: np.random.Generator | None = None) -> int:
    """The next token id. temperature <= 0 is greedy (argmax, deterministic); otherwise the
    logits are divided by the temperature, cut to the `top_k` best (0: all) and to the smallest
    set whose probability reaches `top_p`, then one id is drawn with `rng`."""
    logits = np.asarray(logits, dtype=np.float64).reshape(-1)
    if temperature is None or temperature <= 0:
        return int(np.argmax(logits))
    scaled = logits / float(temperature)
    if top_k and 0 < top_k < scaled.size:
        kth = np.partition(scaled, -top_k)[-top_k]
        scaled = np.where(scaled < kth, -np.inf, scaled)
    probs = np.exp(scaled - scaled.max())
    probs /= probs.sum()
    if top_p is not None and 0 < top_p < 1:
        order = np.argsort(-probs, kind="stable")
        cumulative = np.cumsum(probs[order])
        keep = order[: int(np.searchsorted(cumulative, top_p)) + 1]
        kept = np.zeros_like(probs)
        kept[keep] = probs[keep]
        probs = kept / kept.sum()
    rng = rng if rng is not None else np.random.default_rng()
    return int(rng.choice(probs.size, p=probs))
