"""The catalog of finding codes: every code a reader or check can raise, with its severity, what
it means in one line and, where one is known, how to fix it.

This table is the only source of a finding's severity and fix: `Finding.of(code, message, ...)`
(spans.py) looks the code up here, and a caller adds detail to the message only. Where a fix needs
the finding's specifics, it is a template: `$name` is filled from the finding's field `name`.

The tests check that every code raised anywhere is listed here, that every finding the suite
produces agrees with it, and that docs/findings.md (made from this table by
`python -m model_explorer.codes > docs/findings.md`) lists them all.
"""

from __future__ import annotations

from string import Template
from typing import Any, NamedTuple


class Code(NamedTuple):
    severity: str  # the one every finding of this code has
    meaning: str
    fix: str = ""  # may hold $field placeholders, filled from the finding's fields
    # Why no repair can fix it from the checkpoint's bytes; a repair plan lists such a finding as
    # unfixable with this reason and the fix ("": a repair may fix it, or it is no fault).
    unfixable: str = ""


_RE_EXPORT = "Re-export the checkpoint from the original weights with the library that wrote it."
_REINDEX = "Rebuild the index from the shards' own headers: mx.repair(src, dest) (fix rebuild_index)."
_REQUANT = ("Re-export the quantized model with the library that wrote it (save_pretrained of a bitsandbytes "
            "model, llm-compressor for compressed-tensors, the GPTQ or AWQ quantizer), or fix the bits, group "
            "size, config_groups or weight_block_size in config.json to what the tensors fit.")
_TRUST = "Do not load this file with pickle or torch.load(weights_only=False); convert it without running it."

