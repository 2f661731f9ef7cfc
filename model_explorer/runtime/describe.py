"""What a checkpoint is to the run cell before any weight is read: its hyperparameters
(ModelConfig, from GGUF metadata or config.json) and its tokenizer, or the refusal that says why
not, and what llama-cpp-python would add for a GGUF the numpy decoder does not run."""

from __future__ import annotations

from ..model.config import ModelConfig, UnsupportedModel, from_hf
from ..model.config_gguf import engine_config, from_gguf
from ..model.findings import MODEL_CODES
from ..model.tokenizer import Tokenizer
from ..model.tokenizer import from_directory as tokenizer_from_directory
from ..model.tokenizer import from_gguf as tokenizer_from_gguf


def describe(ckpt, path: str, engine: bool = False) -> tuple[ModelConfig, Tokenizer | None, str | None]:
    """Hyperparameters and tokenizer, from GGUF metadata or the files beside the weights. A folder
    without a tokenizer is still a model: the tokenizer comes back None with the reason.
    engine: llama.cpp runs the GGUF, so only its vocabulary and sizes are needed here."""
    from .. import sources

    def refuse(errors) -> None:
        # The model-level findings name the cause (a key prefix, a missing head...): their fix too.
        shown = "; ".join(f.message + (f" Fix: {f.fix}" if f.fix else "") for f in errors[:3])
        raise UnsupportedModel(f"{path!r} has {len(errors)} error(s) and cannot be loaded: {shown} "
                               "(model-explorer doctor lists them all).")

    # Bytes first, then whether the runtime runs this architecture, then whether the tensors fit it.
    unreadable = [f for f in ckpt.errors if f.code not in MODEL_CODES]
    if unreadable:
        refuse(unreadable)
    config = ckpt.metadata.get("config.json")
    if ckpt.format == "gguf":
        cfg = gguf_config(ckpt, engine)
    else:
        cfg = from_hf(config)
    if ckpt.errors and not engine:
        refuse(ckpt.errors)
    if ckpt.format == "gguf":
        if "tokenizer.ggml.tokens" not in ckpt.metadata:  # a converted folder that had no tokenizer
            return cfg, None, "the GGUF metadata has no tokenizer (tokenizer.ggml.tokens)"
        try:
            tok = tokenizer_from_gguf(ckpt.metadata)
            return cfg, tok, tok.problem  # an unknown tokenizer.ggml.pre: split the GPT-2 way
        except UnsupportedModel as e:
            if not engine:
                raise
            return cfg, None, str(e)  # llama.cpp runs the ids; text needs a tokenizer we read
    directory = path if sources.isdir(path) else sources.dirname(path)
    if not sources.exists(sources.join(directory, "tokenizer.json")):
        return cfg, None, f"{directory!r} holds no tokenizer.json"
    return cfg, tokenizer_from_directory(directory, config, ckpt.metadata.get("generation_config.json")), None


def gguf_config(ckpt, engine: bool) -> ModelConfig:
    """from_gguf; for llama.cpp, what it needs of an architecture the numpy decoder refuses; else
    the refusal says what llama-cpp-python would add."""
    from .engines import llamacpp

    try:
        # llama.cpp reads the tensors itself: the layout check is the numpy decoder's only
        return from_gguf(ckpt.metadata, set(ckpt.tensors)) if engine else _numpy_config(ckpt)
    except UnsupportedModel as e:
        if engine:
            return engine_config(ckpt.metadata, set(ckpt.tensors))
        raise UnsupportedModel(str(e) + llamacpp.offer(ckpt.meta("general.architecture"))) from None


def _numpy_config(ckpt) -> ModelConfig:
    cfg = from_gguf(ckpt.metadata, set(ckpt.tensors))
    _check_gguf_layout(cfg)
    return cfg


def _refusal(ckpt) -> str | None:
    try:
        _numpy_config(ckpt)
    except UnsupportedModel as e:
        return str(e)
    return None


def decoder_refusal(path: str) -> str | None:
    """Why the numpy decoder refuses this GGUF, or None when it runs it (the header only: what
    decides whether llama.cpp should run it instead)."""
    from ..opener import open as open_checkpoint

    with open_checkpoint(path) as ckpt:
        return _refusal(ckpt)


def _check_gguf_layout(cfg: ModelConfig) -> None:
    """Refuse what the weights reader would read wrong: GGUF norms after a sublayer (Gemma 2/3,
    OLMo 2: `post_attention_norm`, which an HF-name mapping takes for `ffn_norm`) and stacked
    experts, until it names GGUF tensors by part (tensors.names.gguf_part_name)."""
    from ..tensors.names import gguf_part_name
    from .weights import tensor_name

    needed = [p for p, used in (("attn_out_norm", cfg.sandwich_norms or cfg.post_norms),
                                ("router", bool(cfg.experts))) if used]
    for part in needed:
        try:
            ok = tensor_name(part, 0, True) == gguf_part_name(part, 0)
        except KeyError:
            ok = False
        if not ok:
            raise UnsupportedModel(f"This {cfg.architecture} GGUF needs the run cell to read llama.cpp's "
                                   f"{gguf_part_name(part, 0).replace('blk.0.', 'blk.N.')} by its GGUF name, which "
                                   "it does not do yet (runtime/weights.py).")


def config_of(ckpt) -> ModelConfig | None:
    """The decoder's config of an open checkpoint without its tokenizer; None where the runtime
    does not read it (what a plan made before loading can do without)."""
    try:
        return gguf_config(ckpt, False) if ckpt.format == "gguf" else from_hf(ckpt.metadata.get("config.json"))
    except (UnsupportedModel, ValueError, TypeError, KeyError, AttributeError):
        return None
