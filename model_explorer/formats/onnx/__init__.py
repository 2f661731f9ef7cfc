"""ONNX: the protobuf walked with byte offsets (wire.py), the schema (schema.py), tensors and
their external data (tensor.py, external.py), quantized weights grouped (quant.py)."""

from .reader import read_onnx

__all__ = ["read_onnx"]
