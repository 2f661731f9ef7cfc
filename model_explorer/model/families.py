"""The model families the explorer knows without transformers: what each one's checkpoint holds.

A family is a row of data, not code: where its blocks live (`model.layers.N.`, GPT-2's
`transformer.h.N.`, NeoX's `gpt_neox.layers.N.`), how attention is stored (separate q/k/v,
Phi-3's fused `qkv_proj`, GPT-2's Conv1D `c_attn`, NeoX's `query_key_value`, DeepSeek's
low-rank MLA), which norms a block has and where, which biases, and the feed-forward (gated,
fused gate/up, plain GELU MLP, or a mixture of experts with its router). `layout(hp, config)`
turns one row and the hyperparameters into the tensor names and shapes the checkpoint must
have, in Hugging Face naming: what the expected-tensor check uses at open, with no torch.
tests/model/test_families.py holds every row equal to transformers' own build on the meta device.

Orientation. nn.Linear stores [out, in]; a few parameters are stored [in, out]: GPT-2's Conv1D
weights and the fused expert tensors of gpt-oss and Llama 4 ([experts, in, out]). A Hub-quantized
layer's logical tensor is always [..., out, in] (quantization groups run along the input, so the
codecs decode rows of outputs), whatever the model's parameter is; `stored_shape` says what a
quantized tensor of an [in, out] parameter looks like, and the expected-tensor check, the
demo and the diff go through it.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from .hparams import HParams


@dataclass(frozen=True)
class Family:
    label: str
    blocks: str = "model.layers."  # prefix of block N's tensors (N and a dot follow)
    embed: str = "model.embed_tokens.weight"
    final_norm: str = "model.norm"
    head: str = "lm_head.weight"
    attention: str = "split"  # split | phi3 | gpt2 | neox | mla
    qkv_bias: bool = False  # without config.json's attention_bias (which sets q, k, v and o alike)
    o_bias: bool = False
    bias_from_config: bool = True  # False: attention_bias is ignored (Qwen2's biases are fixed)
    qk_norm: str = ""  # "" | "head" ([head_dim]) | "full" ([heads * head_dim], OLMo 2)
    norms: str = "pre"  # pre: input + post_attention | sandwich: + pre/post_feedforward | post: OLMo 2
    norm_bias: bool = False  # LayerNorm with a bias (GPT-2, NeoX)
    mlp: str = "gated"  # gated | phi3 | gpt2 | neox | mixtral | moe | gpt_oss | deepseek
    learned_positions: bool = False  # GPT-2's wpe
    sinks: bool = False  # gpt-oss's per-head attention sinks
    in_out: tuple[str, ...] = field(default_factory=tuple)  # parameters stored [..., in, out]
    ignore_unexpected: tuple[str, ...] = field(default_factory=tuple)  # buffers old saves hold
    aliases: tuple[tuple[str, str], ...] = ()  # (another name transformers loads, the table's name)


FAMILIES: dict[str, Family] = {
    "llama": Family("Llama"),
    "mistral": Family("Mistral"),
    "qwen2": Family("Qwen2", qkv_bias=True, bias_from_config=False),
    "qwen3": Family("Qwen3", qk_norm="head"),
    "gemma": Family("Gemma"),
    "gemma2": Family("Gemma 2", norms="sandwich"),
    "gemma3_text": Family("Gemma 3", qk_norm="head", norms="sandwich"),
    "phi3": Family("Phi-3", attention="phi3", mlp="phi3"),
    "olmo2": Family("OLMo 2", qk_norm="full", norms="post"),
    "smollm3": Family("SmolLM3"),
    "granite": Family("Granite"),
    "mixtral": Family("Mixtral", mlp="mixtral"),
    "qwen2_moe": Family("Qwen2-MoE", qkv_bias=True, mlp="moe", bias_from_config=False),
    "qwen3_moe": Family("Qwen3-MoE", qk_norm="head", mlp="moe"),
    "gpt2": Family("GPT-2", blocks="transformer.h.", embed="transformer.wte.weight",
                   final_norm="transformer.ln_f", attention="gpt2", qkv_bias=True, o_bias=True,
                   norm_bias=True, mlp="gpt2", learned_positions=True,
                   in_out=(r"\.attn\.c_attn\.weight$", r"\.attn\.c_proj\.weight$",
                           r"\.mlp\.c_fc\.weight$", r"\.mlp\.c_proj\.weight$"),
                   ignore_unexpected=(r"attn\.bias", r"crossattention\.bias")),  # as transformers 5
    "gpt_neox": Family("GPT-NeoX", blocks="gpt_neox.layers.", embed="gpt_neox.embed_in.weight",
                       final_norm="gpt_neox.final_layer_norm", head="embed_out.weight",
                       attention="neox", qkv_bias=True, o_bias=True, norm_bias=True, mlp="neox",
                       ignore_unexpected=(r"attention\.masked_bias", r"attention\.bias"),
                       aliases=(("lm_head.weight", "embed_out.weight"),)),
    "gpt_oss": Family("gpt-oss", qkv_bias=True, o_bias=True, mlp="gpt_oss", sinks=True,
                      in_out=(r"\.mlp\.experts\.gate_up_proj$", r"\.mlp\.experts\.down_proj$")),
    "deepseek_v3": Family("DeepSeek-V3", attention="mla", mlp="deepseek"),
}

# The class transformers saves each family's causal LM as (config.json's "architectures").
CAUSAL_LM = {"llama": "LlamaForCausalLM", "mistral": "MistralForCausalLM", "qwen2": "Qwen2ForCausalLM",
             "qwen3": "Qwen3ForCausalLM", "gemma": "GemmaForCausalLM", "gemma2": "Gemma2ForCausalLM",
             "gemma3_text": "Gemma3ForCausalLM", "phi3": "Phi3ForCausalLM", "olmo2": "Olmo2ForCausalLM",
             "smollm3": "SmolLM3ForCausalLM", "granite": "GraniteForCausalLM", "mixtral": "MixtralForCausalLM",
             "qwen2_moe": "Qwen2MoeForCausalLM", "qwen3_moe": "Qwen3MoeForCausalLM", "gpt2": "GPT2LMHeadModel",
             "gpt_neox": "GPTNeoXForCausalLM", "gpt_oss": "GptOssForCausalLM",
             "deepseek_v3": "DeepseekV3ForCausalLM"}
# Families whose norms scale by (1 + w), not w (their neutral norm weight is 0).
OFFSET_NORMS = ("gemma", "gemma2", "gemma3_text")


def family(model_type: str | None) -> Family | None:
    return FAMILIES.get((model_type or "").lower())


def is_in_out(model_type: str | None, name: str) -> bool:
    """Whether the model's parameter `name` is stored [..., in, out] (the transpose of nn.Linear)."""
    fam = family(model_type)
    return bool(fam and any(re.search(p, name) for p in fam.in_out))


