"""The expected tensors from transformers itself: the model class built on the meta device (no
memory, no weights, never code from the model folder: `trust_remote_code` is never set).

Two namings come out of one build. `Expected.shapes` is the state dict put back into checkpoint
naming the way save_pretrained writes it (transformers 5 fuses some weights at load), for the
shape checks and renames; `Expected.rules` is what loading does (load_rules.py): the state dict
in the model's own naming, `base_model_prefix`, the renamings and converters the loader applies
(legacy ones included), the tied pairs and the ignore patterns, taken from the built model.
"""

from __future__ import annotations

import json
from functools import lru_cache

from .expected import MAX_BUILD, Expected
from .load_rules import INV_FREQ, POSITION_IDS, LoadRules

# the auto classes a library's loader uses, by the task it names (sentence-transformers' names)
AUTO_CLASSES = {"auto": "MODEL_MAPPING", "feature-extraction": "MODEL_MAPPING",
                "sequence-classification": "MODEL_FOR_SEQUENCE_CLASSIFICATION_MAPPING",
                "fill-mask": "MODEL_FOR_MASKED_LM_MAPPING", "text-generation": "MODEL_FOR_CAUSAL_LM_MAPPING"}


class NotBuildable(Exception):
    """transformers cannot build this config (unknown model_type, bad values); the message says why."""


def from_transformers(config: dict, loader: str | None = None) -> Expected:
    """Build the model named by config.json on the meta device and list its state dict.

    loader: None builds the class config.json's `architectures` names (the causal-LM or base
    class when it names none); a key of AUTO_CLASSES builds the class that auto class picks for
    this config ("auto": what `AutoModel.from_pretrained(path)` builds).
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
    return _cached_build(key, AUTO_CLASSES.get(loader) if loader else None)


@lru_cache(maxsize=16)
def _cached_build(key: str, mapping: str | None) -> Expected:
    return _build(json.loads(key), mapping)


def _config(config: dict):
    import transformers
    from transformers import AutoConfig

    model_type = config.get("model_type")
    if not isinstance(model_type, str):
        raise NotBuildable("config.json has no model_type")
    # Never code from the folder: auto_map names modules there, so it goes.
    kwargs = {k: v for k, v in config.items() if k not in ("model_type", "auto_map", "transformers_version")}
    try:
        return AutoConfig.for_model(model_type, **kwargs)
    except (ValueError, KeyError) as e:
        raise NotBuildable(f"transformers {transformers.__version__} does not know model_type "
                           f"{model_type!r} ({str(e).splitlines()[0][:120]})") from None
    except MemoryError:  # the process's limit, not the config's fault: the caller reports it
        raise
    except Exception as e:  # noqa: BLE001 - a config class rejecting values
        raise NotBuildable(f"transformers rejects the config: {type(e).__name__}: {str(e)[:200]}") from None


def _class(config: dict, cfg, mapping: str | None):
    import transformers
    from transformers.models.auto import modeling_auto

    classes = config.get("architectures")
    if mapping is None and isinstance(classes, list) and classes and isinstance(classes[0], str):
        candidate = getattr(transformers, classes[0], None)
        if isinstance(candidate, type) and issubclass(candidate, transformers.PreTrainedModel):
            return candidate
    for name in (mapping,) if mapping else ("MODEL_FOR_CAUSAL_LM_MAPPING", "MODEL_MAPPING"):
        try:
            return getattr(modeling_auto, name)[type(cfg)]
        except (KeyError, AttributeError):
            continue
    raise NotBuildable(f"transformers has no model class for {classes or config.get('model_type')!r}"
                       + (f" in {mapping}" if mapping else ""))


def _build(config: dict, mapping: str | None) -> Expected:
    import logging
    import warnings

    import torch
    import transformers

    logging.getLogger("transformers").setLevel(logging.ERROR)
    cfg = _config(config)
    cls = _class(config, cfg, mapping)
    try:
        with warnings.catch_warnings(), torch.device("meta"):
            warnings.simplefilter("ignore")
            model = cls._from_config(cfg)
    except MemoryError:
        raise
    except Exception as e:  # noqa: BLE001 - the model's __init__ rejecting the config
        raise NotBuildable(f"{cls.__name__} cannot be built from this config: {type(e).__name__}: "
                           f"{str(e)[:200]}") from None
    state = model.state_dict()
    own = {name: tuple(int(d) for d in t.shape) for name, t in state.items()}
    try:  # transformers 5 fuses some weights at load; save_pretrained reverts that naming
        from transformers.core_model_loading import revert_weight_conversion

        state = revert_weight_conversion(model, dict(state))
    except Exception:  # noqa: BLE001 - older transformers, or a conversion meta tensors cannot do
        pass
    prefix = getattr(model, "base_model_prefix", None)
    e = Expected(f"transformers {transformers.__version__} {cls.__name__} (meta device)",
                 prefix=prefix, class_name=cls.__name__)
    e.base = not prefix or not any(n.startswith(prefix + ".") for n in own)
    for name, t in state.items():
        e.shapes[name] = tuple(int(d) for d in t.shape)
    e.required = set(e.shapes)
    tied = dict(getattr(model, "all_tied_weights_keys", None) or {})
    if not tied and not hasattr(model, "all_tied_weights_keys"):  # transformers 4: targets only
        old = getattr(model, "_tied_weights_keys", None) or {}
        if isinstance(old, (list, tuple, set)):
            old = {t: "model.embed_tokens.weight" for t in old}
        if getattr(cfg, "tie_word_embeddings", False) or _text_tied(cfg):
            tied = dict(old)
    e.tied = dict(tied)
    for target in tied:
        if target.endswith("lm_head.weight"):
            e.head = target
    if e.head is None and "lm_head.weight" in e.shapes:
        e.head = "lm_head.weight"
    e.ignore_missing = [str(p) for p in (getattr(model, "_keys_to_ignore_on_load_missing", None) or [])]
    e.ignore_unexpected = [str(p) for p in (getattr(model, "_keys_to_ignore_on_load_unexpected", None) or [])]
    buffers = [n for n, _ in model.named_buffers()]
    extra = ([INV_FREQ] if any(n.endswith("rotary_emb.inv_freq") for n in buffers) else []) + \
        ([POSITION_IDS] if any(n.endswith("position_ids") for n in buffers) else [])
    e.ignore_unexpected += extra
    e.rules = LoadRules(own, prefix, _renamer(model, own), tuple(tied.items()), tuple(e.ignore_missing),
                        tuple(e.ignore_unexpected), cls.__name__)
    return e


def _renamer(model, keys: dict):
    """The loader's own renamings and converters for this model (legacy ones included), as a
    function of one stored name; the legacy list alone when this transformers has none."""
    try:
        from transformers.conversion_mapping import get_model_conversion_mapping
        from transformers.core_model_loading import WeightConverter, WeightRenaming, rename_source_key
    except ImportError:
        from .load_rules import legacy_rename

        return legacy_rename
    conversions = get_model_conversion_mapping(model)
    renamings = [c for c in conversions if isinstance(c, WeightRenaming)]
    converters = [c for c in conversions if isinstance(c, WeightConverter)]
    targets = {p: c.target_patterns for c in converters for p in c.source_patterns}

    def rename(name: str):
        renamed, pattern = rename_source_key(name, renamings, converters)
        if pattern is None:
            return renamed, None
        first, *rest = targets.get(pattern, [renamed])
        return renamed, [renamed.replace(first, k) for k in rest]

    return rename


def _text_tied(cfg) -> bool:
    text = getattr(cfg, "text_config", None)
    return bool(getattr(text, "tie_word_embeddings", False)) if text is not None else False