CATALOG: dict[str, Code] = {
    # -- opening: files, directories, formats --------------------------------------------------
    "unknown_format": Code("error", "The first bytes match no format this tool reads."),
    "format_not_read": Code("warning", "The bytes are a weight format this version does not read yet (ONNX, HDF5/Keras, TFLite, Flax msgpack, OpenVINO, legacy GGML...): nothing in the file was checked.",
                            "Open the safetensors or GGUF file of the same model, or inspect this one with its own format's tools."),
    "extension_mismatch": Code("info", "The file name suggests one format but the bytes are another."),
    "mixed_formats": Code("error", "The files of one checkpoint are in different formats."),
    "no_weights": Code("error", "A directory holds no weight file and no index."),
    "several_indexes": Code("info", "A directory holds several index files; the first is read."),
    "several_models": Code("info", "A directory holds several GGUF models; one is read."),
    "bad_config": Code("warning", "config.json or generation_config.json cannot be read as JSON.",
                       "Fix the JSON syntax at the position the message gives; the model's hyperparameters "
                       "are unknown until then."),
    "internal_error": Code("error", "A reader failed on this file; the rest of the checkpoint is still read."),
    # -- safetensors ---------------------------------------------------------------------------
    "header_too_large": Code("error", "The 8-byte header length is larger than the file or the 100 MB cap."),
    "header_past_end": Code("error", "The header length points past the end of the file."),
    "header_not_utf8": Code("error", "The JSON header is not valid UTF-8."),
    "header_not_json": Code("error", "The header is not valid JSON."),
    "header_not_object": Code("error", "The JSON header is not an object."),
    "header_trailing_garbage": Code("error", "Bytes other than spaces follow the JSON header."),
    "metadata_not_object": Code("error", "`__metadata__` is not an object."),
    "metadata_not_string": Code("error", "A `__metadata__` value is not a string (the reference reader rejects it).",
                                "Store metadata values as strings."),
    "lone_surrogate": Code("error", "A header string holds a lone surrogate escape (not Unicode; the reference reader rejects it).",
                           "Rename the tensor or metadata key to valid Unicode."),
    "header_labels_capped": Code("info", "A header with more entries than are labelled in the hexdump; all are still checked."),
    "header_too_many_entries": Code("warning", "A header with more tensors than are listed; the rest are checked one by one but not laid out."),
    "bad_tensor_entry": Code("error", "A tensor entry lacks dtype, shape or data_offsets, or has other keys."),
    "bad_dtype": Code("error", "A tensor's dtype is not a string."),
    "unknown_dtype": Code("error", "A tensor's dtype is not one safetensors defines."),
    "bad_shape": Code("error", "A tensor's shape is not a list of integers."),
    "negative_shape": Code("error", "A tensor's shape has a negative dimension."),
    "shape_too_large": Code("error", "A tensor's shape has more dimensions or elements than any file holds."),
    "bad_offsets": Code("error", "A tensor's data_offsets are not two ordered integers."),
    "size_mismatch": Code("error", "A tensor's byte range does not equal its shape times its dtype size.",
                          "Where one reading fits the bytes, mx.repair(src, dest) corrects the entry (fix fix_entry)."),
    "data_overlap": Code("error", "Two tensors' byte ranges overlap."),
    "data_gap": Code("error", "Bytes between tensors belong to none of them.",
                     "Rewrite the tensors back to back: mx.repair(src, dest) (fix make_contiguous)."),
    "data_past_end": Code("error", "A tensor's bytes run past the end of the file.", _RE_EXPORT),
    "trailing_bytes": Code("warning", "Bytes after the last tensor belong to none.",
                           "Rewrite without them: mx.repair(src, dest) (fix make_contiguous)."),
    "truncated": Code("error", "The file ends before the data its header describes.",
                      "Download or copy the file again; compare its size with the source's."),
    "duplicate_key": Code("error", "A key appears twice in a header: readers keep different copies, and llama.cpp refuses a GGUF with one.",
                          "Keep one copy of the key and write the header again."),
    # -- GGUF ----------------------------------------------------------------------------------
    "bad_magic": Code("error", "The file does not start with 'GGUF'."),
    "unsupported_version": Code("error", "The GGUF version is not 2 or 3."),
    "big_endian": Code("info", "The GGUF file is big-endian."),
    "string_past_end": Code("error", "A string's length runs past the end of the file."),
    "bad_utf8": Code("warning", "A GGUF string is not valid UTF-8."),
    "unknown_value_type": Code("error", "A key/value has a type code GGUF does not define."),
    "array_past_end": Code("error", "An array's length runs past the end of the file."),
    "array_too_deep": Code("error", "Arrays nest deeper than any real file does."),
    "alignment_type": Code("warning", "general.alignment is not a uint32."),
    "bad_alignment": Code("error", "general.alignment is not a positive power of two."),
    "too_many_dims": Code("error", "A tensor has more than 4 dimensions."),
    "unknown_tensor_type": Code("error", "A tensor's ggml type code is unknown."),
    "bad_block_shape": Code("error", "A tensor's row length is not a multiple of its type's block size."),
    "misaligned": Code("error", "A tensor's data offset is not a multiple of the alignment."),
    "tensors_unplaced": Code("warning", "Tensor infos could not all be read, so some tensors have no data range."),
    "duplicate_tensor": Code("error", "A tensor name appears twice (in one file, two shards or two splits).",
                             "Keep one copy; rebuild the index or re-split the model."),
    "split_name": Code("warning", "A GGUF split is not named NAME-0000k-of-0000N.gguf, so its siblings cannot be found.",
                       "Rename the splits to llama.cpp's NAME-00001-of-0000N.gguf pattern."),
    "missing_split": Code("error", "A GGUF split file is missing.", "Download the missing split."),
    "split_number": Code("error", "A split's split.no does not match its place in the file names."),
    "split_tensor_count": Code("error", "split.tensors.count disagrees with the tensors the splits hold."),
    # -- sharded indexes -------------------------------------------------------------------------
    "bad_index": Code("error", "The *.index.json file cannot be read or lacks a weight_map.", _REINDEX),
    "bad_shard_name": Code("error", "The index names a shard path that is not a plain relative path."),
    "missing_shard": Code("error", "A shard the index names does not exist.", "Download the missing shard.",
                          unfixable="The file is not here and no other file holds its tensors."),
    "unreadable_shard": Code("error", "A shard exists but cannot be read."),
    "missing_tensor": Code("error", "The index maps a tensor to a shard that does not hold it.", _REINDEX),
    "orphan_tensor": Code("warning", "A shard holds a tensor the index does not name.", _REINDEX),
    "index_names_twice": Code("warning", "The index names a tensor more than once; JSON readers keep the last mapping.",
                              "Keep one entry per tensor in the index."),
    "total_size_mismatch": Code("warning", "metadata.total_size disagrees with the shards' tensor bytes.", _REINDEX),
    # -- MLX -----------------------------------------------------------------------------------
    "mlx_no_config": Code("warning", "MLX-quantized tensors without a config.json quantization entry; bits and group size inferred.",
                          "Add \"quantization\": {\"bits\": B, \"group_size\": G} to config.json."),
    "mlx_missing_weight": Code("error", "An MLX .scales tensor has no .weight to scale."),
    "mlx_missing_biases": Code("error", "An MLX affine-quantized weight has no .biases."),
    "mlx_missing_scales": Code("error", "A packed uint32 weight in a quantized MLX model has no .scales."),
    "mlx_bad_weight": Code("error", "An MLX-quantized weight is not packed uint32."),
    "mlx_scales_shape": Code("error", "MLX scales/biases shapes do not fit the weight with the stated bits and group size.",
                             "Set bits and group_size in config.json to the values the shapes fit."),
    # -- Hub quantization schemes (GPTQ, AWQ, bitsandbytes, compressed-tensors, FP8, MXFP4) -----
    "quant_inferred": Code("info", "No quantization_config: the scheme, bits and group size were inferred from tensor names and shapes.",
                           "Add the library's quantization_config to config.json."),
    "quant_not_decoded": Code("warning", "A quant_method this tool does not decode: its tensors are shown packed, not as weights.",
                              "Dequantize with the method's own library to inspect values."),
    "quant_config_invalid": Code("warning", "A quantization_config field outside what the library allows; the shapes are used instead.",
                                 "Fix the field in config.json."),
    "quant_no_tensors": Code("warning", "The config names a quantization scheme but no tensor carries its parts.",
                             "Fix quantization_config, or re-export the quantized model."),
    "quant_layout_unknown": Code("warning", "A recognised scheme version whose layout is not documented; shown packed."),
    "quant_scheme_mismatch": Code("error", "config.json says one quantization scheme while the tensors say another; read as the tensors say.",
                                  "Fix quantization_config in config.json to the scheme the tensors use."),
    "quant_packed_shape": Code("error", "A packed weight's shape disagrees with the logical shape or the config.", _REQUANT),
    "quant_groups_mismatch": Code("error", "Scales, zeros, absmax, block scales or a bitmask have the wrong count or shape.", _REQUANT),
    "quant_gidx_length": Code("error", "A GPTQ g_idx does not have one entry per input feature.", "Re-export the quantized model."),
    "quant_missing_companion": Code("error", "A quantized weight lacks a part it needs (scales, zeros, block scales...); it cannot be decoded.",
                                    "Add the missing tensor from the original export, or re-export the quantized model."),
    "quant_state_invalid": Code("error", "A bitsandbytes quant_state blob is not JSON or lacks shape, blocksize or quant_type.",
                                "Re-save the model with save_pretrained from a bitsandbytes-quantized model."),
    # -- the model layer: will it load, tokenizer, adapters (model/) -----------------------------
    "key_prefix": Code("error", "Every (or nearly every) tensor name carries a prefix the model's own names lack.", "Strip the prefix from the keys: {k.removeprefix('$prefix'): v for k, v in state_dict.items()}, then save again (or save the unwrapped model's state_dict: model.module after DDP, model._orig_mod after torch.compile); mx.repair(src, dest) writes a copy without it (fix strip_prefix)."),
    "lm_head_missing": Code("error", "The output projection is missing and config.json does not tie it to the embedding.", "Save the checkpoint with its lm_head.weight, or set \"tie_word_embeddings\": true in config.json if the head is meant to share the embedding (transformers otherwise initialises the head at random)."),
    "transposed_weight": Code("error", "A weight's shape is the expected shape reversed: it was stored transposed.", "Transpose it back before saving (W.T.contiguous()): nn.Linear stores [out_features, in_features]."),
    "missing_tensors": Code("error", "Tensors the architecture needs are not in the checkpoint.", "Re-export the checkpoint from the full model (save every shard the index names), or check that config.json describes this model. Where the message says the names are one module renamed, mx.repair(src, dest) writes a copy with the expected names (fix rename_expected)."),
    "unexpected_tensors": Code("warning", "The checkpoint holds tensors the architecture does not use (loaders ignore them).", "Nothing, if they are extras (e.g. rotary caches); otherwise check that config.json describes this model. Where the message says the names are one module renamed, mx.repair(src, dest) writes a copy with the expected names (fix rename_expected)."),
    "shape_mismatch": Code("error", "A tensor's shape differs from the one the architecture and config imply.", "Check config.json against the model the weights were saved from."),
    "unknown_architecture": Code("info", "The architecture is not one the expected-tensor tables know; only built-in checks ran.", "Install a transformers release that knows the architecture for the full check."),
    "model_check_failed": Code("info", "A model-level check failed on input it did not foresee; the rest still ran.", "Report it with the file: the check should have said what is wrong."),
    "bad_side_file": Code("warning", "A side file (tokenizer, chat template, adapter config) cannot be read.", "Repair the file at the position given, or download it again."),
    "tokens_beyond_embedding": Code("error", "The tokenizer has more tokens than the embedding has rows: those ids crash at run time.", "Resize the embedding (model.resize_token_embeddings(len(tokenizer))) and re-save, or use the tokenizer the model was trained with."),
    "unused_embedding_rows": Code("info", "The embedding has more rows than the tokenizer has tokens (padding for speed)."),
    "special_token_out_of_vocab": Code("error", "A special-token id (bos/eos/pad/unk) lies outside the vocabulary.", "Correct the id in config.json / generation_config.json / the GGUF tokenizer.ggml.*_token_id key."),
    "tokenizer_mismatch": Code("warning", "The two checkpoints' tokenizers encode the same text differently.", "Use the tokenizer the model was converted with (re-convert the GGUF with the right tokenizer.ggml.pre / vocabulary)."),
    "missing_pre_tokenizer": Code("warning", "A BPE GGUF tokenizer has no tokenizer.ggml.pre: llama.cpp falls back to the default split and generation quality degrades.", "Re-convert with a current convert_hf_to_gguf.py, or set tokenizer.ggml.pre with gguf_new_metadata.py --special-token ... (the value that matches the original tokenizer)."),
    "unknown_pre_tokenizer": Code("warning", "A BPE GGUF tokenizer names a tokenizer.ggml.pre this explorer does not know: text is split with GPT-2's rule here, which may differ from the model's own split.", "Compare with the model's tokenizer.json (mx.diff compares two tokenizers); if llama.cpp knows the name, the split there is its own."),
    "no_chat_template": Code("warning", "An instruct/chat model has no chat template.", "Add the template the model was tuned with (chat_template.jinja, or chat_template in tokenizer_config.json / tokenizer.chat_template in a GGUF)."),
    "bad_chat_template": Code("error", "The chat template does not parse as Jinja, or fails on a two-turn conversation.", "Fix the template at the line given; compare it with the one the model was tuned with."),
    "no_tokenizer": Code("info", "No tokenizer file was found: the model runs on token ids, not on text.", "Add tokenizer.json (and tokenizer_config.json) from the model's repository."),
    "adapter_unpaired": Code("error", "A LoRA lora_A has no lora_B (or the reverse).", "Re-save the adapter with PEFT's save_pretrained; both halves are needed."),
    "adapter_rank_mismatch": Code("error", "A LoRA pair's rank disagrees with adapter_config.json r (or rank_pattern), or the two halves disagree with each other.", "Set r (or rank_pattern for this module) in adapter_config.json to the rank the tensors have."),
    "adapter_untrained": Code("warning", "Every lora_B is all zeros: the adapter changes nothing (untrained or not saved after training).", "Save the adapter after training (model.save_pretrained once the trainer is done)."),
    "adapter_base_mismatch": Code("error", "A LoRA pair does not fit the base model's linear layer.", "Load the adapter on the base model it was trained for (base_model_name_or_path)."),
    "adapter_base_missing": Code("error", "A LoRA pair targets a module the base model does not have.", "Check target_modules and the base model (base_model_name_or_path)."),
    "adapter_config_invalid": Code("error", "adapter_config.json lacks a field the adapter needs (r, lora_alpha, peft_type) or has a bad value.", "Write the missing field; PEFT's save_pretrained writes all of them."),
    # -- PyTorch zip / legacy / pickles ---------------------------------------------------------
    "dangerous_import": Code("error", "Loading the pickle would import a callable that can run code, write files or reach the network.", _TRUST),
    "needs_author_classes": Code("warning", "A whole-model pickle builds objects of the author's classes the way pickle saves any object: loading imports their modules and torch.load(weights_only=True) refuses it; no function of the file's choosing is called.",
                                 "Load it only with the author's code installed and trusted, then save the weights alone (torch.save(model.state_dict()) or safetensors); mx.repair(file, out_dir) writes a safetensors copy of its tensors without loading it."),
    "unknown_import": Code("warning", "Loading the pickle would import a name outside the allow-list."),
    "polyglot": Code("warning", "The file is valid as two formats at once (a pickle before or after a zip archive): a pickle reader and a zip reader see different contents."),
    "zip_prefix_bytes": Code("warning", "Bytes precede the zip archive."),
    "several_pickles": Code("warning", "More than one pickle in a file that should hold one."),
    "pickle_trailing_bytes": Code("warning", "Bytes follow the pickle's STOP opcode."),
    "pickle_too_long": Code("warning", "The pickle has more opcodes than are checked; the rest may hide imports."),
    "pickle_emulation": Code("warning", "An opcode could not be followed exactly; later values may be approximate."),
    "pickle_bad_opcode": Code("error", "An opcode's argument is malformed."),
    "pickle_unknown_opcode": Code("error", "A byte is not a pickle opcode."),
    "pickle_truncated": Code("error", "The pickle ends before STOP."),
    "pickle_memo_missing": Code("error", "A GET reads a memo slot never PUT."),
    "pickle_append_target": Code("warning", "APPEND(S) onto something that is not a list, as far as the opcode walk follows the values: the unpickler fails there."),
    "pickle_setitem_target": Code("warning", "SETITEM(S) onto something that is not a dict, as far as the opcode walk follows the values: the unpickler fails there."),
    "pickle_no_mark": Code("error", "An opcode needs a MARK that is not on the stack."),
    "pickle_stack_underflow": Code("error", "An opcode pops more than the stack holds."),
    "pickle_out_of_band": Code("warning", "The pickle asks for out-of-band buffers (protocol 5) a checkpoint never has; unpickling fails without them."),
    "pickle_persistent_id": Code("info", "A plain pickle refers to outside objects by persistent id; only a loader that knows them (such as torch.load) resolves them."),
    "pickle_work_capped": Code("warning", "The pickle asks for more work than its size explains; the walk was cut short."),
    "pickle_imports_capped": Code("warning", "The pickle makes more imports than are kept with their detail; the rest were judged by name, the denied and called ones reported, the others only counted."),
    "opcode_spans_capped": Code("info", "Too many opcodes to label each one; the first are labelled."),
    # -- pickle verdicts by semantics, frames (issue 18) -----------------------------------------
    "unlisted_call": Code("error", "The pickle calls (REDUCE, NEWOBJ, OBJ, INST, BUILD) a name outside the allow-list, so loading runs its code.", _TRUST),
    "pickle_frame_overrun": Code("error", "An opcode runs past the end of its FRAME; pickle.py refuses it and the C unpickler may read other bytes than a scanner.",
                                 "Re-save the object with pickle or torch.save; their frames never split an opcode."),
    "pickle_frame_nested": Code("error", "A FRAME starts inside another frame; pickle.py refuses it and the C unpickler may skip bytes.",
                                "Re-save the object with pickle or torch.save."),
    "pickle_frame_past_end": Code("error", "A FRAME claims more bytes than the pickle has; every unpickler fails there."),
    "pickle_frame_differential": Code("error", "Read the way torch.load reads it, the pickle imports names a straight opcode walk never sees: its frames hide them.", _TRUST),
    "pickle_frame_unchecked": Code("warning", "The pickle's frames are irregular and it is too large to re-read the way the loader does."),
    "embedded_too_deep": Code("error", "Torch files embedded in torch files nest deeper than are read; the deeper ones are not checked.", _TRUST),
    # -- numpy .npy / .npz, torch's legacy tar (issue 18) ------------------------------------------
    "npy_bad_magic": Code("error", "A .npy array does not start with \\x93NUMPY."),
    "npy_bad_version": Code("error", "The .npy version is not 1.0, 2.0 or 3.0."),
    "npy_bad_header": Code("error", "The .npy header is not the literal dict of descr, fortran_order and shape numpy writes."),
    "npy_bad_dtype": Code("error", "The .npy descr is not a numpy dtype."),
    "npy_large_header": Code("warning", "The .npy header is longer than np.load accepts without allow_pickle=True."),
    "npy_truncated": Code("error", "The .npy array data is shorter than its shape and dtype need.",
                          "Download or copy the file again."),
    "npy_trailing_bytes": Code("warning", "Bytes follow the .npy array data."),
    "npy_unaligned": Code("info", "The .npy array data does not start on a 64-byte boundary."),
    "npy_dtype_not_listed": Code("info", "A .npy array's dtype (strings, dates, records) is not one this tool decodes."),
    "npy_object_array": Code("warning", "A .npy array of Python objects: a pickle that np.load(allow_pickle=True) runs.",
                             "Store numeric arrays, or load with allow_pickle=False."),
    "npz_no_arrays": Code("error", "An .npz zip without any .npy member."),
    "tar_not_torch": Code("error", "A tar archive without the storages, tensors and pickle members of torch's legacy format."),
    "tar_member_link": Code("error", "A member torch.load extracts is a link, so loading reads another file."),
    "tar_bad_checksum": Code("error", "A tar header's checksum does not match its bytes."),
    "tar_bad_header": Code("error", "A tar header has no valid size."),
    "tar_truncated": Code("error", "A tar member or a record inside it is cut short.",
                          "Download or copy the file again."),
    "tar_bad_record": Code("error", "A storage or tensor record of torch's legacy tar format is malformed."),
    "persistent_id_other": Code("warning", "A persistent id that torch.load cannot resolve."),
    "persistent_id_module": Code("info", "A persistent id holding a saved module class's source, which torch.load compares but does not run."),
    "torchscript_archive": Code("warning", "A TorchScript archive: its code runs when loaded with torch.jit.load.", _TRUST),
    "no_data_pkl": Code("error", "A zip without the data.pkl torch.save writes."),
    "zip_empty": Code("error", "The zip archive holds no entries."),
    "zip_truncated": Code("error", "The zip archive is cut short."),
    "zip_bad_directory": Code("error", "The zip central directory is malformed."),
    "zip_directory_past_end": Code("error", "The zip central directory lies past the end of the file."),
    "zip_bad_local_header": Code("error", "A zip entry's local header is malformed."),
    "zip_entry_past_end": Code("error", "A zip entry's data runs past the end of the file."),
    "zip_name_mismatch": Code("error", "A zip entry's local name differs from its directory name."),
    "zip_duplicate_entry": Code("error", "Two zip entries share a name (readers disagree on which counts)."),
    "zip_encrypted_entry": Code("error", "A zip entry is encrypted."),
    "zip_multidisk": Code("error", "A multi-disk zip archive."),
    "zip64_bad_record": Code("error", "A ZIP64 record is malformed."),
    "zip_shifted": Code("info", "Zip offsets are shifted by bytes prepended to the archive."),
    "zip_trailing_bytes": Code("warning", "Bytes follow the zip's end record."),
    "zip_compressed_entry": Code("warning", "A torch zip's data.pkl is compressed, which torch.save never does; it is inflated and checked, but its opcodes have no offsets in the file."),
    "zip_bad_deflate": Code("error", "A deflated zip entry does not inflate."),
    "zip_foreign_entry": Code("warning", "The zip holds entries torch.save does not write."),
    "bad_byteorder": Code("error", "The archive's byteorder entry is neither 'little' nor 'big'."),
    "legacy_bad_magic": Code("error", "A legacy torch file without the magic number."),
    "legacy_protocol": Code("warning", "A legacy torch file with an unexpected protocol version."),
    "legacy_bad_keys": Code("error", "A legacy torch file's storage key list is malformed."),
    "legacy_unknown_key": Code("error", "A legacy storage key that the data pickle never used."),
    "legacy_bad_count": Code("error", "A legacy storage's element count is malformed."),
    "legacy_count_mismatch": Code("error", "A legacy storage's element count differs from the pickle's."),
    "legacy_truncated": Code("error", "A legacy torch file ends inside its storages."),
    "bad_persistent_id": Code("error", "A storage reference in the pickle is malformed."),
    "unknown_storage_type": Code("error", "A storage type torch does not define."),
    "missing_storage": Code("error", "A tensor's storage entry is missing from the archive.",
                            "Save the checkpoint again from the model (torch.save writes every storage into the archive).",
                            unfixable="The storage is not in the archive: its tensors cannot be recovered from this file."),
    "storage_too_small": Code("error", "A storage holds fewer bytes than its element count needs."),
    "bad_storage_offset": Code("error", "A tensor's storage offset is not a non-negative integer."),
    "bad_tensor_shape": Code("error", "A tensor's size or stride is malformed."),
    "bad_tensor_dtype": Code("error", "A tensor's dtype is malformed."),
    "tensor_without_storage": Code("error", "A tensor whose storage cannot be found."),
    "view_out_of_bounds": Code("error", "A tensor view reaches past the end of its storage."),
    "bad_embedded_storage": Code("error", "A storage embedded as bytes is malformed."),
    "unused_storage": Code("info", "A storage that no tensor uses."),
    "tensor_not_raw": Code("info", "A tensor whose bytes are not stored raw (no byte range shown)."),
    "array_not_raw": Code("info", "A numpy array whose bytes are not stored raw (no byte range shown)."),
    "array_size_mismatch": Code("error", "A numpy array's bytes disagree with its shape and dtype."),
    "duplicate_tensor_name": Code("info", "Two paths in the pickle give a tensor the same name."),
    "structure_too_deep": Code("warning", "The pickled structure nests deeper than is walked."),
    "structure_too_large": Code("warning", "The pickled structure has more items than are walked."),
    "numpy_array_not_listed": Code("info", "A pickled numpy array of text, objects or records is not a tensor; it is shown in the structure."),
    # -- tensor data (deep checks) --------------------------------------------------------------
    "undecodable": Code("warning", "A tensor's bytes cannot be decoded by this tool; the message says why."),
    "nan_inf": Code("error", "A tensor holds NaN or Inf values.", _RE_EXPORT, unfixable="The values are lost."),
    "all_zero": Code("warning", "A tensor is all zeros."),
    "constant": Code("info", "A tensor holds one value in every element."),
    "norm_far_from_one": Code("info", "A norm weight's mean |w| is far from the usual scale near 1."),
    "fp16_overflow": Code("warning", "A float32/bfloat16 tensor holds values beyond float16's range.",
                          "Keep the model in bfloat16 or float32, or re-convert from the original weights.",
                          unfixable="Values beyond float16's range cannot be brought back in float16."),
    "mlx_bad_scales": Code("error", "MLX scales are zero, NaN or Inf."),
    "tied_weights_differ": Code("warning", "Tensors that config.json ties into one (tie_word_embeddings) differ.",
                                "Re-export the checkpoint from the original weights.",
                                unfixable="Which copy is right cannot be told from the bytes."),
    "config_mismatch": Code("error", "A hyperparameter in config.json or the GGUF metadata disagrees with the tensor shapes.", "Correct the value in config.json (or the GGUF key) to the one the tensors show, or re-export the weights from the model the config describes."),
    # -- layer profile (checks/layers.py) ---------------------------------------------------------
    "layer_outlier": Code("warning", "A layer's tensor is zeroed, or its statistic (norm, std...) lies beyond every other layer of its role many times over: exploded or damaged.",
                          "Compare the layer with the original weights; re-export or restore it."),
    "layer_unusual": Code("info", "A layer's statistic lies off its role's trend but within a few times the other layers' range, as the first and last layers of trained models often do: unusual, not evidence of damage."),
    "layer_duplicate": Code("warning", "Two layers of one role have exactly the same statistics: one looks copied over the other.",
                            "Restore the overwritten layer from the original weights."),
    # -- audits (audits/) -------------------------------------------------------------------------
    "unreadable": Code("error", "The source cannot be opened at all (missing, permission denied, unreachable)."),
    "audit_timeout": Code("error", "Auditing the model took longer than the per-model timeout; it was stopped.",
                          "Rerun with a larger --timeout, or audit the model alone with model-explorer doctor."),
    "audit_memory": Code("error", "Auditing the model needed more memory than the per-model cap; it was stopped.",
                         "Rerun with a larger --memory-limit."),
    "audit_crashed": Code("error", "The process auditing the model died (a crash or a signal); the batch went on.",
                          "Audit the model alone with model-explorer doctor to see the failure."),
    # -- the Hugging Face Hub (hf://, hub.py) -----------------------------------------------------
    "hub_reads": Code("info", "What reading the model from the Hub took: requests, bytes, seconds (headers only, no download)."),
    "hub_not_found": Code("error", "The Hub has no such repo, or it is private and the token used cannot see it.",
                          "Check the name; for a private repo set HF_TOKEN or run `hf auth login` with an account that can read it."),
    "hub_gated": Code("error", "The repo is gated and the token used has not been granted access to its files.",
                      "Accept the conditions on the repo's Hub page, then use that account's token (HF_TOKEN or `hf auth login`)."),
    "hub_forbidden": Code("error", "The Hub refused access (401/403): the token lacks the permission to read the repo.",
                          "Use a token with read access to the repo (HF_TOKEN or `hf auth login`)."),
    "hub_rate_limited": Code("error", "The Hub rate-limited the requests (HTTP 429).",
                             "Wait the time the message gives and retry; requests with a token have a higher limit."),
    "hub_revision_not_found": Code("error", "The repo has no branch, tag or commit of the name after '@'.",
                                   "Use an existing revision: hf://org/repo@main, @v1.0 or a commit hash."),
    "hub_file_not_found": Code("error", "The repo has no file or folder at that path in that revision."),
    "hub_http_error": Code("error", "The Hub answered with an HTTP error not covered by another code."),
    "hub_unreachable": Code("error", "The Hub (HF_ENDPOINT) could not be reached: network, DNS or TLS failure."),
    "hub_not_installed": Code("error", "hf:// needs huggingface_hub, which is not installed.",
                              "pip install 'checkpoint-model-explorer[hub]'"),
    # -- TorchScript code (issue 30, formats/pytorch/torchscript.py) ------------------------------
    "torchscript_call": Code("error", "A TorchScript archive's code calls an operator that reads or writes files or reaches other processes or machines (aten::save, aten::from_file, c10d, RPC, load_library); torch.jit.load compiles it and loading or running the model calls it.",
                             "Do not load it with torch.jit.load or torch.load; mx.repair(file, out_dir) writes its tensors as safetensors without running it."),
    "torchscript_native_op": Code("warning", "A TorchScript archive's code calls an operator or class of a native extension torch does not ship; torch.jit.load fails unless that library is loaded, and what it does is up to the library."),
    "torchscript_code_unread": Code("warning", "A TorchScript source file of the archive could not be read (too large, not inflatable, not tokenizable), so the operators it calls are not checked."),
    # -- loading rules and library layouts (issue 30: transformers' own rules, layouts of other libraries) --
    "head_initialised": Code("warning", "The checkpoint was saved from another class of the same model (a base model under a head class, or a head model under the base class): transformers adds or strips the base prefix and initialises the tensors only this class has at random.", "Load it with the class it was saved from (AutoModel for a base checkpoint) to use it as it is, or train those tensors: they were never in the checkpoint."),
    "head_dropped": Code("info", "A head checkpoint loaded as its base model: transformers strips the base prefix and leaves the head's tensors out.", "Nothing, if the base model is what you want; load it with the head class (config.json's architectures) to keep the head."),
    "stale_buffers": Code("info", "Stored tensors are buffers the model computes itself (position ids, rotary frequencies, causal masks), saved by older code; loaders do not load them.", "Nothing: they are harmless. Drop them when saving again to silence loaders that list them."),
    "library_module_missing": Code("warning", "The library's module list (sentence-transformers' modules.json) names a module whose folder is not beside it: the library's loader fails on it.", "Copy the module's folder (its config.json and weights) from where the model was downloaded, or remove the entry from modules.json if the module is not wanted."),
    "library_layout": Code("info", "The checkpoint was written by a library whose loader differs from a plain transformers folder or a llama.cpp GGUF (sentence-transformers, diffusers, timm, another GGUF writer).", "Load it the way the finding says; the checks compare it with what that loader builds."),
    # -- chat templates, tokenizer files, generation config, custom code (issue 34) --------------
    "chat_template_escape": Code("error", "The chat template reaches Python internals (dunder attributes or keys, the attr filter, names assembled from pieces, Jinja globals chained into them): a sandbox escape that runs commands when an unsandboxed Jinja renders it.", "Do not serve this model with a renderer that is not jinja2's sandbox; replace the template with the one the model family publishes, and treat the rest of the repository as untrusted."),
    "chat_template_injected_text": Code("warning", "The chat template writes text of its own that is not taken from the conversation: instruction idioms, or a system/user turn opened inside a content- or date-gated branch or after the conversation.", "Compare the template with the one the model family publishes and remove the injected text."),
    "chat_template_content_gate": Code("warning", "The chat template branches on words in a message's content: the shape of a planted trigger.", "Compare the template with the one the model family publishes; a template formats turns by role and position."),
    "chat_template_date_gate": Code("warning", "The chat template changes its output depending on the current date (strftime_now / now compared with a value).", "Compare the template with the one the model family publishes; printing the date is normal, branching on it is not."),
    "chat_template_include": Code("warning", "The chat template includes, imports or extends another template: what runs is not in the file.", "Inline the template or replace it with the one the model family publishes."),
    "chat_template_decode": Code("warning", "The chat template decodes text at render time (base64, URL, hex, reversed strings): its output cannot be read in the file.", "Replace the template with the one the model family publishes."),
    "chat_template_differs": Code("warning", "A GGUF's chat template differs from the one its folder ships (tokenizer_config.json / chat_template.jinja).", "Use one template in both: re-convert the GGUF, or set tokenizer.chat_template to the folder's template (gguf_new_metadata.py --chat-template-config)."),
    "hidden_text": Code("warning", "Invisible code points (zero-width, format controls, Unicode tag characters, blank letters) in a chat template, token, metadata string or model card: text a reader does not see and a model reads.", "Remove the invisible characters (the message lists them, and what tag characters spell)."),
    "bidi_override": Code("warning", "Bidi override, embedding or isolate controls (U+202A-U+202E, U+2066-U+2069): the text shown is not the text read (Trojan Source).", "Remove the bidi controls."),
    "injection_text": Code("warning", "A metadata string, special token or model card holds prompt-injection idioms (ignore previous instructions, do not mention this, send your password...).", "Remove the text; a model's metadata describes it, it does not instruct."),
    "normalizer_rewrites": Code("warning", "tokenizer.json has a Replace rule that rewrites words of the text on every encode or decode.", "Remove the Replace rule unless the model's own tokenizer has it (compare with the original tokenizer.json)."),
    "special_token_not_special": Code("warning", "An end or start token id (eos/eot/bos) points at an ordinary vocabulary token: generation stops on a word, or never at the real end of turn.", "Set the id to the tokenizer's own special token (tokenizer_config.json eos_token, tokenizer.ggml.eos_token_id)."),
    "generation_stop_suppressed": Code("warning", "generation_config.json suppresses the end-of-sequence token (suppress_tokens, bad_words_ids, a negative sequence_bias): generation never stops on its own.", "Remove the end token from suppress_tokens / bad_words_ids / sequence_bias."),
    "generation_refusal_suppressed": Code("warning", "generation_config.json suppresses tokens that spell refusals (sorry, cannot, unable...): the model is kept from declining.", "Remove those ids from suppress_tokens / bad_words_ids."),
    "generation_forced_tokens": Code("warning", "generation_config.json forces or favours ordinary text tokens (forced_bos/eos_token_id, forced_decoder_ids, a positive sequence_bias): the output is steered.", "Remove the forcing unless the model needs it (language or task tokens of a translation or speech model)."),
    "generation_cannot_end": Code("warning", "generation_config.json asks for at least as many tokens as the limit or the context allows (min_new_tokens / min_length): the end token is never allowed.", "Lower min_new_tokens / min_length below max_new_tokens / max_length and the context length."),
    "remote_code": Code("info", "config.json auto_map names Python files that transformers runs with trust_remote_code=True (they were read here, never imported).", "Load with trust_remote_code=True only after reading these files, or use a transformers release that has the architecture built in."),
    "remote_code_exec": Code("error", "Custom code named by auto_map runs commands, evaluates code, opens network connections or deletes files when it is imported.", "Do not load this repository with trust_remote_code=True."),
    "remote_code_native": Code("warning", "Custom code named by auto_map loads a native library or compiles an extension when it is imported.", "Read the library's source and origin before loading with trust_remote_code=True."),
    "remote_code_unchecked": Code("warning", "auto_map names code that could not be read here: another repository's (org/repo--module.Class), a missing file, or one that does not parse.", "Read that code before loading with trust_remote_code=True; trust_remote_code downloads and runs it."),
    # -- one severity per code (issue 32): cases that were raised at a second severity -----------
    "key_prefix_doubled": Code("warning", "Tensor names carry the model's own base prefix twice (saved from a wrapper that names its child like the model): transformers' head class strips one and loads them, the base model class and tools that read the names as they are find every tensor missing.",
                               "Strip one prefix from the keys: {k.removeprefix('$prefix'): v for k, v in state_dict.items()}, then save again; mx.repair(src, dest) writes a copy without it (fix strip_prefix)."),
    "quant_param_mismatch": Code("warning", "A quantization_config parameter (bnb_4bit_quant_type...) disagrees with the tensors' own quantization state; the tensors' value is used, as the library does.",
                                 "Set the parameter in config.json's quantization_config to the tensors' value."),
    "quant_shape_inferred": Code("warning", "A compressed-tensors layer has no weight_shape tensor; its input width is taken from the packed width, which padding can make wrong.",
                                 "Add the weight_shape tensor from the original export."),
    "zip_compressed_storage": Code("error", "A tensor storage in a torch zip is compressed: torch.save never does this, and compressed bytes cannot be memory-mapped or shown at their offsets.",
                                   "Re-save the checkpoint with torch.save (its zip stores every storage uncompressed)."),
    "zip_compressed_other": Code("info", "A zip member other than data.pkl and the storages is compressed."),
    "zip_unknown_compression": Code("error", "An .npz member uses a compression method np.load cannot read.",
                                    "Write the archive again with np.savez or np.savez_compressed."),
    "numpy_array_invalid": Code("warning", "A pickled numpy array has a dtype or shape no array can have; it is not listed as a tensor."),
    "norm_exploded": Code("warning", "A norm weight's mean |w| is over 1000: no trained model's norm scales are near that; the weight is unscaled, overwritten or broken.",
                          _RE_EXPORT),
    "tied_weights_close": Code("info", "Two tensors that config.json does not tie are nearly one tensor (cosine above 0.999) but differ: tied once and drifted, or copied."),
}


