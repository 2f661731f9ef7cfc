"""The tensors a model's architecture expects, with their shapes: what "will it load" compares against.

Three sources, best first:
- transformers (optional): the architecture named in config.json built on the meta device
  (no memory, no weights, never code from the model folder: `trust_remote_code` is never
  set), its state dict put back into checkpoint naming the way save_pretrained does, its tied
  weights and `_keys_to_ignore_on_load_*` lists taken into account;
- the built-in family tables (families.py: Llama, Mistral, Qwen2/3, Gemma 1-3, Phi-3, OLMo 2,
  SmolLM3, Granite, Mixtral, Qwen-MoE, GPT-2, GPT-NeoX, gpt-oss, DeepSeek-V3) in Hugging Face
  naming, and the llama family's in GGUF naming: no torch, so they are what opening uses;
- for GGUF, gguf-py's tensor tables (`MODEL_TENSORS`, `TENSOR_NAMES`): which names llama.cpp
  knows for `general.architecture`, so anything else is unexpected.
"""

from __future__ import annotations

import importlib.util
import json
import os
import re
from dataclasses import dataclass, field
from functools import lru_cache

from . import families
from .hparams import HParams

# GGUF architectures whose names the built-in llama table lists (gguf-py's tables do the rest)
GGUF_BUILTIN = ("llama", "mistral", "qwen2", "qwen3")
# Beyond these a config is not built (a header's numbers must not size an allocation): the
# largest released models stay well inside them.
MAX_LAYERS = 1024
MAX_BUILD = {"layers": MAX_LAYERS, "hidden": 65536, "intermediate": 1 << 20, "vocab": 1 << 22,
             "heads": 4096, "experts": 4096}


@dataclass
class Expected:
    """Expected names -> shapes (None: any shape). `required` must be present; `tied` maps a
    target to its source (the target may be absent when the source is there and the config ties)."""

    source: str
    shapes: dict[str, tuple[int, ...] | None] = field(default_factory=dict)
    required: set[str] = field(default_factory=set)
    tied: dict[str, str] = field(default_factory=dict)
    head: str | None = None  # the output projection's name
    ignore_missing: list[str] = field(default_factory=list)
    ignore_unexpected: list[str] = field(default_factory=list)
    known: re.Pattern | None = None  # names outside `shapes` that are still not unexpected
    complete: bool = True  # False: `shapes` is not every name the model has (skip unexpected)
    aliases: dict[str, str] = field(default_factory=dict)  # another stored name -> the table's

    def is_ignored_missing(self, name: str) -> bool:
        return any(re.search(p, name) for p in self.ignore_missing)

    def is_ignored_unexpected(self, name: str) -> bool:
        return any(re.search(p, name) for p in self.ignore_unexpected) or bool(
            self.known is not None and self.known.match(name))


def _int(v) -> int | None:
    return v if isinstance(v, int) and not isinstance(v, bool) and v > 0 else None


# -- built-in family tables ----------------------------------------------------------------------

def builtin(hp: HParams, gguf: bool = False, config: dict | None = None,
            max_layers: int = MAX_LAYERS) -> Expected | None:
    """The tensors of a family the explorer knows (families.py) from the hyperparameters, in
    Hugging Face naming, or the llama family's in GGUF naming; None when the family is not known
    or a number it needs is missing. Layers are listed up to `max_layers` (a header's count is not
    trusted to size a table)."""
    if gguf:
        return _gguf_llama(hp, max_layers)
    fam = families.family(hp.model_type)
    shapes = families.layout(hp, config or {}, max_layers) if fam is not None else None
    if shapes is None:
        return None
    e = Expected(f"built-in {fam.label} table", shapes=shapes, head=fam.head)
    e.required = set(shapes) - {fam.head}  # the head is judged with the config's tie setting
    if hp.get("tied_embeddings") is True:
        e.tied[fam.head] = fam.embed
    e.ignore_unexpected = list(fam.ignore_unexpected)
    e.aliases = dict(fam.aliases)
    mtp = _mtp_layers(hp, config or {})
    if mtp:
        e.ignore_unexpected.append(mtp)
    return e


def _mtp_layers(hp: HParams, config: dict) -> str | None:
    """DeepSeek-V3 ships its multi-token-prediction layers after the last block, which
    transformers does not load: a pattern for them."""
    n, layers = config.get("num_nextn_predict_layers"), hp.get("layers")
    if (hp.model_type or "").lower() == "deepseek_v3" and isinstance(layers, int):
        return rf"^model\.layers\.{layers}\b" if not isinstance(n, int) or n >= 1 else None
    return None


