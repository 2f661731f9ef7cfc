"""Small checkpoint files for the widget tests (Python and browser): built inline, no downloads."""

from __future__ import annotations

import json
import struct
from pathlib import Path

import numpy as np

XSS_NAME = '<img src=x onerror="window.__mx_xss=1">.weight'
XSS_SCRIPT = "<script>window.__mx_xss=2</script>.bias"
XSS_META = '<b onmouseover="window.__mx_xss=3">bold</b><script>window.__mx_xss=4</script>'


def write_safetensors(path: Path, tensors: dict[str, np.ndarray], metadata: dict | None = None,
                      patch: dict | None = None, compact: bool = False) -> Path:
    """A safetensors file; `patch` overrides header fields per tensor to break it on purpose;
    `compact`: JSON without spaces, as the safetensors library writes (the columnar reader's
    kind, whose spans are built when first asked)."""
    header: dict = {}
    if metadata is not None:
        header["__metadata__"] = metadata
    blobs = []
    pos = 0
    dtypes = {np.dtype("float32"): "F32", np.dtype("float16"): "F16", np.dtype("int32"): "I32"}
    for name, arr in tensors.items():
        raw = np.ascontiguousarray(arr).tobytes()
        header[name] = {"dtype": dtypes[arr.dtype], "shape": list(arr.shape), "data_offsets": [pos, pos + len(raw)]}
        header[name].update((patch or {}).get(name, {}))
        blobs.append(raw)
        pos += len(raw)
    text = json.dumps(header, separators=(",", ":") if compact else None).encode()
    text += b" " * (-len(text) % 8)
    path.write_bytes(struct.pack("<Q", len(text)) + text + b"".join(blobs))
    return path


def broken_safetensors(path: Path) -> Path:
    """1.2 MB: a big tensor (so paging past the first megabyte is tested) and one whose
    data_offsets claim 4 bytes too few (a size_mismatch finding at its header entry)."""
    rng = np.random.default_rng(0)
    tensors = {
        "model.embed.weight": rng.standard_normal((300, 1024)).astype(np.float32),
        "model.layers.0.attn.weight": rng.standard_normal((16, 16)).astype(np.float32),
        "model.layers.1.attn.weight": rng.standard_normal((16, 16)).astype(np.float32),
    }
    size = 300 * 1024 * 4
    patch = {"model.layers.0.attn.weight": {"data_offsets": [size, size + 16 * 16 * 4 - 4]}}
    return write_safetensors(path, tensors, {"format": "pt"}, patch)


def xss_safetensors(path: Path) -> Path:
    tensors = {XSS_NAME: np.ones((4, 4), np.float32), XSS_SCRIPT: np.zeros(4, np.float32)}
    return write_safetensors(path, tensors, {"note": XSS_META})


class _Evil:
    """Pickles as a call to os.system: the reader must flag it and never run it."""

    def __reduce__(self):
        import os

        return (os.system, ("echo this must never run",))


def evil_pickle(path: Path) -> Path:
    import pickle

    path.write_bytes(pickle.dumps({"payload": _Evil(), XSS_NAME: XSS_META}))
    return path


def small_gguf(path: Path) -> Path:
    import gguf

    w = gguf.GGUFWriter(str(path), "llama")
    w.add_name("tiny test model")
    w.add_block_count(2)
    w.add_token_list([f"tok{i}" for i in range(250)])
    rng = np.random.default_rng(1)
    w.add_tensor("token_embd.weight", rng.standard_normal((32, 64)).astype(np.float32))
    for i in range(2):
        w.add_tensor(f"blk.{i}.attn_q.weight", rng.standard_normal((64, 64)).astype(np.float16))
        w.add_tensor(f"blk.{i}.ffn_norm.weight", np.ones(64, np.float32))
    # A quantized tensor, so the histogram view draws its block scales.
    q8 = gguf.quants.quantize(rng.standard_normal((64, 64)).astype(np.float32), gguf.GGMLQuantizationType.Q8_0)
    w.add_tensor("output.weight", q8, raw_dtype=gguf.GGMLQuantizationType.Q8_0)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return path


