"""What a family's checkpoint holds, from its row (table.py) and the hyperparameters.

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
from typing import Any

from .row import Family


def is_in_out(fam: Family | None, name: str) -> bool:
    """Whether the model's parameter `name` is stored [..., in, out] (the transpose of nn.Linear)."""
    return bool(fam and any(re.search(p, name) for p in fam.in_out))


def stored_shape(fam: Family | None, name: str, shape: tuple[int, ...], quantized: bool) -> tuple[int, ...]:
    """The shape a checkpoint holds for the parameter `name` of `shape`: the same, except that a
    Hub-quantized tensor of an [in, out] parameter is [..., out, in] (see the module's note)."""
    if quantized and len(shape) >= 2 and is_in_out(fam, name):
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


def moe_layers(fam: Family, config: dict, n_layers: int) -> set[int]:
    """The layers whose feed-forward is a mixture of experts."""
    if fam.moe_layers_rule == "first_dense":  # DeepSeek: first_k_dense_replace (and V2's moe_layer_freq)
        first = _int(config.get("first_k_dense_replace")) or 0
        freq = _int(config.get("moe_layer_freq")) or 1
        return {i for i in range(n_layers) if i >= first and i % freq == 0}
    if fam.moe_layers_rule == "sparse_step":  # Qwen2/3-MoE: decoder_sparse_step and mlp_only_layers
        step = _int(config.get("decoder_sparse_step")) or 1
        dense = {i for i in config.get("mlp_only_layers") or [] if isinstance(i, int)}
        return {i for i in range(n_layers) if i not in dense and (i + 1) % step == 0}
    return set(range(n_layers))


def layout(fam: Family, hp: Any, config: dict, max_layers: int) -> dict[str, tuple[int, ...]] | None:
    """Names -> shapes of every tensor a checkpoint of family `fam` holds (Hugging Face naming,
    the model's own orientation), for layers up to `max_layers`; None when a number it needs is
    missing. `hp` is the HParams (its `get(name)`)."""
    h, n_layers, vocab = _int(hp.get("hidden")), _int(hp.get("layers")), _int(hp.get("vocab"))
    heads, kvh, hd = _int(hp.get("heads")), _int(hp.get("kv_heads")), _int(hp.get("head_dim"))
    f = _int(hp.get("intermediate"))
    if fam.intermediate_default_x4 and f is None and h:
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
        out[fam.part_names["pos_embed"]] = (ctx, h)

    def norm(name: str, width: int = h) -> None:
        out[name + ".weight"] = (width,)
        if fam.norm_bias:
            out[name + ".bias"] = (width,)

    def linear(name: str, rows: int, cols: int, bias: bool = False) -> None:
        out[name + ".weight"] = (rows, cols)
        if bias:
            out[name + ".bias"] = (rows,)

    moe = moe_layers(fam, config, min(n_layers, max_layers))
    n_exp = _int(hp.get("experts")) or 0
    if n_exp > MAX_EXPERTS or min(n_layers, max_layers) * (n_exp * 3 + 24) > MAX_ENTRIES:
        return None
    for i in range(min(n_layers, max_layers)):
        p = f"{fam.blocks}{i}."
        if fam.attention == "conv1d":
            norm(_own(fam, "attn_norm", i))
            norm(_own(fam, "ffn_norm", i))
        elif fam.norms != "post":
            norm(p + "input_layernorm")
        if fam.attention != "conv1d":
            norm(p + "post_attention_layernorm")
        if fam.norms == "sandwich":
            norm(p + "pre_feedforward_layernorm")
        if fam.norms in ("sandwich", "post"):
            norm(p + "post_feedforward_layernorm")
        if not _attention(out, fam, i, h, heads, hd, q, kv, qkv_bias, o_bias, linear, hp):
            return None
        if fam.sinks:
            out[p + "self_attn.sinks"] = (heads,)
        if not _feed_forward(out, fam, config, i, h, f, i in moe, mlp_bias, linear, hp):
            return None
    norm(fam.final_norm)
    out[fam.head] = (vocab, h)
    return out


def _own(fam: Family, part: str, i: int) -> str:
    """The family's own name of a layer part (its row's part_names), without ".weight"."""
    return fam.part_names[part].format(i=i).removesuffix(".weight")


