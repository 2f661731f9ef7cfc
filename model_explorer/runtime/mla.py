"""Multi-head latent attention (DeepSeek-V2/V3), as transformers' DeepseekV3Attention computes it.

q comes from a low-rank pair (q_a_proj, its RMSNorm, q_b_proj) or a plain q_proj; keys and values
from a compressed latent: kv_a_proj_with_mqa gives kv_lora_rank latent dims (RMSNorm-ed, then
kv_b_proj expands them to each head's k_nope and v) and the decoupled rotary key k_pe, one for
every head. Each head's q and k are [nope, rope] in the checkpoint; here the rows are put
[rope, nope] at load, so the decoder's partial rotary (the first rotary_dim dims) turns them, and
where the rotary dims are stored as interleaved pairs (rope_interleave) they are de-interleaved
the same way for q and k: dot products, hence attention, are unchanged by one permutation of
both. The cache holds the expanded per-head keys and values (simple and exact).
"""

from __future__ import annotations

import numpy as np

from ..model.config import ModelConfig
from ..model.config_gguf import GGUF_KV_B_SPLIT

# The parts an MLA layer holds (their names: the family's row, part_names)
PARTS = ("q_a", "q_a_bias", "q_a_norm", "q_b", "kv_a", "kv_a_bias", "kv_a_norm", "kv_b")
DESCRIPTIONS = {"k_b": "key up-projection (per head, transposed)", "v_b": "value up-projection (per head)",
                "q_a": "query down-projection", "q_a_bias": "query down-projection bias",
                "q_a_norm": "query latent norm", "q_b": "query up-projection",
                "kv_a": "key/value latent and rotary key projection", "kv_a_bias": "key/value latent bias",
                "kv_a_norm": "key/value latent norm", "kv_b": "key/value up-projection"}


def parts(cfg: ModelConfig) -> list[str]:
    """What an MLA layer has in place of q, k, v (and their biases)."""
    out = ["q_a", "q_a_norm", "q_b"] if cfg.q_lora_rank else ["q"]
    # a GGUF of newer llama.cpp holds kv_b as k_b ([heads, rank, nope]) and v_b ([heads, v, rank])
    out += ["kv_a", "kv_a_norm"] + (["k_b", "v_b"] if cfg.extra.get(GGUF_KV_B_SPLIT) else ["kv_b"])
    if cfg.attention_bias:
        out += (["q_a_bias"] if cfg.q_lora_rank else []) + ["kv_a_bias"]
    return out


def shapes(cfg: ModelConfig) -> dict[str, tuple[int, ...]]:
    if not cfg.kv_lora_rank:
        return {}
    h, nh, rank, rope = cfg.hidden_size, cfg.num_heads, cfg.kv_lora_rank, cfg.rotary_dim or 0
    return {"q_a": (cfg.q_lora_rank, h), "q_a_bias": (cfg.q_lora_rank,), "q_a_norm": (cfg.q_lora_rank,),
            "q_b": (nh * cfg.head_dim, cfg.q_lora_rank), "q": (nh * cfg.head_dim, h),
            "kv_a": (rank + rope, h), "kv_a_bias": (rank + rope,), "kv_a_norm": (rank,),
            "kv_b": (nh * (cfg.qk_nope_head_dim + cfg.value_head_dim), rank),
            "k_b": (nh, rank, cfg.qk_nope_head_dim), "v_b": (nh, cfg.value_head_dim, rank)}


def _deinterleave(cfg: ModelConfig, rope: np.ndarray, axis: int) -> np.ndarray:
    """(x0, x1, x2, x3, ...) -> (x0, x2, ..., x1, x3, ...) along `axis`, where the checkpoint
    interleaves the rotary pairs; as transformers' apply_rotary_pos_emb_interleave pairs them."""
    if not cfg.rope_interleave:
        return rope
    n = rope.shape[axis]
    return np.take(rope, np.concatenate([np.arange(0, n, 2), np.arange(1, n, 2)]), axis=axis)


