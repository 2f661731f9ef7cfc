"""Architecture-agnostic hyperparameters, each with the place it was read from.

From a Hugging Face config.json (`architectures`, `model_type`, the usual keys and their older
spellings, a multimodal model's `text_config`) or from GGUF `general.architecture` and the
`<arch>.*` keys. Every value is a `Sourced`: the value, the file, the key, and the byte range
of that key/value (or the tensor whose shape it was read from), so a view can select it.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from ..ggml import Keys
from ..records import CheckpointRecord, plain_value
from .sidefiles import side_json

# name -> config.json keys, first found wins (newer spelling first, then GPT-2/T5/Falcon style)
HF_KEYS: dict[str, tuple[str, ...]] = {
    "layers": ("num_hidden_layers", "n_layer", "num_layers", "n_layers"),
    "hidden": ("hidden_size", "n_embd", "d_model", "dim"),
    "heads": ("num_attention_heads", "n_head", "num_heads", "n_heads"),
    "kv_heads": ("num_key_value_heads", "num_kv_heads", "n_head_kv", "multi_query_group_num"),
    "head_dim": ("head_dim",),
    "intermediate": ("intermediate_size", "ffn_dim", "n_inner", "d_ff", "ffn_hidden_size"),
    "moe_intermediate": ("moe_intermediate_size",),
    "vocab": ("vocab_size", "padded_vocab_size"),
    "context": ("max_position_embeddings", "n_positions", "max_seq_len", "seq_length", "n_ctx",
                "max_sequence_length"),
    "rope_theta": ("rope_theta",),
    "rope_scaling": ("rope_scaling",),
    "sliding_window": ("sliding_window",),
    "experts": ("num_local_experts", "num_experts", "n_routed_experts", "moe_num_experts"),
    "experts_per_token": ("num_experts_per_tok", "num_experts_per_token", "moe_topk", "top_k"),
    "tied_embeddings": ("tie_word_embeddings",),
    "kv_lora_rank": ("kv_lora_rank",),
    "q_lora_rank": ("q_lora_rank",),
    "qk_rope_head_dim": ("qk_rope_head_dim",),
    "qk_nope_head_dim": ("qk_nope_head_dim",),
    "v_head_dim": ("v_head_dim",),
    "layer_types": ("layer_types",),
    "torch_dtype": ("torch_dtype", "dtype"),
}
# name -> GGUF key after "<arch>."
GGUF_KEYS: dict[str, str] = {
    "layers": "block_count",
    "hidden": "embedding_length",
    "heads": "attention.head_count",
    "kv_heads": "attention.head_count_kv",
    "head_dim": "attention.key_length",
    "v_head_dim": "attention.value_length",
    "intermediate": "feed_forward_length",
    "moe_intermediate": "expert_feed_forward_length",
    "vocab": "vocab_size",
    "context": "context_length",
    "rope_theta": "rope.freq_base",
    "rope_dims": "rope.dimension_count",
    "sliding_window": "attention.sliding_window",
    "experts": "expert_count",
    "experts_per_token": "expert_used_count",
    "kv_lora_rank": "attention.kv_lora_rank",
    "q_lora_rank": "attention.q_lora_rank",
}
# transformers' defaults for tie_word_embeddings where config.json leaves it out
TIE_DEFAULTS = {"llama": False, "mistral": False, "qwen2": False, "qwen3": False, "phi3": False,
                "gemma": True, "gemma2": True, "gemma3_text": True, "mixtral": False, "gpt2": True,
                "qwen2_moe": False, "qwen3_moe": False, "deepseek_v2": False, "deepseek_v3": False}
LLAMA_FAMILY = {"llama": "Llama", "mistral": "Mistral", "qwen2": "Qwen2", "qwen3": "Qwen3",
                "gemma": "Gemma", "phi3": "Phi-3"}


@dataclass
class Sourced:
    """A value and where it was read: `file` + `key` (+ byte range) or a tensor's shape."""

    value: Any
    source: str  # "config.json" | "gguf" | "tensor" | "derived" | "default"
    key: str = ""
    file: str | None = None
    offset: int | None = None
    length: int | None = None
    tensor: str | None = None

    def to_dict(self) -> dict[str, Any]:
        v = self.value
        if not isinstance(v, (str, int, float, bool, list, dict, type(None))):
            v = str(v)
        return {"value": v, "source": self.source, "key": self.key, "file": self.file,
                "offset": self.offset, "length": self.length, "tensor": self.tensor}

    def where(self) -> str:
        if self.source == "tensor":
            return f"shape of {self.tensor}"
        if self.source in ("derived", "default"):
            return f"{self.source}: {self.key}"
        name = (self.file or "").replace("\\", "/").rsplit("/", 1)[-1] or self.source
        return f"{name} {self.key}"


