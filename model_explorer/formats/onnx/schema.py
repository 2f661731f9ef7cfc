"""The ONNX schema (onnx/onnx.proto, IR version 11): field numbers and the tensor data types.

One table per message, as onnx.proto numbers them; the reader walks messages with these and
never with generated classes, so it runs without the `onnx` package.
"""

from __future__ import annotations

from enum import IntEnum
from typing import NamedTuple


class Model(IntEnum):
    IR_VERSION = 1
    PRODUCER_NAME = 2
    PRODUCER_VERSION = 3
    DOMAIN = 4
    MODEL_VERSION = 5
    DOC_STRING = 6
    GRAPH = 7
    OPSET_IMPORT = 8
    METADATA_PROPS = 14
    TRAINING_INFO = 20
    FUNCTIONS = 25


class Graph(IntEnum):
    NODE = 1
    NAME = 2
    INITIALIZER = 5
    DOC_STRING = 10
    INPUT = 11
    OUTPUT = 12
    VALUE_INFO = 13
    SPARSE_INITIALIZER = 15


class Node(IntEnum):
    INPUT = 1
    OUTPUT = 2
    NAME = 3
    OP_TYPE = 4
    ATTRIBUTE = 5
    DOMAIN = 7


class Attribute(IntEnum):
    NAME = 1
    F = 2
    I = 3  # noqa: E741 - onnx.proto's name
    S = 4
    T = 5
    G = 6
    FLOATS = 7
    INTS = 8
    TENSORS = 10
    GRAPHS = 11
    TYPE = 20


class Tensor(IntEnum):
    DIMS = 1
    DATA_TYPE = 2
    SEGMENT = 3
    FLOAT_DATA = 4
    INT32_DATA = 5
    STRING_DATA = 6
    INT64_DATA = 7
    NAME = 8
    RAW_DATA = 9
    DOUBLE_DATA = 10
    UINT64_DATA = 11
    DOC_STRING = 12
    EXTERNAL_DATA = 13
    DATA_LOCATION = 14


class Entry(IntEnum):  # StringStringEntryProto and OperatorSetIdProto share 1 and 2
    KEY = 1
    VALUE = 2


class DataType(NamedTuple):
    """One TensorProto.DataType: our dtype name (safetensors' where one exists), bits per
    element, and the typed field that holds it when raw_data is absent."""

    onnx: str
    dtype: str
    bits: int
    typed: int | None


# TensorProto.DataType -> how it is stored. Typed fields: onnx.helper.tensor_dtype_to_field.
DATA_TYPES: dict[int, DataType] = {
    1: DataType("FLOAT", "F32", 32, Tensor.FLOAT_DATA),
    2: DataType("UINT8", "U8", 8, Tensor.INT32_DATA),
    3: DataType("INT8", "I8", 8, Tensor.INT32_DATA),
    4: DataType("UINT16", "U16", 16, Tensor.INT32_DATA),
    5: DataType("INT16", "I16", 16, Tensor.INT32_DATA),
    6: DataType("INT32", "I32", 32, Tensor.INT32_DATA),
    7: DataType("INT64", "I64", 64, Tensor.INT64_DATA),
    8: DataType("STRING", "STRING", 0, Tensor.STRING_DATA),
    9: DataType("BOOL", "BOOL", 8, Tensor.INT32_DATA),
    10: DataType("FLOAT16", "F16", 16, Tensor.INT32_DATA),
    11: DataType("DOUBLE", "F64", 64, Tensor.DOUBLE_DATA),
    12: DataType("UINT32", "U32", 32, Tensor.UINT64_DATA),
    13: DataType("UINT64", "U64", 64, Tensor.UINT64_DATA),
    14: DataType("COMPLEX64", "C64", 64, Tensor.FLOAT_DATA),
    15: DataType("COMPLEX128", "C128", 128, Tensor.DOUBLE_DATA),
    16: DataType("BFLOAT16", "BF16", 16, Tensor.INT32_DATA),
    17: DataType("FLOAT8E4M3FN", "F8_E4M3", 8, Tensor.INT32_DATA),
    18: DataType("FLOAT8E4M3FNUZ", "F8_E4M3FNUZ", 8, Tensor.INT32_DATA),
    19: DataType("FLOAT8E5M2", "F8_E5M2", 8, Tensor.INT32_DATA),
    20: DataType("FLOAT8E5M2FNUZ", "F8_E5M2FNUZ", 8, Tensor.INT32_DATA),
    21: DataType("UINT4", "U4", 4, Tensor.INT32_DATA),
    22: DataType("INT4", "I4", 4, Tensor.INT32_DATA),
    23: DataType("FLOAT4E2M1", "F4", 4, Tensor.INT32_DATA),
    24: DataType("FLOAT8E8M0", "F8_E8M0", 8, Tensor.INT32_DATA),
    25: DataType("UINT2", "U2", 2, Tensor.INT32_DATA),
    26: DataType("INT2", "I2", 2, Tensor.INT32_DATA),
    27: DataType("FLOAT6E2M3", "F6_E2M3", 6, Tensor.INT32_DATA),
    28: DataType("FLOAT6E3M2", "F6_E3M2", 6, Tensor.INT32_DATA),
}
# Typed fields whose packed payload is the little-endian values themselves (fixed width): a
# tensor stored there is read in place, like raw_data.
FIXED_FIELDS = {Tensor.FLOAT_DATA: 4, Tensor.DOUBLE_DATA: 8}
TYPED_NAMES: dict[int, str] = {
    Tensor.FLOAT_DATA: "float_data", Tensor.INT32_DATA: "int32_data",
    Tensor.STRING_DATA: "string_data", Tensor.INT64_DATA: "int64_data",
    Tensor.DOUBLE_DATA: "double_data", Tensor.UINT64_DATA: "uint64_data"}
# AttributeProto.type values that carry a tensor or a graph.
ATTR_TENSOR, ATTR_GRAPH, ATTR_TENSORS, ATTR_GRAPHS = 4, 5, 9, 10
