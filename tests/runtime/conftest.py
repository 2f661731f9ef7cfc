"""Tiny llama-family models for the demo tests, built in the test from random weights.

- `tiny_tokenizer`: a byte-level BPE vocabulary (specials, the 256 byte symbols, a few merges),
  written as tokenizer.json and usable as GGUF `tokenizer.ggml.*` arrays.
- `tiny_config` + `random_state`: a Llama / Qwen2 / Mistral config.json and random float32
  weights under Hugging Face names; `write_hf_dir` saves them as a safetensors model folder,
  `hf_model_from` loads the same weights into transformers (reference tests only).
- `write_gguf`: the same model as a GGUF file (F32 or Q8_0) the way llama.cpp's converter writes
  it: its key names, tensor names, and the Q/K row permutation of llama-arch models.
"""

from __future__ import annotations

import json
import math
import os
from dataclasses import dataclass

import numpy as np
import pytest

SPECIALS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
MERGES = ["Ġ t", "h e", "Ġt he", "i n", "Ġ a", "e r", "o n", "Ġ s", "a t", "e n"]
VOCAB_SIZE = 288
CHATML = ("{% for message in messages %}{{'<|im_start|>' + message['role'] + '\n' + message['content']"
          " + '<|im_end|>' + '\n'}}{% endfor %}{% if add_generation_prompt %}"
          "{{ '<|im_start|>assistant\n' }}{% endif %}")


def byte_symbols() -> list[str]:
    from model_explorer.model.tokenizer import byte_alphabet

    return [byte_alphabet()[b] for b in range(256)]


@dataclass
class TinyVocab:
    tokens: list[str]
    types: list[int]  # llama.cpp token types: 1 normal, 3 control
    merges: list[str]

    @property
    def ids(self) -> dict[str, int]:
        return {t: i for i, t in enumerate(self.tokens)}


def tiny_vocab(size: int = VOCAB_SIZE) -> TinyVocab:
    tokens = SPECIALS + byte_symbols() + ["".join(m.split(" ")) for m in MERGES]
    types = [3] * len(SPECIALS) + [1] * (len(tokens) - len(SPECIALS))
    while len(tokens) < size:  # unused slots, as padded vocabularies have
        tokens.append(f"<extra_{len(tokens)}>")
        types.append(3)
    return TinyVocab(tokens, types, MERGES)


def write_tokenizer_files(directory: str, vocab: TinyVocab) -> None:
    from tokenizers import AddedToken, Tokenizer, decoders, pre_tokenizers
    from tokenizers.models import BPE

    tok = Tokenizer(BPE(vocab=vocab.ids, merges=[tuple(m.split(" ")) for m in vocab.merges]))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    tok.add_special_tokens([AddedToken(t, special=True, normalized=False)
                            for t, ty in zip(vocab.tokens, vocab.types) if ty == 3])
    tok.save(os.path.join(directory, "tokenizer.json"))
    with open(os.path.join(directory, "tokenizer_config.json"), "w") as f:
        json.dump({"chat_template": CHATML, "eos_token": "<|im_end|>", "bos_token": "<|im_start|>"}, f)


def tiny_config(arch: str = "llama", tie: bool = False, **overrides) -> dict:
    """A Hugging Face config.json for a 2-layer model with grouped-query attention."""
    cfg = dict(model_type=arch, architectures=[{"llama": "LlamaForCausalLM", "qwen2": "Qwen2ForCausalLM",
                                                "mistral": "MistralForCausalLM"}[arch]],
               vocab_size=VOCAB_SIZE, hidden_size=64, intermediate_size=96, num_hidden_layers=2,
               num_attention_heads=4, num_key_value_heads=2, head_dim=16, max_position_embeddings=256,
               rms_norm_eps=1e-5, rope_theta=10000.0, tie_word_embeddings=tie, bos_token_id=1,
               eos_token_id=2, hidden_act="silu")
    if arch == "qwen2":
        cfg["attention_bias"] = True
    cfg.update(overrides)
    return cfg


def random_state(cfg: dict, seed: int = 0) -> dict[str, np.ndarray]:
    """float32 weights under Hugging Face names; big enough that every part moves the logits."""
    rng = np.random.default_rng(seed)
    h, inter, hd = cfg["hidden_size"], cfg["intermediate_size"], cfg["head_dim"]
    q, kv = cfg["num_attention_heads"] * hd, cfg["num_key_value_heads"] * hd

    def w(*shape):
        return (0.15 * rng.standard_normal(shape)).astype(np.float32)

    def norm():
        return (1.0 + 0.2 * rng.standard_normal(h)).astype(np.float32)

    state = {"model.embed_tokens.weight": w(cfg["vocab_size"], h)}
    for i in range(cfg["num_hidden_layers"]):
        p = f"model.layers.{i}."
        state.update({p + "input_layernorm.weight": norm(), p + "self_attn.q_proj.weight": w(q, h),
                      p + "self_attn.k_proj.weight": w(kv, h), p + "self_attn.v_proj.weight": w(kv, h),
                      p + "self_attn.o_proj.weight": w(h, q), p + "post_attention_layernorm.weight": norm(),
                      p + "mlp.gate_proj.weight": w(inter, h), p + "mlp.up_proj.weight": w(inter, h),
                      p + "mlp.down_proj.weight": w(h, inter)})
        if cfg.get("attention_bias"):
            state.update({p + "self_attn.q_proj.bias": w(q), p + "self_attn.k_proj.bias": w(kv),
                          p + "self_attn.v_proj.bias": w(kv)})
    state["model.norm.weight"] = norm()
    if not cfg["tie_word_embeddings"]:
        state["lm_head.weight"] = w(cfg["vocab_size"], h)
    return state


