"""Weights read from the file as a forward pass reaches them, for models that do not fit.

`StreamedWeights` is `Weights` with nothing held between layers. A layer's matrices are
`StreamedMatrix`es: `x @ m.T` reads a block of rows from the file's own quantized blocks into
one reused float32 buffer, multiplies it and reads the next block, so no matrix is ever decoded
whole (the fused q/k/v and gate/up are blocks of their parts, never a concatenated copy). The
pages of the memory-mapped files are dropped from the process after each layer. The embedding
reads only the rows of the prompt's tokens; the output head multiplies block by block like the
layers. The numbers are the same as the in-memory path's: every value goes through the same
`ckpt.read` and the same decoder; only BLAS's summation order over the blocks may differ.

Layers whose matrices are not a stack of stored rows (mixtures of experts, DeepSeek's latent
attention, GPT-2's transposed Conv1D, NeoX's per-head q/k/v) are decoded whole, one layer at a
time, as `keep_quantized` does.
"""

from __future__ import annotations

import os
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

import numpy as np

from ..tensors.names import unpermute_qk
from . import layouts
from .dequant_report import DequantRow
from .experts import is_moe
from .weights import Weights, matrix_parts, part_name

# float32 bytes of one block of rows: large enough for BLAS to run near its full rate, small
# enough to count for nothing in the memory plan (two of them: one multiplied, one decoded).
# On the 8B-shaped Q4_K_M trace (benchmarks/bench_real_sizes.py), 8 MiB took 67 s, 16-32 MiB 62 s.
BLOCK_BYTES = 16 << 20
BUFFERS = 2
THREAD_MIN_VALUES = 1 << 20
# Threads that decode a block (numpy releases the GIL in the decoders' array operations).
DECODE_THREADS = max(1, min(4, len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity")
                            else (os.cpu_count() or 1)))


@dataclass(frozen=True)
class _Piece:
    """Rows of one stored tensor inside a streamed matrix."""

    name: str
    rows: int
    align: int  # blocks start at multiples of this (whole heads, where rows are re-ordered per head)
    per_head: bool  # GGUF q/k: each head's rows (`align` of them) go back to Hugging Face's order


