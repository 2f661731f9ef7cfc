"""Will it fit: weights, KV cache and a stated margin at a given context, from headers only.

    estimate(ckpt, context=8192, batch=1, kv_dtype="f16", fits="24GB")

- weights as stored (every tensor's bytes, quantization scales included) and as the demo holds
  them (float32, the tied output head shared with the embedding);
- KV cache: 2 × layers × KV heads × head dim × context × batch × bytes per element, with
  grouped-query attention (KV heads, not attention heads), sliding-window layers (they keep at
  most `window` positions), and DeepSeek's multi-head latent attention (one compressed vector
  of kv_lora_rank + qk_rope_head_dim per token and layer, as llama.cpp and vLLM cache it);
- activations of one prefill chunk (two copies of the attention scores chunk × heads × context,
  the causal mask, the MLP's intermediate) and a margin: RUNTIME_FRACTION of weights + cache, plus RUNTIME_BYTES for the
  runtime itself (CUDA context or interpreter);
- given a device size, the largest context that fits.
"""

from __future__ import annotations

import re
from dataclasses import asdict, dataclass
from typing import Any

from ..records import CheckpointRecord
from ..safe_text import escape_deep
from ..units import format_bytes
from .hparams import HParams, read_hparams

KV_BYTES = {"f32": 4.0, "float32": 4.0, "f16": 2.0, "float16": 2.0, "bf16": 2.0, "bfloat16": 2.0,
            "fp8": 1.0, "f8": 1.0, "q8_0": 34 / 32, "q4_0": 18 / 32, "q4_1": 20 / 32, "q5_0": 22 / 32,
            "q5_1": 24 / 32, "iq4_nl": 18 / 32}
RUNTIME_FRACTION = 0.05
RUNTIME_BYTES = 256 * 2**20
PREFILL_CHUNK = 512  # the demo's prefill chunk; transformers prefills whole, which costs more
# The demo: a Python process with numpy, tokenizers and this package imported (measured RSS on
# Linux, CPython 3.11: ~110 MiB) and float32 everything.
DEMO_RUNTIME_BYTES = 110 * 2**20
STANDARD_CONTEXTS = (2048, 8192, 32768)


@dataclass
class MemoryEstimate:
    context: int
    batch: int
    kv_dtype: str
    weights_bytes: int  # as stored
    demo_weights_bytes: int  # float32, as the demo holds them
    kv_bytes: int
    kv_bytes_per_token: float
    kv_formula: str
    activation_bytes: int
    margin_bytes: int
    total_bytes: int  # stored weights + KV + activations + margin
    demo_total_bytes: int  # float32 weights + float32 KV + activations + the demo's runtime
    device_bytes: int | None = None
    fits: bool | None = None
    max_context: int | None = None

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def parse_size(size: str | int | float) -> int:
    """"24GB", "24 GiB", "80G", 24e9 -> bytes (GB = 10^9, GiB = 2^30; a bare G means GiB)."""
    if isinstance(size, (int, float)) and not isinstance(size, bool):
        return int(size)
    m = re.fullmatch(r"\s*([\d.]+)\s*([kmgt]?)(i?)(b?)\s*", str(size), re.I)
    if not m:
        raise ValueError(f"cannot read {size!r} as a size (e.g. '24GB', '80GiB')")
    n, unit, i, b = float(m[1]), m[2].lower(), m[3], m[4]
    power = " kmgt".index(unit) if unit else 0
    base = 1024 if (i or not b) else 1000
    return int(n * base ** power)


def _int(v) -> int | None:
    return v if isinstance(v, int) and not isinstance(v, bool) and v > 0 else None


def kv_bytes(positions: int, kv_heads: int, key_dim: int, value_dim: int, element_bytes: float,
             batch: int = 1) -> float:
    """Bytes of a key/value cache: `positions` (summed over the layers) × kv_heads × (key dim +
    value dim) × batch × bytes per element. The one formula: the estimate below and the
    decoder's own cache (demo/model.py KVCache) both use it. MLA's compressed cache is one
    "head" of kv_lora_rank + qk_rope_head_dim with no separate value."""
    return positions * kv_heads * (key_dim + value_dim) * batch * element_bytes


