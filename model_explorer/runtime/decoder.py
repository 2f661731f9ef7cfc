"""The decoder, written once against the array backend (numpy or torch).

One layer: x += o(attention(rope(q), rope(k), v)) over norm(x); then x += mlp(norm(x)).
Attention is grouped-query (each key/value head serves `num_heads // num_kv_heads` query heads)
with a preallocated KV cache, so decoding one token costs one pass over the weights, not one per
position. What differs between families is data in ModelConfig (model/config.py), each feature
one `if` here: RMSNorm or LayerNorm, q/k norms, norms after or around a sublayer, GeGLU, a plain
GELU MLP, learned positions, partial rotary, per-layer windows and RoPE bases, attention sinks,
the parallel residual, embedding/residual/attention/logit scales. DeepSeek's latent attention
(mla.py) makes q, k, v its own way; mixtures of experts are experts.py; RoPE tables rope.py.

Tracing (mx.trace, mx.compare_runs): a `recorder` handed to `steps` is called as
`recorder(layer, module, activation)` at the named points of MODULES (model/decoder_points.py:
layer None for the embedding, final norm and logits); it lives for that pass only, never on the Decoder, so a
pass that stops half way leaves nothing behind; without one, recording costs one test per point.
"""

from __future__ import annotations

import numpy as np

from ..model.config import ModelConfig
from ..model.memory import kv_bytes
from . import experts, mla
from .rope import RopeTables, rotary_dim


class KVCache:
    """Keys and values of every layer, preallocated for `capacity` positions (grown if needed).

    Keys are stored transposed, (kv_heads, head_dim, positions), so q @ K^T reads each head's
    keys as a plain row-major matrix: numpy hands that to BLAS, but not a strided transpose.
    Values are (kv_heads, positions, head_dim).
    """

    def __init__(self, backend, cfg: ModelConfig, capacity: int) -> None:
        self.backend, self.cfg = backend, cfg
        self.capacity = max(1, int(capacity))
        self.keys = [backend.zeros(self._key_shape(self.capacity)) for _ in range(cfg.num_layers)]
        self.values = [backend.zeros(self._value_shape(self.capacity)) for _ in range(cfg.num_layers)]
        self.length = 0

    def _key_shape(self, n: int) -> tuple[int, int, int]:
        return (self.cfg.num_kv_heads, self.cfg.head_dim, n)

    def _value_shape(self, n: int) -> tuple[int, int, int]:
        return (self.cfg.num_kv_heads, n, self.cfg.value_head_dim or self.cfg.head_dim)

    def reserve(self, total: int) -> None:
        """Make room for `total` positions, doubling so appends stay cheap."""
        if total <= self.capacity:
            return
        new, n = max(total, 2 * self.capacity), self.length
        for i in range(self.cfg.num_layers):
            keys, values = self.backend.zeros(self._key_shape(new)), self.backend.zeros(self._value_shape(new))
            keys[:, :, :n] = self.keys[i][:, :, :n]
            values[:, :n] = self.values[i][:, :n]
            self.keys[i], self.values[i] = keys, values
        self.capacity = new

    @property
    def nbytes(self) -> int:
        c = self.cfg  # the one KV formula (model/memory.py), float32
        return int(kv_bytes(c.num_layers * self.capacity, c.num_kv_heads, c.head_dim, c.value_head_dim or c.head_dim, 4))