def lookup(code: str) -> Code | None:
    return CATALOG.get(code)


def fix_for(code: str, fields: dict[str, Any]) -> str:
    """The catalog's fix for `code`, its $placeholders filled from `fields` (a missing one stays
    as written: the suite's finding check reports it)."""
    fix = CATALOG[code].fix
    return Template(fix).safe_substitute(fields) if "$" in fix else fix


def generic_fix(code: str) -> str:
    """The fix of `code` with each $placeholder written as the field's name in capitals (PREFIX),
    for a text about the code rather than one finding (a SARIF rule's help)."""
    return fix_for(code, {name: name.upper() for name in template_fields(code)})


def template_fields(code: str) -> set[str]:
    """The field names the fix of `code` needs."""
    fix = CATALOG[code].fix
    if "$" not in fix:
        return set()
    return {m.group("named") or m.group("braced") for m in Template.pattern.finditer(fix)
            if m.group("named") or m.group("braced")}


def markdown() -> str:
    """The catalog as the Markdown table in docs/findings.md."""
    lines = ["# Finding codes", "",
             "Every code model_explorer can raise, its severity, what it means, and the fix where one",
             "is known (`$name`: filled from the finding's field of that name; \"No repair:\" why",
             "`mx.repair` cannot fix it). Made from `model_explorer/codes.py` by",
             "`python -m model_explorer.codes`.", "",
             "| code | severity | meaning | fix |", "|---|---|---|---|"]
    for code, c in sorted(CATALOG.items()):
        why = c.unfixable[:1].lower() + c.unfixable[1:]
        fix = f"No repair: {why} {c.fix}".rstrip() if c.unfixable else c.fix
        lines.append(f"| `{code}` | {c.severity} | {c.meaning} | {fix} |")
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    print(markdown(), end="")