@dataclass
class HParams:
    """What the model is. `values[name]` is a Sourced; `get(name)` the plain value or None."""

    architecture: str | None  # HF class name or GGUF architecture
    model_type: str | None  # HF model_type, or the GGUF architecture
    origin: str  # "config.json" | "gguf" | "none"
    values: dict[str, Sourced]

    def get(self, name: str, default: Any = None) -> Any:
        s = self.values.get(name)
        return default if s is None or s.value is None else s.value

    @property
    def family(self) -> str | None:
        mt = (self.model_type or "").lower()
        if mt in LLAMA_FAMILY:
            return f"llama family ({LLAMA_FAMILY[mt]})"
        if self.get("kv_lora_rank"):
            return "DeepSeek (multi-head latent attention)"
        if self.get("experts"):
            return "mixture of experts"
        return mt or None

    @property
    def describes_model(self) -> bool:
        """True when the config or GGUF states the layer count and width: a stub config.json
        (only a quantization block, say) or a GGUF of loose tensors is not compared to a model."""
        return all(name in self.values and self.values[name].source in ("config.json", "gguf")
                   for name in ("layers", "hidden"))

    def to_dict(self) -> dict[str, Any]:
        return {"architecture": self.architecture, "model_type": self.model_type, "origin": self.origin,
                "family": self.family, "values": {k: v.to_dict() for k, v in self.values.items()}}


