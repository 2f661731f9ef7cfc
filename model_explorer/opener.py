"""`open(source)`: the public way in. Reads every header of a model, then runs the checks
that opening promises (`deep=True` adds the ones that decode tensor data)."""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from typing import Any

from . import sources
from .assemble import assemble
from .checkpoint import Checkpoint
from .gcpause import no_gc


def open(source: str | os.PathLike, deep: bool = False) -> Checkpoint:  # noqa: A001
    """Open a checkpoint file, directory, index or URL and read every header in it.

    Raises FileNotFoundError / OSError only when the path itself cannot be read; whatever
    the bytes say, a Checkpoint comes back with findings that locate the problems.
    """
    path = os.fspath(source)
    if not sources.exists(path):
        raise FileNotFoundError(f"No such file or directory: {path!r}")
    with no_gc():
        ckpt = assemble(path)
    if deep:
        from .checks.deep import deep_check

        deep_check(ckpt)
    return ckpt


def as_checkpoint(source: Any) -> Checkpoint:
    """A Checkpoint as given, or the one `open` makes of a path or URL."""
    return source if isinstance(source, Checkpoint) else open(source)


@contextlib.contextmanager
def opened(source: Any) -> Iterator[Checkpoint]:
    """`as_checkpoint` for a moment: closes what it opened, leaves a caller's Checkpoint open."""
    ckpt = as_checkpoint(source)
    try:
        yield ckpt
    finally:
        if ckpt is not source:
            ckpt.close()