def cut_gguf(path: Path, layers: int = 3) -> Path:
    """A GGUF cut a third of the way into output.weight (Q8_0 [64, 64]: 21 whole rows left); the
    `layers` blocks written after it are gone."""
    import gguf

    import model_explorer as mx

    w = gguf.GGUFWriter(str(path), "llama")
    w.add_name("cut test model")
    w.add_block_count(layers)
    rng = np.random.default_rng(1)
    w.add_tensor("token_embd.weight", rng.standard_normal((32, 64)).astype(np.float32))
    q8 = gguf.quants.quantize(rng.standard_normal((64, 64)).astype(np.float32), gguf.GGMLQuantizationType.Q8_0)
    w.add_tensor("output.weight", q8, raw_dtype=gguf.GGMLQuantizationType.Q8_0)
    for i in range(layers):
        w.add_tensor(f"blk.{i}.attn_q.weight", rng.standard_normal((64, 64)).astype(np.float16))
        w.add_tensor(f"blk.{i}.ffn_norm.weight", np.ones(64, np.float32))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    info = mx.open(path).tensors["output.weight"]
    with open(path, "r+b") as f:
        f.truncate(info.offset + info.length // 3)
    return path


def sharded(directory: Path) -> Path:
    """Three shards in the index: one missing, one with an orphan tensor, and a missing tensor."""
    directory.mkdir(parents=True, exist_ok=True)
    a = {"model.layers.0.w": np.ones((8, 8), np.float32), "model.layers.0.b": np.ones(8, np.float32)}
    b = {"model.layers.1.w": np.ones((8, 8), np.float16), "model.extra": np.ones(3, np.float32)}
    write_safetensors(directory / "model-00001-of-00003.safetensors", a)
    write_safetensors(directory / "model-00002-of-00003.safetensors", b)
    weight_map = {"model.layers.0.w": "model-00001-of-00003.safetensors",
                  "model.layers.0.b": "model-00001-of-00003.safetensors",
                  "model.layers.0.gone": "model-00001-of-00003.safetensors",
                  "model.layers.1.w": "model-00002-of-00003.safetensors",
                  "model.layers.2.w": "model-00003-of-00003.safetensors"}
    index = directory / "model.safetensors.index.json"
    index.write_text(json.dumps({"metadata": {"total_size": 0}, "weight_map": weight_map}))
    return index


LLAMA_PROJ = ("self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj", "self_attn.o_proj",
              "mlp.gate_proj", "mlp.up_proj", "mlp.down_proj")


def damaged_llama(path: Path, layers: int = 6, zeroed: int = 2, scaled: int = 4) -> Path:
    """A tiny llama whose layer `zeroed` has an all-zero down_proj and whose layer `scaled` has a
    q_proj 40 times too large: what the Layers tab must mark."""
    rng = np.random.default_rng(3)
    tensors = {"model.embed_tokens.weight": rng.standard_normal((64, 32)).astype(np.float32)}
    for i in range(layers):
        tensors[f"model.layers.{i}.input_layernorm.weight"] = np.ones(32, np.float32)
        for p in LLAMA_PROJ:
            w = (rng.standard_normal((32, 32)) * 0.05).astype(np.float32)
            if i == zeroed and p == "mlp.down_proj":
                w[:] = 0
            if i == scaled and p == "self_attn.q_proj":
                w *= 40
            tensors[f"model.layers.{i}.{p}.weight"] = w
        tensors[f"model.layers.{i}.post_attention_layernorm.weight"] = np.ones(32, np.float32)
    tensors["model.norm.weight"] = np.ones(32, np.float32)
    return write_safetensors(path, tensors, {"format": "pt"})


def prefixed_folder(directory: Path) -> Path:
    """A llama folder saved from DataParallel ("module." on every name) whose config does not tie
    the missing lm_head: two fixes (strip_prefix, tie_lm_head), each for its own finding."""
    directory.mkdir(parents=True, exist_ok=True)
    tensors = {"module.model.embed_tokens.weight": np.ones((16, 8), np.float32),
               "module.model.layers.0.self_attn.q_proj.weight": np.ones((8, 8), np.float32)}
    write_safetensors(directory / "model.safetensors", tensors)
    config = {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": 8,
              "num_attention_heads": 2, "num_hidden_layers": 1, "vocab_size": 16,
              "intermediate_size": 16, "tie_word_embeddings": False}
    (directory / "config.json").write_text(json.dumps(config))
    return directory


def profile_by_requests(e, stat: str = "norm", exact: bool = False) -> dict:
    """The Layers tab's requests, as the browser makes them: start, steps, then the profile."""
    start = e.answer("layers_start", {"exact": exact})[0]
    done = start["done"]
    while done < start["total"]:
        done = e.answer("layers_step", {"exact": exact})[0]["done"]
    return e.answer("layers_profile", {"stat": stat, "exact": exact})[0]


BIG_VOCAB_SPECIALS = ("<|endoftext|>", "<|im_start|>", "<|im_end|>")


def big_vocab_folder(directory: Path, tokens: int = 150_000) -> Path:
    """A tiny llama folder whose tokenizer.json holds `tokens` ids (a Qwen-sized vocabulary):
    the 256 byte-level tokens, "w{id}" words up to the three special tokens that end it, and
    id 300 spelled with a newline and a tab (shown as escapes, not as blank space)."""
    from tokenizers import AddedToken, Tokenizer, decoders, pre_tokenizers
    from tokenizers.models import BPE

    directory.mkdir(parents=True, exist_ok=True)
    printable = [*range(ord("!"), ord("~") + 1), *range(ord("¡"), ord("¬") + 1), *range(ord("®"), ord("ÿ") + 1)]
    alphabet, extra = [], 0
    for b in range(256):  # GPT-2's byte alphabet: bytes that do not print move past 255
        alphabet.append(chr(b) if b in printable else chr(256 + extra))
        extra += b not in printable
    vocab = {t: i for i, t in enumerate(alphabet)}
    for i in range(len(vocab), tokens - len(BIG_VOCAB_SPECIALS)):
        vocab["a\n\tb" if i == 300 else f"w{i}"] = i
    tok = Tokenizer(BPE(vocab=vocab, merges=[]))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    tok.add_special_tokens([AddedToken(t, special=True, normalized=False) for t in BIG_VOCAB_SPECIALS])
    tok.save(str(directory / "tokenizer.json"))
    config = {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": 8,
              "num_attention_heads": 2, "num_hidden_layers": 1, "vocab_size": tokens,
              "intermediate_size": 16, "tie_word_embeddings": True}
    (directory / "config.json").write_text(json.dumps(config))
    write_safetensors(directory / "model.safetensors",
                      {"model.embed_tokens.weight": np.zeros((4, 8), np.float32)})
    return directory


def starcoder2_missing_a_tensor(folder):
    """A tiny Starcoder2 (outside the built-in family tables) saved by transformers, one tensor
    short: only transformers' cross-check finds it. None without transformers."""
    try:
        import torch
        import transformers
        from safetensors.torch import load_file, save_file
    except ImportError:
        return None
    cfg = transformers.Starcoder2Config(vocab_size=64, hidden_size=32, intermediate_size=48,
                                        num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2)
    torch.manual_seed(0)
    transformers.Starcoder2ForCausalLM(cfg).save_pretrained(folder)
    path = folder / "model.safetensors"
    state = load_file(str(path))
    del state["model.layers.1.mlp.c_fc.weight"]
    save_file(state, str(path))
    return folder
