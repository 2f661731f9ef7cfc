"""Tensor data: dtypes, dequantization and statistics over the byte ranges the readers found."""
