"""`convert(source, dest, format=...)`: the same model written as safetensors, GGUF or MLX.

    mx.convert("SmolLM2.Q4_1.gguf", "smol-f32", format="safetensors", dtype="F32")
    mx.convert("smol-f32", "smol.Q8_0.gguf", format="gguf", dtype="Q8_0")
    mx.convert("smol-f32", "smol-mlx4", format="mlx", bits=4, group_size=64)

Tensors are read one at a time through `Checkpoint.read` (float32), transformed, encoded and
appended to the output, so memory stays at about one tensor. Names are translated through the
Hugging Face llama layout: llama.cpp stores the Q and K projections with the rows of each head
interleaved for its rotary kernel, so GGUF -> HF undoes that permutation and HF -> GGUF applies
it. GGUF -> GGUF keeps names, layout and metadata as they are.
"""

from __future__ import annotations

import json
import math
import os
import warnings
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from .. import sources
from ..checkpoint import Checkpoint
from ..tensors.names import gguf_to_hf, hf_to_gguf, permute_qk, unpermute_qk
from .tokenizer import side_text

FORMATS = ("safetensors", "gguf", "mlx")
SAFETENSORS_DTYPES = ("F32", "BF16", "F16")
GGUF_DTYPES = ("F32", "F16", "Q8_0", "Q4_0")
MLX_BITS = (4, 8)
MLX_GROUP_SIZES = (32, 64)
TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "generation_config.json")

Progress = Callable[[int, int, str], None]  # (tensors done, tensors in all, name just written)


class ConvertError(ValueError):
    """The source cannot be converted as asked; the message says why."""


# -- names and layouts ---------------------------------------------------------------------------

# Derived by llama.cpp from the rope scaling settings; transformers recomputes it from config.json.
_GGUF_ONLY = ("rope_freqs.weight",)


def _rope_heads(hf_name: str, config: dict) -> int | None:
    """Heads llama.cpp permutes a Q or K projection over (weight and bias), else None."""
    if hf_name.endswith(("self_attn.q_proj.weight", "self_attn.q_proj.bias")):
        return int(config["num_attention_heads"])
    if hf_name.endswith(("self_attn.k_proj.weight", "self_attn.k_proj.bias")):
        return int(config.get("num_key_value_heads") or config["num_attention_heads"])
    return None


# -- the source, seen as a llama model with HF names ---------------------------------------------


@dataclass
class _Tensor:
    """One output tensor: its name there, where it comes from and how to reshape its rows."""

    name: str
    source: str
    shape: tuple[int, ...]
    transform: Callable[[np.ndarray], np.ndarray] | None = None


@dataclass
class _Source:
    ckpt: Checkpoint
    config: dict | None  # HF config.json (llama), derived from GGUF metadata when needed
    tensors: list[_Tensor]  # in HF names
    tokenizer_files: dict[str, str] = field(default_factory=dict)  # file name -> text
    float_dtype: str = "F16"

    def read(self, t: _Tensor) -> np.ndarray:
        arr = np.asarray(self.ckpt.read(t.source), dtype=np.float32)
        if arr.shape != t.shape:
            arr = arr.reshape(t.shape)
        return t.transform(arr) if t.transform is not None else arr


def _kv(ckpt: Checkpoint, key: str, default=None):
    kv = ckpt.metadata.get(key)
    return default if kv is None else getattr(kv, "value", kv)


def _open(source) -> Checkpoint:
    if isinstance(source, Checkpoint):
        return source
    from ..opener import open as open_checkpoint

    return open_checkpoint(source)


def _check_readable(ckpt: Checkpoint) -> None:
    if ckpt.errors:
        first = ckpt.errors[0]
        raise ConvertError(f"{ckpt.source!r} has {len(ckpt.errors)} error(s), so its tensors cannot "
                           f"all be trusted; the first: {first.message}")
    if not ckpt.tensors:
        raise ConvertError(f"{ckpt.source!r} holds no tensors to convert.")


def _source_dir(ckpt: Checkpoint) -> str:
    return ckpt.source if sources.isdir(ckpt.source) else sources.dirname(ckpt.source)


