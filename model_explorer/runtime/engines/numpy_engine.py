"""The numpy engine: the decoder's array operations in float32 numpy on the CPU (the reference)."""

from __future__ import annotations

import numpy as np


class NumpyBackend:
    """float32 numpy on the CPU; BLAS does the matmuls with its default thread count."""

    name = "numpy"
    device = "cpu"

    @property
    def device_name(self) -> str:
        return "cpu (numpy)"

    weights = "float32"

    def asarray(self, a: np.ndarray) -> np.ndarray:
        """Weights and inputs in: float32, C-contiguous (a no-op for arrays already so)."""
        return np.ascontiguousarray(a, dtype=np.float32)

    def matrix(self, a: np.ndarray) -> np.ndarray:
        """A layer's weight matrix: numpy runs the file's decoded values as they are."""
        return self.asarray(a)

    def to_numpy(self, x) -> np.ndarray:
        return x

    def zeros(self, shape: tuple[int, ...]) -> np.ndarray:
        return np.zeros(shape, np.float32)

    def ids(self, token_ids) -> np.ndarray:
        return np.asarray(token_ids, dtype=np.int64)

    def embed(self, table, ids):
        return table[ids]

    def linear(self, x, w, b=None):
        """x @ w.T (+ b): w is stored (out_features, in_features), as every format stores it.

        One row (a decode step) runs as w @ x, a matrix-vector product that streams w's rows in
        memory order: decoding is bound by how fast the weights stream, and BLAS's gemv does
        that better than a 1-row gemm over the transposed matrix.
        """
        y = (w @ x[0])[None] if x.shape[0] == 1 else x @ w.T
        if b is not None:
            y += b
        return y

    def matmul(self, a, b):
        return a @ b

    def transpose(self, x, axes: tuple[int, ...]):
        return x.transpose(axes)

    def concat(self, xs, axis: int):
        return np.concatenate(xs, axis=axis)

    def rms_norm(self, x, weight, eps: float):
        # Sum of squares per row without the x * x temporary; one scale vector, one product.
        inv = np.einsum("ij,ij->i", x, x)
        inv /= x.shape[-1]
        inv += eps
        np.sqrt(inv, out=inv)
        np.divide(1.0, inv, out=inv)
        y = x * inv[:, None]
        y *= weight
        return y

    def silu(self, x):
        # x * sigmoid(x), written to stay finite for large |x|.
        return x / (1.0 + np.exp(-np.clip(x, -80.0, 80.0)))

    def sigmoid(self, x):
        return 1.0 / (1.0 + np.exp(-np.clip(x, -80.0, 80.0)))

    def swiglu(self, gate, up):
        """silu(gate) * up in one buffer: decoding runs this every layer, so no temporaries."""
        t = np.clip(gate, -80.0, 80.0)
        np.negative(t, out=t)
        np.exp(t, out=t)
        t += 1.0
        np.divide(gate, t, out=t)
        t *= up
        return t

    def rows(self, x, idx):
        return x[idx]

    def add_rows(self, out, idx, values):
        """out[idx] += values (each index once: a token meets an expert at most once)."""
        out[idx] += values
        return out

    def softcap(self, x, cap: float):
        """cap * tanh(x / cap), Gemma 2's soft bound on attention scores and logits."""
        return np.tanh(x / np.float32(cap)) * np.float32(cap)

    def clamped_swiglu(self, gate, up, limit: float, alpha: float):
        """gpt-oss: (clip(up, +-limit) + 1) * g * sigmoid(alpha * g), g = min(gate, limit)."""
        g = np.minimum(gate, np.float32(limit))
        u = np.clip(up, np.float32(-limit), np.float32(limit))
        return (u + np.float32(1.0)) * (g * self.sigmoid(g * np.float32(alpha)))

    def layer_norm(self, x, weight, bias, eps: float):
        """LayerNorm over the last axis (GPT-2, NeoX): biased variance, as torch computes it."""
        d = x - x.mean(axis=-1, keepdims=True)
        var = np.einsum("ij,ij->i", d, d)[:, None] / np.float32(x.shape[-1])
        y = d / np.sqrt(var + np.float32(eps))
        y *= weight
        if bias is not None:
            y += bias
        return y

    def gelu(self, x, tanh: bool):
        """GELU: the tanh approximation (GPT-2's gelu_new), or exact, 0.5 x (1 + erf(x / sqrt 2)),
        with erf from Abramowitz & Stegun 7.1.26 in float64 (absolute error 1.5e-7; numpy has no erf)."""
        if tanh:
            return self.geglu(x, np.float32(1.0))
        z = np.abs(x.astype(np.float64)) / np.sqrt(2.0)
        t = 1.0 / (1.0 + 0.3275911 * z)
        poly = t * (0.254829592 + t * (-0.284496736 + t * (1.421413741 + t * (-1.453152027 + t * 1.061405429))))
        erf = np.sign(x) * (1.0 - poly * np.exp(-z * z))
        return (0.5 * x * (1.0 + erf)).astype(np.float32)

    def geglu(self, gate, up):
        """gelu_tanh(gate) * up (Gemma's GeGLU), as torch's gelu(approximate="tanh") computes it."""
        g = gate.astype(np.float32)
        t = np.tanh(np.float32(np.sqrt(2.0 / np.pi)) * (g + np.float32(0.044715) * g * g * g))
        return np.float32(0.5) * g * (np.float32(1.0) + t) * up

    def rope(self, x, cos, sin):
        """Rotary embedding, rotate-half convention, written into one output buffer."""
        half = x.shape[-1] // 2
        x1, x2 = x[..., :half], x[..., half:]
        out = np.empty(x.shape, np.float32)
        lo, hi = out[..., :half], out[..., half:]
        np.multiply(x1, cos, out=lo)
        lo -= x2 * sin
        np.multiply(x2, cos, out=hi)
        hi += x1 * sin
        return out

    def softmax(self, x):
        x = x - x.max(axis=-1, keepdims=True)
        np.exp(x, out=x)
        x /= x.sum(axis=-1, keepdims=True)
        return x

    def synchronize(self) -> None:
        pass

    def memory_peak(self) -> int | None:
        return None

    def reset_memory_peak(self) -> None:
        pass
