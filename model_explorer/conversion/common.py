"""What every conversion shares: the formats and dtypes it takes, its error, its progress callback."""

from __future__ import annotations

from collections.abc import Callable

FORMATS = ("safetensors", "gguf", "mlx")
SAFETENSORS_DTYPES = ("F32", "BF16", "F16")
GGUF_DTYPES = ("F32", "F16", "Q8_0", "Q4_0")
MLX_BITS = (4, 8)
MLX_GROUP_SIZES = (32, 64)
TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "generation_config.json")

Progress = Callable[[int, int, str], None]  # (tensors done, tensors in all, name just written)


class ConvertError(ValueError):
    """The source cannot be converted as asked; the message says why."""


def report(progress: Progress | None, done: int, total: int, name: str) -> None:
    if progress is not None:
        progress(done, total, name)