def _gguf_llama(hp: HParams, max_layers: int) -> Expected | None:
    """The llama family in GGUF naming (llama.cpp's names for the architectures it shares)."""
    mt = (hp.model_type or "").lower()
    if mt not in GGUF_BUILTIN:
        return None
    h, layers, vocab = _int(hp.get("hidden")), _int(hp.get("layers")), _int(hp.get("vocab"))
    heads, kvh, hd, f = (_int(hp.get("heads")), _int(hp.get("kv_heads")), _int(hp.get("head_dim")),
                         _int(hp.get("intermediate")))
    if not all((h, layers, vocab, heads, kvh, hd, f)):
        return None
    q, kv = heads * hd, kvh * hd
    experts = _int(hp.get("experts"))
    e = Expected(f"built-in {mt} table (GGUF names)")

    def add(name: str, shape, required: bool = True) -> None:
        e.shapes[name] = shape
        if required:
            e.required.add(name)

    add("token_embd.weight", (vocab, h))
    add("output_norm.weight", (h,))
    add("output.weight", (vocab, h), required=False)
    e.head = "output.weight"
    e.tied[e.head] = "token_embd.weight"  # llama.cpp reuses token_embd when output is absent
    for i in range(min(layers, max_layers)):
        g = f"blk.{i}."
        add(g + "attn_norm.weight", (h,))
        add(g + "ffn_norm.weight", (h,))
        add(g + "attn_output.weight", (h, q))
        if not experts:
            add(g + "ffn_down.weight", (h, f))
        add(g + "attn_q.weight", (q, h))
        add(g + "attn_k.weight", (kv, h))
        add(g + "attn_v.weight", (kv, h))
        if experts:  # Mixtral: a router, each projection of every expert stacked
            fe = _int(hp.get("moe_intermediate")) or f
            add(g + "ffn_gate_inp.weight", (experts, h))
            for part, shape in (("gate", (experts, fe, h)), ("up", (experts, fe, h)), ("down", (experts, h, fe))):
                add(g + f"ffn_{part}_exps.weight", shape)
        else:
            add(g + "ffn_gate.weight", (f, h))
            add(g + "ffn_up.weight", (f, h))
        for part, size in (("q", q), ("k", kv), ("v", kv)):  # llama.cpp loads biases when present
            add(g + f"attn_{part}.bias", (size,), required=False)
        if mt == "qwen3":
            add(g + "attn_q_norm.weight", (hd,))
            add(g + "attn_k_norm.weight", (hd,))
    e.shapes["rope_freqs.weight"] = None
    return e


# -- gguf-py's tables -----------------------------------------------------------------------------

@lru_cache(maxsize=64)
def gguf_known(arch: str) -> re.Pattern | None:
    """A pattern matching every tensor name llama.cpp knows for `arch` (gguf-py's tables)."""
    try:
        import gguf
    except ImportError:
        return None
    which = next((a for a, n in gguf.MODEL_ARCH_NAMES.items() if n == arch), None)
    if which is None or which not in gguf.MODEL_TENSORS:
        return None
    parts = []
    for t in gguf.MODEL_TENSORS[which]:
        template = gguf.TENSOR_NAMES.get(t)
        if template:
            parts.append(re.sub(r"\\\{\w+\\\}", r"\\d+", re.escape(template)))
    if not parts:
        return None
    return re.compile(r"^(?:" + "|".join(parts) + r")(?:\.(?:weight|bias|scale|[a-z_]+))?$")


def for_gguf(hp: HParams, max_layers: int = MAX_LAYERS) -> Expected | None:
    """Expected tensors of a GGUF: the built-in table's required set for the llama family, and
    gguf-py's known names for every architecture it lists."""
    arch = hp.architecture or ""
    e = builtin(hp, gguf=True, max_layers=max_layers)
    known = gguf_known(arch)
    if e is None and known is None:
        return None
    if e is None:
        e = Expected(f"gguf-py tensor names for {arch!r}", complete=False)
    else:
        e.source += " + gguf-py tensor names" if known is not None else ""
    e.known = known
    if known is not None:
        e.complete = True  # a name neither listed nor known to llama.cpp is unexpected
    return e


# -- transformers on the meta device ---------------------------------------------------------------

def transformers_available() -> bool:
    """transformers and torch are installed, and MODEL_EXPLORER_TRANSFORMERS is not "0" (importing
    them costs a few seconds on a process's first Hugging Face folder; "0" keeps the built-in table)."""
    if os.environ.get("MODEL_EXPLORER_TRANSFORMERS", "1") == "0":
        return False
    return importlib.util.find_spec("transformers") is not None and importlib.util.find_spec("torch") is not None


class NotBuildable(Exception):
    """transformers cannot build this config (unknown model_type, bad values); the message says why."""


