"""GGUF constants: magic, versions, value types and ggml tensor types with their block sizes."""

from __future__ import annotations

from enum import IntEnum

MAGIC = b"GGUF"
SUPPORTED_VERSIONS = (2, 3)
DEFAULT_ALIGNMENT = 32
MAX_DIMS = 4  # GGML_MAX_DIMS


class ValueType(IntEnum):
    UINT8 = 0
    INT8 = 1
    UINT16 = 2
    INT16 = 3
    UINT32 = 4
    INT32 = 5
    FLOAT32 = 6
    BOOL = 7
    STRING = 8
    ARRAY = 9
    UINT64 = 10
    INT64 = 11
    FLOAT64 = 12


# struct format letter of each fixed-size value type
SCALAR_FORMATS: dict[ValueType, str] = {
    ValueType.UINT8: "B",
    ValueType.INT8: "b",
    ValueType.UINT16: "H",
    ValueType.INT16: "h",
    ValueType.UINT32: "I",
    ValueType.INT32: "i",
    ValueType.FLOAT32: "f",
    ValueType.BOOL: "?",
    ValueType.UINT64: "Q",
    ValueType.INT64: "q",
    ValueType.FLOAT64: "d",
}

# numpy dtype letter of each fixed-size value type, for lazy array views
NUMPY_CODES: dict[ValueType, str] = {
    ValueType.UINT8: "u1",
    ValueType.INT8: "i1",
    ValueType.UINT16: "u2",
    ValueType.INT16: "i2",
    ValueType.UINT32: "u4",
    ValueType.INT32: "i4",
    ValueType.FLOAT32: "f4",
    ValueType.BOOL: "?",
    ValueType.UINT64: "u8",
    ValueType.INT64: "i8",
    ValueType.FLOAT64: "f8",
}


class GGMLType(IntEnum):
    F32 = 0
    F16 = 1
    Q4_0 = 2
    Q4_1 = 3
    Q5_0 = 6
    Q5_1 = 7
    Q8_0 = 8
    Q8_1 = 9
    Q2_K = 10
    Q3_K = 11
    Q4_K = 12
    Q5_K = 13
    Q6_K = 14
    Q8_K = 15
    IQ2_XXS = 16
    IQ2_XS = 17
    IQ3_XXS = 18
    IQ1_S = 19
    IQ4_NL = 20
    IQ3_S = 21
    IQ2_S = 22
    IQ4_XS = 23
    I8 = 24
    I16 = 25
    I32 = 26
    I64 = 27
    F64 = 28
    IQ1_M = 29
    BF16 = 30
    TQ1_0 = 34
    TQ2_0 = 35
    MXFP4 = 39
    NVFP4 = 40
    Q1_0 = 41


QK_K = 256

