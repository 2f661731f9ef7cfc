"""TFLite files written with the schema's own object API (ai_edge_litert.schema_py_generated,
packed by the flatbuffers Builder with the 'TFL3' identifier)."""

from __future__ import annotations

import numpy as np


def _schema():
    from ai_edge_litert import schema_py_generated as s

    return s


def _buffer(s, data: bytes | None):
    b = s.BufferT()
    b.data = None if data is None else np.frombuffer(data, np.uint8)
    return b


def _tensor(s, name, shape, ttype, buffer, scale=None, zero=None, qdim=0):
    t = s.TensorT()
    t.name, t.shape, t.type, t.buffer = name.encode(), np.array(shape, np.int32), ttype, buffer
    if scale is not None:
        q = s.QuantizationParametersT()
        q.scale = np.array(scale, np.float32)
        q.zeroPoint = np.array(zero, np.int64)
        q.quantizedDimension = qdim
        t.quantization = q
    return t


def model_bytes(consts: list[tuple], with_fc: bool = True) -> bytes:
    """consts: (name, numpy array, tflite type, scale or None, zero or None, qdim[, shape]). With
    `with_fc`, a FULLY_CONNECTED op over the first const (float32 [out, in]) makes it runnable."""
    import flatbuffers

    s = _schema()
    T = s.TensorType
    buffers = [_buffer(s, None)]
    tensors = []
    for name, arr, ttype, scale, zero, qdim, *shape in consts:
        buffers.append(_buffer(s, np.ascontiguousarray(arr).tobytes()))
        tensors.append(_tensor(s, name, shape[0] if shape else arr.shape, ttype, len(buffers) - 1,
                               scale, zero, qdim))
    sg = s.SubGraphT()
    sg.name = b"main"
    if with_fc:
        w = consts[0][1]
        buffers.append(_buffer(s, None))
        tensors.append(_tensor(s, "input", (1, w.shape[1]), T.FLOAT32, len(buffers) - 1))
        buffers.append(_buffer(s, None))
        tensors.append(_tensor(s, "output", (1, w.shape[0]), T.FLOAT32, len(buffers) - 1))
        op = s.OperatorT()
        op.opcodeIndex = 0
        op.inputs = np.array([len(tensors) - 2, 0, -1], np.int32)
        op.outputs = np.array([len(tensors) - 1], np.int32)
        op.builtinOptionsType = s.BuiltinOptions.FullyConnectedOptions
        op.builtinOptions = s.FullyConnectedOptionsT()
        sg.operators = [op]
        sg.inputs = np.array([len(tensors) - 2], np.int32)
        sg.outputs = np.array([len(tensors) - 1], np.int32)
    sg.tensors = tensors
    oc = s.OperatorCodeT()
    oc.builtinCode = s.BuiltinOperator.FULLY_CONNECTED
    oc.deprecatedBuiltinCode = s.BuiltinOperator.FULLY_CONNECTED
    oc.version = 1
    m = s.ModelT()
    m.version = 3
    m.description = b"built by model_explorer's tests"
    m.operatorCodes = [oc]
    m.subgraphs = [sg]
    m.buffers = buffers
    b = flatbuffers.Builder(1024)
    b.Finish(m.Pack(b), file_identifier=b"TFL3")
    return bytes(b.Output())


def standard_consts(rng) -> list[tuple]:
    """A float32 weight, int8 per-channel, uint8 per-tensor, int32 bias, float16, int4."""
    s = _schema()
    T = s.TensorType
    w = rng.standard_normal((3, 4)).astype(np.float32)
    q8 = rng.integers(-127, 128, (3, 8), dtype=np.int8)
    u8 = rng.integers(0, 256, (2, 5), dtype=np.uint8)
    b32 = rng.integers(-1000, 1000, (3,), dtype=np.int32)
    f16 = rng.standard_normal((2, 3)).astype(np.float16)
    i4 = rng.integers(0, 256, (2, 4), dtype=np.uint8)  # 2 x 8 int4 codes, packed low nibble first
    return [("fc.weight", w, T.FLOAT32, None, None, 0),
            ("conv.weight_int8", q8, T.INT8, [0.01, 0.02, 0.5], [0, 0, 0], 0),
            ("embed_uint8", u8, T.UINT8, [0.1], [128], 0),
            ("fc.bias_int32", b32, T.INT32, [1e-4, 2e-4, 3e-4], [0, 0, 0], 0),
            ("f16_const", f16, T.FLOAT16, None, None, 0),
            ("int4_weight", i4, T.INT4, [0.25, 0.5], [0, 0], 0, (2, 8))]
