"""Tiny models for the model-layer tests, each a folder built in the test (no downloads).

`tiny_cfg` is a 2-layer Llama config.json with grouped-query attention; `tiny_state` random
float32 weights under Hugging Face names; `write_folder` saves config.json + model.safetensors
(+ a byte-level tokenizer.json of `tokens` tokens); `write_gguf` the same model as a GGUF.
"""

from __future__ import annotations

import json
import os

import numpy as np

SPECIALS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
CHATML = ("{% for message in messages %}{{'<|im_start|>' + message['role'] + '\n' + message['content']"
          " + '<|im_end|>' + '\n'}}{% endfor %}{% if add_generation_prompt %}"
          "{{ '<|im_start|>assistant\n' }}{% endif %}")
VOCAB = 288


def tiny_cfg(**overrides) -> dict:
    cfg = dict(model_type="llama", architectures=["LlamaForCausalLM"], vocab_size=VOCAB, hidden_size=64,
               intermediate_size=96, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
               head_dim=16, max_position_embeddings=256, rms_norm_eps=1e-5, rope_theta=10000.0,
               tie_word_embeddings=False, bos_token_id=1, eos_token_id=2, hidden_act="silu")
    cfg.update(overrides)
    return cfg


def tiny_state(cfg: dict, seed: int = 0) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    h, inter, hd = cfg["hidden_size"], cfg["intermediate_size"], cfg["head_dim"]
    q, kv = cfg["num_attention_heads"] * hd, cfg["num_key_value_heads"] * hd

    def w(*shape):
        return (0.1 * rng.standard_normal(shape)).astype(np.float32)

    state = {"model.embed_tokens.weight": w(cfg["vocab_size"], h)}
    for i in range(cfg["num_hidden_layers"]):
        p = f"model.layers.{i}."
        state.update({p + "input_layernorm.weight": np.ones(h, np.float32),
                      p + "self_attn.q_proj.weight": w(q, h), p + "self_attn.k_proj.weight": w(kv, h),
                      p + "self_attn.v_proj.weight": w(kv, h), p + "self_attn.o_proj.weight": w(h, q),
                      p + "post_attention_layernorm.weight": np.ones(h, np.float32),
                      p + "mlp.gate_proj.weight": w(inter, h), p + "mlp.up_proj.weight": w(inter, h),
                      p + "mlp.down_proj.weight": w(h, inter)})
    state["model.norm.weight"] = np.ones(h, np.float32)
    if not cfg.get("tie_word_embeddings"):
        state["lm_head.weight"] = w(cfg["vocab_size"], h)
    return state


def byte_tokens() -> list[str]:
    from model_explorer.model.tokenizer import byte_alphabet

    return [byte_alphabet()[b] for b in range(256)]


def write_tokenizer(directory, n_tokens: int = VOCAB, template: str | None = CHATML) -> None:
    """A byte-level BPE tokenizer.json with exactly `n_tokens` ids, + tokenizer_config.json."""
    from tokenizers import AddedToken, Tokenizer, decoders, pre_tokenizers
    from tokenizers.models import BPE

    base = byte_tokens()
    vocab = {t: i for i, t in enumerate(base)}
    while len(vocab) < n_tokens - len(SPECIALS):
        vocab[f"x{len(vocab)}"] = len(vocab)
    tok = Tokenizer(BPE(vocab=vocab, merges=[]))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    tok.add_special_tokens([AddedToken(t, special=True, normalized=False) for t in SPECIALS])
    tok.save(os.path.join(directory, "tokenizer.json"))
    cfg = {"eos_token": "<|im_end|>", "bos_token": "<|im_start|>"}
    if template is not None:
        cfg["chat_template"] = template
    with open(os.path.join(directory, "tokenizer_config.json"), "w") as f:
        json.dump(cfg, f)


def write_folder(directory, cfg: dict | None = None, state: dict | None = None, tokenizer: int | None = VOCAB,
                 template: str | None = CHATML) -> str:
    from safetensors.numpy import save_file

    cfg = cfg if cfg is not None else tiny_cfg()
    state = state if state is not None else tiny_state(cfg)
    directory = str(directory)
    os.makedirs(directory, exist_ok=True)
    save_file(state, os.path.join(directory, "model.safetensors"), metadata={"format": "pt"})
    with open(os.path.join(directory, "config.json"), "w") as f:
        json.dump(cfg, f)
    if tokenizer:
        write_tokenizer(directory, tokenizer, template)
    return directory


GGUF_BLOCK = {"input_layernorm.weight": "attn_norm.weight", "self_attn.q_proj.weight": "attn_q.weight",
              "self_attn.k_proj.weight": "attn_k.weight", "self_attn.v_proj.weight": "attn_v.weight",
              "self_attn.o_proj.weight": "attn_output.weight",
              "post_attention_layernorm.weight": "ffn_norm.weight", "mlp.gate_proj.weight": "ffn_gate.weight",
              "mlp.up_proj.weight": "ffn_up.weight", "mlp.down_proj.weight": "ffn_down.weight"}


def gguf_name(hf: str) -> str:
    top = {"model.embed_tokens.weight": "token_embd.weight", "model.norm.weight": "output_norm.weight",
           "lm_head.weight": "output.weight"}
    if hf in top:
        return top[hf]
    _, _, layer, rest = hf.split(".", 3)
    return f"blk.{layer}.{GGUF_BLOCK[rest]}"


def write_gguf(path, cfg: dict | None = None, state: dict | None = None, pre: str | None = "smollm",
               n_tokens: int | None = None, template: str | None = CHATML, extra=None) -> str:
    import gguf

    cfg = cfg if cfg is not None else tiny_cfg()
    state = state if state is not None else tiny_state(cfg)
    path = str(path)
    w = gguf.GGUFWriter(path, "llama")
    w.add_name("tiny-instruct")
    w.add_context_length(cfg["max_position_embeddings"])
    w.add_embedding_length(cfg["hidden_size"])
    w.add_block_count(cfg["num_hidden_layers"])
    w.add_feed_forward_length(cfg["intermediate_size"])
    w.add_head_count(cfg["num_attention_heads"])
    w.add_head_count_kv(cfg["num_key_value_heads"])
    w.add_rope_freq_base(10000.0)
    w.add_layer_norm_rms_eps(1e-5)
    n = n_tokens or cfg["vocab_size"]
    tokens = SPECIALS + byte_tokens() + ["Ġt"]
    tokens += [f"x{i}" for i in range(len(tokens), n)]
    w.add_tokenizer_model("gpt2")
    if pre:
        w.add_tokenizer_pre(pre)
    w.add_token_list(tokens[:n])
    w.add_token_types([3] * 3 + [1] * (n - 3))
    w.add_token_merges(["Ġ t"])
    w.add_bos_token_id(1)
    w.add_eos_token_id(2)
    if template:
        w.add_chat_template(template)
    for key, value in (extra or {}).items():
        w.add_uint32(key, value)
    for name, data in state.items():
        w.add_tensor(gguf_name(name), data)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return path


def codes(ckpt) -> list[str]:
    return [f.code for f in ckpt.findings]


def model_findings(ckpt) -> list:
    """Findings from the model layer (the readers' own are tested elsewhere)."""
    from model_explorer.model.findings import MODEL_CODES

    return [f for f in ckpt.findings if f.code in MODEL_CODES or f.code == "bad_config"]


def only(ckpt, code: str):
    hits = [f for f in ckpt.findings if f.code == code]
    assert len(hits) == 1, f"expected one {code!r}, got {[str(f) for f in ckpt.findings]}"
    return hits[0]
