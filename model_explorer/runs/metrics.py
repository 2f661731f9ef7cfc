"""The figures of a run comparison: each point's cosine, relative L2, max |a - b| and SQNR, and
the logits' KL divergence per position, its summary as llama-perplexity gives it, perplexity."""

from __future__ import annotations

import math
from typing import Any

import numpy as np


def activation_diff(a: np.ndarray | None, b: np.ndarray) -> dict[str, Any]:
    """cosine, rel_l2 = ||b - a|| / ||a||, max_abs = max |b - a| and sqnr (dB, sqnr()), in float64;
    non-finite values on one side only make rel_l2 and max_abs inf and cosine NaN."""
    out = {"cosine": math.nan, "rel_l2": math.nan, "max_abs": math.nan, "sqnr": math.nan,
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
    out["sqnr"] = sqnr_db(nx, nd)
    return out


SQNR_EPS = float(np.finfo(float).eps)


def sqnr_db(signal_norm: float, noise_norm: float) -> float:
    """Signal-to-quantization-noise ratio in dB as onnxruntime's qdq_loss_debug defines it:
    20 log10(max(||a||, eps) / max(||a - b||, eps)), eps the float64 machine epsilon (so equal
    values give about 313 dB, not infinity)."""
    return 20 * math.log10(max(signal_norm, SQNR_EPS) / max(noise_norm, SQNR_EPS))


def kl_per_position(logits_a: np.ndarray, logits_b: np.ndarray) -> np.ndarray:
    """KL(P_a || P_b) at each position, nats, from log-softmax in float64."""
    la, lb = log_softmax(logits_a), log_softmax(logits_b)
    return np.sum(np.exp(la) * (la - lb), axis=-1)


def log_softmax(logits: np.ndarray) -> np.ndarray:
    x = np.asarray(logits, dtype=np.float64)
    x = x - x.max(axis=-1, keepdims=True)
    return x - np.log(np.exp(x).sum(axis=-1, keepdims=True))


def flatness(logits: np.ndarray) -> float:
    """The mean over positions of the next-token distribution's entropy over its largest possible
    value log(vocabulary): 1 for a uniform distribution (random weights), near 0 for a confident one."""
    x = np.asarray(logits)
    if x.ndim < 2 or x.shape[-1] < 2 or not x.size:
        return 0.0
    lp = log_softmax(x)
    return float(np.mean(-np.sum(np.exp(lp) * lp, axis=-1)) / math.log(x.shape[-1]))


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