# ggml type -> (elements per block, bytes per block)
# keyed by GGMLType; a raw type code (an int) looks up the same row
QUANT_SIZES: dict[int, tuple[int, int]] = {
    GGMLType.F32: (1, 4),
    GGMLType.F16: (1, 2),
    GGMLType.Q4_0: (32, 2 + 16),
    GGMLType.Q4_1: (32, 2 + 2 + 16),
    GGMLType.Q5_0: (32, 2 + 4 + 16),
    GGMLType.Q5_1: (32, 2 + 2 + 4 + 16),
    GGMLType.Q8_0: (32, 2 + 32),
    GGMLType.Q8_1: (32, 4 + 4 + 32),
    GGMLType.Q2_K: (QK_K, 2 + 2 + QK_K // 16 + QK_K // 4),
    GGMLType.Q3_K: (QK_K, 2 + QK_K // 4 + QK_K // 8 + 12),
    GGMLType.Q4_K: (QK_K, 2 + 2 + QK_K // 2 + 12),
    GGMLType.Q5_K: (QK_K, 2 + 2 + QK_K // 2 + QK_K // 8 + 12),
    GGMLType.Q6_K: (QK_K, 2 + QK_K // 2 + QK_K // 4 + QK_K // 16),
    GGMLType.Q8_K: (QK_K, 4 + QK_K + QK_K // 8),
    GGMLType.IQ2_XXS: (QK_K, 2 + QK_K // 4),
    GGMLType.IQ2_XS: (QK_K, 2 + QK_K // 4 + QK_K // 32),
    GGMLType.IQ3_XXS: (QK_K, 2 + QK_K // 4 + QK_K // 8),
    GGMLType.IQ1_S: (QK_K, 2 + QK_K // 8 + QK_K // 16),
    GGMLType.IQ4_NL: (32, 2 + 16),
    GGMLType.IQ3_S: (QK_K, 2 + QK_K // 4 + QK_K // 8 + QK_K // 32 + 4),
    GGMLType.IQ2_S: (QK_K, 2 + QK_K // 4 + QK_K // 16),
    GGMLType.IQ4_XS: (QK_K, 2 + 2 + QK_K // 2 + QK_K // 64),
    GGMLType.I8: (1, 1),
    GGMLType.I16: (1, 2),
    GGMLType.I32: (1, 4),
    GGMLType.I64: (1, 8),
    GGMLType.F64: (1, 8),
    GGMLType.IQ1_M: (QK_K, QK_K // 8 + QK_K // 16 + QK_K // 32),
    GGMLType.BF16: (1, 2),
    GGMLType.TQ1_0: (QK_K, 2 + 4 * 13),
    GGMLType.TQ2_0: (QK_K, 2 + 64),
    GGMLType.MXFP4: (32, 1 + 16),
    GGMLType.NVFP4: (64, 4 + 32),
    GGMLType.Q1_0: (128, 2 + 16),
}


def type_name(code: int) -> str:
    try:
        return GGMLType(code).name
    except ValueError:
        return f"GGML_TYPE_{code}"


def type_by_name(name: str) -> GGMLType | None:
    return GGMLType.__members__.get(name)


class Keys:
    """GGUF metadata keys, spelled once. Per-architecture keys are templates: `Keys.arch(arch,
    Keys.CONTEXT_LENGTH)` gives "llama.context_length". Names follow gguf-py's `gguf.Keys`."""

    ARCHITECTURE = "general.architecture"
    ALIGNMENT = "general.alignment"
    FILE_TYPE = "general.file_type"
    QUANTIZATION_VERSION = "general.quantization_version"
    NAME = "general.name"

    SPLIT_COUNT = "split.count"
    SPLIT_NO = "split.no"
    SPLIT_TENSORS_COUNT = "split.tensors.count"

    TOKENIZER_MODEL = "tokenizer.ggml.model"
    TOKENIZER_PRE = "tokenizer.ggml.pre"
    TOKENS = "tokenizer.ggml.tokens"
    TOKEN_TYPE = "tokenizer.ggml.token_type"
    SCORES = "tokenizer.ggml.scores"
    MERGES = "tokenizer.ggml.merges"
    ADD_BOS = "tokenizer.ggml.add_bos_token"
    ADD_EOS = "tokenizer.ggml.add_eos_token"
    ADD_SPACE_PREFIX = "tokenizer.ggml.add_space_prefix"
    BOS_ID = "tokenizer.ggml.bos_token_id"
    EOS_ID = "tokenizer.ggml.eos_token_id"
    UNK_ID = "tokenizer.ggml.unknown_token_id"
    PAD_ID = "tokenizer.ggml.padding_token_id"
    CHAT_TEMPLATE = "tokenizer.chat_template"

    # "{arch}." templates
    CONTEXT_LENGTH = "{arch}.context_length"
    EMBEDDING_LENGTH = "{arch}.embedding_length"
    BLOCK_COUNT = "{arch}.block_count"
    FEED_FORWARD_LENGTH = "{arch}.feed_forward_length"
    VOCAB_SIZE = "{arch}.vocab_size"
    HEAD_COUNT = "{arch}.attention.head_count"
    HEAD_COUNT_KV = "{arch}.attention.head_count_kv"
    KEY_LENGTH = "{arch}.attention.key_length"
    VALUE_LENGTH = "{arch}.attention.value_length"
    RMS_EPS = "{arch}.attention.layer_norm_rms_epsilon"
    SLIDING_WINDOW = "{arch}.attention.sliding_window"
    ROPE_DIMENSION_COUNT = "{arch}.rope.dimension_count"
    ROPE_FREQ_BASE = "{arch}.rope.freq_base"
    ROPE_SCALING_TYPE = "{arch}.rope.scaling.type"
    ROPE_SCALING_FACTOR = "{arch}.rope.scaling.factor"
    EXPERT_COUNT = "{arch}.expert_count"
    EXPERT_USED_COUNT = "{arch}.expert_used_count"

    @staticmethod
    def arch(arch: str, template: str) -> str:
        return template.format(arch=arch)
