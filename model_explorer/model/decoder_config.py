"""The decoder's description: ModelConfig, the one set of hyperparameters and family features the
run cell's forward pass reads, with its self-consistency checks. config.py fills it from a
Hugging Face config.json, config_gguf.py from GGUF metadata.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

ROPE_TYPES = ("default", "linear", "llama3", "dynamic", "yarn")
ROPE_PARAMETERS = {"linear": ("factor",), "dynamic": ("factor",),
                   "llama3": ("factor", "low_freq_factor", "high_freq_factor", "original_max_position_embeddings"),
                   "yarn": ("factor", "original_max_position_embeddings")}

class UnsupportedModel(ValueError):
    """The checkpoint is not a model the run cell can run; the message names the architecture and
    the missing feature, or what in its config contradicts itself."""


@dataclass
class ModelConfig:
    """What the forward pass needs to know; names follow Hugging Face's `LlamaConfig`."""

    architecture: str
    vocab_size: int
    hidden_size: int
    intermediate_size: int
    num_layers: int
    num_heads: int
    num_kv_heads: int
    head_dim: int
    rms_norm_eps: float = 1e-6
    rope_theta: float = 10000.0
    # {"rope_type": "linear" | "llama3", "factor": ..., ...}; None for plain RoPE.
    rope_scaling: dict[str, Any] | None = None
    max_position_embeddings: int = 2048
    attention_bias: bool = False  # q, k and v biases
    o_bias: bool = False  # an output-projection bias (attention_bias: true sets both, except Qwen2's)
    tie_word_embeddings: bool = False
    sliding_window: int | None = None
    # GGUF llama files store q/k rows permuted for llama.cpp's interleaved RoPE.
    gguf_qk_permuted: bool = False
    # -- what tells the families apart (defaults: Llama) --
    qk_norm: str = ""  # "head": RMSNorm of each head's q and k (Qwen3) | "full": of the projections (OLMo 2)
    post_norms: bool = False  # norm the attention and MLP outputs, not their inputs (OLMo 2)
    norm_offset: float = 0.0  # Gemma's norms scale by (1 + w)
    activation: str = "silu"  # the gate's activation: silu (SwiGLU) | gelu_tanh (GeGLU)
    embed_scale: float = 1.0  # Gemma sqrt(hidden), Granite embedding_multiplier
    residual_scale: float = 1.0  # Granite residual_multiplier
    attention_scale: float | None = None  # None: 1/sqrt(head_dim); Granite attention_multiplier
    logit_scale: float = 1.0  # Granite 1/logits_scaling
    rope_layers: list[bool] | None = None  # per layer, whether it rotates (SmolLM3's NoPE layers)
    sandwich_norms: bool = False  # norms before and after each sublayer (Gemma 2)
    attn_softcap: float | None = None  # scores -> cap * tanh(scores / cap) (Gemma 2)
    final_softcap: float | None = None  # the same on the logits
    sliding_layers: list[bool] | None = None  # per layer, whether the sliding window applies
    local_rope_theta: float | None = None  # the RoPE base of sliding layers, plain RoPE (Gemma 3)
    rotary_dim: int | None = None  # None: all of head_dim rotates; else the first rotary_dim (partial)
    fused_projections: bool = False  # qkv_proj and gate_up_proj stored as one matrix each (Phi-3)
    norm: str = "rms"  # rms | layer (LayerNorm with a bias: GPT-2, NeoX; rms_norm_eps is its eps)
    mlp: str = "gated"  # gated: down(act(gate) * up) | gelu: down(gelu(up + b) + b) (GPT-2, NeoX)
    positions: str = "rope"  # rope | learned (GPT-2's wpe added to the embedding)
    parallel_residual: bool = False  # x + attn(ln1(x)) + mlp(ln2(x)) (NeoX use_parallel_residual)
    # mixture of experts (Mixtral, Qwen3-MoE): softmax router, top-k, optionally renormalised
    experts: int = 0
    experts_per_token: int = 0
    expert_intermediate_size: int = 0
    renormalize_top_k: bool = True
    moe_layers: list[bool] | None = None  # per layer, whether its feed-forward is the experts
    shared_expert_size: int = 0  # an MLP every token goes through beside its experts (Qwen2-MoE, DeepSeek)
    shared_expert_gate: bool = False  # Qwen2-MoE scales the shared expert by sigmoid(h . w)
    router: str = "softmax"  # softmax over all, then top-k | topk_softmax: top-k logits, softmax (gpt-oss)
    expert_bias: bool = False  # router and expert biases (gpt-oss)
    swiglu_limit: float | None = None  # clamped SwiGLU experts, (up + 1) * glu (gpt-oss)
    swiglu_alpha: float = 1.702
    attention_sinks: bool = False  # a learned logit per head joins each softmax (gpt-oss)
    # DeepSeek's router: sigmoid scores, a correction bias used only to choose, the best topk_groups
    # of expert_groups groups (by their two best scores), weights times routed_scaling
    expert_groups: int = 1
    topk_groups: int = 1
    routed_scaling: float = 1.0
    # multi-head latent attention (DeepSeek): kv_lora_rank > 0; head_dim is qk_nope + the rotary part
    kv_lora_rank: int = 0
    q_lora_rank: int = 0  # 0: a plain q_proj
    qk_nope_head_dim: int = 0
    value_head_dim: int | None = None  # None: head_dim
    rope_interleave: bool = False  # the rotary dims stored as interleaved pairs
    extra: dict[str, Any] = field(default_factory=dict)

    def features(self) -> list[str]:
        """What this model uses beyond a plain Llama decoder, in words (the Run tab says them)."""
        out = []
        if self.attention_bias:
            out.append("q/k/v biases")
        if self.qk_norm:
            out.append("q/k RMSNorm " + ("per head" if self.qk_norm == "head" else "over the projection"))
        if self.post_norms:
            out.append("norms after attention and MLP")
        if self.norm_offset:
            out.append("(1 + w) norms")
        if self.norm == "layer":
            out.append("LayerNorm with bias")
        if self.mlp == "gelu":
            out.append("GELU MLP" + (" (tanh)" if self.activation == "gelu_tanh" else ""))
        elif self.activation != "silu":
            out.append("GeGLU (tanh GELU)")
        if self.positions == "learned":
            out.append("learned positions")
        if self.parallel_residual:
            out.append("parallel residual")
        if self.embed_scale != 1.0:
            out.append(f"embedding x {self.embed_scale:.4g}")
        if self.residual_scale != 1.0:
            out.append(f"residual x {self.residual_scale:.4g}")
        if self.attention_scale is not None:
            out.append(f"attention scale {self.attention_scale:.4g}")
        if self.logit_scale != 1.0:
            out.append(f"logits x {self.logit_scale:.4g}")
        if self.rope_layers is not None and not all(self.rope_layers):
            out.append(f"no RoPE in {sum(not r for r in self.rope_layers)} of {self.num_layers} layers")
        if self.sandwich_norms:
            out.append("norms before and after attention and MLP")
        if self.attn_softcap:
            out.append(f"attention logit softcap {self.attn_softcap:g}")
        if self.final_softcap:
            out.append(f"final logit softcap {self.final_softcap:g}")
        if self.sliding_window:
            which = ("" if self.sliding_layers is None else
                     f" in {sum(self.sliding_layers)} of {self.num_layers} layers")
            out.append(f"sliding window {self.sliding_window}{which}")
        if self.rope_scaling:
            out.append(f"{self.rope_scaling.get('rope_type')} RoPE scaling")
        if self.local_rope_theta is not None:
            out.append(f"local RoPE base {self.local_rope_theta:g} on sliding layers")
        if self.rotary_dim is not None:
            out.append(f"partial rotary ({self.rotary_dim} of {self.head_dim} dims)")
        if self.fused_projections:
            out.append("fused qkv and gate/up projections" if self.mlp == "gated" else "fused qkv projection")
        if self.experts:
            which = "" if not self.moe_layers or all(self.moe_layers) else \
                f" in {sum(self.moe_layers)} of {self.num_layers} layers"
            out.append(f"{self.experts} experts, top {self.experts_per_token}"
                       f"{' renormalised' if self.renormalize_top_k else ''}{which}")
        if self.router == "topk_softmax":
            out.append("softmax over the top-k router logits" + (" (router bias)" if self.expert_bias else ""))
        if self.swiglu_limit is not None:
            out.append(f"clamped SwiGLU experts (limit {self.swiglu_limit:g}, alpha {self.swiglu_alpha:g})")
        if self.attention_sinks:
            out.append("attention sinks")
        if self.router == "sigmoid_groups":
            out.append(f"sigmoid router with score correction, top {self.topk_groups} of {self.expert_groups} "
                       f"groups, x {self.routed_scaling:g}")
        if self.kv_lora_rank:
            out.append(f"MLA (kv rank {self.kv_lora_rank}" + (f", q rank {self.q_lora_rank}" if self.q_lora_rank
                                                            else "") + ")")
        if self.shared_expert_size:
            out.append("shared expert" + (" with a sigmoid gate" if self.shared_expert_gate else ""))
        return out

    @property
    def q_size(self) -> int:
        return self.num_heads * self.head_dim

    @property
    def kv_size(self) -> int:
        return self.num_kv_heads * self.head_dim

    def validate(self) -> ModelConfig:
        problems = []
        for name in ("vocab_size", "hidden_size", "intermediate_size", "num_layers", "num_heads",
                     "num_kv_heads", "head_dim"):
            value = getattr(self, name)
            if not isinstance(value, int) or value <= 0:
                problems.append(f"{name} must be a positive integer, found {value!r}")
        if not problems and self.num_heads % self.num_kv_heads:
            problems.append(f"num_heads ({self.num_heads}) is not a multiple of num_kv_heads "
                            f"({self.num_kv_heads})")
        if not problems and self.head_dim % 2:
            problems.append(f"head_dim ({self.head_dim}) must be even for rotary embeddings")
        if not self.rope_theta > 0:
            problems.append(f"the RoPE base (rope_theta) must be positive, found {self.rope_theta!r}")
        if not self.rms_norm_eps >= 0:
            problems.append(f"rms_norm_eps must not be negative, found {self.rms_norm_eps!r}")
        if self.sliding_window is not None and (not isinstance(self.sliding_window, int)
                                                or self.sliding_window <= 0):
            problems.append(f"sliding_window must be a positive integer, found {self.sliding_window!r}")
        kind = (self.rope_scaling or {}).get("rope_type")
        if self.rope_scaling and kind not in ROPE_TYPES:
            problems.append(f"rope scaling {kind!r} is not implemented for {self.architecture} (the decoder runs "
                            f"{', '.join(ROPE_TYPES)})")
        for key in ROPE_PARAMETERS.get(kind, ()):
            value = self.rope_scaling.get(key)
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not value > 0:
                problems.append(f"{kind} rope scaling needs a positive {key}, found {value!r}")
        if self.sliding_layers is not None and len(self.sliding_layers) != self.num_layers:
            problems.append(f"layer_types has {len(self.sliding_layers)} entries for {self.num_layers} "
                            "layers")
        if self.experts and not (0 < self.experts_per_token <= self.experts <= 4096
                                 and self.expert_intermediate_size > 0):
            problems.append(f"{self.experts} experts with {self.experts_per_token} per token and "
                            f"expert width {self.expert_intermediate_size} cannot route")
        if self.rotary_dim is not None and not (  # (no head_dim when a file gives no heads)
                self.head_dim and 0 < self.rotary_dim <= self.head_dim and self.rotary_dim % 2 == 0):
            problems.append(f"the rotary part of each head ({self.rotary_dim} of head_dim {self.head_dim}) "
                            "must be a positive even number of dimensions")
        if self.local_rope_theta is not None and not self.local_rope_theta > 0:
            problems.append(f"the sliding layers' RoPE base must be positive, found {self.local_rope_theta!r}")
        if self.router == "sigmoid_groups" and self.experts and not (
                self.expert_groups > 0 and self.experts % self.expert_groups == 0
                and self.experts // self.expert_groups >= 2 and 0 < self.topk_groups <= self.expert_groups
                and self.experts_per_token <= self.topk_groups * (self.experts // self.expert_groups)):
            problems.append(f"{self.experts} experts in n_group {self.expert_groups} groups (topk_group "
                            f"{self.topk_groups}, {self.experts_per_token} per token) cannot route: the groups "
                            "must divide the experts, two or more each, and hold the top-k")
        if self.value_head_dim is not None and self.value_head_dim <= 0:
            problems.append(f"v_head_dim must be a positive integer, found {self.value_head_dim!r}")
        if self.rope_layers is not None and len(self.rope_layers) != self.num_layers:
            problems.append(f"the per-layer RoPE list has {len(self.rope_layers)} entries for "
                            f"{self.num_layers} layers")
        for name in ("embed_scale", "residual_scale", "logit_scale"):
            if not math.isfinite(getattr(self, name)) or getattr(self, name) == 0:
                problems.append(f"{name} must be a finite non-zero number, found {getattr(self, name)!r}")
        if problems:
            raise UnsupportedModel("The model's hyperparameters cannot be used: " + "; ".join(problems) + ".")
        return self


def finite_float(value: Any, name: str) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise UnsupportedModel(f"{name} should be a finite number, found {value!r}.")
    return float(value)
