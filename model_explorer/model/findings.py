"""The finding codes the model layer raises; their severity, meaning and fix live in the catalog.

`model_finding(code, message, ...)` is `Finding.of` for these codes: the severity and the fix come
from the catalog (codes.py), so a code says the same thing wherever it is raised.
"""

from __future__ import annotations

from typing import Any

from ..codes import CATALOG, Code
from ..spans import Finding

# The codes this layer raises; their severity, meaning and fix live in the one catalog.
MODEL_CODES: dict[str, Code] = {code: CATALOG[code] for code in (
    "key_prefix", "key_prefix_doubled", "lm_head_missing", "transposed_weight", "config_mismatch", "missing_tensors",
    "unexpected_tensors", "shape_mismatch", "unknown_architecture", "model_check_failed",
    "bad_side_file", "tokens_beyond_embedding", "unused_embedding_rows", "special_token_out_of_vocab",
    "missing_pre_tokenizer", "unknown_pre_tokenizer", "tokenizer_mismatch", "no_chat_template", "bad_chat_template", "no_tokenizer",
    "adapter_unpaired", "adapter_rank_mismatch", "adapter_untrained", "adapter_base_mismatch",
    "adapter_base_missing", "adapter_config_invalid",
    "head_initialised", "head_dropped", "stale_buffers", "library_layout", "library_module_missing",
    # issue 34: chat templates, tokenizer files, generation config, custom code
    "chat_template_escape", "chat_template_injected_text", "chat_template_content_gate", "chat_template_date_gate",
    "chat_template_gate", "chat_template_prefill", "chat_template_drops_content",
    "chat_template_include", "chat_template_decode", "chat_template_differs", "hidden_text", "bidi_override",
    "injection_text", "normalizer_rewrites", "special_token_not_special", "generation_stop_suppressed",
    "generation_refusal_suppressed", "generation_forced_tokens", "generation_cannot_end", "remote_code",
    "remote_code_exec", "remote_code_native", "remote_code_unchecked")}


def model_finding(code: str, message: str, *, offset: int | None = None, length: int | None = None,
                  tensor: str | None = None, file: str | None = None, **extra: Any) -> Finding:
    if code not in MODEL_CODES:
        raise ValueError(f"{code!r} is not a model-layer code: add it to MODEL_CODES")
    return Finding.of(code, message, offset, length, tensor, file, **extra)
