"""`Checkpoint`: the record of one model with its tensor data a method call away.

The readers fill a `CheckpointRecord` (records.py); this class adds the shortcuts to the
tensor code, which sits below it and never imports it.
"""

from __future__ import annotations

import numpy as np

from .records import CheckpointRecord, TensorInfo
from .spans import Finding
from .tensors import blocks as _blocks
from .tensors import plot as _plot
from .tensors import read as _read
from .tensors import stats as _stats

__all__ = ["Checkpoint", "TensorInfo"]


class Checkpoint(CheckpointRecord):
    """One model, possibly spread over several files (see `CheckpointRecord` for the fields)."""

    def _note(self, finding: Finding | None) -> None:
        """Keep a finding that decoding produced (once per code and tensor)."""
        if finding is not None and not any(f.code == finding.code and f.tensor == finding.tensor
                                           for f in self.findings):
            self.findings.append(finding)

    def read(self, name: str | TensorInfo, rows: slice | int | None = None,
             out: np.ndarray | None = None) -> np.ndarray:
        """Decode one tensor: float32 for float and quantized dtypes, integers and bools as
        stored. `rows` selects along the first axis; only the blocks holding them are read.
        `out`: a contiguous buffer of the result's shape and dtype to decode into (a slice of
        consecutive rows, or the whole tensor). Raises KeyError for an unknown name and
        ValueError for bytes that cannot be decoded (also kept as an `undecodable` finding)."""
        try:
            return _read.read(self, name, rows, out)
        except _read.Undecodable as e:
            self._note(e.finding)
            raise

    def blocks(self, name: str | TensorInfo, reference=None, start: int = 0, count: int = 16):
        """Raw quantization blocks of one tensor from block `start`: scales, mins, codes, and
        the error against `reference` (a float array or another checkpoint's tensor)."""
        return _blocks.blocks(self, name, reference, start, count)

    def stats(self, name: str | TensorInfo, bins: int = 64, exact: bool = False,
              max_elements: int = 1_000_000):
        """Statistics and histogram of one tensor: sampled whole blocks by default, every
        element with `exact=True`."""
        try:
            return _stats.stats(self, name, bins=bins, exact=exact, max_elements=max_elements)
        except _read.Undecodable as e:
            self._note(e.finding)
            raise

    def stats_table(self, names: list[str] | None = None, bins: int = 16, exact: bool = False,
                    max_elements: int = 100_000, progress: bool | None = None):
        """A pandas DataFrame with one row of statistics per tensor (a tqdm progress bar on
        big checkpoints unless `progress=False`)."""
        return _stats.stats_table(self, names, bins=bins, exact=exact, max_elements=max_elements,
                                  progress=progress)

    def plot(self, name: str, bins: int = 64, log: bool = False, exact: bool = False,
             scales: bool = False, ax=None, max_elements: int = 1_000_000):
        """A matplotlib histogram of one tensor's values, or of its block scales with
        `scales=True`; returns the Axes."""
        return _plot.plot(self, name, bins=bins, log=log, exact=exact, scales=scales, ax=ax,
                          max_elements=max_elements)
