"""Weights read from the file as a forward pass reaches them, for models that do not fit.

`StreamedWeights` is `Weights` with nothing held between layers: each layer is dequantized from
the checkpoint's own blocks when the pass reaches it and let go after (the `keep_quantized`
path), the pages of the memory-mapped files are dropped from the process after each layer, and
the embedding and output head, the two largest tensors of most models, are never decoded
whole: the embedding reads only the rows of the prompt's tokens, and the head multiplies slice
by slice (`HEAD_CHUNK_ROWS` vocabulary rows at a time). The numbers are the same as the
in-memory path's, because every value goes through the same `ckpt.read` and the same decoder.
"""

from __future__ import annotations

import numpy as np

from .memory_budget import HEAD_CHUNK_ROWS
from .weights import Weights


class StreamedMatrix:
    """A (rows, width) tensor of the checkpoint that the numpy engine can index and multiply
    without holding it: `table[ids]` reads those rows; `x @ m.T` and `m @ v` go slice by slice.

    numpy defers to this class's reflected operators because `__array_ufunc__` is None."""

    __array_ufunc__ = None

    def __init__(self, weights: Weights, part: str) -> None:
        self._weights = weights
        self.name = weights.name(part)
        info = weights.ckpt.tensors[self.name]
        if len(info.shape) != 2:
            raise ValueError(f"{self.name} has shape {info.shape}; a streamed table must be 2-D")
        self.shape = (int(info.shape[0]), int(info.shape[1]))
        self.dtype = np.dtype(np.float32)
        self.nbytes = 0  # nothing is held

    def _slice(self, start: int, stop: int) -> np.ndarray:
        a = self._weights.ckpt.read(self.name, rows=slice(start, stop))
        return np.ascontiguousarray(a, dtype=np.float32).reshape(stop - start, self.shape[1])

    def _chunks(self):
        for start in range(0, self.shape[0], HEAD_CHUNK_ROWS):
            stop = min(self.shape[0], start + HEAD_CHUNK_ROWS)
            yield start, stop, self._slice(start, stop)

    def __getitem__(self, ids) -> np.ndarray:
        ids = np.asarray(ids, dtype=np.int64).reshape(-1)
        out = np.empty((len(ids), self.shape[1]), dtype=np.float32)
        rows = {int(i): self._slice(int(i), int(i) + 1)[0] for i in np.unique(ids)}
        for k, i in enumerate(ids):
            out[k] = rows[int(i)]
        return out

    def __matmul__(self, v: np.ndarray) -> np.ndarray:
        """m @ v for one vector (the numpy engine's one-row path)."""
        out = np.empty(self.shape[0], dtype=np.float32)
        for start, stop, rows in self._chunks():
            out[start:stop] = rows @ v
        return out

    @property
    def T(self) -> _Transposed:
        return _Transposed(self)


class _Transposed:
    __array_ufunc__ = None

    def __init__(self, m: StreamedMatrix) -> None:
        self._m = m
        self.shape = (m.shape[1], m.shape[0])

    def __rmatmul__(self, x: np.ndarray) -> np.ndarray:
        """x @ m.T, one slice of m's rows at a time."""
        out = np.empty((x.shape[0], self._m.shape[0]), dtype=np.float32)
        for start, stop, rows in self._m._chunks():
            out[:, start:stop] = x @ rows.T
        return out


class StreamedWeights(Weights):
    """`Weights` that hold no layer between forward passes and never decode the embedding or
    the output head whole (see the module docstring). numpy engine only."""

    STREAMED_PARTS = ("embed", "lm_head")

    def __init__(self, ckpt, cfg, backend, progress=None) -> None:
        if getattr(backend, "name", None) != "numpy":
            raise ValueError("a streamed run uses the numpy engine (device='cpu'); torch holds its "
                             "weights on the device")
        super().__init__(ckpt, cfg, backend, keep_quantized=True, progress=progress)

    def _array(self, part: str, layer: int | None = None):
        if part in self.STREAMED_PARTS and layer is None:
            return StreamedMatrix(self, part)
        return super()._array(part, layer)

    def layer(self, i: int) -> dict:
        # The previous layer's decoded arrays are gone; drop its file pages from the process too.
        self.ckpt.sources.release_pages()
        return super().layer(i)
