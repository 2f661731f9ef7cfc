"""Hyperparameters of a decoder the run cell runs, from a GGUF file's `{arch}.*` metadata.

The Hugging Face side (config.json) is config.py; both fill the one ModelConfig the decoder reads.
"""

from __future__ import annotations

from typing import Any

from ..ggml import Keys
from .config import ModelConfig, UnsupportedModel, finite_float

# GGUF `general.architecture` values this decoder runs. llama.cpp writes Mistral as "llama".
GGUF_ARCHITECTURES = ("llama", "mistral", "qwen2")

_MISSING = object()


def from_gguf(metadata: dict[str, Any], tensor_names: set[str] | None = None) -> ModelConfig:
    """Read `{arch}.*` keys; `metadata` maps key -> KeyValue (with `.value`) or plain value."""

    def get(key: str, default: Any = _MISSING) -> Any:
        kv = metadata.get(key)
        if kv is None:
            if default is _MISSING:
                raise UnsupportedModel(f"The GGUF metadata has no {key!r}, which a {arch} model needs.")
            return default
        return getattr(kv, "value", kv)

    arch = get(Keys.ARCHITECTURE, None)
    if arch not in GGUF_ARCHITECTURES:
        raise UnsupportedModel(
            f"GGUF architecture {arch!r} is not supported: load_model runs llama-family decoders "
            f"(general.architecture one of {', '.join(GGUF_ARCHITECTURES)})."
            if arch is not None else
            "The GGUF metadata has no 'general.architecture', so the model type is unknown.")
    hidden = get(Keys.arch(arch, Keys.EMBEDDING_LENGTH))
    heads = get(Keys.arch(arch, Keys.HEAD_COUNT))
    kv_heads = get(Keys.arch(arch, Keys.HEAD_COUNT_KV), heads)
    head_dim = get(Keys.arch(arch, Keys.KEY_LENGTH), None) or get(Keys.arch(arch, Keys.ROPE_DIMENSION_COUNT), None)
    if head_dim is None and isinstance(hidden, int) and isinstance(heads, int) and heads:
        head_dim = hidden // heads
    rope_scaling = None
    scaling_type = get(Keys.arch(arch, Keys.ROPE_SCALING_TYPE), None)
    if scaling_type == "linear":
        rope_scaling = {"rope_type": "linear", "factor": finite_float(get(Keys.arch(arch, Keys.ROPE_SCALING_FACTOR)),
                                                                 "rope.scaling.factor")}
    elif scaling_type not in (None, "none"):
        rope_scaling = {"rope_type": scaling_type}
    names = tensor_names or set()
    extra = {}
    if "rope_freqs.weight" in names:
        # Llama 3.x stores its per-frequency RoPE divisors as a tensor; weights.py reads it.
        extra["rope_freqs_tensor"] = "rope_freqs.weight"
    vocab = get(Keys.arch(arch, Keys.VOCAB_SIZE), None)
    if vocab is None:
        tokens = metadata.get(Keys.TOKENS)
        vocab = len(getattr(tokens, "value", tokens)) if tokens is not None else None
    return ModelConfig(
        architecture=arch,
        vocab_size=vocab,
        hidden_size=hidden,
        intermediate_size=get(Keys.arch(arch, Keys.FEED_FORWARD_LENGTH)),
        num_layers=get(Keys.arch(arch, Keys.BLOCK_COUNT)),
        num_heads=heads,
        num_kv_heads=kv_heads,
        head_dim=head_dim,
        rms_norm_eps=finite_float(get(Keys.arch(arch, Keys.RMS_EPS), 1e-5), "layer_norm_rms_epsilon"),
        rope_theta=finite_float(get(Keys.arch(arch, Keys.ROPE_FREQ_BASE), 10000.0), "rope.freq_base"),
        rope_scaling=rope_scaling,
        max_position_embeddings=get(Keys.arch(arch, Keys.CONTEXT_LENGTH), 2048),
        attention_bias=bool(names) and "blk.0.attn_q.bias" in names,
        tie_word_embeddings=bool(names) and "output.weight" not in names,
        sliding_window=get(Keys.arch(arch, Keys.SLIDING_WINDOW), None) or None,
        gguf_qk_permuted=arch in ("llama", "mistral"),
        extra=extra,
    ).validate()