def _attention(out, fam, i, h, heads, hd, q, kv, qkv_bias, o_bias, linear, hp) -> bool:
    a = f"{fam.blocks}{i}.self_attn."
    if fam.attention == "conv1d":  # [in, out]
        qkv, o = _own(fam, "qkv", i), _own(fam, "o", i)
        out[qkv + ".weight"], out[qkv + ".bias"] = (h, 3 * h), (3 * h,)
        out[o + ".weight"], out[o + ".bias"] = (h, h), (h,)
        return True
    if fam.attention == "per_head":
        linear(_own(fam, "qkv", i), 3 * h, h, qkv_bias)
        linear(_own(fam, "o", i), h, h, o_bias)
        return True
    if fam.attention == "mla":
        rank_q, rank_kv = _int(hp.get("q_lora_rank")), _int(hp.get("kv_lora_rank"))
        rope, nope, v = (_int(hp.get("qk_rope_head_dim")), _int(hp.get("qk_nope_head_dim")),
                         _int(hp.get("v_head_dim")))
        if not all((rank_kv, rope, nope, v)):
            return False
        if rank_q:
            linear(_own(fam, "q_a", i), rank_q, h, qkv_bias)
            out[fam.part_names["q_a_norm"].format(i=i)] = (rank_q,)
            linear(_own(fam, "q_b", i), heads * (nope + rope), rank_q)
        else:
            linear(a + "q_proj", heads * (nope + rope), h)
        linear(_own(fam, "kv_a", i), rank_kv + rope, h, qkv_bias)
        out[fam.part_names["kv_a_norm"].format(i=i)] = (rank_kv,)
        linear(_own(fam, "kv_b", i), heads * (nope + v), rank_kv)
        linear(a + "o_proj", h, heads * v, o_bias)
        return True
    if fam.attention == "fused":
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


def _feed_forward(out, fam, config, i, h, f, is_moe, mlp_bias, linear, hp) -> bool:
    m = f"{fam.blocks}{i}.mlp."
    if fam.mlp == "conv1d":  # [in, out]
        up, down = _own(fam, "gate_up", i), _own(fam, "down", i)
        out[up + ".weight"], out[up + ".bias"] = (h, f), (f,)
        out[down + ".weight"], out[down + ".bias"] = (f, h), (h,)
        return True
    if fam.mlp == "plain":
        linear(_own(fam, "gate_up", i), f, h, True)
        linear(_own(fam, "down", i), h, f, True)
        return True
    if fam.mlp == "fused_gated":
        linear(m + "gate_up_proj", 2 * f, h)
        linear(m + "down_proj", h, f)
        return True
    n_exp = _int(hp.get("experts"))
    if fam.has_experts and is_moe:
        if n_exp is None:
            return False
        ef = f if fam.expert_width_key == "intermediate_size" else _int(hp.get("moe_intermediate")) or f
        router, gate, up, down = fam.expert_names
        linear(router.format(i=i)[:-len(".weight")], n_exp, h, fam.mlp == "fused_experts")
        if fam.mlp == "fused_experts":  # [experts, in, out], gate and up columns interleaved
            names = {k: v.format(i=i) for k, v in fam.fused_expert_names.items()}
            out[names["gate_up"]] = (n_exp, h, 2 * f)
            out[names["gate_up_bias"]] = (n_exp, 2 * f)
            out[names["down"]] = (n_exp, f, h)
            out[names["down_bias"]] = (n_exp, h)
            return True
        if fam.router == "sigmoid_groups":  # the choice bias
            out[m + "gate.e_score_correction_bias"] = (n_exp,)
        # in the order transformers lists them (Mixtral's w1, w2, w3), so random_model draws alike
        order = ((gate, ef, h), (down, h, ef), (up, ef, h)) if fam.mlp == "experts" else \
            ((gate, ef, h), (up, ef, h), (down, h, ef))
        for e in range(n_exp):
            for template, rows, cols in order:
                linear(template.format(i=i, e=e)[:-len(".weight")], rows, cols)
        width = {"plain": (_int(config.get("n_shared_experts")) or 0) * ef,
                 "gated": _int(config.get("shared_expert_intermediate_size")) or 0}.get(fam.shared_expert, 0)
        if width:  # DeepSeek's n_shared_experts always-on experts; Qwen2-MoE's, with a sigmoid gate
            s_gate, s_up, s_down, s_sigmoid = (n.format(i=i)[:-len(".weight")] if n else None
                                               for n in fam.shared_expert_names)
            linear(s_gate, width, h)
            linear(s_up, width, h)
            linear(s_down, h, width)
            if s_sigmoid:
                linear(s_sigmoid, 1, h)
        return True
    linear(m + "gate_proj", f, h, mlp_bias)
    linear(m + "up_proj", f, h, mlp_bias)
    linear(m + "down_proj", h, f, mlp_bias)
    return True
