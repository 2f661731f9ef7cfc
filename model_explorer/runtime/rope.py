"""Rotary position embeddings as transformers computes them (modeling_rope_utils): the inverse
frequencies of plain, linear, Llama 3, dynamic-NTK and YaRN RoPE over the rotary part of a head,
YaRN's attention factor on cos/sin, and the cos/sin tables the decoder rotates q and k with.

A model may rotate with two sets of frequencies (Gemma 3: plain RoPE with a local base on
sliding layers, the configured scaling on full ones); each is a `RopeTables` of its own.
"""

from __future__ import annotations

import math

import numpy as np

from ..model.config import ModelConfig


def rotary_dim(cfg: ModelConfig) -> int:
    return cfg.rotary_dim or cfg.head_dim


def _plain(base: float, dim: int) -> np.ndarray:
    return 1.0 / (base ** (np.arange(0, dim, 2, dtype=np.int64).astype(np.float32) / dim))


def inverse_frequencies(cfg: ModelConfig, local: bool = False, seq_len: int | None = None) -> np.ndarray:
    """Per-pair rotation speeds. local: the sliding layers' plain RoPE (Gemma 3's local base).
    seq_len: the sequence length dynamic NTK scaling stretches the base for."""
    dim = rotary_dim(cfg)
    if local:
        return _plain(cfg.local_rope_theta, dim).astype(np.float32)
    s = cfg.rope_scaling or {}
    kind = s.get("rope_type")
    inv = _plain(cfg.rope_theta, dim)
    if kind == "linear":
        inv = inv / float(s["factor"])
    elif kind == "dynamic":
        factor, most = float(s["factor"]), cfg.max_position_embeddings
        n = max(seq_len or most, most)
        base = cfg.rope_theta * ((factor * n / most) - (factor - 1)) ** (dim / (dim - 2))
        inv = _plain(base, dim)
    elif kind == "llama3":
        factor, low, high = float(s["factor"]), float(s["low_freq_factor"]), float(s["high_freq_factor"])
        old = float(s["original_max_position_embeddings"])
        wavelen = 2 * math.pi / inv
        low_wavelen, high_wavelen = old / low, old / high
        scaled = np.where(wavelen > low_wavelen, inv / factor, inv)
        smooth = (old / wavelen - low) / (high - low)
        smoothed = (1 - smooth) * scaled / factor + smooth * scaled
        medium = (wavelen >= high_wavelen) & (wavelen <= low_wavelen)
        inv = np.where(medium, smoothed, scaled)
    elif kind == "yarn":
        inv = _yarn(cfg, s, dim)
    factors = cfg.extra.get("rope_freq_factors")
    if factors is not None:  # GGUF rope_freqs: llama.cpp divides each frequency by its factor
        inv = inv / np.asarray(factors, dtype=np.float32)
    return inv.astype(np.float32)


def _yarn(cfg: ModelConfig, s: dict, dim: int) -> np.ndarray:
    """YaRN: interpolated (divided by factor) below the correction range, extrapolated above it,
    a linear ramp between (beta_fast / beta_slow rotations over the original context)."""
    base, factor = cfg.rope_theta, float(s["factor"])
    old = float(s["original_max_position_embeddings"])
    beta_fast, beta_slow = s.get("beta_fast") or 32, s.get("beta_slow") or 1

    def correction_dim(rotations: float) -> float:
        return (dim * math.log(old / (rotations * 2 * math.pi))) / (2 * math.log(base))

    low, high = correction_dim(beta_fast), correction_dim(beta_slow)
    if s.get("truncate", True):
        low, high = math.floor(low), math.ceil(high)
    low, high = max(low, 0), min(high, dim - 1)
    if low == high:
        high += 0.001  # as transformers: no division by zero
    pos = (base ** (np.arange(0, dim, 2).astype(np.float32) / dim)).astype(np.float32)
    ramp = np.clip((np.arange(dim // 2, dtype=np.float32) - low) / (high - low), 0, 1).astype(np.float32)
    extrapolation = (1 - ramp).astype(np.float32)
    return (1.0 / (factor * pos)) * (1 - extrapolation) + (1.0 / pos) * extrapolation


def yarn_mscale(scale: float, mscale: float = 1.0) -> float:
    return 1.0 if scale <= 1 else 0.1 * mscale * math.log(scale) + 1.0


def attention_factor(cfg: ModelConfig) -> float:
    """What cos and sin are multiplied by: YaRN's attention factor (1 for other kinds)."""
    s = cfg.rope_scaling or {}
    if s.get("rope_type") != "yarn":
        return 1.0
    if s.get("attention_factor") is not None:
        return float(s["attention_factor"])
    factor, mscale, mscale_all = float(s["factor"]), s.get("mscale"), s.get("mscale_all_dim")
    if mscale and mscale_all:
        return yarn_mscale(factor, mscale) / yarn_mscale(factor, mscale_all)
    return yarn_mscale(factor)


class RopeTables:
    """cos/sin for a range of positions, shaped (count, 1, rotary_dim // 2), float32 as
    transformers computes them; cached and grown, except under dynamic NTK past the original
    context, where the frequencies depend on the sequence length."""

    def __init__(self, cfg: ModelConfig, backend, local: bool = False) -> None:
        self.cfg, self.backend, self.local = cfg, backend, local
        self.dynamic = not local and (cfg.rope_scaling or {}).get("rope_type") == "dynamic"
        self.factor = 1.0 if local else attention_factor(cfg)
        self._inv = inverse_frequencies(cfg, local)
        self._cos = self._sin = None
        self._len = 0

    def _tables(self, inv: np.ndarray, positions: np.ndarray):
        freqs = positions.astype(np.float32)[:, None] * inv[None, :]
        cos, sin = np.cos(freqs)[:, None, :], np.sin(freqs)[:, None, :]
        if self.factor != 1.0:
            cos, sin = cos * np.float32(self.factor), sin * np.float32(self.factor)
        return self.backend.asarray(cos), self.backend.asarray(sin)

    def __call__(self, start: int, count: int):
        end = start + count
        if self.dynamic and end > self.cfg.max_position_embeddings:
            # transformers recomputes the frequencies for the longest sequence seen, positions
            # already cached keep the rotation they were given
            return self._tables(inverse_frequencies(self.cfg, seq_len=end), np.arange(start, end))
        if end > self._len:
            length = max(end, 2 * self._len, 256)
            self._cos, self._sin = self._tables(self._inv, np.arange(length))
            self._len = length
        return self._cos[start:end], self._sin[start:end]