def stored_shape(model_type: str | None, name: str, shape: tuple[int, ...], quantized: bool
                 ) -> tuple[int, ...]:
    """The shape a checkpoint holds for the parameter `name` of `shape`: the same, except that a
    Hub-quantized tensor of an [in, out] parameter is [..., out, in] (see the module's note)."""
    if quantized and len(shape) >= 2 and is_in_out(model_type, name):
        return (*shape[:-2], shape[-1], shape[-2])
    return shape


# A header's numbers never size a table beyond these (the largest released models stay well inside).
MAX_DIM = 1 << 22
MAX_EXPERTS = 4096
MAX_ENTRIES = 2_000_000


def attention_biases(fam: Family, config: dict) -> tuple[bool, bool]:
    """(q/k/v biases, o bias): config.json's attention_bias sets both where the family reads it."""
    said = config.get("attention_bias")
    if isinstance(said, bool) and fam.bias_from_config:
        return said, said
    return fam.qkv_bias, fam.o_bias


def _int(v) -> int | None:
    return v if isinstance(v, int) and not isinstance(v, bool) and 0 < v <= MAX_DIM else None


def _moe_layers(config: dict, n_layers: int, kind: str) -> set[int]:
    """The layers whose feed-forward is a mixture of experts."""
    if kind == "deepseek":
        first = _int(config.get("first_k_dense_replace")) or 0
        freq = _int(config.get("moe_layer_freq")) or 1
        return {i for i in range(n_layers) if i >= first and i % freq == 0}
    if kind == "moe":  # Qwen2/3-MoE: decoder_sparse_step and mlp_only_layers
        step = _int(config.get("decoder_sparse_step")) or 1
        dense = {i for i in config.get("mlp_only_layers") or [] if isinstance(i, int)}
        return {i for i in range(n_layers) if i not in dense and (i + 1) % step == 0}
    return set(range(n_layers))


