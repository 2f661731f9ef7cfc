"""ggml.py's tables are a copy of gguf-py's constants (so the GGUF reader needs no gguf import
at open): each table is held equal to gguf-py's here, name for name and number for number.

A difference means one of them moved: a new ggml type in gguf-py wants a row in ggml.py (and,
to decode, a codec in tensors/dequant.py); a changed size is a bug in the copy.
"""

from __future__ import annotations

import struct

import numpy as np
import pytest

gguf = pytest.importorskip("gguf")
from gguf import constants as C  # noqa: E402
from gguf.gguf_reader import GGUFReader  # noqa: E402
from gguf.gguf_writer import GGUFWriter  # noqa: E402

from model_explorer import ggml  # noqa: E402


def test_magic_version_alignment():
    assert struct.unpack("<I", ggml.MAGIC)[0] == C.GGUF_MAGIC
    assert C.GGUF_VERSION in ggml.SUPPORTED_VERSIONS
    assert max(ggml.SUPPORTED_VERSIONS) == C.GGUF_VERSION
    assert ggml.DEFAULT_ALIGNMENT == C.GGUF_DEFAULT_ALIGNMENT
    assert ggml.QK_K == C.QK_K


def test_value_types_same_names_and_numbers():
    assert {t.name: t.value for t in ggml.ValueType} == \
        {t.name: t.value for t in C.GGUFValueType}


def test_ggml_types_same_names_and_numbers():
    assert {t.name: t.value for t in ggml.GGMLType} == \
        {t.name: t.value for t in C.GGMLQuantizationType}


def test_block_and_type_sizes():
    ours = {t.name: sizes for t, sizes in ggml.QUANT_SIZES.items()}
    theirs = {t.name: sizes for t, sizes in C.GGML_QUANT_SIZES.items()}
    assert ours == theirs
    assert set(ours) == {t.name for t in ggml.GGMLType}  # every type has its sizes


def test_scalar_struct_formats_match_the_writer():
    assert {t.name: f for t, f in ggml.SCALAR_FORMATS.items()} == \
        {t.name: f for t, f in GGUFWriter._simple_value_packing.items()}


def test_numpy_codes_match_the_reader():
    ours = {t.name: np.dtype(code) for t, code in ggml.NUMPY_CODES.items()}
    theirs = {t.name: np.dtype(kind) for t, kind in GGUFReader.gguf_scalar_to_np.items()}
    assert ours == theirs
    assert set(ours) == {t.name for t in ggml.SCALAR_FORMATS}


def test_type_names_round_trip():
    for t in C.GGMLQuantizationType:
        assert ggml.type_name(t.value) == t.name
        assert ggml.type_by_name(t.name) == t.value
    assert ggml.type_name(9999) == "GGML_TYPE_9999"
    assert ggml.type_by_name("NOT_A_TYPE") is None


# ggml.Keys name -> gguf-py's spelling of the same key
GGUF_KEYS = {
    "ARCHITECTURE": C.Keys.General.ARCHITECTURE,
    "ALIGNMENT": C.Keys.General.ALIGNMENT,
    "FILE_TYPE": C.Keys.General.FILE_TYPE,
    "QUANTIZATION_VERSION": C.Keys.General.QUANTIZATION_VERSION,
    "NAME": C.Keys.General.NAME,
    "SPLIT_COUNT": C.Keys.Split.LLM_KV_SPLIT_COUNT,
    "SPLIT_NO": C.Keys.Split.LLM_KV_SPLIT_NO,
    "SPLIT_TENSORS_COUNT": C.Keys.Split.LLM_KV_SPLIT_TENSORS_COUNT,
    "TOKENIZER_MODEL": C.Keys.Tokenizer.MODEL,
    "TOKENIZER_PRE": C.Keys.Tokenizer.PRE,
    "TOKENS": C.Keys.Tokenizer.LIST,
    "TOKEN_TYPE": C.Keys.Tokenizer.TOKEN_TYPE,
    "SCORES": C.Keys.Tokenizer.SCORES,
    "MERGES": C.Keys.Tokenizer.MERGES,
    "ADD_BOS": C.Keys.Tokenizer.ADD_BOS,
    "ADD_EOS": C.Keys.Tokenizer.ADD_EOS,
    "ADD_SPACE_PREFIX": C.Keys.Tokenizer.ADD_PREFIX,
    "BOS_ID": C.Keys.Tokenizer.BOS_ID,
    "EOS_ID": C.Keys.Tokenizer.EOS_ID,
    "UNK_ID": C.Keys.Tokenizer.UNK_ID,
    "PAD_ID": C.Keys.Tokenizer.PAD_ID,
    "CHAT_TEMPLATE": C.Keys.Tokenizer.CHAT_TEMPLATE,
    "CONTEXT_LENGTH": C.Keys.LLM.CONTEXT_LENGTH,
    "EMBEDDING_LENGTH": C.Keys.LLM.EMBEDDING_LENGTH,
    "BLOCK_COUNT": C.Keys.LLM.BLOCK_COUNT,
    "FEED_FORWARD_LENGTH": C.Keys.LLM.FEED_FORWARD_LENGTH,
    "VOCAB_SIZE": C.Keys.LLM.VOCAB_SIZE,
    "HEAD_COUNT": C.Keys.Attention.HEAD_COUNT,
    "HEAD_COUNT_KV": C.Keys.Attention.HEAD_COUNT_KV,
    "KEY_LENGTH": C.Keys.Attention.KEY_LENGTH,
    "VALUE_LENGTH": C.Keys.Attention.VALUE_LENGTH,
    "RMS_EPS": C.Keys.Attention.LAYERNORM_RMS_EPS,
    "SLIDING_WINDOW": C.Keys.Attention.SLIDING_WINDOW,
    "ROPE_DIMENSION_COUNT": C.Keys.Rope.DIMENSION_COUNT,
    "ROPE_FREQ_BASE": C.Keys.Rope.FREQ_BASE,
    "ROPE_SCALING_TYPE": C.Keys.Rope.SCALING_TYPE,
    "ROPE_SCALING_FACTOR": C.Keys.Rope.SCALING_FACTOR,
    "EXPERT_COUNT": C.Keys.LLM.EXPERT_COUNT,
    "EXPERT_USED_COUNT": C.Keys.LLM.EXPERT_USED_COUNT,
}


def test_every_key_spelled_as_gguf_py_spells_it():
    ours = {n: v for n, v in vars(ggml.Keys).items() if n.isupper() and isinstance(v, str)}
    assert set(ours) == set(GGUF_KEYS), "a key in ggml.Keys without its gguf-py spelling here"
    assert ours == GGUF_KEYS


def test_arch_templates_fill_like_gguf_py():
    assert ggml.Keys.arch("llama", ggml.Keys.CONTEXT_LENGTH) == \
        C.Keys.LLM.CONTEXT_LENGTH.format(arch="llama")