def weight_dtype(ckpt: Checkpoint) -> str | None:
    """The dtype most weight elements (of tensors with 2 or more dimensions) are stored in."""
    counts: dict[str, int] = {}
    for t in ckpt.tensors.values():
        if len(t.shape) >= 2:
            counts[t.kind] = counts.get(t.kind, 0) + t.numel
    return max(counts, key=counts.get) if counts else None


def _float_dtype(ckpt: Checkpoint) -> str:
    """The float dtype most weight elements are stored in; F16 for quantized files."""
    top = weight_dtype(ckpt)
    return top if top in SAFETENSORS_DTYPES else "F16"


def _from_gguf(ckpt: Checkpoint) -> _Source:
    config = config_from_gguf(ckpt)
    tensors = []
    for name, info in ckpt.tensors.items():
        hf = gguf_to_hf(name)
        if hf is None:
            if name not in _GGUF_ONLY:
                warnings.warn(f"convert: {name!r} has no Hugging Face llama name; left out.", stacklevel=3)
            continue
        heads = _rope_heads(hf, config)
        transform = (lambda w, h=heads: unpermute_qk(w, h)) if heads else None
        tensors.append(_Tensor(hf, name, tuple(info.shape), transform))
    files = {}
    tok = tokenizer_json_from_gguf(ckpt)
    if tok is not None:
        files["tokenizer.json"] = tok
        files["tokenizer_config.json"] = json.dumps(tokenizer_config_from_gguf(ckpt), indent=2)
    return _Source(ckpt, config, tensors, files, _float_dtype(ckpt))


def _from_hf(ckpt: Checkpoint) -> _Source:
    config = ckpt.metadata.get("config.json")
    if isinstance(config, dict):
        config = {k: v for k, v in config.items() if k not in ("quantization", "quantization_config")}
    else:
        config = None
    tensors = [_Tensor(name, name, tuple(info.shape)) for name, info in ckpt.tensors.items()]
    directory = _source_dir(ckpt)
    files = {name: text for name in TOKENIZER_FILES if (text := side_text(directory, name)[0]) is not None}
    return _Source(ckpt, config, tensors, files, _float_dtype(ckpt))


def _load_source(ckpt: Checkpoint, keep_gguf: bool = False) -> _Source:
    """The source in HF llama names, or as stored for GGUF -> GGUF (any architecture)."""
    _check_readable(ckpt)
    if ckpt.format == "gguf" and keep_gguf:
        tensors = [_Tensor(name, name, tuple(info.shape)) for name, info in ckpt.tensors.items()]
        return _Source(ckpt, None, tensors)
    if ckpt.format == "gguf":
        return _from_gguf(ckpt)
    if ckpt.format in ("safetensors", "pytorch"):
        return _from_hf(ckpt)
    raise ConvertError(f"{ckpt.source!r} is {ckpt.format}; convert reads GGUF, safetensors (plain, "
                       "sharded or MLX) and PyTorch checkpoints.")


# -- config.json <-> GGUF metadata ---------------------------------------------------------------

# GGUF key (after "<arch>.") -> HF LlamaConfig field
_GGUF_CONFIG = {
    "context_length": "max_position_embeddings",
    "embedding_length": "hidden_size",
    "block_count": "num_hidden_layers",
    "feed_forward_length": "intermediate_size",
    "attention.head_count": "num_attention_heads",
    "attention.head_count_kv": "num_key_value_heads",
    "attention.layer_norm_rms_epsilon": "rms_norm_eps",
    "rope.freq_base": "rope_theta",
    "vocab_size": "vocab_size",
}
LLAMA_LIKE = ("llama",)


