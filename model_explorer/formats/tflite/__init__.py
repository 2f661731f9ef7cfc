"""TFLite models (flatbuffers), read without TensorFlow."""

from .reader import read_tflite

__all__ = ["read_tflite"]