def write_hf_dir(directory: str, cfg: dict, state: dict[str, np.ndarray]) -> str:
    """config.json + model.safetensors + tokenizer files, as save_pretrained leaves them."""
    from safetensors.numpy import save_file

    os.makedirs(directory, exist_ok=True)
    save_file(state, os.path.join(directory, "model.safetensors"), metadata={"format": "pt"})
    with open(os.path.join(directory, "config.json"), "w") as f:
        json.dump(cfg, f)
    write_tokenizer_files(directory, tiny_vocab(cfg["vocab_size"]))
    return directory


def hf_model_from(cfg: dict, state: dict[str, np.ndarray]):
    """The transformers model (eager attention) holding exactly these weights."""
    import torch
    import transformers

    kwargs = {k: v for k, v in cfg.items() if k not in ("model_type", "architectures")}
    config_cls, model_cls = {
        "llama": (transformers.LlamaConfig, transformers.LlamaForCausalLM),
        "qwen2": (transformers.Qwen2Config, transformers.Qwen2ForCausalLM),
        "mistral": (transformers.MistralConfig, transformers.MistralForCausalLM),
    }[cfg["model_type"]]
    model = model_cls._from_config(config_cls(**kwargs), attn_implementation="eager").eval()
    missing, unexpected = model.load_state_dict({k: torch.from_numpy(v) for k, v in state.items()},
                                                strict=False)
    assert not unexpected and all(k == "lm_head.weight" for k in missing), (missing, unexpected)
    if cfg["tie_word_embeddings"]:
        model.tie_weights()
    return model


def reference_logits(model, ids) -> np.ndarray:
    import torch

    with torch.no_grad():
        return model(torch.tensor([list(ids)])).logits[0].float().numpy()


def rel_error(ours: np.ndarray, ref: np.ndarray) -> float:
    return float(np.max(np.abs(ours - ref)) / np.max(np.abs(ref)))


# -- GGUF, as llama.cpp's convert_hf_to_gguf.py writes it ------------------------------------------

GGUF_BLOCK = {
    "input_layernorm.weight": "attn_norm.weight", "self_attn.q_proj.weight": "attn_q.weight",
    "self_attn.k_proj.weight": "attn_k.weight", "self_attn.v_proj.weight": "attn_v.weight",
    "self_attn.q_proj.bias": "attn_q.bias", "self_attn.k_proj.bias": "attn_k.bias",
    "self_attn.v_proj.bias": "attn_v.bias", "self_attn.o_proj.weight": "attn_output.weight",
    "post_attention_layernorm.weight": "ffn_norm.weight", "mlp.gate_proj.weight": "ffn_gate.weight",
    "mlp.up_proj.weight": "ffn_up.weight", "mlp.down_proj.weight": "ffn_down.weight",
}