def from_transformers(config: dict) -> Expected:
    """Build the model named by config.json on the meta device and list its state dict.

    Raises NotBuildable when transformers does not know the architecture or rejects the config.
    Results are cached per config, so a notebook that opens one model many times pays once.
    """
    from .hparams import HF_KEYS

    scope = config.get("text_config") if isinstance(config.get("text_config"), dict) else config
    for name, limit in MAX_BUILD.items():
        for key in HF_KEYS[name]:
            v = scope.get(key)
            if isinstance(v, (int, float)) and not isinstance(v, bool) and not 0 <= v <= limit:
                raise NotBuildable(f"config.json {key} = {v} is outside what any released model uses "
                                   f"(0..{limit}), so the architecture was not built")
    key = json.dumps(config, sort_keys=True, default=str)
    return _cached_build(key)


@lru_cache(maxsize=16)
def _cached_build(key: str) -> Expected:
    config = json.loads(key)
    return _build(config)


def _build(config: dict) -> Expected:
    import logging
    import warnings

    import torch
    import transformers
    from transformers import AutoConfig
    from transformers.models.auto import modeling_auto

    model_type = config.get("model_type")
    if not isinstance(model_type, str):
        raise NotBuildable("config.json has no model_type")
    # Never code from the folder: auto_map names modules there, so it goes.
    kwargs = {k: v for k, v in config.items() if k not in ("model_type", "auto_map", "transformers_version")}
    logging.getLogger("transformers").setLevel(logging.ERROR)
    try:
        cfg = AutoConfig.for_model(model_type, **kwargs)
    except (ValueError, KeyError) as e:
        raise NotBuildable(f"transformers {transformers.__version__} does not know model_type "
                           f"{model_type!r} ({str(e).splitlines()[0][:120]})") from None
    except Exception as e:  # noqa: BLE001 - a config class rejecting values
        raise NotBuildable(f"transformers rejects the config: {type(e).__name__}: {str(e)[:200]}") from None
    cls = None
    classes = config.get("architectures")
    if isinstance(classes, list) and classes and isinstance(classes[0], str):
        candidate = getattr(transformers, classes[0], None)
        if isinstance(candidate, type) and issubclass(candidate, transformers.PreTrainedModel):
            cls = candidate
    if cls is None:
        for mapping in ("MODEL_FOR_CAUSAL_LM_MAPPING", "MODEL_MAPPING"):
            try:
                cls = getattr(modeling_auto, mapping)[type(cfg)]
                break
            except (KeyError, AttributeError):
                continue
    if cls is None:
        raise NotBuildable(f"transformers has no model class for {classes or model_type!r}")
    try:
        with warnings.catch_warnings(), torch.device("meta"):
            warnings.simplefilter("ignore")
            model = cls._from_config(cfg)
    except Exception as e:  # noqa: BLE001 - the model's __init__ rejecting the config
        raise NotBuildable(f"{cls.__name__} cannot be built from this config: {type(e).__name__}: "
                           f"{str(e)[:200]}") from None
    state = model.state_dict()
    try:  # transformers 5 fuses some weights at load; save_pretrained reverts that naming
        from transformers.core_model_loading import revert_weight_conversion

        state = revert_weight_conversion(model, dict(state))
    except Exception:  # noqa: BLE001 - older transformers, or a conversion meta tensors cannot do
        pass
    e = Expected(f"transformers {transformers.__version__} {cls.__name__} (meta device)")
    for name, t in state.items():
        e.shapes[name] = tuple(int(d) for d in t.shape)
    e.required = set(e.shapes)
    tied = getattr(model, "all_tied_weights_keys", None)
    if not tied:
        tied = getattr(model, "_tied_weights_keys", None) or {}
        if isinstance(tied, (list, tuple, set)):  # transformers 4: targets only
            tied = {t: "model.embed_tokens.weight" for t in tied}
    if getattr(cfg, "tie_word_embeddings", False) or _text_tied(cfg):
        for target, src in dict(tied).items():
            e.tied[target] = src
    for target in list(getattr(model, "all_tied_weights_keys", {}) or {}):
        if target.endswith("lm_head.weight"):
            e.head = target
    if e.head is None and "lm_head.weight" in e.shapes:
        e.head = "lm_head.weight"
    e.ignore_missing = [str(p) for p in (getattr(model, "_keys_to_ignore_on_load_missing", None) or [])]
    e.ignore_unexpected = [str(p) for p in (getattr(model, "_keys_to_ignore_on_load_unexpected", None) or [])]
    return e


def _text_tied(cfg) -> bool:
    text = getattr(cfg, "text_config", None)
    return bool(getattr(text, "tie_word_embeddings", False)) if text is not None else False