def _is_int(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def read_hparams(ckpt: CheckpointRecord) -> HParams:
    """Hyperparameters from GGUF metadata when the checkpoint is a GGUF, else config.json."""
    cached = ckpt.derived.hparams
    if cached is not None:
        return cached
    if ckpt.format == "gguf" and ckpt.meta(Keys.ARCHITECTURE) is not None:
        hp = _from_gguf(ckpt)
    else:
        hp = _from_config(ckpt)
    _derive(hp, ckpt)
    ckpt.derived.hparams = hp
    return hp


# -- config.json ---------------------------------------------------------------------------------

def _from_config(ckpt: CheckpointRecord) -> HParams:
    cfg = ckpt.metadata.get("config.json")
    if not isinstance(cfg, dict):
        return HParams(None, None, "none", {})
    side = side_json(ckpt, "config.json")
    file = side.path if side else None
    values: dict[str, Sourced] = {}
    # Multimodal models keep the language model's numbers under text_config.
    scope, prefix = cfg, ""
    if not any(k in cfg for k in HF_KEYS["hidden"]) and isinstance(cfg.get("text_config"), dict):
        scope, prefix = cfg["text_config"], "text_config."

    def put(name: str, key: str, value: Any, top: bool = False) -> None:
        full = key if top else prefix + key
        off, ln = side.where(full) if side else (None, None)
        values[name] = Sourced(value, "config.json", full, file, off, ln)

    for name, keys in HF_KEYS.items():
        for key in keys:
            if key in scope and scope[key] is not None:
                put(name, key, scope[key])
                break
    rope = scope.get("rope_parameters")
    if isinstance(rope, dict):
        if "rope_theta" not in values and rope.get("rope_theta") is not None:
            put("rope_theta", "rope_parameters", rope["rope_theta"])
        if "rope_scaling" not in values and rope.get("rope_type", "default") != "default":
            put("rope_scaling", "rope_parameters", {k: v for k, v in rope.items() if k != "rope_theta"})
    if scope.get("use_sliding_window") is False and "sliding_window" in values:
        values["sliding_window"].value = None  # Qwen2 writes a window it does not use
    if cfg.get("model_type") == "gpt2" and "intermediate" in values:
        # GPT2Config reads n_inner (None: 4 x n_embd); a stray intermediate_size is not used
        del values["intermediate"]
        if isinstance(scope.get("n_inner"), int):
            put("intermediate", "n_inner", scope["n_inner"])
    classes = cfg.get("architectures")
    arch = classes[0] if isinstance(classes, list) and classes and isinstance(classes[0], str) else None
    model_type = cfg.get("model_type") if isinstance(cfg.get("model_type"), str) else None
    if arch:
        put("architecture", "architectures", arch, top=True)
    if model_type:
        put("model_type", "model_type", model_type, top=True)
    for key in ("_name_or_path", "name_or_path"):
        if isinstance(cfg.get(key), str):
            put("name_or_path", key, cfg[key], top=True)
            break
    return HParams(arch, model_type, "config.json", values)


# -- GGUF ----------------------------------------------------------------------------------------

def _kv(ckpt: CheckpointRecord, key: str) -> Sourced | None:
    entry = ckpt.metadata.get(key)
    if entry is None:
        return None
    value = plain_value(entry)
    if hasattr(value, "to_list") and key.endswith(("head_count", "head_count_kv")):
        value = value.to_list()  # per-layer head counts (e.g. OpenELM, Gemma 3n)
    return Sourced(value, "gguf", key, getattr(entry, "file", None) or (ckpt.files[0] if ckpt.files else None),
                   getattr(entry, "offset", None), getattr(entry, "length", None))


def _from_gguf(ckpt: CheckpointRecord) -> HParams:
    arch = ckpt.meta(Keys.ARCHITECTURE)
    values: dict[str, Sourced] = {}
    for name, key in GGUF_KEYS.items():
        s = _kv(ckpt, f"{arch}.{key}")
        if s is not None:
            if isinstance(s.value, list):  # per-layer counts: the largest governs memory
                s.value = max((v for v in s.value if _is_int(v)), default=None)
            values[name] = s
    kind = _kv(ckpt, Keys.arch(arch, Keys.ROPE_SCALING_TYPE))
    if kind is not None and kind.value not in (None, "none"):
        scaling = {"rope_type": kind.value}
        factor = ckpt.meta(Keys.arch(arch, Keys.ROPE_SCALING_FACTOR))
        if factor is not None:
            scaling["factor"] = factor
        orig = ckpt.meta(f"{arch}.rope.scaling.original_context_length")
        if orig is not None:
            scaling["original_max_position_embeddings"] = orig
        kind.value = scaling
        values["rope_scaling"] = kind
    for key, name in ((Keys.ARCHITECTURE, "architecture"), (Keys.NAME, "name"),
                      ("general.finetune", "finetune")):
        s = _kv(ckpt, key)
        if s is not None:
            values[name] = s
    values["model_type"] = values["architecture"]
    if "vocab" not in values:
        tokens = _kv(ckpt, Keys.TOKENS)
        if tokens is not None and hasattr(tokens.value, "__len__"):
            tokens.value = len(tokens.value)
            tokens.key += " (its length)"
            values["vocab"] = tokens
    out = ckpt.tensors.get("output.weight")
    values["tied_embeddings"] = Sourced(out is None, "derived", "no output.weight tensor" if out is None
                                        else "output.weight is stored")
    return HParams(arch, arch, "gguf", values)


# -- derived values ------------------------------------------------------------------------------

def _derive(hp: HParams, ckpt: CheckpointRecord) -> None:
    v = hp.values
    hidden, heads = hp.get("hidden"), hp.get("heads")
    if "kv_heads" not in v and _is_int(heads):
        v["kv_heads"] = Sourced(heads, "derived", "no key/value head count: one per attention head")
    if "head_dim" not in v and _is_int(hidden) and _is_int(heads) and heads > 0:
        v["head_dim"] = Sourced(hidden // heads, "derived", f"hidden {hidden} / heads {heads}")
    if "tied_embeddings" not in v and hp.origin == "config.json":
        default = TIE_DEFAULTS.get((hp.model_type or "").lower())
        if default is not None:
            v["tied_embeddings"] = Sourced(default, "default", f"{hp.model_type} default")
    types = hp.get("layer_types")
    if isinstance(types, list):
        sliding = sum(1 for t in types if t == "sliding_attention")
        v["sliding_layers"] = Sourced(sliding, "derived", f"{sliding} of {len(types)} layer_types "
                                      "are sliding_attention")
    elif hp.get("sliding_window") and _is_int(hp.get("layers")):
        pattern = _sliding_pattern(ckpt, hp)
        listed = ckpt.meta(f"{hp.architecture}.attention.sliding_window_pattern") if hp.origin == "gguf" else None
        listed = listed.to_list() if hasattr(listed, "to_list") else listed
        if isinstance(listed, (list, tuple)) and len(listed) == hp.get("layers"):  # one flag per layer
            n = sum(1 for flag in listed if flag)
            v["sliding_layers"] = Sourced(n, "derived", f"{n} of {len(listed)} layers flagged sliding")
        elif pattern:
            n = sum(1 for i in range(hp.get("layers")) if (i + 1) % pattern)
            v["sliding_layers"] = Sourced(n, "derived", f"every layer but each {pattern}th is sliding")
        else:
            v["sliding_layers"] = Sourced(hp.get("layers"), "derived", "sliding_window applies to every layer")
    if "vocab" not in v:
        embed = embedding(ckpt)
        if embed is not None and len(embed.shape) == 2:
            v["vocab"] = Sourced(embed.shape[0], "tensor", "rows", embed.file, *info_span(embed),
                                 tensor=embed.name)
    if "hidden" not in v:
        embed = embedding(ckpt)
        if embed is not None and len(embed.shape) == 2:
            v["hidden"] = Sourced(embed.shape[1], "tensor", "columns", embed.file, *info_span(embed),
                                  tensor=embed.name)


# The families whose sliding layers no key lists: every layer slides but the last of each n
# (Gemma 2 every other layer from layer 0, Gemma 3 five of every six), as transformers' configs
# default them and llama.cpp's set_swa_pattern(n) hard-codes them; keyed by model_type and by
# GGUF architecture.
SLIDING_PATTERN = {"gemma2": 2, "gemma3": 6, "gemma3_text": 6}


def _sliding_pattern(ckpt: CheckpointRecord, hp: HParams) -> int | None:
    cfg = ckpt.metadata.get("config.json")
    if isinstance(cfg, dict):
        scope = cfg.get("text_config") if isinstance(cfg.get("text_config"), dict) else cfg
        p = scope.get("sliding_window_pattern")
        if _is_int(p) and p > 0:
            return p
    if hp.origin == "gguf":
        p = ckpt.meta(f"{hp.architecture}.attention.sliding_window_pattern")
        if _is_int(p) and p > 0:
            return p
    return SLIDING_PATTERN.get((hp.model_type or "").lower())


EMBED_NAMES = ("model.embed_tokens.weight", "token_embd.weight", "transformer.wte.weight",
               "embed_tokens.weight", "model.language_model.embed_tokens.weight",
               "language_model.model.embed_tokens.weight", "tok_embeddings.weight",
               "transformer.word_embeddings.weight", "gpt_neox.embed_in.weight")


def embedding(ckpt: CheckpointRecord):
    """The token embedding's TensorInfo (any common naming), or None."""
    for n in EMBED_NAMES:
        if n in ckpt.tensors:
            return ckpt.tensors[n]
    return None


def info_span(info) -> tuple[int | None, int | None]:
    """The byte range of a tensor's header entry (its data range when the header has none)."""
    span = info.extra.get("info_span") if info.extra else None
    return (span[0], span[1]) if span else (info.offset, info.length)


def parameters_text(n: int) -> str:
    if n <= 0:
        return "0"
    exp = min(int(math.log10(n)) // 3, 4)
    unit = ["", "K", "M", "B", "T"][exp]
    return f"{n / 10 ** (3 * exp):.3g}{unit}"