def llama_cpp_permute(w: np.ndarray, n_head: int) -> np.ndarray:
    """llama.cpp's LlamaModel.permute: HF rotate-half rows -> interleaved pairs per head."""
    return w.reshape(n_head, 2, w.shape[0] // n_head // 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape)


def gguf_name(hf_name: str) -> str:
    top = {"model.embed_tokens.weight": "token_embd.weight", "model.norm.weight": "output_norm.weight",
           "lm_head.weight": "output.weight"}
    if hf_name in top:
        return top[hf_name]
    _, _, layer, rest = hf_name.split(".", 3)
    return f"blk.{layer}.{GGUF_BLOCK[rest]}"


def spm_vocab(size: int = VOCAB_SIZE) -> dict:
    """A sentencepiece-style ("llama") GGUF vocabulary: specials, 256 byte tokens, scored pieces."""
    pieces = ["▁", "▁t", "h", "e", "he", "▁the", "▁a", "i", "n", "in", "r", "er", "▁c", "a", "t", "at",
              "▁cat", "o", "l", "lo", "▁w", "▁h", "d", "w", "s", "▁s", "x", "▁x"]
    tokens = ["<unk>", "<s>", "</s>"] + [f"<0x{b:02X}>" for b in range(256)] + pieces
    types = [2, 3, 3] + [6] * 256 + [1] * len(pieces)
    scores = [0.0, 0.0, 0.0] + [0.0] * 256 + [-float(i) for i in range(len(pieces))]
    while len(tokens) < size:
        tokens.append(f"<unused{len(tokens)}>")
        types.append(5)
        scores.append(-1000.0)
    return {"model": "llama", "tokens": tokens, "types": types, "scores": scores}


def llama3_rope_factors(cfg: dict) -> np.ndarray:
    """llama.cpp's converter: Llama 3 RoPE scaling as one divisor per frequency."""
    s, dim = cfg["rope_scaling"], cfg["head_dim"]
    factor, low, high, old = s["factor"], s["low_freq_factor"], s["high_freq_factor"], \
        s["original_max_position_embeddings"]
    out = []
    for freq in 1.0 / (cfg["rope_theta"] ** (np.arange(0, dim, 2) / dim)):
        wavelen = 2 * math.pi / freq
        if wavelen < old / high:
            out.append(1.0)
        elif wavelen > old / low:
            out.append(factor)
        else:
            smooth = (old / wavelen - low) / (high - low)
            out.append(1 / ((1 - smooth) / factor + smooth))
    return np.array(out, dtype=np.float32)


def write_gguf(cfg: dict, state: dict[str, np.ndarray], path: str, dtype: str = "F32",
               architecture: str | None = None, spm: bool = False, pre: str | None = None) -> str:
    """spm: write a sentencepiece ("llama") vocabulary with scores and no merges; pre: the
    tokenizer.ggml.pre value (which split regex a byte-level vocabulary was trained with)."""
    import gguf

    arch = architecture or ("qwen2" if cfg["model_type"] == "qwen2" else "llama")  # Mistral is llama
    w = gguf.GGUFWriter(path, arch)
    w.add_context_length(cfg["max_position_embeddings"])
    w.add_embedding_length(cfg["hidden_size"])
    w.add_block_count(cfg["num_hidden_layers"])
    w.add_feed_forward_length(cfg["intermediate_size"])
    w.add_head_count(cfg["num_attention_heads"])
    w.add_head_count_kv(cfg["num_key_value_heads"])
    w.add_rope_dimension_count(cfg["head_dim"])
    w.add_rope_freq_base(float(cfg["rope_theta"]))
    w.add_layer_norm_rms_eps(cfg["rms_norm_eps"])
    w.add_vocab_size(cfg["vocab_size"])
    if cfg.get("sliding_window") and cfg["model_type"] == "mistral":
        w.add_sliding_window(cfg["sliding_window"])
    w.add_file_type(gguf.LlamaFileType.MOSTLY_Q8_0 if dtype == "Q8_0" else gguf.LlamaFileType.ALL_F32)
    if spm:
        sp = spm_vocab(cfg["vocab_size"])
        w.add_tokenizer_model("llama")
        w.add_token_list(sp["tokens"])
        w.add_token_types(sp["types"])
        w.add_token_scores(sp["scores"])
        w.add_unk_token_id(0)
    else:
        vocab = tiny_vocab(cfg["vocab_size"])
        w.add_tokenizer_model("gpt2")
        w.add_token_list(vocab.tokens)
        w.add_token_types(vocab.types)
        w.add_token_merges(vocab.merges)
        w.add_add_bos_token(False)
        if pre:
            w.add_tokenizer_pre(pre)
    w.add_bos_token_id(1)
    w.add_eos_token_id(2)
    w.add_chat_template(CHATML)
    scaling = cfg.get("rope_scaling")
    if scaling and scaling["rope_type"] == "llama3":
        w.add_tensor("rope_freqs.weight", llama3_rope_factors(cfg))
    for name, data in state.items():
        if arch == "llama" and name.endswith(("q_proj.weight", "q_proj.bias")):
            data = llama_cpp_permute(data, cfg["num_attention_heads"])
        elif arch == "llama" and name.endswith(("k_proj.weight", "k_proj.bias")):
            data = llama_cpp_permute(data, cfg["num_key_value_heads"])
        if dtype == "Q8_0" and data.ndim == 2:
            q = gguf.quants.quantize(data, gguf.GGMLQuantizationType.Q8_0)
            w.add_tensor(gguf_name(name), q, raw_dtype=gguf.GGMLQuantizationType.Q8_0)
        else:
            w.add_tensor(gguf_name(name), data)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return path


# -- fixtures ----------------------------------------------------------------------------------------

@pytest.fixture(scope="session")
def sample_gguf() -> str:
    from model_explorer.samples import sample_path

    try:
        return sample_path()
    except FileNotFoundError as e:
        pytest.skip(str(e))


@pytest.fixture(scope="session")
def smollm2(sample_gguf):
    """The SmolLM2 sample, loaded once for every test that generates with it."""
    from model_explorer.runtime import load_model

    return load_model(sample_gguf, device="cpu")
