"""The tensors a model's architecture expects, with their shapes: what "will it load" compares against.

Three sources, best first:
- transformers (optional, hf_build.py): the architecture named in config.json built on the meta
  device, with the loading rules its `from_pretrained` applies (load_rules.py);
- the built-in family tables (families.py: Llama, Mistral, Qwen2/3, Gemma 1-3, Phi-3, OLMo 2,
  SmolLM3, Granite, Mixtral, Qwen-MoE, GPT-2, GPT-NeoX, gpt-oss, DeepSeek-V3) in Hugging Face
  naming, and the llama family's in GGUF naming: no torch, so they are what opening uses;
- for GGUF, gguf-py's tensor tables (`MODEL_TENSORS`, `TENSOR_NAMES`): which names llama.cpp
  knows for `general.architecture`, so anything else is unexpected.
"""

from __future__ import annotations

import importlib.util
import os
import re
from dataclasses import dataclass, field
from functools import lru_cache

from . import families
from .gguf_tables import constants
from .hparams import HParams
from .load_rules import INV_FREQ, LoadRules, legacy_rename

# GGUF architectures whose names the built-in llama table lists (gguf-py's tables do the rest)
GGUF_BUILTIN = families.gguf_archs_where(lambda row: row.gguf_llama_table)
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
    prefix: str | None = None  # base_model_prefix: transformers adds or strips it at load
    rules: LoadRules | None = None  # set by the transformers build; derived otherwise
    class_name: str | None = None  # the model class it describes (transformers' name)
    base: bool = False  # the class is the base model (no head of its own)

    def load_rules(self) -> LoadRules:
        """transformers' loading rules for this model (load_rules.py). The transformers build
        sets them from the model itself; a built-in table's come from its fields: names that are
        neither required nor tied are optional (never missing), and a GGUF renames nothing."""
        if self.rules is None:
            optional = set(self.shapes) - self.required - set(self.tied)
            self.rules = LoadRules(
                dict(self.shapes), self.prefix,
                legacy_rename if self.prefix is not None else (lambda n: (n, None)),
                tuple(self.tied.items()),
                tuple(self.ignore_missing) + tuple(rf"^{re.escape(n)}$" for n in sorted(optional)),
                tuple(self.ignore_unexpected), self.class_name or self.source)
        return self.rules

    def model_name(self, name: str) -> str:
        """The name transformers loads a checkpoint-named tensor as (the same but for fused or
        renamed weights)."""
        cache = self.__dict__.setdefault("_model_names", {})
        if name not in cache:
            cache[name] = self.load_rules().target(name)[0]
        return cache[name]

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
    e = Expected(f"built-in {fam.label} table", shapes=shapes, head=fam.head,
                 prefix=fam.blocks.split(".", 1)[0])
    e.required = set(shapes) - {fam.head}  # the head is judged with the config's tie setting
    if hp.get("tied_embeddings") is True:
        e.tied[fam.head] = fam.embed
    e.ignore_unexpected = list(fam.ignore_unexpected) + ([INV_FREQ] if not fam.learned_positions else [])
    e.aliases = dict(fam.aliases)
    mtp = _mtp_layers(hp, config or {})
    if mtp:
        e.ignore_unexpected.append(mtp)
    return e


def as_base(e: Expected) -> Expected:
    """A head class's table as its base model's (what AutoModel builds): the names under the
    base prefix, without it; the head's left out."""
    p = e.prefix
    if not p or not any(n.startswith(p + ".") for n in e.shapes):
        return e
    cut = len(p) + 1
    b = Expected(e.source + ", its base model", complete=e.complete, prefix=p, base=True,
                 ignore_unexpected=list(e.ignore_unexpected), ignore_missing=list(e.ignore_missing))
    b.shapes = {n[cut:]: s for n, s in e.shapes.items() if n.startswith(p + ".")}
    b.required = {n[cut:] for n in e.required if n.startswith(p + ".")}
    return b


def _mtp_layers(hp: HParams, config: dict) -> str | None:
    """DeepSeek-V3 ships its multi-token-prediction layers after the last block, which
    transformers does not load: a pattern for them."""
    n, layers = config.get("num_nextn_predict_layers"), hp.get("layers")
    fam = families.family(hp.model_type)
    if fam is not None and fam.mtp_layers and isinstance(layers, int):
        return rf"^model\.layers\.{layers}\b" if not isinstance(n, int) or n >= 1 else None
    return None


def _gguf_llama(hp: HParams, max_layers: int) -> Expected | None:
    """The llama family in GGUF naming (llama.cpp's names for the architectures it shares)."""
    mt = (hp.model_type or "").lower()
    fam = families.by_gguf_arch(mt)
    if fam is None or not fam.gguf_llama_table:
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
        if fam.qk_norm == "head":
            add(g + "attn_q_norm.weight", (hd,))
            add(g + "attn_k_norm.weight", (hd,))
    e.shapes["rope_freqs.weight"] = None
    return e


# -- gguf-py's tables -----------------------------------------------------------------------------

@lru_cache(maxsize=64)
def gguf_known(arch: str) -> re.Pattern | None:
    """A pattern matching every tensor name llama.cpp knows for `arch` (gguf-py's tables)."""
    gguf = constants()
    if gguf is None:
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


# -- transformers on the meta device (hf_build.py) ------------------------------------------------

def transformers_available() -> bool:
    """transformers and torch are installed, and MODEL_EXPLORER_TRANSFORMERS is not "0" (importing
    them costs a few seconds on a process's first Hugging Face folder; "0" keeps the built-in table)."""
    if os.environ.get("MODEL_EXPLORER_TRANSFORMERS", "1") == "0":
        return False
    return importlib.util.find_spec("transformers") is not None and importlib.util.find_spec("torch") is not None