def kv_layout(hp: HParams) -> dict[str, Any]:
    """Per-layer cache shape: {"layers", "full_layers", "sliding_layers", "window", "kv_heads",
    "key_dim", "value_dim", "per_token" (elements per token per full layer), "formula"}."""
    layers = _int(hp.get("layers"))
    if layers is None:
        raise ValueError("the number of layers is unknown (config.json num_hidden_layers / GGUF block_count)")
    window = _int(hp.get("sliding_window"))
    sliding = hp.get("sliding_layers") if window else 0
    sliding = min(int(sliding or 0), layers)
    rank, rope = _int(hp.get("kv_lora_rank")), _int(hp.get("qk_rope_head_dim"))
    if rank:
        if rope is None:
            rope = _int(hp.get("rope_dims")) or 64
        kv_heads, key_dim, value_dim = 1, rank + rope, 0
        formula = f"layers × (kv_lora_rank {rank} + qk_rope_head_dim {rope}) × context × batch × bytes (MLA)"
    else:
        kvh, hd = _int(hp.get("kv_heads")), _int(hp.get("head_dim"))
        if kvh is None or hd is None:
            raise ValueError("the key/value heads or the head dim are unknown")
        vd = _int(hp.get("v_head_dim")) or hd
        kv_heads, key_dim, value_dim = kvh, hd, vd
        formula = f"layers × 2 × kv_heads {kvh} × head_dim {hd} × context × batch × bytes" if vd == hd else \
            f"layers × kv_heads {kvh} × (key dim {hd} + value dim {vd}) × context × batch × bytes"
    if sliding:
        formula += f"; {sliding} sliding-window layers keep at most {window} positions"
    return {"layers": layers, "full_layers": layers - sliding, "sliding_layers": sliding, "window": window,
            "kv_heads": kv_heads, "key_dim": key_dim, "value_dim": value_dim,
            "per_token": kv_heads * (key_dim + value_dim), "formula": formula}


def kv_cache_bytes(hp: HParams, context: int, batch: int = 1, kv_dtype: str = "f16") -> tuple[int, float, str]:
    """(bytes, bytes per token at this context, formula) of the KV cache."""
    lay = kv_layout(hp)
    el = KV_BYTES.get(kv_dtype.lower())
    if el is None:
        raise ValueError(f"unknown kv_dtype {kv_dtype!r} (one of {', '.join(KV_BYTES)})")
    positions = lay["full_layers"] * context + lay["sliding_layers"] * min(context, lay["window"] or context)
    total = kv_bytes(positions, lay["kv_heads"], lay["key_dim"], lay["value_dim"], el, batch)
    return int(round(total)), total / max(1, context), lay["formula"]


def demo_kv_bytes(hp: HParams, context: int, batch: int = 1) -> int:
    """The float32 cache the demo's decoder allocates: every layer holds every position (no window
    trims it), and MLA's keys and values expanded per head (nope + rope keys, v_head_dim values)."""
    lay = kv_layout(hp)
    heads, nope = _int(hp.get("heads")), _int(hp.get("qk_nope_head_dim"))
    if _int(hp.get("kv_lora_rank")) and heads and nope:
        rope = lay["key_dim"] - _int(hp.get("kv_lora_rank"))
        kvh, key, value = heads, nope + rope, _int(hp.get("v_head_dim")) or nope + rope
    else:
        kvh, key, value = lay["kv_heads"], lay["key_dim"], lay["value_dim"]
    return int(kv_bytes(lay["layers"] * context, kvh, key, value, 4.0, batch))


def stored_bytes(ckpt: CheckpointRecord) -> int:
    """Every tensor's bytes as stored, its quantization components' included (TensorInfo.stored_bytes:
    the one count, as the decoder's dequantization report and the views make it)."""
    return sum(t.stored_bytes for t in ckpt.tensors.values())


def float32_bytes(ckpt: CheckpointRecord) -> int:
    """Every tensor as float32 (what the demo dequantizes to)."""
    return 4 * sum(t.numel for t in ckpt.tensors.values())