class StreamedMatrix:
    """A (rows, width) matrix of the checkpoint that the numpy engine indexes and multiplies
    without holding it: `table[ids]` reads those rows; `x @ m.T` and `m @ v` go block by block.

    numpy defers to this class's reflected operators because `__array_ufunc__` is None."""

    __array_ufunc__ = None

    def __init__(self, weights: Weights, pieces: list[_Piece], width: int, label: str) -> None:
        self._weights = weights
        self._pieces = pieces
        self.name = pieces[0].name if len(pieces) == 1 else label
        self.shape = (sum(p.rows for p in pieces), int(width))
        self.dtype = np.dtype(np.float32)
        self.nbytes = 0  # nothing is held

    def _read(self, piece: _Piece, start: int, stop: int, out: np.ndarray) -> None:
        self._weights.read_rows(piece, start, stop, out)

    def _plan(self):
        """(piece, first row of the piece in the matrix, start, stop) of every block, in order."""
        per_block = max(1, BLOCK_BYTES // (4 * self.shape[1]))
        first = 0
        for piece in self._pieces:
            step = max(piece.align, per_block // piece.align * piece.align)
            for start in range(0, piece.rows, step):
                yield piece, first, start, min(piece.rows, start + step)
            first += piece.rows

    def blocks(self):
        """(first row, float32 rows) over the whole matrix. The next block is decoded in the
        background while the caller multiplies this one (two buffers, reused): the array
        handed out is valid until the caller asks for the next."""
        plan = list(self._plan())
        rows_most = max(stop - start for _, _, start, stop in plan)
        buffers = [np.empty(rows_most * self.shape[1], np.float32) for _ in range(min(BUFFERS, len(plan)))]

        def fill(k: int) -> np.ndarray:
            piece, _, start, stop = plan[k]
            rows = buffers[k % len(buffers)][:(stop - start) * self.shape[1]].reshape(stop - start, self.shape[1])
            self._read(piece, start, stop, rows)
            return rows

        if len(plan) == 1:  # one block: nothing to overlap
            yield plan[0][1] + plan[0][2], fill(0)
            return
        with ThreadPoolExecutor(1, thread_name_prefix="mx-stream") as pool:
            pending = pool.submit(fill, 0)
            try:
                for k, (_, first, start, _) in enumerate(plan):
                    rows = pending.result()
                    if k + 1 < len(plan):  # the buffer it fills was handed out two blocks ago
                        pending = pool.submit(fill, k + 1)
                    yield first + start, rows
            finally:
                pending.cancel()

    def __getitem__(self, ids) -> np.ndarray:
        ids = np.asarray(ids, dtype=np.int64).reshape(-1)
        out = np.empty((len(ids), self.shape[1]), dtype=np.float32)
        piece = self._pieces[0]
        if len(self._pieces) != 1 or piece.align != 1:
            raise TypeError(f"{self.name} is not a table whose rows can be picked")
        rows = {}
        for i in np.unique(ids):
            if not 0 <= i < self.shape[0]:
                raise IndexError(f"token id {int(i)} is outside {self.name}'s {self.shape[0]} rows")
            rows[int(i)] = np.empty((1, self.shape[1]), np.float32)
            self._read(piece, int(i), int(i) + 1, rows[int(i)])
        for k, i in enumerate(ids):
            out[k] = rows[int(i)][0]
        return out

    def __matmul__(self, v: np.ndarray) -> np.ndarray:
        """m @ v for one vector (the numpy engine's one-row path)."""
        out = np.empty(self.shape[0], dtype=np.float32)
        for start, rows in self.blocks():
            out[start:start + len(rows)] = rows @ v
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
        """x @ m.T, one block of m's rows at a time."""
        out = np.empty((x.shape[0], self._m.shape[0]), dtype=np.float32)
        for start, rows in self._m.blocks():
            np.matmul(x, rows.T, out=out[:, start:start + len(rows)])
        return out


class StreamedWeights(Weights):
    """`Weights` that hold no layer between forward passes and multiply each matrix block by
    block from the file (see the module docstring). numpy engine only."""

    def __init__(self, ckpt, cfg, backend, progress=None) -> None:
        if getattr(backend, "name", None) != "numpy":
            raise ValueError("a streamed run uses the numpy engine (device='cpu'); torch holds its "
                             "weights on the device")
        self._lock = threading.Lock()
        super().__init__(ckpt, cfg, backend, keep_quantized=True, progress=progress)

    # -- which matrices stream by blocks (row_pieces decides; the memory plan reads it too) ------

    def _joined(self, i: int, label: str, parts: tuple[str, ...]):
        pieces = row_pieces(self.ckpt, self.cfg, i, parts)
        if pieces is None:
            return super()._joined(i, label, parts)
        return StreamedMatrix(self, pieces, int(self.ckpt.tensors[pieces[0].name].shape[1]), f"layer {i} {label}")

    def _array(self, part: str, layer: int | None = None):
        if part in ("embed", "lm_head") and layer is None:
            piece = row_piece(self.ckpt, self.cfg, part, None)
            if piece is not None:
                return StreamedMatrix(self, [piece], int(self.ckpt.tensors[piece.name].shape[1]), part)
        return super()._array(part, layer)

    def layer(self, i: int) -> dict:
        # The previous layer's blocks are gone; drop its file pages from the process too.
        self.ckpt.sources.release_pages()
        return super().layer(i)

    # -- reading blocks ----------------------------------------------------------------------------

    def read_rows(self, piece: _Piece, start: int, stop: int, out: np.ndarray) -> None:
        """Rows [start, stop) of `piece` into `out`, decoded by up to DECODE_THREADS threads."""
        t0 = time.perf_counter()
        n = stop - start
        # threads pay off on blocks of a million values and more (a decode step's small matrices
        # would spend more starting them than decoding)
        parts = min(DECODE_THREADS, max(1, n // max(piece.align, 64)), max(1, out.size // THREAD_MIN_VALUES))
        cuts = [start + (n * k // parts) // piece.align * piece.align for k in range(parts)] + [stop]
        spans = [(a, b) for a, b in zip(cuts, cuts[1:], strict=False) if b > a]
        if len(spans) == 1:
            self._decode(piece, start, stop, out)
        else:
            errors: list[BaseException] = []

            def work(a: int, b: int) -> None:
                try:
                    self._decode(piece, a, b, out[a - start:b - start])
                except BaseException as e:  # noqa: BLE001 - raised again in the caller's thread
                    errors.append(e)

            threads = [threading.Thread(target=work, args=s) for s in spans[1:]]
            for t in threads:
                t.start()
            work(*spans[0])
            for t in threads:
                t.join()
            if errors:
                raise errors[0]
        self._record(piece, start, time.perf_counter() - t0)

    def _decode(self, piece: _Piece, start: int, stop: int, out: np.ndarray) -> None:
        self.ckpt.read(piece.name, rows=slice(start, stop), out=out)
        if piece.per_head:  # GGUF q/k rows back in Hugging Face's order, head by head
            out[...] = unpermute_qk(out, (stop - start) // piece.align)

    def _record(self, piece: _Piece, start: int, seconds: float) -> None:
        """One dequantization row per tensor; a pass that starts over from row 0 is one call."""
        with self._lock:
            row = self._rows.get(piece.name)
            if row is None:
                info = self.ckpt.tensors[piece.name]
                row = self._rows[piece.name] = DequantRow(piece.name, info.label, tuple(info.shape),
                                                          info.stored_bytes, 4 * info.numel, 0.0)
                self.report.add(row)
            elif start == 0:
                row.calls += 1
            row.seconds += seconds


def _strided(ckpt, info) -> bool:
    from ..tensors.read import plan_for

    try:
        return plan_for(ckpt, info).strided is not None
    except ValueError:
        return True


def row_piece(ckpt, cfg, part: str, layer: int | None) -> _Piece | None:
    """`part` as rows of the file, or None when its rows are not the decoder's rows (not 2-D,
    strided in the file, transposed or regrouped on load, heads that do not divide its rows)."""
    gguf = ckpt.format == "gguf"
    name = part_name(cfg, part, layer, gguf)
    info = ckpt.tensors.get(name)
    if info is None or len(info.shape) != 2 or info.stride is not None and _strided(ckpt, info):
        return None
    # llama.cpp's converter stored GPT-2's Conv1D as [out, in] and NeoX's q/k/v grouped already
    if not gguf and not layouts.row_local(cfg, part, layer, bool(info.quant)):
        return None
    rows = int(info.shape[0])
    if gguf and cfg.gguf_qk_permuted and part in ("q", "k"):
        heads = cfg.num_heads if part == "q" else cfg.num_kv_heads
        if heads <= 0 or rows % (2 * heads):
            return None
        return _Piece(name, rows, rows // heads, True)
    return _Piece(name, rows, 1, False)


def row_pieces(ckpt, cfg, layer: int, parts: tuple[str, ...]) -> list[_Piece] | None:
    """The pieces of the layer matrix stacking `parts` by rows, or None when a streamed pass
    decodes it whole (a part is not rows of the file, or the parts differ in width)."""
    pieces = [row_piece(ckpt, cfg, p, layer) for p in parts]
    if any(p is None for p in pieces):
        return None
    found = [p for p in pieces if p is not None]
    widths = {int(ckpt.tensors[p.name].shape[1]) for p in found}
    return found if len(widths) == 1 else None


def streams_by_blocks(ckpt, cfg, layer: int) -> bool:
    """Whether a streamed pass multiplies every matrix of layer `layer` block by block (else
    part of it is decoded whole, and the memory plan counts the whole layer): the same
    `row_pieces` StreamedWeights builds its matrices from. Experts and latent attention are
    decoded whole."""
    if is_moe(cfg, layer) or cfg.kv_lora_rank:
        return False
    return all(row_pieces(ckpt, cfg, layer, parts) is not None for parts in matrix_parts(cfg).values())
