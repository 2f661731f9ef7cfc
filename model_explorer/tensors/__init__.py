"""Tensor data: dtypes, dequantization and statistics over the byte ranges the readers found."""

from . import schemes  # noqa: F401  (registers the Hub quantization codecs with read.plan_for)