def layout(hp: HParams, config: dict, max_layers: int) -> dict[str, tuple[int, ...]] | None:
    """Names -> shapes of every tensor a checkpoint of this family holds (Hugging Face naming,
    the model's own orientation), for layers up to `max_layers`; None when the family is not
    one of FAMILIES or a number it needs is missing."""
    fam = family(hp.model_type)
    if fam is None:
        return None
    h, n_layers, vocab = _int(hp.get("hidden")), _int(hp.get("layers")), _int(hp.get("vocab"))
    heads, kvh, hd = _int(hp.get("heads")), _int(hp.get("kv_heads")), _int(hp.get("head_dim"))
    f = _int(hp.get("intermediate"))
    if fam.mlp in ("gpt2",) and f is None and h:
        f = 4 * h  # n_inner: null means 4 x n_embd
    if not all((h, n_layers, vocab, heads, kvh, hd, f)):
        return None
    config = config.get("text_config") if isinstance(config.get("text_config"), dict) else config
    qkv_bias, o_bias = attention_biases(fam, config)
    mlp_bias = bool(config.get("mlp_bias", False))
    q, kv = heads * hd, kvh * hd
    out: dict[str, tuple[int, ...]] = {fam.embed: (vocab, h)}
    if fam.learned_positions:
        ctx = _int(hp.get("context"))
        if ctx is None:
            return None
        out["transformer.wpe.weight"] = (ctx, h)

    def norm(name: str, width: int = h) -> None:
        out[name + ".weight"] = (width,)
        if fam.norm_bias:
            out[name + ".bias"] = (width,)

    def linear(name: str, rows: int, cols: int, bias: bool = False) -> None:
        out[name + ".weight"] = (rows, cols)
        if bias:
            out[name + ".bias"] = (rows,)

    moe = _moe_layers(config, min(n_layers, max_layers), fam.mlp)
    n_exp = _int(hp.get("experts")) or 0
    if n_exp > MAX_EXPERTS or min(n_layers, max_layers) * (n_exp * 3 + 24) > MAX_ENTRIES:
        return None
    for i in range(min(n_layers, max_layers)):
        p = f"{fam.blocks}{i}."
        if fam.attention == "gpt2":
            norm(p + "ln_1")
            norm(p + "ln_2")
        elif fam.norms != "post":
            norm(p + "input_layernorm")
        if fam.attention in ("split", "phi3", "neox", "mla"):
            norm(p + "post_attention_layernorm")
        if fam.norms == "sandwich":
            norm(p + "pre_feedforward_layernorm")
        if fam.norms in ("sandwich", "post"):
            norm(p + "post_feedforward_layernorm")
        if not _attention(out, fam, config, p, h, heads, hd, q, kv, qkv_bias, o_bias, linear, norm, hp):
            return None
        if fam.sinks:
            out[p + "self_attn.sinks"] = (heads,)
        if not _feed_forward(out, fam, config, p, h, f, i in moe, mlp_bias, linear, hp):
            return None
    norm(fam.final_norm)
    out[fam.head] = (vocab, h)
    return out


