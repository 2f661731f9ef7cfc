"""One family, one row: `Family`, every fact the explorer knows about a model family.

A row says what the family is called (Hugging Face `model_type`, the `architectures` class,
the GGUF `general.architecture` llama.cpp writes and reads), where its checkpoint keeps each
tensor (Hugging Face names, and the GGUF names that differ from llama.cpp's shared table), the
config.json keys it reads and the defaults transformers assumes for those left out, and the
features that tell it apart in the decoder (the norm's (1 + w), the sliding-window pattern,
RoPE, the attention and MLP kinds, the router). The readers (config.py, config_gguf.py,
hparams.py), the converter (conversion/gguf_arch.py, gguf_source.py), the decoder's weights,
random_model and the expected-tensor check read rows and never compare family names.

The kinds are words for what the layers are, not family names:
- attention: split (q, k, v apart) | fused (one qkv_proj, Phi-3) | conv1d (GPT-2's c_attn,
  [in, out]) | per_head (one query_key_value grouped [heads, 3, head_dim], NeoX) | mla (DeepSeek's
  latent attention);
- mlp: gated | fused_gated (one gate_up_proj, Phi-3) | conv1d (GPT-2's plain GELU MLP, [in, out])
  | plain (NeoX's GELU MLP) | experts (Mixtral's block_sparse_moe) | sparse_experts (Qwen-MoE's
  mlp.experts, some layers dense) | fused_experts (gpt-oss: every expert in one tensor) |
  routed_experts (DeepSeek: dense leading layers, shared experts);
- window (where config.json's sliding_window applies, as transformers applies it): "" never |
  all | layer_types (the layers layer_types marks, or window_rule's) | if_used (the same, only
  with use_sliding_window) | all_if_used (every layer, only with use_sliding_window);
- window_rule (which layers slide when config.json lists no layer_types): alternate (every
  other, sliding first) | pattern (all but the last of each sliding_window_pattern) | max_window
  (from max_window_layers on) | max_window_alternate (even layers below max_window_layers) |
  nope (the layers without RoPE).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

ATTENTION_KINDS = ("split", "fused", "conv1d", "per_head", "mla")
MLP_KINDS = ("gated", "fused_gated", "conv1d", "plain", "experts", "sparse_experts", "fused_experts",
             "routed_experts")
EXPERT_KINDS = ("experts", "sparse_experts", "fused_experts", "routed_experts")
PLAIN_MLP_KINDS = ("conv1d", "plain")  # a GELU MLP with biases, no gate
WINDOWS = ("", "all", "layer_types", "if_used", "all_if_used")
WINDOW_RULES = ("", "alternate", "pattern", "max_window", "max_window_alternate", "nope")
# A gated MLP's activations, and a plain GELU MLP's (GPT-2's gelu_new is the tanh approximation).
ACTIVATIONS = {"silu": "silu", "swish": "silu", "gelu_pytorch_tanh": "gelu_tanh"}
GELU_ACTIVATIONS = {"gelu": "gelu", "gelu_new": "gelu_tanh", "gelu_pytorch_tanh": "gelu_tanh"}


@dataclass(frozen=True)
class Family:
    label: str  # what a person calls it
    model_types: tuple[str, ...]  # Hugging Face config.json model_type (the first is the row's key)
    causal_lm: str  # the class transformers saves the causal LM as (config.json's "architectures")
    # GGUF general.architecture: the first is what llama.cpp's converter writes (Mistral and
    # Mixtral as "llama"), every one is read as this family (Mixtral: "llama" with experts)
    gguf_archs: tuple[str, ...] = ()
    # -- tensors, Hugging Face naming --
    blocks: str = "model.layers."  # prefix of block N's tensors (N and a dot follow)
    embed: str = "model.embed_tokens.weight"
    final_norm: str = "model.norm"
    head: str = "lm_head.weight"
    attention: str = "split"
    qkv_bias: bool = False  # without config.json's attention_bias (which sets q, k, v and o alike)
    o_bias: bool = False
    bias_from_config: bool = True  # False: attention_bias is ignored (Qwen2's biases are fixed)
    qk_norm: str = ""  # "" | "head" ([head_dim]) | "full" ([heads * head_dim], OLMo 2)
    norms: str = "pre"  # pre: input + post_attention | sandwich: + pre/post_feedforward | post: OLMo 2
    norm_bias: bool = False  # LayerNorm with a bias (GPT-2, NeoX)
    mlp: str = "gated"
    learned_positions: bool = False  # GPT-2's wpe
    sinks: bool = False  # gpt-oss's per-head attention sinks
    in_out: tuple[str, ...] = ()  # patterns of the parameters stored [..., in, out]
    ignore_unexpected: tuple[str, ...] = ()  # buffers old saves hold
    aliases: tuple[tuple[str, str], ...] = ()  # (another name transformers loads, the table's name)
    mtp_layers: bool = False  # multi-token-prediction layers after the last block (not loaded)
    # The decoder's parts ("qkv", "o", "down"...) where the family names them otherwise than
    # Llama does ({i}: the layer)
    part_names: dict[str, str] = field(default_factory=dict)
    # A mixture of experts: (router, expert {e}'s gate, up, down); every expert in one tensor
    # per projection (gpt-oss); the shared expert's (gate, up, down, sigmoid gate or None)
    expert_names: tuple[str | None, ...] = ()
    fused_expert_names: dict[str, str] = field(default_factory=dict)
    shared_expert_names: tuple[str | None, ...] = ()
    # -- tensors, GGUF naming: where llama.cpp names them otherwise for this family --
    gguf_names: dict[str, str] = field(default_factory=dict)  # HF block tail -> GGUF block tail
    gguf_parts: dict[str, str] = field(default_factory=dict)  # decoder part -> GGUF name
    # -- config.json --
    hf_defaults: dict[str, Any] = field(default_factory=dict)  # transformers' defaults (hf_defaults.py)
    hf_renames: tuple[tuple[str, str], ...] = ()  # its own key -> Llama's key (GPT-2's n_embd...)
    refused: tuple[tuple[str, str], ...] = ()  # options the decoder does not implement: (key, what it does)
    intermediate_default_x4: bool = False  # a missing MLP width is 4 x hidden (GPT-2's n_inner)
    full_heads: bool = False  # every head has its own k and v; head_dim is hidden / heads
    experts_key: str = "num_experts"  # the expert count (num_local_experts where it is absent)
    expert_width_key: str = "moe_intermediate_size"
    # -- features --
    norm_offset: float = 0.0  # 1.0: norms scale by (1 + w) (Gemma); llama.cpp stores 1 + w
    embed_scale_sqrt: bool = False  # the embedding times sqrt(hidden) (Gemma)
    query_scalar: bool = False  # attention scales by query_pre_attn_scalar ** -0.5 when set (Gemma)
    multipliers: bool = False  # Granite's embedding, residual, attention and logit multipliers
    attention_multiplier: bool = False  # config.json's attention_multiplier is the attention scale
    softcaps: tuple[str, ...] = ()  # the softcapping keys the model applies (Gemma 2, Gemma 3)
    window: str = ""
    window_rule: str = ""
    sliding_period: int = 0  # alternate / pattern: one full layer in each this many (the default)
    rope_theta_default: float = 10000.0
    local_rope_base: float | None = None  # sliding layers rotate with this base, unscaled (Gemma 3)
    nope_period: int = 0  # every this-many-th layer has no RoPE (SmolLM3's no_rope_layers default)
    parallel_residual: bool = False  # reads use_parallel_residual (NeoX)
    moe_layers_rule: str = ""  # "" every layer | sparse_step (Qwen-MoE) | first_dense (DeepSeek)
    shared_expert: str = ""  # "" | gated (Qwen2-MoE's sigmoid gate) | plain (DeepSeek's n_shared_experts)
    renormalize: bool | None = None  # top-k weights renormalised; None: config.json's norm_topk_prob
    router: str = "softmax"  # softmax | topk_softmax (gpt-oss) | sigmoid_groups (DeepSeek)
    swiglu: tuple[float, float] | None = None  # clamped SwiGLU experts: (limit, alpha) (gpt-oss)
    llama_like: bool = False  # the card calls it the llama family
    # -- GGUF, as llama.cpp writes and runs it --
    gguf_qk_permuted: bool = False  # the converter permutes q/k rows (its LlamaModel subclasses)
    gguf_window: bool = False  # attention.sliding_window means a window to llama.cpp
    gguf_renormalize: bool = True  # llama.cpp renormalises the top-k weights (unless expert_weights_norm)
    gguf_rope_freqs: bool = False  # Llama 3's RoPE scaling written as a rope_freqs tensor
    gguf_to_hf: bool = False  # conversion/gguf_source.py turns its GGUF back into a folder
    gguf_llama_table: bool = False  # expected.py's built-in GGUF table lists its tensors (Llama-shaped)
    gguf_yarn_truncate: bool = True  # False: YaRN without rounding the correction range (gpt-oss)
    gguf_original_context: bool = False  # the converter writes rope.scaling.original_context_length (Phi-3)
    # llama.cpp scales attention by 1/sqrt(hidden / heads) for models of these layer counts (27B)
    gguf_width_scale_layers: tuple[int, ...] = ()

    @property
    def model_type(self) -> str:
        return self.model_types[0]

    @property
    def gguf_arch(self) -> str | None:
        """The architecture llama.cpp's converter writes for it."""
        return self.gguf_archs[0] if self.gguf_archs else None

    @property
    def has_experts(self) -> bool:
        return self.mlp in EXPERT_KINDS

    @property
    def plain_mlp(self) -> bool:
        return self.mlp in PLAIN_MLP_KINDS

    @property
    def tie_default(self) -> bool:
        """transformers' tie_word_embeddings when config.json leaves it out."""
        return bool(self.hf_defaults.get("tie_word_embeddings", False))

    @property
    def activations(self) -> dict[str, str]:
        """config.json activation -> the decoder's, for this family's MLP."""
        return GELU_ACTIVATIONS if self.plain_mlp else ACTIVATIONS

    @property
    def default_activation(self) -> str:
        """The decoder's activation where nothing says (a GGUF states none)."""
        d = self.hf_defaults
        said = d.get("hidden_activation") or d.get("hidden_act") or d.get("activation_function") or "silu"
        return self.activations.get(said, "silu")
