"""Codecs of the Hub quantization schemes: one module per scheme, chosen by `Quant.codec`.

The format layer (formats/hubquant) groups each quantized layer's components into one logical
tensor [out, in] with a `Quant` record (codec, label, bits, ..., parts by role); these build
its decoding `Plan` (tensors/read.py): one unit per logical row, so row slices, sampling and
streaming decode only the rows they touch.
"""

from __future__ import annotations

from ...records import CheckpointRecord, TensorInfo
from ..plan import Plan
from . import affine, awq, bnb, compressed, fp8, gptq, h5py_dataset, mxfp4, onnx_quant

PLANS = {
    "gptq": gptq.plan,
    "awq": awq.plan,
    "bnb_4bit": bnb.plan_4bit,
    "bnb_int8": bnb.plan_int8,
    "ct_pack": compressed.plan,
    "ct_int": compressed.plan,
    "ct_float": compressed.plan,
    "ct_nvfp4": compressed.plan,
    "ct_mxfp4": compressed.plan,
    "fp8_block": fp8.plan,
    "mxfp4": mxfp4.plan,
    "h5py_dataset": h5py_dataset.plan,  # chunked HDF5 (formats/hdf5): values through h5py
    "onnx_varint": onnx_quant.varint_plan,
    "onnx_qdq": onnx_quant.qdq_plan,
    "onnx_matmul_nbits": onnx_quant.nbits_plan,
    "onnx_packed_int": onnx_quant.packed_int_plan,
    "affine": affine.plan,  # OpenVINO, TFLite and CTranslate2 integer weights
}
# Recognised by the format layer but without a decoder here, with the reason.
NOT_DECODED = {
    "ct_sparse_24": "compressed-tensors 2:4 sparse weights (sparse-24-bitmask) are not decoded yet",
    "ct_sparse_bitmask": "compressed-tensors sparse-bitmask weights are not decoded yet",
}


def scheme_plan(ckpt: CheckpointRecord, info: TensorInfo) -> Plan:
    """The Plan of a grouped quantized tensor; ValueError naming the scheme when it cannot be
    decoded (never a plan that would show packed or unscaled values)."""
    q = info.quant
    name = q.label or q.codec
    if q.refusal is not None:
        raise ValueError(f"Tensor {info.name!r} ({name}) cannot be dequantized: {q.refusal}.")
    build = PLANS.get(q.codec)
    if build is None:
        why = NOT_DECODED.get(q.codec, f"quantization codec {q.codec!r} has no decoder in this tool")
        raise ValueError(f"Tensor {info.name!r} ({name}) is not decoded: {why}; its stored "
                         "values are packed codes, not weights.")
    try:
        return build(ckpt, info)
    except (KeyError, TypeError, IndexError, ArithmeticError) as e:
        # shapes or parameters no check above foresaw: still a clear refusal, never a traceback
        raise ValueError(f"Tensor {info.name!r} ({name}) cannot be dequantized: its components "
                         f"do not fit together ({type(e).__name__}: {e}).") from None
