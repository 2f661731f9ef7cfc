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
from . import families
from .decoder_config import UnsupportedModel
from .gguf_keys import GGUF_KEYS, HPARAM_NAMES
from .hf_defaults import with_defaults
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
        row = families.lookup(mt)
        if row is not None and row.llama_like:
            return f"llama family ({row.label})"
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
    cached = ckpt.details.get("model_hparams")
    if cached is not None:
        return cached
    if ckpt.format == "gguf" and ckpt.meta(Keys.ARCHITECTURE) is not None:
        hp = _from_gguf(ckpt)
    else:
        hp = _from_config(ckpt)
    _from_tensors(hp, ckpt)
    ckpt.details["model_hparams"] = hp
    return hp


# -- config.json ---------------------------------------------------------------------------------

def _from_config(ckpt: CheckpointRecord) -> HParams:
    cfg = ckpt.metadata.get("config.json")
    side = side_json(ckpt, "config.json")
    return from_config(cfg, side)


def from_config(cfg: Any, side: Any = None) -> HParams:
    """The hyperparameters a config.json says (`side`: where its keys sit in the file, for the
    byte ranges), with the family's defaults and derived values (`derive`): the one reader the
    card, memory, the will-load check and the decoder's config (config.from_hf) share."""
    if not isinstance(cfg, dict):
        return HParams(None, None, "none", {})
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
    row = families.family(cfg.get("model_type"))
    if row is not None and row.intermediate_default_x4 and "intermediate" in values:
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
    hp = HParams(arch, model_type, "config.json", values)
    derive(hp, scope)
    return hp


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
    for name in HPARAM_NAMES:
        s = _kv(ckpt, GGUF_KEYS[name].format(arch=arch))
        if s is not None:
            if isinstance(s.value, list):  # per-layer counts: the largest governs memory
                s.value = max((v for v in s.value if _is_int(v)), default=None)
            values[name] = s
    kind = _kv(ckpt, GGUF_KEYS["rope_scaling_type"].format(arch=arch))
    if kind is not None and kind.value not in (None, "none"):
        scaling = {"rope_type": kind.value}
        factor = ckpt.meta(GGUF_KEYS["rope_scaling_factor"].format(arch=arch))
        if factor is not None:
            scaling["factor"] = factor
        orig = ckpt.meta(GGUF_KEYS["yarn_original_context"].format(arch=arch))
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
    hp = HParams(arch, arch, "gguf", values)
    derive(hp)
    _gguf_window(hp, ckpt)
    return hp


# -- derived values ------------------------------------------------------------------------------

