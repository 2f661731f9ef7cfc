"""PyTorch checkpoints (zip and legacy) and plain pickles, read without running them.

Placeholder until the pickle reader lands: reports the file as not yet readable.
"""

from __future__ import annotations

from ..spans import Report
from .safetensors import FileResult


def _unsupported(source, what: str) -> FileResult:
    rep = Report(source.name)
    rep.warning("unsupported_format", f"This is a {what}; reading it is not supported yet.", 0,
                min(8, source.size))
    return FileResult(source.name, source.size, rep)


def read_torch_zip(source) -> FileResult:
    return _unsupported(source, "PyTorch zip checkpoint")


def read_torch_legacy(source) -> FileResult:
    return _unsupported(source, "legacy PyTorch checkpoint")


def read_pickle(source) -> FileResult:
    return _unsupported(source, "Python pickle")
