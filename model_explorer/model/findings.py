"""The finding codes the model layer raises, each with its usual severity, meaning and fix.

`model_finding(code, message, ...)` fills in the severity and the fix from this table, so a
code says the same thing wherever it is raised. (The project-wide catalog, codes.py, lists
these too once the two meet.)
"""

from __future__ import annotations

from typing import Any, NamedTuple

from ..spans import Finding


class ModelCode(NamedTuple):
    severity: str
    meaning: str
    fix: str = ""


MODEL_CODES: dict[str, ModelCode] = {
    # -- will it load: expected against actual tensors -------------------------------------------
    "key_prefix": ModelCode(
        "error", "Every (or nearly every) tensor name carries a prefix the model's own names lack.",
        "Strip the prefix from the keys before saving (e.g. save model.module.state_dict() after DDP, "
        "model._orig_mod.state_dict() after torch.compile), or rename the keys once: "
        "{k.removeprefix(PREFIX): v for k, v in state_dict.items()}."),
    "lm_head_missing": ModelCode(
        "error", "The output projection is missing and config.json does not tie it to the embedding.",
        "Save the checkpoint with its lm_head.weight, or set \"tie_word_embeddings\": true in "
        "config.json if the head is meant to share the embedding (transformers otherwise "
        "initialises the head at random)."),
    "transposed_weight": ModelCode(
        "error", "A weight's shape is the expected shape reversed: it was stored transposed.",
        "Transpose it back before saving (W.T.contiguous()): nn.Linear stores [out_features, in_features]."),
    "config_mismatch": ModelCode(
        "error", "A hyperparameter in config.json or the GGUF metadata disagrees with the tensor shapes.",
        "Correct the value in config.json (or the GGUF key) to the one the tensors show, or re-export "
        "the weights from the model the config describes."),
    "missing_tensors": ModelCode(
        "error", "Tensors the architecture needs are not in the checkpoint.",
        "Re-export the checkpoint from the full model (save every shard the index names), or check "
        "that config.json describes this model."),
    "unexpected_tensors": ModelCode(
        "warning", "The checkpoint holds tensors the architecture does not use (loaders ignore them).",
        "Nothing, if they are extras (e.g. rotary caches); otherwise check that config.json "
        "describes this model."),
    "shape_mismatch": ModelCode(
        "error", "A tensor's shape differs from the one the architecture and config imply.",
        "Check config.json against the model the weights were saved from."),
    "unknown_architecture": ModelCode(
        "info", "The architecture is not one the expected-tensor tables know; only built-in checks ran.",
        "Install a transformers release that knows the architecture for the full check."),
    "model_check_failed": ModelCode(
        "info", "A model-level check failed on input it did not foresee; the rest still ran.",
        "Report it with the file: the check should have said what is wrong."),
    "bad_side_file": ModelCode(
        "warning", "A side file (tokenizer, chat template, adapter config) cannot be read.",
        "Repair the file at the position given, or download it again."),
    # -- tokenizer and chat template -------------------------------------------------------------
    "tokens_beyond_embedding": ModelCode(
        "error", "The tokenizer has more tokens than the embedding has rows: those ids crash at run time.",
        "Resize the embedding (model.resize_token_embeddings(len(tokenizer))) and re-save, or use "
        "the tokenizer the model was trained with."),
    "unused_embedding_rows": ModelCode(
        "info", "The embedding has more rows than the tokenizer has tokens (padding for speed).", ""),
    "special_token_out_of_vocab": ModelCode(
        "error", "A special-token id (bos/eos/pad/unk) lies outside the vocabulary.",
        "Correct the id in config.json / generation_config.json / the GGUF tokenizer.ggml.*_token_id key."),
    "missing_pre_tokenizer": ModelCode(
        "warning", "A BPE GGUF tokenizer has no tokenizer.ggml.pre: llama.cpp falls back to the default "
        "split and generation quality degrades.",
        "Re-convert with a current convert_hf_to_gguf.py, or set tokenizer.ggml.pre with "
        "gguf_new_metadata.py --special-token ... (the value that matches the original tokenizer)."),
    "no_chat_template": ModelCode(
        "warning", "An instruct/chat model has no chat template.",
        "Add the template the model was tuned with (chat_template.jinja, or chat_template in "
        "tokenizer_config.json / tokenizer.chat_template in a GGUF)."),
    "bad_chat_template": ModelCode(
        "error", "The chat template does not parse as Jinja, or fails on a two-turn conversation.",
        "Fix the template at the line given; compare it with the one the model was tuned with."),
    "no_tokenizer": ModelCode(
        "info", "No tokenizer file was found: the model runs on token ids, not on text.",
        "Add tokenizer.json (and tokenizer_config.json) from the model's repository."),
    # -- adapters --------------------------------------------------------------------------------
    "adapter_unpaired": ModelCode(
        "error", "A LoRA lora_A has no lora_B (or the reverse).",
        "Re-save the adapter with PEFT's save_pretrained; both halves are needed."),
    "adapter_rank_mismatch": ModelCode(
        "error", "A LoRA pair's rank disagrees with adapter_config.json r (or rank_pattern), or the "
        "two halves disagree with each other.",
        "Set r (or rank_pattern for this module) in adapter_config.json to the rank the tensors have."),
    "adapter_untrained": ModelCode(
        "warning", "Every lora_B is all zeros: the adapter changes nothing (untrained or not saved after training).",
        "Save the adapter after training (model.save_pretrained once the trainer is done)."),
    "adapter_base_mismatch": ModelCode(
        "error", "A LoRA pair does not fit the base model's linear layer.",
        "Load the adapter on the base model it was trained for (base_model_name_or_path)."),
    "adapter_base_missing": ModelCode(
        "error", "A LoRA pair targets a module the base model does not have.",
        "Check target_modules and the base model (base_model_name_or_path)."),
    "adapter_config_invalid": ModelCode(
        "error", "adapter_config.json lacks a field the adapter needs (r, lora_alpha, peft_type) or has a bad value.",
        "Write the missing field; PEFT's save_pretrained writes all of them."),
}


def model_finding(code: str, message: str, *, severity: str | None = None, offset: int | None = None,
                  length: int | None = None, tensor: str | None = None, file: str | None = None,
                  fix: str | None = None, **extra: Any) -> Finding:
    entry = MODEL_CODES[code]
    return Finding(severity or entry.severity, code, message, offset, length, tensor, file, extra,
                   entry.fix if fix is None else fix)
