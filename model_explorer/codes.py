"""The catalog of finding codes: every code a reader or check can raise, with its usual severity,
what it means in one line and, where one is known, how to fix it.

The tests check that every code raised anywhere is listed here, and that docs/findings.md (made
from this table by `python -m model_explorer.codes > docs/findings.md`) lists them all.
"""

from __future__ import annotations

from typing import NamedTuple


class Code(NamedTuple):
    severity: str  # the usual one; a few codes are raised at more than one
    meaning: str
    fix: str = ""


_RE_EXPORT = "Re-export the checkpoint from the original weights with the library that wrote it."
_REINDEX = "Rebuild the index from the shards' own headers (mx.repair, when it lands)."
_TRUST = "Do not load this file with pickle or torch.load(weights_only=False); convert it without running it."

CATALOG: dict[str, Code] = {
    # -- opening: files, directories, formats --------------------------------------------------
    "unknown_format": Code("error", "The first bytes match no format this tool reads."),
    "extension_mismatch": Code("info", "The file name suggests one format but the bytes are another."),
    "mixed_formats": Code("error", "The files of one checkpoint are in different formats."),
    "no_weights": Code("error", "A directory holds no weight file and no index."),
    "several_indexes": Code("info", "A directory holds several index files; the first is read."),
    "several_models": Code("info", "A directory holds several GGUF models; one is read."),
    "bad_config": Code("warning", "config.json or generation_config.json cannot be read as JSON.",
                       "Fix the JSON syntax at the position the message gives."),
    "internal_error": Code("error", "A reader failed on this file; the rest of the checkpoint is still read."),
    # -- safetensors ---------------------------------------------------------------------------
    "header_too_large": Code("error", "The 8-byte header length is larger than the file or the 100 MB cap."),
    "header_past_end": Code("error", "The header length points past the end of the file."),
    "header_not_utf8": Code("error", "The JSON header is not valid UTF-8."),
    "header_not_json": Code("error", "The header is not valid JSON."),
    "header_not_object": Code("error", "The JSON header is not an object."),
    "header_trailing_garbage": Code("error", "Bytes other than spaces follow the JSON header."),
    "metadata_not_object": Code("error", "`__metadata__` is not an object."),
    "metadata_not_string": Code("warning", "A `__metadata__` value is not a string (the reference reader rejects it).",
                                "Store metadata values as strings."),
    "bad_tensor_entry": Code("error", "A tensor entry lacks dtype, shape or data_offsets, or has other keys."),
    "bad_dtype": Code("error", "A tensor's dtype is not a string."),
    "unknown_dtype": Code("error", "A tensor's dtype is not one safetensors defines."),
    "bad_shape": Code("error", "A tensor's shape is not a list of integers."),
    "negative_shape": Code("error", "A tensor's shape has a negative dimension."),
    "shape_too_large": Code("error", "A tensor's shape has more dimensions or elements than any file holds."),
    "bad_offsets": Code("error", "A tensor's data_offsets are not two ordered integers."),
    "size_mismatch": Code("error", "A tensor's byte range does not equal its shape times its dtype size."),
    "data_overlap": Code("error", "Two tensors' byte ranges overlap."),
    "data_gap": Code("error", "Bytes between tensors belong to none of them."),
    "data_past_end": Code("error", "A tensor's bytes run past the end of the file.", _RE_EXPORT),
    "trailing_bytes": Code("warning", "Bytes after the last tensor belong to none."),
    "truncated": Code("error", "The file ends before the data its header describes.",
                      "Download or copy the file again; compare its size with the source's."),
    "duplicate_key": Code("error", "A key appears twice in a header (the readers keep different copies)."),
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
    "missing_shard": Code("error", "A shard the index names does not exist.", "Download the missing shard."),
    "unreadable_shard": Code("error", "A shard exists but cannot be read."),
    "missing_tensor": Code("error", "The index maps a tensor to a shard that does not hold it.", _REINDEX),
    "orphan_tensor": Code("warning", "A shard holds a tensor the index does not name.", _REINDEX),
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
                                  "Fix quantization_config to match the tensors."),
    "quant_packed_shape": Code("error", "A packed weight's shape disagrees with the logical shape or the config.",
                               "Re-export the quantized model, or fix bits/group size in the config."),
    "quant_groups_mismatch": Code("error", "Scales, zeros, absmax, block scales or a bitmask have the wrong count or shape.",
                                  "Re-export the quantized model, or fix the group size in the config."),
    "quant_gidx_length": Code("error", "A GPTQ g_idx does not have one entry per input feature.", "Re-export the quantized model."),
    "quant_missing_companion": Code("error", "A quantized weight lacks a part it needs (scales, zeros, block scales...); it cannot be decoded.",
                                    "Add the missing tensor from the original export."),
    "quant_state_invalid": Code("error", "A bitsandbytes quant_state blob is not JSON or lacks shape, blocksize or quant_type.",
                                "Re-save the model with save_pretrained."),
    # -- PyTorch zip / legacy / pickles ---------------------------------------------------------
    "dangerous_import": Code("error", "Loading the pickle would import a callable that can run code, write files or reach the network.", _TRUST),
    "unknown_import": Code("warning", "Loading the pickle would import a name outside the allow-list."),
    "polyglot": Code("warning", "The file is also valid as another format (bytes before the zip look like one)."),
    "zip_prefix_bytes": Code("warning", "Bytes precede the zip archive."),
    "several_pickles": Code("warning", "More than one pickle in a file that should hold one."),
    "pickle_trailing_bytes": Code("warning", "Bytes follow the pickle's STOP opcode."),
    "pickle_too_long": Code("warning", "The pickle has more opcodes than are checked; the rest may hide imports."),
    "pickle_emulation": Code("warning", "An opcode could not be followed exactly; later values may be approximate."),
    "pickle_bad_opcode": Code("error", "An opcode's argument is malformed."),
    "pickle_unknown_opcode": Code("error", "A byte is not a pickle opcode."),
    "pickle_truncated": Code("error", "The pickle ends before STOP."),
    "pickle_memo_missing": Code("error", "A GET reads a memo slot never PUT."),
    "pickle_append_target": Code("error", "APPEND(S) onto something that is not a list."),
    "pickle_setitem_target": Code("error", "SETITEM(S) onto something that is not a dict."),
    "pickle_no_mark": Code("error", "An opcode needs a MARK that is not on the stack."),
    "pickle_stack_underflow": Code("error", "An opcode pops more than the stack holds."),
    "pickle_out_of_band": Code("error", "The pickle asks for out-of-band buffers (protocol 5) a checkpoint never has."),
    "pickle_persistent_id": Code("error", "A persistent id that is not torch's storage tuple."),
    "pickle_work_capped": Code("warning", "The pickle asks for more work than its size explains; the walk was cut short."),
    "opcode_spans_capped": Code("info", "Too many opcodes to label each one; the first are labelled."),
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
    "zip_compressed_entry": Code("warning", "A zip entry is compressed, which torch.save never does."),
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
    "missing_storage": Code("error", "A tensor's storage entry is missing from the archive."),
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
    # -- tensor data (deep checks) --------------------------------------------------------------
    "undecodable": Code("warning", "A tensor's bytes cannot be decoded by this tool; the message says why."),
    "nan_inf": Code("error", "A tensor holds NaN or Inf values.", _RE_EXPORT),
    "all_zero": Code("warning", "A tensor is all zeros."),
    "constant": Code("info", "A tensor holds one value in every element."),
    "norm_far_from_one": Code("info", "A norm weight's mean |w| is far from the usual scale near 1."),
    "fp16_overflow": Code("warning", "A float32/bfloat16 tensor holds values beyond float16's range.",
                          "Keep the model in bfloat16 or float32; re-convert from the original weights."),
    "mlx_bad_scales": Code("error", "MLX scales are zero, NaN or Inf."),
    "tied_weights_differ": Code("warning", "Tensors that should be one tied tensor differ."),
    "config_mismatch": Code("error", "config.json or GGUF metadata disagrees with the tensor shapes.",
                            "Correct the config value to what the tensors hold, or re-export."),
    # -- layer profile (checks/layers.py) ---------------------------------------------------------
    "layer_outlier": Code("warning", "A layer's statistic (norm, std...) lies far from its role's trend over the other layers: zeroed, exploded, swapped or damaged.",
                          "Compare the layer with the original weights; re-export or restore it."),
    "layer_duplicate": Code("warning", "Two layers of one role have exactly the same statistics: one looks copied over the other.",
                            "Restore the overwritten layer from the original weights."),
    # -- audits (audit/) ---------------------------------------------------------------------------
    "unreadable": Code("error", "The source cannot be opened at all (missing, permission denied, unreachable)."),
    "audit_timeout": Code("error", "Auditing the model took longer than the per-model timeout; it was stopped.",
                          "Rerun with a larger --timeout, or audit the model alone with model-explorer doctor."),
    "audit_memory": Code("error", "Auditing the model needed more memory than the per-model cap; it was stopped.",
                         "Rerun with a larger --memory-limit."),
    "audit_crashed": Code("error", "The process auditing the model died (a crash or a signal); the batch went on.",
                          "Audit the model alone with model-explorer doctor to see the failure."),
}


def lookup(code: str) -> Code | None:
    return CATALOG.get(code)


def markdown() -> str:
    """The catalog as the Markdown table in docs/findings.md."""
    lines = ["# Finding codes", "",
             "Every code model_explorer can raise, its usual severity, what it means, and the fix where",
             "one is known. Made from `model_explorer/codes.py` by `python -m model_explorer.codes`.", "",
             "| code | severity | meaning | fix |", "|---|---|---|---|"]
    for code, c in sorted(CATALOG.items()):
        lines.append(f"| `{code}` | {c.severity} | {c.meaning} | {c.fix} |")
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    print(markdown(), end="")