def _attention(out, fam, config, p, h, heads, hd, q, kv, qkv_bias, o_bias, linear, norm, hp) -> bool:
    a = p + "self_attn."
    if fam.attention == "gpt2":  # Conv1D: [in, out]
        out[p + "attn.c_attn.weight"], out[p + "attn.c_attn.bias"] = (h, 3 * h), (3 * h,)
        out[p + "attn.c_proj.weight"], out[p + "attn.c_proj.bias"] = (h, h), (h,)
        return True
    if fam.attention == "neox":
        linear(p + "attention.query_key_value", 3 * h, h, qkv_bias)
        linear(p + "attention.dense", h, h, o_bias)
        return True
    if fam.attention == "mla":
        rank_q, rank_kv = _int(hp.get("q_lora_rank")), _int(hp.get("kv_lora_rank"))
        rope, nope, v = (_int(hp.get("qk_rope_head_dim")), _int(hp.get("qk_nope_head_dim")),
                         _int(hp.get("v_head_dim")))
        if not all((rank_kv, rope, nope, v)):
            return False
        if rank_q:
            linear(a + "q_a_proj", rank_q, h, qkv_bias)
            out[a + "q_a_layernorm.weight"] = (rank_q,)
            linear(a + "q_b_proj", heads * (nope + rope), rank_q)
        else:
            linear(a + "q_proj", heads * (nope + rope), h)
        linear(a + "kv_a_proj_with_mqa", rank_kv + rope, h, qkv_bias)
        out[a + "kv_a_layernorm.weight"] = (rank_kv,)
        linear(a + "kv_b_proj", heads * (nope + v), rank_kv)
        linear(a + "o_proj", h, heads * v, o_bias)
        return True
    if fam.attention == "phi3":
        linear(a + "qkv_proj", q + 2 * kv, h)
    else:
        linear(a + "q_proj", q, h, qkv_bias)
        linear(a + "k_proj", kv, h, qkv_bias)
        linear(a + "v_proj", kv, h, qkv_bias)
    linear(a + "o_proj", h, q, o_bias)
    if fam.qk_norm:
        out[a + "q_norm.weight"] = (hd,) if fam.qk_norm == "head" else (q,)
        out[a + "k_norm.weight"] = (hd,) if fam.qk_norm == "head" else (kv,)
    return True


def _feed_forward(out, fam, config, p, h, f, is_moe, mlp_bias, linear, hp) -> bool:
    m = p + "mlp."
    if fam.mlp == "gpt2":  # Conv1D: [in, out]
        out[m + "c_fc.weight"], out[m + "c_fc.bias"] = (h, f), (f,)
        out[m + "c_proj.weight"], out[m + "c_proj.bias"] = (f, h), (h,)
        return True
    if fam.mlp == "neox":
        linear(m + "dense_h_to_4h", f, h, True)
        linear(m + "dense_4h_to_h", h, f, True)
        return True
    if fam.mlp == "phi3":
        linear(m + "gate_up_proj", 2 * f, h)
        linear(m + "down_proj", h, f)
        return True
    n_exp = _int(hp.get("experts"))
    if fam.mlp in ("mixtral", "moe", "gpt_oss", "deepseek") and is_moe:
        if n_exp is None:
            return False
        ef = _int(hp.get("moe_intermediate")) or f
        if fam.mlp == "mixtral":
            s = p + "block_sparse_moe."
            linear(s + "gate", n_exp, h)
            for e in range(n_exp):
                linear(s + f"experts.{e}.w1", f, h)
                linear(s + f"experts.{e}.w2", h, f)
                linear(s + f"experts.{e}.w3", f, h)
            return True
        if fam.mlp == "gpt_oss":
            linear(m + "router", n_exp, h, True)
            out[m + "experts.gate_up_proj"] = (n_exp, h, 2 * f)
            out[m + "experts.gate_up_proj_bias"] = (n_exp, 2 * f)
            out[m + "experts.down_proj"] = (n_exp, f, h)
            out[m + "experts.down_proj_bias"] = (n_exp, h)
            return True
        linear(m + "gate", n_exp, h)
        if fam.mlp == "deepseek":
            out[m + "gate.e_score_correction_bias"] = (n_exp,)
        for e in range(n_exp):
            linear(m + f"experts.{e}.gate_proj", ef, h)
            linear(m + f"experts.{e}.up_proj", ef, h)
            linear(m + f"experts.{e}.down_proj", h, ef)
        shared = _int(config.get("n_shared_experts"))
        if fam.mlp == "deepseek" and shared:
            linear(m + "shared_experts.gate_proj", ef * shared, h)
            linear(m + "shared_experts.up_proj", ef * shared, h)
            linear(m + "shared_experts.down_proj", h, ef * shared)
        shared_f = _int(config.get("shared_expert_intermediate_size"))
        if fam.mlp == "moe" and shared_f:  # Qwen2-MoE's gated shared expert
            linear(m + "shared_expert.gate_proj", shared_f, h)
            linear(m + "shared_expert.up_proj", shared_f, h)
            linear(m + "shared_expert.down_proj", h, shared_f)
            linear(m + "shared_expert_gate", 1, h)
        return True
    linear(m + "gate_proj", f, h, mlp_bias)
    linear(m + "up_proj", f, h, mlp_bias)
    linear(m + "down_proj", h, f, mlp_bias)
    return True
