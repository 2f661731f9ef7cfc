"""tokenizer.json / tokenizer_config.json <-> GGUF tokenizer metadata."""

from __future__ import annotations

import json
import warnings
from typing import Any

from ..checkpoint import Checkpoint
from ..ggml import Keys

_TOKEN_NORMAL, _TOKEN_UNKNOWN, _TOKEN_CONTROL, _TOKEN_USER, _TOKEN_UNUSED, _TOKEN_BYTE = 1, 2, 3, 4, 5, 6


def tokenizer_json_from_gguf(ckpt: Checkpoint) -> str | None:
    """tokenizer.json for the tokenizer `tokenizer.ggml.*` describes (the one load_model runs)."""
    from ..model.config import UnsupportedModel
    from ..model.tokenizer import from_gguf

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
    tokens = ckpt.meta(Keys.TOKENS)
    out: dict[str, Any] = {"tokenizer_class": "PreTrainedTokenizerFast",
                           "add_bos_token": bool(ckpt.meta(Keys.ADD_BOS, False)),
                           "clean_up_tokenization_spaces": False}
    for name, key in (("bos_token", "bos_token_id"), ("eos_token", "eos_token_id"),
                      ("unk_token", "unknown_token_id"), ("pad_token", "padding_token_id")):
        i = ckpt.meta(f"tokenizer.ggml.{key}")
        if tokens is not None and isinstance(i, int) and 0 <= i < len(tokens):
            out[name] = tokens[i]
    template = ckpt.meta("tokenizer.chat_template")
    if isinstance(template, str):
        out["chat_template"] = template
    return out


def _guess_pre(tj: dict) -> str:
    """The tokenizer.ggml.pre name whose split matches this tokenizer.json's pre-tokenizer
    (model/pretokenizers.py); GPT-2's, with a warning, when none does."""
    from ..model.pretokenizers import pre_name_for

    name = pre_name_for(tj)
    if name is None:
        warnings.warn("convert: the tokenizer's pre-tokenizer matches no tokenizer.ggml.pre name known here; "
                      "the GGUF says 'gpt-2', and llama.cpp will split text the GPT-2 way.", stacklevel=3)
    return name or "gpt-2"


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
    """tokenizer.json -> tokenizer.ggml.* keys; `rows` is the embedding's row count. Byte-level BPE
    becomes llama.cpp's "gpt2" model, sentencepiece-style BPE (byte fallback, "▁" spaces: Llama 2,
    Gemma) its "llama" model, with scores ranking the merges as the merge list does."""
    text = files.get("tokenizer.json")
    if text is None:
        warnings.warn("convert: no tokenizer.json next to the model; the GGUF has no tokenizer.",
                      stacklevel=4)
        return
    tj = json.loads(text)
    model = tj.get("model") or {}
    if model.get("type") != "BPE":
        warnings.warn(f"convert: tokenizer.json is {model.get('type')!r}; only BPE goes into GGUF "
                      "here, so the GGUF has no tokenizer.", stacklevel=4)
        return
    ids = _vocab_ids(tj, rows)
    if not ids:
        warnings.warn(f"convert: tokenizer.json's vocabulary is not a map of tokens to ids below "
                      f"the embedding's {rows} rows; the GGUF has no tokenizer.", stacklevel=4)
        return
    tokens = [ids.get(i, (f"[PAD{i}]", _TOKEN_UNUSED)) for i in range(rows)]
    merges = [m if isinstance(m, str) else " ".join(m) for m in model.get("merges") or []]
    if model.get("byte_fallback"):
        _sentencepiece(writer, tj, tokens, merges)
    else:
        writer.add_tokenizer_model("gpt2")
        writer.add_tokenizer_pre(_guess_pre(tj))
        writer.add_token_list([t for t, _ in tokens])
        writer.add_token_types([k for _, k in tokens])
    if merges:
        writer.add_token_merges(merges)
    _add_specials(writer, files, config, model)


def _sentencepiece(writer, tj: dict, tokens: list[tuple[str, int]], merges: list[str]) -> None:
    """llama.cpp's "llama" tokenizer merges the pair whose result scores highest: a token made by
    the merge of rank r scores -r, so it merges in the order tokenizer.json's list gives."""
    rank: dict[str, int] = {}
    for r, m in enumerate(merges):
        left, _, right = m.partition(" ")
        rank.setdefault(left + right, r)
    scores = [-float(rank.get(t, len(merges))) if kind == _TOKEN_NORMAL else 0.0 for t, kind in tokens]
    unk = (tj.get("model") or {}).get("unk_token")
    kinds = [_TOKEN_BYTE if kind == _TOKEN_NORMAL and len(t) == 6 and t.startswith("<0x") and t.endswith(">")
             else _TOKEN_UNKNOWN if t == unk else kind for t, kind in tokens]
    shape = json.dumps([tj.get("normalizer"), tj.get("pre_tokenizer")])
    writer.add_tokenizer_model("llama")
    writer.add_tokenizer_pre("default")
    writer.add_token_list([t for t, _ in tokens])
    writer.add_token_scores(scores)
    writer.add_token_types(kinds)
    # Llama 2 prepends "▁" to the text (Prepend normalizer or Metaspace "first"); Gemma does not
    writer.add_add_space_prefix('"Prepend"' in shape or '"prepend_scheme": "first"' in shape
                                or '"prepend_scheme": "always"' in shape)


def _add_specials(writer, files: dict[str, str], config: dict, model: dict) -> None:
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