def derive(hp: HParams, scope: dict | None = None) -> None:
    """What the config or GGUF leaves to be derived: one key/value head per head, head_dim as
    hidden / heads, the family's defaults (tie_word_embeddings, the context) for a config.json
    that leaves them out, and which layers slide (`scope`: the config.json, its text_config)."""
    v = hp.values
    hidden, heads = hp.get("hidden"), hp.get("heads")
    if "kv_heads" not in v and _is_int(heads):
        v["kv_heads"] = Sourced(heads, "derived", "no key/value head count: one per attention head")
    if "head_dim" not in v and _is_int(hidden) and _is_int(heads) and heads > 0:
        rope = hp.get("rope_dims") if hp.origin == "gguf" else None
        if _is_int(rope) and rope > hidden // heads:  # as llama.cpp: RoPE turns more (Mistral Nemo)
            v["head_dim"] = Sourced(rope, "derived", f"rope.dimension_count {rope}, more than hidden / heads")
        else:
            v["head_dim"] = Sourced(hidden // heads, "derived", f"hidden {hidden} / heads {heads}")
    scope = scope or {}
    row = families.family(hp.model_type) if hp.origin == "config.json" else None
    if row is not None:
        default = f"{hp.model_type} default"
        if "tied_embeddings" not in v:
            v["tied_embeddings"] = Sourced(row.tie_default, "default", default)
        if "context" not in v and _is_int(row.hf_defaults.get("max_position_embeddings")):
            v["context"] = Sourced(row.hf_defaults["max_position_embeddings"], "default", default)
    # a multimodal model's language model: its text_config names the family whose window applies
    text_row = row or (families.family(scope.get("model_type")) if hp.origin == "config.json" else None)
    if text_row is not None:
        _config_window(hp, text_row, scope)
    elif isinstance(hp.get("layer_types"), list):
        types = hp.get("layer_types")
        sliding = sum(1 for t in types if t == "sliding_attention")
        v["sliding_layers"] = Sourced(sliding, "derived", f"{sliding} of {len(types)} layer_types "
                                      "are sliding_attention")
    elif hp.get("sliding_window") and _is_int(hp.get("layers")) and hp.origin == "config.json":
        pattern = scope.get("sliding_window_pattern")
        _count_sliding(hp, pattern if _is_int(pattern) and pattern > 0 else None)


def _config_window(hp: HParams, row: families.Family, scope: dict) -> None:
    """sliding_window and the sliding layers of a family's config.json, by the rule the decoder
    runs (families.window over transformers' defaults); a window the family does not apply
    is no window."""
    v, layers = hp.values, hp.get("layers")
    merged = with_defaults(row.model_type, scope)
    said = merged.get("no_rope_layers")
    rope_layers = [bool(x) for x in said] if isinstance(said, list) else None
    try:
        size, slides = families.window(row, merged, rope_layers)
    except UnsupportedModel:  # the decoder refuses it; the card shows what the file says
        size, slides = merged.get("sliding_window"), None
    if not size:
        if "sliding_window" in v and v["sliding_window"].value is not None:
            v["sliding_window"].value = None  # written, but not applied (Qwen2 without use_sliding_window)
        return
    if "sliding_window" not in v:
        v["sliding_window"] = Sourced(size, "default", f"{row.model_type} default")
    if slides is not None:
        n, listed = sum(slides), isinstance(scope.get("layer_types"), list)
        v["sliding_layers"] = Sourced(n, "derived", f"{n} of {len(slides)} layer_types are sliding_attention"
                                      if listed else f"{n} of {len(slides)} layers slide ({row.label}'s pattern)")
    elif _is_int(layers):
        v["sliding_layers"] = Sourced(layers, "derived", "sliding_window applies to every layer")


def _gguf_window(hp: HParams, ckpt: CheckpointRecord) -> None:
    """The sliding layers of a GGUF, as config_gguf.py reads them: the file's per-layer flags or
    period, else llama.cpp's rule for the family; a window llama.cpp does not apply is none."""
    v, layers = hp.values, hp.get("layers")
    row = families.by_gguf_arch(hp.architecture, experts=bool(hp.get("experts")))
    if row is not None and not row.gguf_window and "sliding_window" in v:
        v["sliding_window"].value = None
    if not hp.get("sliding_window") or not _is_int(layers):
        return
    listed = ckpt.meta(GGUF_KEYS["sliding_window_pattern"].format(arch=hp.architecture))
    listed = listed.to_list() if hasattr(listed, "to_list") else listed
    if isinstance(listed, (list, tuple)) and len(listed) == layers:  # one flag per layer
        n = sum(1 for flag in listed if flag)
        v["sliding_layers"] = Sourced(n, "derived", f"{n} of {len(listed)} layers flagged sliding")
        return
    pattern = listed if _is_int(listed) and listed > 0 and (row is None or row.norms == "sandwich") else None
    if pattern is None and row is not None and row.window == "layer_types":
        pattern = row.sliding_period
    _count_sliding(hp, pattern)


def _count_sliding(hp: HParams, pattern: int | None) -> None:
    layers = hp.get("layers")
    if pattern:
        n = sum(1 for i in range(layers) if (i + 1) % pattern)
        hp.values["sliding_layers"] = Sourced(n, "derived", f"every layer but each {pattern}th is sliding")
    else:
        hp.values["sliding_layers"] = Sourced(layers, "derived", "sliding_window applies to every layer")


def _from_tensors(hp: HParams, ckpt: CheckpointRecord) -> None:
    """What only the tensors say: the vocabulary and width from the embedding's shape."""
    v = hp.values
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