def _rope_first(cfg: ModelConfig, a: np.ndarray) -> np.ndarray:
    """q rows per head [nope, rope] -> [rope, nope]."""
    nope = cfg.qk_nope_head_dim
    per_head = a.reshape(cfg.num_heads, cfg.head_dim, *a.shape[1:])
    out = np.concatenate([_deinterleave(cfg, per_head[:, nope:], 1), per_head[:, :nope]], axis=1)
    return np.ascontiguousarray(out.reshape(a.shape))


def _latent_rope(cfg: ModelConfig, a: np.ndarray) -> np.ndarray:
    """kv_a rows (or bias) [latent, rope]: the rope rows de-interleaved where stored interleaved."""
    rank = cfg.kv_lora_rank
    return np.ascontiguousarray(np.concatenate([a[:rank], _deinterleave(cfg, a[rank:], 0)]))


def build(w, i: int) -> dict:
    """The layer's MLA matrices on the backend; `w` is the `weights.Weights` reading them."""
    cfg, b = w.cfg, w.backend
    out = {k: None for k in PARTS}
    out["q"] = None
    if cfg.q_lora_rank:
        out["q_a"] = w._matrix(f"layer {i} q_a", w._read("q_a", i))
        out["q_a_norm"] = w._array("q_a_norm", i)
        out["q_b"] = w._matrix(f"layer {i} q_b", _rope_first(cfg, w._read("q_b", i)))
        if cfg.attention_bias:
            out["q_a_bias"] = w._array("q_a_bias", i)
    else:
        out["q"] = w._matrix(f"layer {i} q", _rope_first(cfg, w._read("q", i)))
    out["kv_a"] = w._matrix(f"layer {i} kv_a", _latent_rope(cfg, w._read("kv_a", i)))
    if cfg.attention_bias:
        out["kv_a_bias"] = b.asarray(_latent_rope(cfg, w._read("kv_a_bias", i)))
    out["kv_a_norm"] = w._array("kv_a_norm", i)
    if cfg.extra.get(GGUF_KV_B_SPLIT):  # llama.cpp's split: per head k_b transposed, then v_b
        k_b, v_b = w._read("k_b", i), w._read("v_b", i)
        kv_b = np.concatenate([k_b.transpose(0, 2, 1), v_b], axis=1).reshape(-1, cfg.kv_lora_rank)
    else:
        kv_b = w._read("kv_b", i)
    out["kv_b"] = w._matrix(f"layer {i} kv_b", kv_b)
    return out


def qkv(decoder, i: int, layer: dict, h):
    """q (T, heads, rope + nope), k likewise, v (T, heads, v_head_dim), before RoPE."""
    cfg, b, eps = decoder.cfg, decoder.backend, decoder.cfg.rms_norm_eps
    T, nh, hd, nope, rank = h.shape[0], cfg.num_heads, cfg.head_dim, cfg.qk_nope_head_dim, cfg.kv_lora_rank
    rope = hd - nope
    if cfg.q_lora_rank:
        q = b.linear(b.rms_norm(b.linear(h, layer["q_a"], layer["q_a_bias"]), layer["q_a_norm"], eps), layer["q_b"])
    else:
        q = b.linear(h, layer["q"])
    q = q.reshape(T, nh, hd)
    latent = b.linear(h, layer["kv_a"], layer["kv_a_bias"])
    kv = b.linear(b.rms_norm(latent[:, :rank], layer["kv_a_norm"], eps), layer["kv_b"])
    kv = kv.reshape(T, nh, nope + cfg.value_head_dim)
    k_pe = b.zeros((T, nh, rope)) + latent[:, rank:].reshape(T, 1, rope)  # one rotary key for every head
    k = b.concat([k_pe, kv[..., :nope]], -1)
    return q, k, kv[..., nope:]
