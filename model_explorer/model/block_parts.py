"""Which part of a transformer a stored tensor is, read from its name: the words the block graph
(block_graph.py) builds its nodes from.

A name is cut into its block (`model.layers.3.`, GGUF's `blk.3.`, GPT-2's `transformer.h.3.`,
BERT's `encoder.layer.3.`) and the rest, and the rest is matched against the spellings of each
part in Hugging Face, GGUF (llama.cpp), GPT-2, GPT-NeoX, BERT and DeepSeek (MLA) naming, first
match wins. A quantized tensor's companions (`.scales`, `.biases`, `.qweight`, `.qzeros`,
`.g_idx`, `.weight_scale`...) name the same module, so they land on the same part as its
weight. Where a family's row says the norm after attention is a sandwich or post norm
(families/row.py `norms`), `post_attention_layernorm` is that norm, not the MLP's input norm.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

# The block a name sits in: the stack's prefix, the layer index, the rest. The prefix ends in a
# word that numbers blocks; the last such number in the name wins (a vision tower's blocks too).
BLOCK = re.compile(r"^(?P<prefix>(?:.*\.)?(?:layers|layer|h|blk|blocks|block))\.(?P<i>\d{1,6})\.(?P<rest>.+)$")

# (part, pattern over the rest of a block's name), first match wins: the specific before the general
LAYER_PARTS: tuple[tuple[str, str], ...] = (
    ("shared_gate", r"shared_expert_gate\b|ffn_gate_inp_shexp"),
    ("shared_experts", r"shared_experts?\.|_shexp\b"),
    ("router", r"(?:mlp|block_sparse_moe|moe)\.(?:gate|router)\.|ffn_gate_inp\b|exp_probs_b|e_score_correction"),
    ("experts", r"\bexperts\b|_exps\b"),
    ("q_a_norm", r"q_a_layernorm|attn_q_a_norm"),
    ("kv_a_norm", r"kv_a_layernorm|attn_kv_a_norm"),
    ("q_a", r"q_a_proj|attn_q_a\b"),
    ("q_b", r"q_b_proj|attn_q_b\b"),
    ("kv_a", r"kv_a_proj|attn_kv_a_mqa"),
    ("kv_b", r"kv_b_proj|attn_kv_b\b|attn_k_b\b|attn_v_b\b"),
    ("q_norm", r"q_norm|q_layernorm|attn_q_norm"),
    ("k_norm", r"k_norm|k_layernorm|attn_k_norm"),
    ("qkv", r"qkv_proj|c_attn|query_key_value|attn_qkv|wqkv"),
    ("q", r"q_proj|\bquery\b|attn_q\b|attention\.wq\b"),
    ("k", r"k_proj|\bkey\b|attn_k\b|attention\.wk\b"),
    ("v", r"v_proj|\bvalue\b|attn_v\b|attention\.wv\b"),
    ("o", r"o_proj|attn\.c_proj|attention\.dense|attention\.output\.dense|attn_output|out_proj|attention\.wo\b"),
    ("sinks", r"\bsinks\b"),
    ("rotary", r"rotary_emb|inv_freq"),
    ("attn_out_norm", r"post_attention_norm|attention\.output\.layernorm|post_self_attn_layernorm"),
    ("ffn_out_norm", r"post_feedforward_layernorm|post_ffw_norm|(?<!attention\.)\boutput\.layernorm"),
    ("ffn_norm", r"pre_feedforward_layernorm|ffn_norm|\bln_2\b|post_attention_layernorm"),
    ("attn_norm", r"input_layernorm|attn_norm|\bln_1\b|attention_norm"),
    ("gate_up", r"gate_up_proj"),
    ("gate", r"gate_proj|ffn_gate\b|\bw1\b"),
    ("up", r"up_proj|ffn_up\b|\bw3\b|c_fc|dense_h_to_4h|intermediate\.dense"),
    ("down", r"down_proj|ffn_down\b|\bw2\b|mlp\.c_proj|dense_4h_to_h|\boutput\.dense"),
)
# Outside the blocks: the embedding and what goes with it, the final norm, the head.
TOP_PARTS: tuple[tuple[str, str], ...] = (
    ("type_embed", r"token_type_embeddings"),
    ("pos_embed", r"\bwpe\b|position_embeddings|position_ids|embed_positions"),
    ("embed_norm", r"embeddings\.layernorm|token_embd_norm|embed_norm|emb_ln"),
    ("embed", r"embed_tokens|\bwte\b|word_embeddings|token_embd|embed_in|tok_embeddings"),
    ("final_norm", r"(?:^|\.)norm\.|\bln_f\b|final_layer_?norm|output_norm|final_norm"),
    ("head", r"lm_head|^output\.|embed_out"),
    ("pooler", r"\bpooler\b"),
    ("rope", r"rope_freqs|inv_freq"),
)
_LAYER = [(part, re.compile(p, re.IGNORECASE)) for part, p in LAYER_PARTS]
_TOP = [(part, re.compile(p, re.IGNORECASE)) for part, p in TOP_PARTS]
# A tensor's last word when it is one of a module's tensors, not the module's name
LEAVES = re.compile(r"\.(?:weight|bias|scales|biases|qweight|qzeros|g_idx|scale|weight_scale|weight_zero_point|"
                    r"weight_packed|weight_shape|input_scale|absmax|quant_map|quant_state\.[\w.]+|SCB|"
                    r"weight_format|nested_absmax|nested_quant_map)$")


@dataclass(frozen=True)
class Part:
    """Where a tensor belongs: its stack's prefix ("" outside the blocks), layer (None outside),
    the part's word (LAYER_PARTS, TOP_PARTS) and the module's own name (the tensor's name
    without its leaf: "model.layers.0.self_attn.q_proj")."""

    prefix: str
    layer: int | None
    part: str
    module: str


def module_of(name: str) -> str:
    """The module a tensor belongs to: its name without the leaf words (weight, bias, scales...;
    bitsandbytes writes two: q_proj.weight.absmax)."""
    for _ in range(3):
        cut = LEAVES.sub("", name)
        if cut == name:
            break
        name = cut
    return name


def classify(name: str, sandwich_norms: bool = False) -> Part | None:
    """The part `name` is, or None when no spelling of a part matches it. `sandwich_norms`:
    the family norms a sublayer's output (Gemma 2/3, OLMo 2), so post_attention_layernorm is that
    norm rather than the MLP's input norm."""
    module = module_of(name)
    m = BLOCK.match(name)
    if m is None:
        part = next((p for p, rx in _TOP if rx.search(name)), None)
        return Part("", None, part, module) if part else None
    rest = m["rest"]
    if sandwich_norms and re.search(r"post_attention_layernorm", rest):
        return Part(m["prefix"], int(m["i"]), "attn_out_norm", module)
    part = next((p for p, rx in _LAYER if rx.search(rest)), None)
    return Part(m["prefix"], int(m["i"]), part, module) if part else None