class Decoder:
    """Runs token ids through the layers. `weights` is a `weights.Weights`."""

    def __init__(self, cfg: ModelConfig, weights, backend) -> None:
        self.cfg, self.weights, self.backend = cfg, weights, backend
        self._ropes = {False: RopeTables(cfg, backend)}
        if cfg.local_rope_theta is not None:  # Gemma 3: sliding layers rotate with a base of their own
            self._ropes[True] = RopeTables(cfg, backend, local=True)
        self._rotary = rotary_dim(cfg)

    def new_cache(self, capacity: int) -> KVCache:
        return KVCache(self.backend, self.cfg, capacity)

    def _rotate(self, x, cos, sin):
        """Rotary embedding, rotate-half convention: pairs (i, i + rotary/2) turn together; with
        partial rotary (Phi-3, NeoX) only the first rotary_dim dims of each head turn."""
        if self._rotary == self.cfg.head_dim:
            return self.backend.rope(x, cos, sin)
        r = self._rotary
        return self.backend.concat([self.backend.rope(x[..., :r], cos, sin), x[..., r:]], -1)

    def forward(self, token_ids, cache: KVCache, last_only: bool = False):
        """Logits (backend array) for `token_ids` appended after what `cache` holds.

        last_only: return only the last position's logits (what generation needs), which
        skips most of the output projection during prefill.
        """
        return drain(self.steps(token_ids, cache, last_only))

    def steps(self, token_ids, cache: KVCache, last_only: bool = False, recorder=None):
        """`forward` one layer at a time: a generator that yields each layer's index when the
        layer is done and returns the logits (two runs go in lock step: runs/compare_runs.py).
        recorder(layer, module, activation) is called at each named point (MODULES)."""
        cfg, b, w = self.cfg, self.backend, self.weights
        T = len(token_ids)
        start = cache.length
        cache.reserve(start + T)
        end = start + T
        ropes = {local: tables(start, T) for local, tables in self._ropes.items()}
        masks = {}  # by whether the layer slides (Gemma 2 alternates)

        def mask_for(i: int):
            slides = self.cfg.sliding_layers[i] if self.cfg.sliding_layers is not None else True
            if slides not in masks:
                masks[slides] = self._mask(start, T, cfg.num_heads // cfg.num_kv_heads,
                                           self.cfg.sliding_window if slides else None)
            return masks[slides]

        rec = recorder
        x = b.embed(w.embed, b.ids(token_ids))
        if cfg.embed_scale != 1.0:
            x = x * float(cfg.embed_scale)
        if cfg.positions == "learned":  # GPT-2: a learned vector per position
            x = x + w.pos_embed[start:end]
        if rec:
            rec(None, "embed", x)
        for i in range(cfg.num_layers):
            layer = w.layer(i)
            h = self._norm(x, layer["attn_norm"], layer.get("attn_norm_bias"))
            if rec:
                rec(i, "attn_norm", h)
            q, k, v = self._qkv(i, layer, h)
            if rec:  # before RoPE: what the projections (and q/k norms) made of this layer's input
                rec(i, "q", q)
                rec(i, "k", k)
                rec(i, "v", v)
            if cfg.positions == "rope" and (cfg.rope_layers is None or cfg.rope_layers[i]):
                local = len(ropes) > 1 and cfg.sliding_layers is not None and cfg.sliding_layers[i]
                cos, sin = ropes[local]
                q, k = self._rotate(q, cos, sin), self._rotate(k, cos, sin)
            attn = self._attend(i, layer, q, k, v, cache, start, mask_for(i))
            out = b.linear(attn, layer["o"], layer["o_bias"])
            if cfg.parallel_residual:  # NeoX: both sublayers read the same x
                x_in, x = x, x + out
            else:
                x = self._residual(x, out, layer["attn_out_norm"])
            if rec:
                rec(i, "attn_out", out)
                rec(i, "attn_residual", x)
            h = self._norm(x_in if cfg.parallel_residual else x, layer["ffn_norm"], layer.get("ffn_norm_bias"))
            if rec:
                rec(i, "ffn_norm", h)
            if layer.get("experts"):
                out = experts.forward(b, cfg, self._mlp, h, layer)
            elif cfg.mlp == "gelu":
                out = self._gelu_mlp(h, layer)
            else:
                out = self._mlp(h, layer["gate_up"], layer["down"], cfg.intermediate_size)
            x = self._residual(x, out, layer["ffn_out_norm"])
            if rec:
                rec(i, "ffn_out", out)
                rec(i, "residual", x)
            del layer, h, q, k, v, attn, out  # nothing of a layer outlives it while the caller holds the step
            yield i
        cache.length = end
        if last_only:
            x = x[T - 1:]
        x = self._norm(x, w.norm, getattr(w, "norm_bias", None))
        if rec:
            rec(None, "final_norm", x)
        logits = b.linear(x, w.lm_head)
        if cfg.final_softcap:
            logits = b.softcap(logits, cfg.final_softcap)
        logits = logits if cfg.logit_scale == 1.0 else logits * float(cfg.logit_scale)
        if rec:
            rec(None, "logits", logits)
        return logits

    def _norm(self, x, weight, bias=None):
        """RMSNorm, or LayerNorm with its bias (GPT-2, NeoX); None: the family has no norm here."""
        if weight is None:
            return x
        if self.cfg.norm == "layer":
            return self.backend.layer_norm(x, weight, bias, self.cfg.rms_norm_eps)
        return self.backend.rms_norm(x, weight, self.cfg.rms_norm_eps)

    def _qkv(self, i: int, layer: dict, h):
        """q (T, heads, head_dim), k (T, kv_heads, head_dim), v (T, kv_heads, head_dim) before
        RoPE, q/k normed where the family says."""
        if self.cfg.kv_lora_rank:  # DeepSeek's latent attention
            return mla.qkv(self, i, layer, h)
        cfg, b, eps = self.cfg, self.backend, self.cfg.rms_norm_eps
        T, nh, nkv, hd, qs, kvs = h.shape[0], cfg.num_heads, cfg.num_kv_heads, cfg.head_dim, cfg.q_size, cfg.kv_size
        qkv = b.linear(h, layer["qkv"], layer["qkv_bias"])
        q, k, v = qkv[:, :qs], qkv[:, qs:qs + kvs], qkv[:, qs + kvs:].reshape(T, nkv, hd)
        if cfg.qk_norm == "full":  # OLMo 2: over the whole projection
            q, k = b.rms_norm(q, layer["q_norm"], eps), b.rms_norm(k, layer["k_norm"], eps)
        elif cfg.qk_norm == "head":  # Qwen3: each head on its own
            q = b.rms_norm(q.reshape(T * nh, hd), layer["q_norm"], eps)
            k = b.rms_norm(k.reshape(T * nkv, hd), layer["k_norm"], eps)
        return q.reshape(T, nh, hd), k.reshape(T, nkv, hd), v

    def _attend(self, i: int, layer: dict, q, k, v, cache: KVCache, start: int, mask):
        """Softmax attention of q over the cached keys and values (k, v appended first):
        (T, heads * value head_dim)."""
        cfg, b = self.cfg, self.backend
        T, nh, nkv, hd, vd = q.shape[0], cfg.num_heads, cfg.num_kv_heads, q.shape[-1], v.shape[-1]
        group, end = nh // nkv, start + q.shape[0]
        keys, values = cache.keys[i], cache.values[i]
        keys[:, :, start:end] = b.transpose(k, (1, 2, 0))
        values[:, start:end] = b.transpose(v, (1, 0, 2))
        # (T, nkv, group, hd) -> (nkv, group * T, hd): one batched matmul per kv head.
        qg = b.transpose(q.reshape(T, nkv, group, hd), (1, 2, 0, 3)).reshape(nkv, group * T, hd)
        scale = cfg.attention_scale if cfg.attention_scale is not None else 1.0 / float(np.sqrt(hd))
        scores = b.matmul(qg, keys[:, :, :end]) * scale
        if cfg.attn_softcap:
            scores = b.softcap(scores, cfg.attn_softcap)
        if mask is not None:
            scores = scores + mask
        if layer.get("sinks") is not None:  # gpt-oss: each head's sink logit joins the softmax, then leaves
            sink = b.zeros((nkv, group, T, 1)) + layer["sinks"].reshape(nkv, group, 1, 1)
            probs = b.softmax(b.concat([scores, sink.reshape(nkv, group * T, 1)], -1))[..., :-1]
        else:
            probs = b.softmax(scores)
        attn = b.matmul(probs, values[:, :end])            # (nkv, group*T, vd)
        return b.transpose(attn.reshape(nkv, group, T, vd), (2, 0, 1, 3)).reshape(T, nh * vd)

    def _mlp(self, h, gate_up, down, inter: int):
        """down(act(gate(h)) * up(h)): SwiGLU, or GeGLU where the family says."""
        b = self.backend
        gu = b.linear(h, gate_up)
        act = b.geglu if self.cfg.activation == "gelu_tanh" else b.swiglu
        return b.linear(act(gu[:, :inter], gu[:, inter:]), down)

    def _gelu_mlp(self, h, layer: dict):
        """down(gelu(up(h) + b) + b): GPT-2 (tanh GELU), NeoX (exact GELU)."""
        b = self.backend
        up = b.linear(h, layer["gate_up"], layer["gate_up_bias"])
        return b.linear(b.gelu(up, self.cfg.activation == "gelu_tanh"), layer["down"], layer["down_bias"])

    def _residual(self, x, out, post_norm):
        """x + out, the sublayer's output normed first (OLMo 2) and scaled (Granite) where the
        family says so."""
        if post_norm is not None:
            out = self.backend.rms_norm(out, post_norm, self.cfg.rms_norm_eps)
        if self.cfg.residual_scale != 1.0:
            out = out * float(self.cfg.residual_scale)
        return x + out

    def _mask(self, start: int, T: int, group: int, window: int | None):
        """Additive mask (group * T, start + T): causal, and a sliding window if given."""
        end = start + T
        if T == 1 and (not window or end <= window):
            return None
        q_pos = np.arange(start, end)[:, None]
        k_pos = np.arange(end)[None, :]
        blocked = k_pos > q_pos
        if window:
            blocked |= k_pos <= q_pos - window
        mask = np.where(blocked, np.float32(-np.inf), np.float32(0.0)).astype(np.float32)
        return self.backend.asarray(np.tile(mask, (group, 1)))


def drain(steps):
    """Run a generator of `Decoder.steps` to its end; its return value (the logits)."""
    while True:
        try:
            next(steps)
        except StopIteration as done:
            return done.value
