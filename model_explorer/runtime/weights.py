"""Weights of a decoder model (names per family: layouts.py, experts.py, mla.py): found by name,
dequantized through `ckpt.read`, timed.

Two ways to hold them:
- dequantize at load (default): every matrix becomes float32 once; fastest generation.
- `keep_quantized=True`: layers stay as the file's quantized bytes (memory-mapped) and are
  dequantized one layer at a time during each forward pass; peak memory is about one layer
  plus the embedding table, at the cost of speed.

Every dequantization is recorded in a `DequantReport`: per tensor, the stored dtype, the bytes
it takes in the file, the bytes it takes as float32, and the seconds it took.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import numpy as np

from ..model import families
from ..model.config import ModelConfig, UnsupportedModel
from ..tensors.names import gguf_expert, gguf_part_name, unpermute_qk
from . import experts as moe
from . import layouts, mla
from .dequant_report import DequantReport, DequantRow, RequantRow  # noqa: F401  (found here too)
from .experts import expert_names, is_moe  # noqa: F401

LAYER_PARTS = ("attn_norm", "q", "k", "v", "o", "ffn_norm", "gate", "up", "down")
BIAS_PARTS = ("q_bias", "k_bias", "v_bias")
NORM_PARTS = ("norm", "attn_norm", "ffn_norm", "q_norm", "k_norm", "attn_out_norm", "ffn_out_norm")


def layer_parts(cfg: ModelConfig, layer: int | None = None) -> tuple[str, ...]:
    """The tensors one layer of this model has (the family's features decide); a layer whose
    feed-forward is a mixture of experts has a router instead of gate/up/down (its experts are
    listed by `expert_names`)."""
    parts = [p for p in LAYER_PARTS if not (cfg.post_norms and p in ("attn_norm", "ffn_norm"))]
    if layer is not None and is_moe(cfg, layer):
        parts = [p for p in parts if p not in ("gate", "up", "down")] + ["router"]
    if cfg.fused_projections:  # Phi-3 stores q, k, v as one matrix, and gate, up as another
        parts = [p for p in parts if p not in ("q", "k", "v", "gate", "up")] + ["qkv", "gate_up"]
    if cfg.attention_bias:  # fused projections have one fused bias (GPT-2, NeoX)
        parts += ["qkv_bias"] if cfg.fused_projections else BIAS_PARTS
    if cfg.norm == "layer":
        parts += ["attn_norm_bias", "ffn_norm_bias"]
    if cfg.mlp == "gelu":
        parts += ["gate_up_bias", "down_bias"]
    if cfg.o_bias:
        parts.append("o_bias")
    if cfg.attention_sinks:
        parts.append("sinks")
    if cfg.kv_lora_rank:  # DeepSeek's latent attention in place of q, k, v
        parts = [p for p in parts if p not in ("q", "k", "v", *BIAS_PARTS)] + mla.parts(cfg)
    if cfg.qk_norm:
        parts += ["q_norm", "k_norm"]
    if cfg.post_norms or cfg.sandwich_norms:
        parts += ["attn_out_norm", "ffn_out_norm"]
    return tuple(parts)


# Hugging Face names; MLX conversions (mlx-lm) keep them, GGUF names follow by tensors/names.py.
HF_NAMES = {
    "embed": "model.embed_tokens.weight", "norm": "model.norm.weight", "lm_head": "lm_head.weight",
    "attn_norm": "model.layers.{i}.input_layernorm.weight",
    "q": "model.layers.{i}.self_attn.q_proj.weight", "k": "model.layers.{i}.self_attn.k_proj.weight",
    "v": "model.layers.{i}.self_attn.v_proj.weight", "o": "model.layers.{i}.self_attn.o_proj.weight",
    "q_bias": "model.layers.{i}.self_attn.q_proj.bias", "k_bias": "model.layers.{i}.self_attn.k_proj.bias",
    "v_bias": "model.layers.{i}.self_attn.v_proj.bias", "o_bias": "model.layers.{i}.self_attn.o_proj.bias",
    "q_norm": "model.layers.{i}.self_attn.q_norm.weight", "k_norm": "model.layers.{i}.self_attn.k_norm.weight",
    # OLMo 2 norms the attention's output with the weight Llama norms the MLP's input with
    "attn_out_norm": "model.layers.{i}.post_attention_layernorm.weight",
    "ffn_out_norm": "model.layers.{i}.post_feedforward_layernorm.weight",
    "qkv": "model.layers.{i}.self_attn.qkv_proj.weight", "gate_up": "model.layers.{i}.mlp.gate_up_proj.weight",
    "ffn_norm": "model.layers.{i}.post_attention_layernorm.weight",
    "gate": "model.layers.{i}.mlp.gate_proj.weight", "up": "model.layers.{i}.mlp.up_proj.weight",
    "down": "model.layers.{i}.mlp.down_proj.weight", "sinks": "model.layers.{i}.self_attn.sinks",
}
DESCRIPTIONS = {
    "embed": "token embedding", "norm": "final norm", "lm_head": "output projection",
    "attn_norm": "attention norm", "q": "query projection", "k": "key projection",
    "v": "value projection", "o": "attention output", "q_bias": "query bias", "k_bias": "key bias",
    "v_bias": "value bias", "o_bias": "attention output bias", "q_norm": "query norm",
    "k_norm": "key norm", "attn_out_norm": "attention output norm", "ffn_out_norm": "MLP output norm",
    "qkv": "fused q/k/v projection", "gate_up": "fused MLP gate/up", "ffn_norm": "MLP norm", "gate": "MLP gate", "up": "MLP up", "down": "MLP down",
    "sinks": "attention sinks", **layouts.DESCRIPTIONS,
}


# Stored dtypes that are weights as they are; anything else in a safetensors folder is codes
# that need scales (FP8, int8, packed int32/uint8) and is never run as it is.
FLOAT_DTYPES = ("F32", "F16", "BF16", "F64")


def quant_method(ckpt) -> str | None:
    """config.json's quantization_config quant_method (GPTQ, AWQ, bitsandbytes, fp8, ...)."""
    cfg = ckpt.metadata.get("config.json")
    q = cfg.get("quantization_config") if isinstance(cfg, dict) else None
    method = q.get("quant_method") if isinstance(q, dict) else None
    return method if isinstance(method, str) else None


def scheme_name(info, method: str | None) -> str:
    return info.quant.label if info.quant else str(method or info.dtype)


class Weights:
    """Resolves, checks and dequantizes a model's tensors; hands the forward pass backend arrays.

    `layer(i)` returns {"attn_norm", "qkv", "qkv_bias", "o", "o_bias", "q_norm", "k_norm",
    "attn_out_norm", "ffn_norm", "ffn_out_norm", "gate_up", "down"} (None where the family has no
    such tensor): q, k, v fused into one matrix and gate, up into another, so one matmul does each.
    """

    def __init__(self, ckpt, cfg: ModelConfig, backend, keep_quantized: bool = False,
                 progress: Callable[[int, int, str], Any] | None = None) -> None:
        self.ckpt, self.cfg, self.backend = ckpt, cfg, backend
        self.keep_quantized = keep_quantized
        self._progress = progress
        self.gguf = ckpt.format == "gguf"
        self.report = DequantReport("on_the_fly" if keep_quantized else "load")
        self._rows: dict[str, DequantRow] = {}
        self._check_tensors()
        self._total = self._count_at_load()
        self._read_rope_factors()
        self.embed = self._array("embed")
        self.norm = self._array("norm")
        self.norm_bias = self._array("norm_bias") if cfg.norm == "layer" else None
        self.pos_embed = self._array("pos_embed") if cfg.positions == "learned" else None
        self.lm_head = self.embed if self.tied else self._array("lm_head")
        self._layers = None if keep_quantized else [self._build_layer(i) for i in range(cfg.num_layers)]
        self._progress = None  # load is over; on-the-fly passes do not report progress

    def _read_rope_factors(self) -> None:
        """GGUF Llama 3.x: `rope_freqs.weight` holds one divisor per rotary frequency."""
        name = self.cfg.extra.get("rope_freqs_tensor")
        if name is None:
            return
        info = self.ckpt.tensors[name]
        if tuple(info.shape) != (self.cfg.head_dim // 2,):
            raise UnsupportedModel(f"Tensor {name!r} has shape {list(info.shape)}; RoPE needs one factor per "
                                   f"frequency, [{self.cfg.head_dim // 2}].")
        t0 = time.perf_counter()
        factors = np.asarray(self.ckpt.read(name), dtype=np.float32)
        self.report.add(DequantRow(name, info.label, tuple(info.shape), info.stored_bytes, 4 * info.numel,
                                   time.perf_counter() - t0))
        self.cfg.extra["rope_freq_factors"] = factors

    def _count_at_load(self) -> int:
        """How many tensors the load dequantizes (for progress callbacks)."""
        top = (len(self._top_parts()) + (0 if self.tied else 1)
               + (1 if "rope_freqs_tensor" in self.cfg.extra else 0))
        if self.keep_quantized:
            return top
        return top + sum(len(layer_parts(self.cfg, i)) + (moe.tensor_count(self.cfg, i) if is_moe(self.cfg, i) else 0)
                         for i in range(self.cfg.num_layers))

    # -- names and shapes ----------------------------------------------------------------------

    def name(self, part: str, layer: int | None = None) -> str:
        """The checkpoint's name for a part ("q", "down", "embed"...) of layer `layer`."""
        return part_name(self.cfg, part, layer, self.gguf)

    def _top_parts(self) -> list[str]:
        """The tensors outside the layers, the output projection excepted."""
        return (["embed", "norm"] + (["norm_bias"] if self.cfg.norm == "layer" else [])
                + (["pos_embed"] if self.cfg.positions == "learned" else []))

    @property
    def tied(self) -> bool:
        return self.name("lm_head") not in self.ckpt.tensors

    def _expected_shapes(self) -> dict[str, tuple[int, ...]]:
        c = self.cfg
        return {"embed": (c.vocab_size, c.hidden_size), "lm_head": (c.vocab_size, c.hidden_size),
                "norm": (c.hidden_size,), "attn_norm": (c.hidden_size,), "ffn_norm": (c.hidden_size,),
                "q": (c.q_size, c.hidden_size), "k": (c.kv_size, c.hidden_size),
                "v": (c.kv_size, c.hidden_size), "o": (c.hidden_size, c.num_heads * (c.value_head_dim or c.head_dim)),
                "q_bias": (c.q_size,), "k_bias": (c.kv_size,), "v_bias": (c.kv_size,),
                "o_bias": (c.hidden_size,), "attn_out_norm": (c.hidden_size,), "ffn_out_norm": (c.hidden_size,),
                "qkv": (c.q_size + 2 * c.kv_size, c.hidden_size), "qkv_bias": (c.q_size + 2 * c.kv_size,),
                # a plain GELU MLP holds its up projection where a gated one holds gate and up
                "gate_up": ((1 if c.mlp == "gelu" else 2) * c.intermediate_size, c.hidden_size),
                "gate_up_bias": (c.intermediate_size,), "down_bias": (c.hidden_size,),
                "norm_bias": (c.hidden_size,), "attn_norm_bias": (c.hidden_size,),
                "ffn_norm_bias": (c.hidden_size,), "sinks": (c.num_heads,), **mla.shapes(c), "pos_embed": (c.max_position_embeddings, c.hidden_size),
                "router": (c.experts, c.hidden_size),
                "q_norm": (c.head_dim,) if c.qk_norm == "head" else (c.q_size,),
                "k_norm": (c.head_dim,) if c.qk_norm == "head" else (c.kv_size,),
                "gate": (c.intermediate_size, c.hidden_size), "up": (c.intermediate_size, c.hidden_size),
                "down": (c.hidden_size, c.intermediate_size)}

    def _check_tensors(self) -> None:
        """Every tensor the decoder needs exists with the shape the hyperparameters imply."""
        tensors, shapes = self.ckpt.tensors, self._expected_shapes()
        per_layer = len(layer_parts(self.cfg))
        if self.cfg.num_layers * per_layer > len(tensors):  # before listing names per layer
            raise UnsupportedModel(f"The model says it has {self.cfg.num_layers} layers, but the checkpoint "
                                   f"holds only {len(tensors)} tensors ({per_layer} per layer needed).")
        wanted = [(p, None) for p in self._top_parts()]
        if not self.tied:
            wanted.append(("lm_head", None))
        elif not self.cfg.tie_word_embeddings and self.ckpt.format != "gguf":
            raise UnsupportedModel(f"The checkpoint has no {self.name('lm_head')!r} and config.json "
                                   "does not tie it to the embedding (tie_word_embeddings is false).")
        wanted += [(p, i) for i in range(self.cfg.num_layers) for p in layer_parts(self.cfg, i)]
        missing = [(p, i) for p, i in wanted if self.name(p, i) not in tensors]
        if missing:
            p, i = missing[0]
            where = f" of layer {i}" if i is not None else ""
            more = f" (and {len(missing) - 1} more)" if len(missing) > 1 else ""
            method = quant_method(self.ckpt)
            why = (f" config.json says quant_method {method!r}: its layers were not recognised as "
                   "a scheme the runtime decodes, so it cannot run." if method else "")
            raise UnsupportedModel(f"The checkpoint has no tensor {self.name(p, i)!r} (the "
                                   f"{DESCRIPTIONS[p]}{where}){more}; a {self.cfg.architecture} "
                                   f"model with {self.cfg.num_layers} layers needs it.{why}")
        attention = {self.name(p, i) for p, i in wanted if p in ("q", "k", "v", "qkv", "o", "q_b", "kv_b")}
        named = [(self.name(p, i), shapes[p] if self.gguf else layouts.stored_shape(
            self.cfg, p, i, shapes[p], bool(tensors[self.name(p, i)].quant))) for p, i in wanted]
        for i in range(self.cfg.num_layers):
            if is_moe(self.cfg, i):
                named += (moe.gguf_expected_shapes(self.cfg, i, tensors) if self.gguf
                          else moe.expected_shapes(self.cfg, i, lambda n: n in tensors and bool(tensors[n].quant)))
        for name, shape in named:
            info = tensors.get(name)
            if info is None:
                raise UnsupportedModel(f"The checkpoint has no tensor {name!r}; a {self.cfg.architecture} "
                                       f"model with {self.cfg.experts} experts per layer needs it.")
            self._check_decodable(info)
            if tuple(info.shape) != shape:
                c = self.cfg
                heads = (f" ({c.num_heads} heads and {c.num_kv_heads} key/value heads of head_dim {c.head_dim})"
                         if name in attention else "")
                raise UnsupportedModel(f"Tensor {info.name!r} has shape {list(info.shape)}; the "
                                       f"hyperparameters imply {list(shape)}{heads}: config.json contradicts "
                                       "the checkpoint, so the model is not run.")

    def _check_decodable(self, info) -> None:
        """Refuse, naming the scheme, what would run unscaled: a Hub-quantized tensor the codec
        cannot decode, or codes (FP8, int8, packed ints) that no scheme claimed."""
        if self.gguf:
            return
        method = quant_method(self.ckpt)
        q = info.quant
        if q and not q.codec.startswith("mlx"):
            from ..tensors.read import plan_for

            try:
                plan_for(self.ckpt, info)
            except ValueError as e:
                raise UnsupportedModel(f"{info.name!r} is quantized as {scheme_name(info, method)}, "
                                       f"which the runtime cannot run: {e}") from None
            return
        if not q and info.dtype not in FLOAT_DTYPES:
            said = f" (config.json says quant_method {method!r})" if method else ""
            raise UnsupportedModel(f"{info.name!r} is stored as {info.dtype} codes{said} with no "
                                   "scales applied to it; running it would use unscaled weights, "
                                   f"so the runtime refuses {method or info.dtype} here.")

    # -- dequantization ------------------------------------------------------------------------

    def _read(self, part: str, layer: int | None = None, name: str | None = None) -> np.ndarray:
        """float32 numpy for one tensor, timed and recorded; q/k rows put in Hugging Face order.
        `name`: read this tensor (an expert's) instead of the part's."""
        name = name or self.name(part, layer)
        stacked = gguf_expert(name) if self.gguf else None  # llama.cpp stacks a layer's experts: one row
        info = self.ckpt.tensors[stacked[0] if stacked else name]
        t0 = time.perf_counter()
        raw = self.ckpt.read(info.name, rows=stacked[1]) if stacked else self.ckpt.read(name)
        # llama.cpp's converter already stored GPT-2's Conv1D as [out, in] and NeoX's q/k/v grouped
        a = raw if self.gguf else layouts.to_decoder(self.cfg, part, layer, raw, bool(info.quant))
        if a.dtype != np.float32 or not a.flags.writeable:
            # Read-only arrays are views of the file's memory map: copy them, so the file can
            # close after loading and torch can adopt the array without a warning.
            a = a.astype(np.float32)
        if self.cfg.gguf_qk_permuted and self.gguf and part in ("q", "k", "q_bias", "k_bias"):
            a = unpermute_qk(a, self.cfg.num_heads if part.startswith("q") else self.cfg.num_kv_heads)
        if self.cfg.norm_offset and part in NORM_PARTS:
            a = a + np.float32(self.cfg.norm_offset)  # Gemma stores w and scales by (1 + w)
        seconds = time.perf_counter() - t0
        row = self._rows.get(name)
        if row is None:
            row = self._rows[name] = DequantRow(name, info.label, tuple(a.shape),  # one expert of a stack
                                                info.stored_bytes * a.size // max(1, info.numel), 4 * a.size, seconds)
            self.report.add(row)
            if self._progress is not None:
                self._progress(len(self.report), self._total, name)
        else:
            row.seconds += seconds
            row.calls += 1
        return a

    def _array(self, part: str, layer: int | None = None):
        return self.backend.asarray(self._read(part, layer))

    def _matrix(self, label: str, a: np.ndarray):
        """A layer matrix on the backend; requantized (and recorded) when it holds int8/int4."""
        t0 = time.perf_counter()
        m = self.backend.matrix(a)
        if self.keep_quantized or getattr(self.backend, "weights", "float32") == "float32":
            return m
        kind = getattr(m, "kind", None)
        if kind is None:  # the backend kept it float32: it holds NaN or Inf
            row = RequantRow(label, "float32", tuple(a.shape), 4 * a.size, float("nan"), 0.0)
        else:
            row = RequantRow(label, kind, tuple(a.shape), m.nbytes, m.rel_error, time.perf_counter() - t0)
        self.report.requantized.append(row)
        return m

    def _joined(self, i: int, label: str, parts: tuple[str, ...]):
        """Layer i's matrix made of `parts` stacked by rows (q, k, v -> qkv), on the backend."""
        a = self._read(parts[0], i) if len(parts) == 1 else np.concatenate([self._read(p, i) for p in parts])
        return self._matrix(f"layer {i} {label}", a)

    def _build_layer(self, i: int) -> dict:
        b = self.backend
        sparse = is_moe(self.cfg, i)
        fused = self.cfg.fused_projections
        stacked = matrix_parts(self.cfg)
        qkv = None if self.cfg.kv_lora_rank and not fused else self._joined(i, "qkv", stacked["qkv"])
        gate_up = None if sparse and not fused else self._joined(i, "gate_up", stacked["gate_up"])
        bias = None
        if self.cfg.attention_bias and self.cfg.fused_projections:
            bias = self._array("qkv_bias", i)
        elif self.cfg.attention_bias and not self.cfg.kv_lora_rank:
            bias = b.asarray(np.concatenate([self._read(p, i) for p in BIAS_PARTS]))
        parts = layer_parts(self.cfg, i)

        def maybe(part):
            return self._array(part, i) if part in parts else None

        layer = {"attn_norm": maybe("attn_norm"), "qkv": qkv,
                 "qkv_bias": bias, "o": self._joined(i, "o", stacked["o"]),
                "o_bias": maybe("o_bias"), "q_norm": maybe("q_norm"), "k_norm": maybe("k_norm"),
                "attn_out_norm": maybe("attn_out_norm"), "ffn_norm": maybe("ffn_norm"),
                "ffn_out_norm": maybe("ffn_out_norm"), "attn_norm_bias": maybe("attn_norm_bias"),
                "ffn_norm_bias": maybe("ffn_norm_bias"), "gate_up_bias": maybe("gate_up_bias"),
                "down_bias": maybe("down_bias"), "sinks": maybe("sinks"),
                "gate_up": None if sparse else gate_up,
                "down": None if sparse else self._joined(i, "down", stacked["down"]),
                "router": None, "experts": None, "shared": None, "shared_gate": None}
        if self.cfg.kv_lora_rank:
            layer.update(mla.build(self, i))
        if sparse:
            layer.update(moe.build(self, i))
        return layer

    def layer(self, i: int) -> dict:
        """The backend arrays of layer `i`; dequantized now when `keep_quantized`."""
        if self._layers is not None:
            return self._layers[i]
        return self._build_layer(i)

    def resident_bytes(self) -> int:
        """Bytes of weights held between forward passes (float32, or int8/int4 plus scales)."""
        held = [a for a in (self.embed, self.norm, self.norm_bias, self.pos_embed) if a is not None]
        held += [] if self.tied else [self.lm_head]
        for layer in self._layers or []:
            held += [v for k, v in layer.items() if v is not None and k not in ("experts", "shared")]
            held += [m for pair in (layer.get("experts") or []) + [layer.get("shared")] if pair for m in pair]
        return sum(int(a.nbytes) for a in held)


def part_name(cfg: ModelConfig, part: str, layer: int | None, gguf: bool) -> str:
    """The checkpoint's name for a part ("q", "down", "embed"...) of layer `layer`."""
    if gguf:  # llama.cpp names tensors by role, nearly the same in every architecture
        fam = families.family(cfg.architecture)
        return gguf_part_name(part, layer, fam.gguf_parts if fam else None)
    if part == "router":
        return moe.router_name(cfg, layer)
    # the family's own names (Gemma 2's pre_feedforward_layernorm, GPT-2's, NeoX's, MLA's)
    return layouts.name(cfg, part, layer) or tensor_name(part, layer, gguf)


def matrix_parts(cfg: ModelConfig) -> dict[str, tuple[str, ...]]:
    """A layer's matrices as the decoder holds them, each the stored parts stacked by rows in
    this order (stored fused where the family fuses them, in the order the decoder splits them)."""
    fused = cfg.fused_projections
    return {"qkv": ("qkv",) if fused else ("q", "k", "v"), "o": ("o",),
            "gate_up": ("gate_up",) if fused else ("gate", "up"), "down": ("down",)}


def tensor_name(part: str, layer: int | None, gguf: bool) -> str:
    """The checkpoint's name for a part ("q", "down", "embed"...) of layer `layer`."""
    return gguf_part_name(part, layer) if gguf else HF_NAMES[part].format(i=layer)


def _layer_matrices(ckpt, cfg: ModelConfig):
    gguf = ckpt.format == "gguf"
    for i in range(cfg.num_layers):
        for part in ("q", "k", "v", "o", "gate", "up", "down"):
            info = ckpt.tensors.get(tensor_name(part, i, gguf))
            if info is not None:
                yield info


def layer_bits_per_weight(ckpt, cfg: ModelConfig) -> float | None:
    """Stored bits per weight of the layer matrices, scales and zero points included (Q4_K_M
    ~4.8, GPTQ-4 ~4.1, Q8_0 8.5, F16 16); None when the checkpoint has none of them."""
    stored = count = 0
    for info in _layer_matrices(ckpt, cfg):
        stored += info.stored_bytes
        count += info.numel
    return 8.0 * stored / count if count else None


def layer_labels(ckpt, cfg: ModelConfig) -> set[str]:
    """How the layer matrices are stored ({"BF16"}, {"Q4_K", "Q6_K"}, ...)."""
    return {info.label for info in _layer_matrices(ckpt, cfg)}
