"""tokenizer.json / tokenizer_config.json <-> GGUF tokenizer metadata."""

from __future__ import annotations

import json
import warnings
from typing import Any

from ..checkpoint import Checkpoint
from ..ggml import Keys

_TOKEN_NORMAL, _TOKEN_UNUSED, _TOKEN_CONTROL, _TOKEN_USER = 1, 5, 3, 4


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
    """The tokenizer.ggml.pre name whose split matches this tokenizer.json's pre-tokenizer."""
    from ..model.tokenizer import PRE_TOKENIZER_SPLITS

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