def config_from_gguf(ckpt: Checkpoint) -> dict:
    """A Hugging Face LlamaConfig dict from a llama GGUF's hyperparameters."""
    arch = _kv(ckpt, "general.architecture")
    if arch not in LLAMA_LIKE:
        raise ConvertError(f"general.architecture is {arch!r}; converting GGUF to safetensors or MLX "
                           f"knows the llama layout only ({', '.join(LLAMA_LIKE)}).")
    config: dict[str, Any] = {"architectures": ["LlamaForCausalLM"], "model_type": "llama",
                              "hidden_act": "silu", "attention_bias": False, "mlp_bias": False}
    for key, field_name in _GGUF_CONFIG.items():
        value = _kv(ckpt, f"{arch}.{key}")
        if value is not None:
            config[field_name] = value
    for needed in ("hidden_size", "num_hidden_layers", "num_attention_heads"):
        if needed not in config:
            raise ConvertError(f"The GGUF has no {arch}.* key for {needed}, so no config.json can be "
                               "derived.")
        value = config[needed]
        if not isinstance(value, int) or isinstance(value, bool) or value <= 0:
            raise ConvertError(f"The GGUF states {needed} = {value!r}; a positive integer is needed.")
    config.setdefault("num_key_value_heads", config["num_attention_heads"])
    config.setdefault("rms_norm_eps", 1e-5)
    config.setdefault("rope_theta", 10000.0)
    if "intermediate_size" not in config and "blk.0.ffn_up.weight" in ckpt.tensors:
        config["intermediate_size"] = ckpt.tensors["blk.0.ffn_up.weight"].shape[0]
    if "vocab_size" not in config:
        tokens = _kv(ckpt, "tokenizer.ggml.tokens")
        emb = ckpt.tensors.get("token_embd.weight")
        config["vocab_size"] = len(tokens) if tokens is not None else (emb.shape[0] if emb else 0)
    head_dim = _kv(ckpt, f"{arch}.attention.key_length") or \
        config["hidden_size"] // config["num_attention_heads"]
    config["head_dim"] = head_dim
    config["rms_norm_eps"] = float(str(np.float32(config["rms_norm_eps"])))  # 1e-05, not 9.99999974e-06
    config["rope_theta"] = float(config["rope_theta"])
    config["rope_parameters"] = {"rope_type": "default", "rope_theta": config["rope_theta"]}
    config["max_position_embeddings"] = config.get("max_position_embeddings", 2048)
    config["tie_word_embeddings"] = "output.weight" not in ckpt.tensors
    for field_name, key in (("bos_token_id", "bos_token_id"), ("eos_token_id", "eos_token_id"),
                            ("pad_token_id", "padding_token_id")):
        value = _kv(ckpt, f"tokenizer.ggml.{key}")
        if value is not None:
            config[field_name] = value
    return config


def _rope_theta(config: dict) -> float | None:
    rp = config.get("rope_parameters")
    if isinstance(rp, dict) and "rope_theta" in rp:
        return float(rp["rope_theta"])
    return float(config["rope_theta"]) if "rope_theta" in config else None