def _activations(hp: HParams, context: int, batch: int, chunk: int) -> int:
    """The largest live temporaries of one prefill chunk of `chunk` tokens at `context`: two
    float32 copies of the attention scores (heads × chunk × context: the product and the
    scaled/masked result exist together), the causal mask (query-group × chunk × context), the
    residual stream and MLP intermediate of the chunk, and one row of logits."""
    heads = _int(hp.get("heads")) or 1
    kvh = _int(hp.get("kv_heads")) or heads
    hidden = _int(hp.get("hidden")) or 0
    inter = _int(hp.get("intermediate")) or 4 * hidden
    vocab = _int(hp.get("vocab")) or 0
    c = min(context, chunk)
    scores = c * heads * context * 4
    mask = c * max(1, heads // kvh) * context * 4
    stream = c * (4 * hidden + 3 * inter) * 4
    return int(batch * (2 * scores + mask + stream + vocab * 4))


def estimate(ckpt: CheckpointRecord, context: int | None = None, batch: int = 1, kv_dtype: str = "f16",
             fits: str | int | None = None) -> MemoryEstimate:
    """Memory to run the model at `context` tokens (the model's maximum by default)."""
    hp = read_hparams(ckpt)
    if context is None:
        context = _int(hp.get("context"))
        if context is None:
            raise ValueError("no context given and the model's maximum context is unknown")
    if context <= 0 or batch <= 0:
        raise ValueError("context and batch must be positive")
    kv, per_token, formula = kv_cache_bytes(hp, context, batch, kv_dtype)
    weights = stored_bytes(ckpt)
    act = _activations(hp, context, batch, PREFILL_CHUNK)
    margin = int(RUNTIME_FRACTION * (weights + kv)) + RUNTIME_BYTES
    demo_w = float32_bytes(ckpt)
    demo_kv = demo_kv_bytes(hp, context, batch)
    est = MemoryEstimate(context, batch, kv_dtype, weights, demo_w, kv, per_token, formula, act, margin,
                         weights + kv + act + margin, demo_w + demo_kv + act + DEMO_RUNTIME_BYTES)
    if fits is not None:
        device = parse_size(fits)
        est.device_bytes, est.fits = device, est.total_bytes <= device
        est.max_context = max_context(ckpt, device, batch, kv_dtype)
    return est


def llamacpp_text(ckpt: CheckpointRecord, context: int) -> str:
    """What llama.cpp will hold for a run at `context` tokens, in words: the file mapped (its pages
    read as each block is reached, shared with the page cache), its f16 KV cache and the compute
    buffers of one prefill chunk (an estimate)."""
    hp = read_hparams(ckpt)
    kv, _, _ = kv_cache_bytes(hp, context, 1, "f16")
    act = _activations(hp, context, 1, PREFILL_CHUNK)
    weights = stored_bytes(ckpt)
    return (f"the mapped file {format_bytes(weights)} (read as each block is reached, shared with the page "
            f"cache), KV cache {format_bytes(kv)} (f16, {context:,} tokens), compute buffers about "
            f"{format_bytes(act)}: about {format_bytes(weights + kv + act)} in all")


def max_context(ckpt: CheckpointRecord, device_bytes: int, batch: int = 1, kv_dtype: str = "f16") -> int:
    """The largest context (up to the model's own maximum, or 2^24) whose estimate fits; 0 if none."""
    hp = read_hparams(ckpt)
    top = _int(hp.get("context")) or 2**24
    lo, hi = 0, top
    while lo < hi:  # the estimate grows with context: bisect
        mid = (lo + hi + 1) // 2
        if estimate(ckpt, mid, batch, kv_dtype).total_bytes <= device_bytes:
            lo = mid
        else:
            hi = mid - 1
    return lo


def table(ckpt: CheckpointRecord, contexts: tuple[int, ...] | None = None, batch: int = 1,
          kv_dtype: str = "f16") -> list[dict[str, Any]]:
    """One row per context: 2k, 8k, 32k (those within the model's maximum) and the maximum."""
    hp = read_hparams(ckpt)
    top = _int(hp.get("context"))
    if contexts is None:
        contexts = tuple(c for c in STANDARD_CONTEXTS if top is None or c < top) + ((top,) if top else ())
    rows = []
    for c in contexts:
        e = estimate(ckpt, c, batch, kv_dtype)
        rows.append({"context": c, "weights_bytes": e.weights_bytes, "kv_bytes": e.kv_bytes,
                     "activation_bytes": e.activation_bytes, "margin_bytes": e.margin_bytes,
                     "total_bytes": e.total_bytes, "demo_total_bytes": e.demo_total_bytes})
    return rows


def table_frame(ckpt: CheckpointRecord, **kwargs):
    """`table` as a pandas DataFrame with MiB columns."""
    import pandas as pd

    df = pd.DataFrame(escape_deep(table(ckpt, **kwargs)))
    for col in [c for c in df.columns if c.endswith("_bytes")]:
        df[col.replace("_bytes", "_mib")] = df.pop(col) / 2**20
    return df