def _add_llama_metadata(writer, config: dict, name: str) -> None:
    """HF config.json -> llama.* keys (what llama.cpp's convert_hf_to_gguf writes)."""
    if config.get("model_type") not in LLAMA_LIKE:
        raise ConvertError(f"config.json says model_type {config.get('model_type')!r}; writing GGUF "
                           "from a Hugging Face model knows the llama layout only.")
    writer.add_name(name)
    heads = int(config["num_attention_heads"])
    writer.add_context_length(int(config.get("max_position_embeddings", 2048)))
    writer.add_embedding_length(int(config["hidden_size"]))
    writer.add_block_count(int(config["num_hidden_layers"]))
    writer.add_feed_forward_length(int(config["intermediate_size"]))
    writer.add_head_count(heads)
    writer.add_head_count_kv(int(config.get("num_key_value_heads") or heads))
    writer.add_layer_norm_rms_eps(float(config.get("rms_norm_eps", 1e-5)))
    theta = _rope_theta(config)
    if theta is not None:
        writer.add_rope_freq_base(theta)
    head_dim = int(config.get("head_dim") or config["hidden_size"] // heads)
    writer.add_rope_dimension_count(head_dim)
    if head_dim != config["hidden_size"] // heads:
        writer.add_key_length(head_dim)
        writer.add_value_length(head_dim)
    writer.add_vocab_size(int(config["vocab_size"]))


# -- tokenizer.json <-> GGUF tokenizer metadata --------------------------------------------------

_TOKEN_NORMAL, _TOKEN_UNUSED, _TOKEN_CONTROL, _TOKEN_USER = 1, 5, 3, 4


def tokenizer_json_from_gguf(ckpt: Checkpoint) -> str | None:
    """tokenizer.json for the tokenizer `tokenizer.ggml.*` describes (the one load_model runs)."""
    from .config import UnsupportedModel
    from .tokenizer import from_gguf

    try:
        tok = from_gguf(ckpt.metadata)
    except UnsupportedModel as e:
        warnings.warn(f"convert: no tokenizer.json written: {e}", stacklevel=4)
        return None
    backend = tok.backend
    if tok.add_bos and tok.bos_id is not None:
        # A tokenizer.json says "put BOS first" in its post-processor, not in a flag.
        from tokenizers import processors

        bos = backend.id_to_token(tok.bos_id)
        backend.post_processor = processors.TemplateProcessing(
            single=f"{bos} $A", pair=f"{bos} $A {bos} $B", special_tokens=[(bos, tok.bos_id)])
    return backend.to_str(pretty=False)


def tokenizer_config_from_gguf(ckpt: Checkpoint) -> dict:
    tokens = _kv(ckpt, "tokenizer.ggml.tokens")
    out: dict[str, Any] = {"tokenizer_class": "PreTrainedTokenizerFast",
                           "add_bos_token": bool(_kv(ckpt, "tokenizer.ggml.add_bos_token", False)),
                           "clean_up_tokenization_spaces": False}
    for name, key in (("bos_token", "bos_token_id"), ("eos_token", "eos_token_id"),
                      ("unk_token", "unknown_token_id"), ("pad_token", "padding_token_id")):
        i = _kv(ckpt, f"tokenizer.ggml.{key}")
        if tokens is not None and isinstance(i, int) and 0 <= i < len(tokens):
            out[name] = tokens[i]
    template = _kv(ckpt, "tokenizer.chat_template")
    if isinstance(template, str):
        out["chat_template"] = template
    return out


def _guess_pre(tj: dict) -> str:
    """The tokenizer.ggml.pre name whose split matches this tokenizer.json's pre-tokenizer."""
    from .tokenizer import PRE_TOKENIZER_SPLITS

    text = json.dumps(tj.get("pre_tokenizer"))
    if '"Digits"' in text and '"individual_digits": true' in text:
        return "smollm"
    for name, split in PRE_TOKENIZER_SPLITS.items():
        if json.dumps(split) in text:
            return name
    return "gpt-2"


def _vocab_ids(tj: dict, rows: int) -> dict[int, tuple[str, int]] | None:
    """id -> (token, type) from tokenizer.json, or None when its shape is not what HF writes.

    Ids must fall inside the embedding (`rows`), so a hostile id cannot size the token list.
    """
    vocab = (tj.get("model") or {}).get("vocab")
    if not isinstance(vocab, dict):
        return None
    ids: dict[int, tuple[str, int]] = {}
    for token, i in vocab.items():
        if type(i) is not int or not 0 <= i < rows:
            return None
        ids[i] = (token, _TOKEN_NORMAL)
    added_tokens = tj.get("added_tokens") or []
    if not isinstance(added_tokens, list):
        return None
    for added in added_tokens:
        i = added.get("id") if isinstance(added, dict) else None
        if type(i) is not int or not 0 <= i < rows or not isinstance(added.get("content"), str):
            return None
        ids[i] = (added["content"], _TOKEN_CONTROL if added.get("special") else _TOKEN_USER)
    return ids


def _add_tokenizer_metadata(writer, files: dict[str, str], config: dict, rows: int) -> None:
    """tokenizer.json (byte-level BPE) -> tokenizer.ggml.* keys; `rows` is the embedding's row count."""
    text = files.get("tokenizer.json")
    if text is None:
        warnings.warn("convert: no tokenizer.json next to the model; the GGUF has no tokenizer.",
                      stacklevel=4)
        return
    tj = json.loads(text)
    model = tj.get("model") or {}
    if model.get("type") != "BPE" or model.get("byte_fallback"):
        kind = "sentencepiece-style BPE" if model.get("type") == "BPE" else repr(model.get("type"))
        warnings.warn(f"convert: tokenizer.json is {kind}; only byte-level BPE goes into GGUF "
                      "here, so the GGUF has no tokenizer.", stacklevel=4)
        return
    ids = _vocab_ids(tj, rows)
    if not ids:
        warnings.warn(f"convert: tokenizer.json's vocabulary is not a map of tokens to ids below "
                      f"the embedding's {rows} rows; the GGUF has no tokenizer.", stacklevel=4)
        return
    n = rows
    tokens = [ids.get(i, (f"[PAD{i}]", _TOKEN_UNUSED)) for i in range(n)]
    writer.add_tokenizer_model("gpt2")
    writer.add_tokenizer_pre(_guess_pre(tj))
    writer.add_token_list([t for t, _ in tokens])
    writer.add_token_types([k for _, k in tokens])
    merges = [m if isinstance(m, str) else " ".join(m) for m in model.get("merges") or []]
    if merges:
        writer.add_token_merges(merges)
    tc = json.loads(files["tokenizer_config.json"]) if "tokenizer_config.json" in files else {}
    for key, add in (("bos_token_id", writer.add_bos_token_id), ("eos_token_id", writer.add_eos_token_id),
                     ("pad_token_id", writer.add_pad_token_id)):
        value = config.get(key)
        if isinstance(value, list):
            value = value[0] if value else None
        if isinstance(value, int):
            add(value)
    unk = tc.get("unk_token")
    unk = unk.get("content") if isinstance(unk, dict) else unk
    if isinstance(unk, str) and unk in model["vocab"]:
        writer.add_unk_token_id(model["vocab"][unk])
    writer.add_add_bos_token(bool(tc.get("add_bos_token", False)))
    if isinstance(tc.get("chat_template"), str):
        writer.add_chat_template(tc["chat_template"])


def _copy_gguf_metadata(writer, ckpt: Checkpoint) -> None:
    """Every key of a GGUF source except those the new file states itself."""
    from gguf import GGUFValueType

    skip = {"general.architecture", "general.file_type", "general.quantization_version", "general.alignment"}
    for key, kv in ckpt.metadata.items():
        if key in skip or key.startswith("split.") or not hasattr(kv, "type"):
            continue
        if kv.type.startswith("ARRAY["):
            sub = kv.type[len("ARRAY["):-1]
            if sub == "ARRAY" or kv.value.count == 0:
                continue  # nested arrays are not metadata llama.cpp reads; empty ones cannot be written
            writer.add_key_value(key, kv.value.to_list(), GGUFValueType.ARRAY, GGUFValueType[sub])
        else:
            writer.add_key_value(key, kv.value, GGUFValueType[kv.type])


# -- writers -------------------------------------------------------------------------------------


def _report(progress: Progress | None, done: int, total: int, name: str) -> None:
    if progress is not None:
        progress(done, total, name)


def _numpy_dtype(dtype: str) -> np.dtype:
    if dtype == "BF16":
        import ml_dtypes

        return np.dtype(ml_dtypes.bfloat16)
    return np.dtype({"F32": np.float32, "F16": np.float16}[dtype])


def write_safetensors(path: str, items: list[tuple[str, str, tuple[int, ...]]], produce,
                      metadata: dict[str, str] | None = None, progress: Progress | None = None) -> None:
    """Write a safetensors file tensor by tensor: the header is known from shapes alone.

    items: (name, dtype, shape) in output order, dtype one of F32/BF16/F16/U32;
    produce(i) returns item i's array, already in that dtype.
    """
    header: dict[str, Any] = {}
    if metadata:
        header["__metadata__"] = metadata
    offset = 0
    sizes = []
    for name, dtype, shape in items:
        nbytes = math.prod(shape) * (4 if dtype == "U32" else _numpy_dtype(dtype).itemsize)
        header[name] = {"dtype": dtype, "shape": list(shape), "data_offsets": [offset, offset + nbytes]}
        sizes.append(nbytes)
        offset += nbytes
    raw = json.dumps(header, separators=(",", ":")).encode()
    raw += b" " * (-len(raw) % 8)  # tensor data starts 8-byte aligned
    partial = path + ".partial"
    try:
        with open(partial, "wb") as f:
            f.write(len(raw).to_bytes(8, "little"))
            f.write(raw)
            for i, (name, _dtype, _shape) in enumerate(items):
                arr = np.ascontiguousarray(produce(i))
                if arr.nbytes != sizes[i]:
                    raise ConvertError(f"{name!r} came out as {arr.nbytes} bytes; the header "
                                       f"promised {sizes[i]}.")
                f.write(memoryview(arr.reshape(-1).view(np.uint8)))
                _report(progress, i + 1, len(items), name)
        os.replace(partial, path)
    finally:
        _remove(partial)


def _remove(path: str) -> None:
    """A half-written output is deleted, so no truncated file is ever left to be loaded."""
    if os.path.exists(path):
        os.remove(path)


def _write_side_files(directory: str, config: dict | None, files: dict[str, str]) -> None:
    if config is not None:
        with open(os.path.join(directory, "config.json"), "w", encoding="utf-8") as f:
            json.dump(config, f, indent=2)
    for name, text in files.items():
        if name == "config.json":
            continue
        with open(os.path.join(directory, name), "w", encoding="utf-8") as f:
            f.write(text)


def _dest_dir(dest: str, default_file: str) -> tuple[str, str]:
    """dest is a directory, or a file path inside one: (directory, weights file path)."""
    if dest.endswith(".safetensors"):
        directory = os.path.dirname(os.path.abspath(dest))
        os.makedirs(directory, exist_ok=True)
        return directory, dest
    os.makedirs(dest, exist_ok=True)
    return dest, os.path.join(dest, default_file)


def _to_safetensors(src: _Source, dest: str, dtype: str, progress) -> str:
    directory, path = _dest_dir(dest, "model.safetensors")
    np_dtype = _numpy_dtype(dtype)
    items = [(t.name, dtype, t.shape) for t in src.tensors]
    write_safetensors(path, items, lambda i: src.read(src.tensors[i]).astype(np_dtype),
                      {"format": "pt"}, progress)
    if src.config is not None:
        config = dict(src.config, torch_dtype={"F32": "float32", "F16": "float16", "BF16": "bfloat16"}[dtype])
        config.pop("dtype", None)
    else:
        config = None
    _write_side_files(directory, config, src.tokenizer_files)
    return directory


MLX_CHUNK_ROWS = 4096  # rows quantized per step: the uint32 codes of a big matrix stay small


def mlx_quantize(w: np.ndarray, bits: int, group_size: int, dtype: str = "F16"):
    """MLX affine quantization of the last axis: (packed uint32, scales, biases).

    Each group of `group_size` values is w ~ scale * q + bias with q in [0, 2**bits - 1],
    scale = (max - min) / (2**bits - 1), bias = min; codes are packed 32 // bits per uint32,
    first value in the lowest bits. Codes are computed against the stored (rounded) scale and
    bias, so that dequantizing the file gives the closest grid point.
    """
    rows = w.reshape(-1, w.shape[-1])
    n, cols = rows.shape
    np_dtype = _numpy_dtype(dtype)
    packed = np.empty((n, cols * bits // 32), np.uint32)
    scales = np.empty((n, cols // group_size), np_dtype)
    biases = np.empty((n, cols // group_size), np_dtype)
    levels = (1 << bits) - 1
    per_word = 32 // bits
    shifts = np.arange(per_word, dtype=np.uint32) * bits
    for start in range(0, n, MLX_CHUNK_ROWS):
        part = slice(start, min(n, start + MLX_CHUNK_ROWS))
        groups = rows[part].astype(np.float32).reshape(-1, cols // group_size, group_size)
        lo, hi = groups.min(axis=-1), groups.max(axis=-1)
        scales[part] = np.maximum((hi - lo) / levels, 1e-7)
        biases[part] = lo
        s32, b32 = scales[part].astype(np.float32)[..., None], biases[part].astype(np.float32)[..., None]
        q = np.clip(np.rint((groups - b32) / s32), 0, levels).astype(np.uint32)
        q = q.reshape(q.shape[0], -1, per_word) << shifts
        packed[part] = np.bitwise_or.reduce(q, axis=-1)
    lead = w.shape[:-1]
    return packed.reshape(*lead, -1), scales.reshape(*lead, -1), biases.reshape(*lead, -1)


def _mlx_quantizable(t: _Tensor, bits: int, group_size: int) -> bool:
    return (len(t.shape) == 2 and t.name.endswith(".weight") and "norm" not in t.name
            and t.shape[-1] % group_size == 0)


def _to_mlx(src: _Source, dest: str, dtype: str, bits: int, group_size: int, progress) -> str:
    directory, path = _dest_dir(dest, "model.safetensors")
    np_dtype = _numpy_dtype(dtype)
    items: list[tuple[str, str, tuple[int, ...]]] = []
    origin: list[tuple[int, int]] = []  # item -> (source tensor, part: -1 plain, 0 weight, 1 scales, 2 biases)
    for k, t in enumerate(src.tensors):
        if _mlx_quantizable(t, bits, group_size):
            base = t.name[: -len(".weight")]
            lead, cols = t.shape[:-1], t.shape[-1]
            items += [(t.name, "U32", (*lead, cols * bits // 32)),
                      (base + ".scales", dtype, (*lead, cols // group_size)),
                      (base + ".biases", dtype, (*lead, cols // group_size))]
            origin += [(k, 0), (k, 1), (k, 2)]
        else:
            items.append((t.name, dtype, t.shape))
            origin.append((k, -1))
    cache: dict[int, tuple] = {}

    def produce(i: int) -> np.ndarray:
        k, part = origin[i]
        if part == -1:
            return src.read(src.tensors[k]).astype(np_dtype)
        if k not in cache:
            cache.clear()  # one quantized tensor at a time
            cache[k] = mlx_quantize(src.read(src.tensors[k]), bits, group_size, dtype)
        return cache[k][part]

    total = len(src.tensors)

    def tensor_progress(done: int, _n: int, name: str) -> None:
        k, part = origin[done - 1]
        if part in (-1, 2):
            _report(progress, k + 1, total, src.tensors[k].name)

    write_safetensors(path, items, produce, {"format": "mlx"}, tensor_progress)
    config = dict(src.config) if src.config is not None else {}
    config["quantization"] = {"group_size": group_size, "bits": bits}
    config["quantization_config"] = dict(config["quantization"])
    config["torch_dtype"] = {"F32": "float32", "F16": "float16", "BF16": "bfloat16"}[dtype]
    _write_side_files(directory, config, src.tokenizer_files)
    return directory


_FILE_TYPE = {"F32": 0, "F16": 1, "Q4_0": 2, "Q8_0": 7}


def _gguf_type(name: str, shape: tuple[int, ...], dtype: str):
    """llama.cpp's choice: 1-D tensors (norms, biases) stay F32; rows that do not fit the block
    size fall back to F16."""
    from gguf import GGML_QUANT_SIZES
    from gguf import GGMLQuantizationType as Q

    if len(shape) < 2 or dtype == "F32":
        return Q.F32
    qtype = Q[dtype]
    if shape[-1] % GGML_QUANT_SIZES[qtype][0]:
        return Q.F16
    return qtype


def _to_gguf(src: _Source, dest: str, dtype: str, progress) -> str:
    import gguf

    if dest.endswith(".gguf"):
        os.makedirs(os.path.dirname(os.path.abspath(dest)), exist_ok=True)
        path = dest
    else:
        os.makedirs(dest, exist_ok=True)
        path = os.path.join(dest, f"model.{dtype}.gguf")
    ckpt = src.ckpt
    if ckpt.format == "gguf":
        # Same names and layout: no (un)permutation, metadata and tokenizer copied as stored.
        arch = _kv(ckpt, "general.architecture", "llama")
        plan = src.tensors
    else:
        if src.config is None:
            raise ConvertError(f"{ckpt.source!r} has no config.json, so the GGUF hyperparameters "
                               "(heads, layers, rope) cannot be derived.")
        arch = "llama"
        plan = []
        for t in src.tensors:
            name = hf_to_gguf(t.name)
            if name is None:
                warnings.warn(f"convert: {t.name!r} has no GGUF llama name; left out.", stacklevel=3)
                continue
            heads = _rope_heads(t.name, src.config)
            inner = t.transform
            if heads:
                def transform(w, h=heads, inner=inner):
                    return permute_qk(inner(w) if inner else w, h)
            else:
                transform = inner
            plan.append(_Tensor(name, t.source, t.shape, transform))
    partial = path + ".partial"
    writer = gguf.GGUFWriter(partial, arch)
    try:
        if ckpt.format == "gguf":
            _copy_gguf_metadata(writer, ckpt)
        else:
            name = (src.config.get("_name_or_path") or os.path.basename(os.path.normpath(ckpt.source)))
            _add_llama_metadata(writer, src.config, str(name))
            rows = next((t.shape[0] for t in plan if t.name == "token_embd.weight"), 0)
            _add_tokenizer_metadata(writer, src.tokenizer_files, src.config, rows)
        writer.add_file_type(_FILE_TYPE[dtype])
        if dtype in ("Q8_0", "Q4_0"):
            writer.add_quantization_version(gguf.GGML_QUANT_VERSION)
        types = [_gguf_type(t.name, t.shape, dtype) for t in plan]
        for t, qtype in zip(plan, types):
            nbytes = math.prod(gguf.quant_shape_to_byte_shape(t.shape, qtype)) if t.shape else 4
            writer.add_tensor_info(t.name, t.shape, np.dtype(np.float32), nbytes, raw_dtype=qtype)
        writer.write_header_to_file()
        writer.write_kv_data_to_file()
        writer.write_ti_data_to_file()
        for i, (t, qtype) in enumerate(zip(plan, types)):
            arr = np.ascontiguousarray(src.read(t))
            writer.write_tensor_data(gguf.quantize(arr, qtype))
            _report(progress, i + 1, len(plan), t.name)
        writer.close()
        os.replace(partial, path)
    finally:
        writer.close()
        _remove(partial)
    return path


# -- the entry point -----------------------------------------------------------------------------


def convert(source, dest: str | os.PathLike, format: str = "safetensors", dtype: str | None = None,  # noqa: A002
            bits: int = 4, group_size: int = 64, progress: Progress | None = None) -> str:
    """Write `source` (a path or an open Checkpoint) as another format; returns the path written.

    format="safetensors": dtype F32 (default), BF16 or F16, dequantized; `dest` is a directory
        (model.safetensors, config.json, tokenizer files) or a path ending in .safetensors.
    format="gguf": dtype F16 (default), Q8_0, Q4_0 or F32, quantized with gguf-py; `dest` is a
        .gguf path or a directory (model.<dtype>.gguf inside). Metadata and tokenizer are copied
        from a GGUF source, or derived from config.json / tokenizer.json.
    format="mlx": affine `bits` (4 or 8) with `group_size` (32 or 64); scales, biases and the
        unquantized tensors in `dtype` (default: the source's float dtype, F16 for quantized
        sources); `dest` is a directory.
    progress(done, total, tensor_name) is called after each tensor is written.
    """
    dest = os.fspath(dest)
    if format not in FORMATS:
        raise ConvertError(f"format must be one of {', '.join(FORMATS)}; got {format!r}.")
    if format == "safetensors":
        dtype = dtype or "F32"
        allowed = SAFETENSORS_DTYPES
    elif format == "gguf":
        dtype = dtype or "F16"
        allowed = GGUF_DTYPES
    else:
        allowed = SAFETENSORS_DTYPES
        if bits not in MLX_BITS or group_size not in MLX_GROUP_SIZES:
            raise ConvertError(f"MLX conversion takes bits in {MLX_BITS} and group_size in "
                               f"{MLX_GROUP_SIZES}; got bits={bits}, group_size={group_size}.")
    if dtype is not None and dtype not in allowed:
        raise ConvertError(f"dtype for {format} must be one of {', '.join(allowed)}; got {dtype!r}.")
    ckpt = _open(source)
    try:
        src = _load_source(ckpt, keep_gguf=format == "gguf")
        if format == "safetensors":
            return _to_safetensors(src, dest, dtype, progress)
        if format == "gguf":
            return _to_gguf(src, dest, dtype, progress)
        return _to_mlx(src, dest, dtype or src.float_dtype, bits, group_size, progress)
    finally:
        if ckpt is not source:  # opened here: close it; a caller's Checkpoint stays open
            ckpt.close()
