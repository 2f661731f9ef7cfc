"""The handful of array operations the forward pass needs, for numpy and for torch.

`model.py` is written once against this interface, so the same decoder runs on numpy (CPU,
always available) or on torch (CUDA, MPS, or torch's CPU kernels) when torch is installed.
Arrays are float32 throughout; shapes are numpy-style tuples on both backends.
"""

from __future__ import annotations

import importlib.util
import os
import platform
import re
import sys
from typing import Any

import numpy as np

DEVICES = ("auto", "cpu", "cuda", "mps")


def torch_installed() -> bool:
    return importlib.util.find_spec("torch") is not None


def _torch_may_see_gpu() -> bool:
    """Whether importing torch could find a GPU, decided without importing it (an import costs
    seconds and hundreds of MiB): a CUDA/ROCm build with a GPU device node, or Apple silicon."""
    spec = importlib.util.find_spec("torch")
    if spec is None:
        return False
    if sys.platform == "darwin":
        return platform.machine() == "arm64"
    for folder in spec.submodule_search_locations or []:
        try:
            with open(os.path.join(folder, "version.py")) as f:
                text = f.read()
        except OSError:
            return True  # unusual layout: ask torch itself
        if not re.search(r"^(cuda|hip)\b.*=\s*'", text, re.M):
            return False
    return any(os.path.exists(p) for p in ("/dev/nvidia0", "/dev/nvidiactl", "/dev/kfd"))


def available_devices() -> list[str]:
    """Devices this machine can run the demo on: "cpu" always, "cuda"/"mps" when torch sees them.

    torch is imported only when it is installed as a GPU build and a GPU may be present.
    """
    found = ["cpu"]
    if _torch_may_see_gpu():
        import torch

        if torch.cuda.is_available():
            found.append("cuda")
        mps = getattr(torch.backends, "mps", None)
        if mps is not None and mps.is_available():
            found.append("mps")
    return found


def get_backend(device: str = "auto", backend: str | None = None, weights: str = "float32"):
    """Pick the array backend for `device`.

    device: "auto" (a GPU when torch finds one, else numpy on the CPU), "cpu", "cuda", "mps".
    backend: None (numpy on the CPU, torch on a GPU), or "numpy" / "torch" to force one;
        `device="cpu", backend="torch"` runs torch's CPU kernels.
    weights: "float32", or "int8" / "int4" for torch's weight-only kernels (torch only).
    """
    if device not in DEVICES:
        raise ValueError(f"device must be one of {', '.join(DEVICES)}, not {device!r}")
    if backend not in (None, "numpy", "torch"):
        raise ValueError(f"backend must be 'numpy' or 'torch', not {backend!r}")
    if device == "auto":
        gpus = [d for d in available_devices() if d != "cpu"] if backend != "numpy" else []
        device = gpus[0] if gpus else "cpu"
    if device == "cpu" and backend != "torch":
        if weights != "float32":
            raise ValueError(f"weights={weights!r} runs torch's weight-only kernels; the numpy "
                             "reference holds float32 (keep_quantized=True keeps the file's blocks "
                             "instead). Pass backend='torch' to use them on the CPU.")
        return NumpyBackend()
    if backend == "numpy":
        raise ValueError(f"the numpy backend runs on the CPU only, not on {device!r}")
    if not torch_installed():
        raise RuntimeError(f"device {device!r} needs torch, which is not installed "
                           "(pip install torch); device='cpu' runs on numpy without it.")
    if device != "cpu" and device not in available_devices():
        raise RuntimeError(f"torch is installed but sees no {device!r} device here; "
                           f"available: {', '.join(available_devices())}.")
    return TorchBackend(device, weights)


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


class TorchBackend:
    """The same operations in torch, on "cpu", "cuda" or "mps".

    weights: "float32", or "int8" / "int4" to hold the layer matrices for torch's weight-only
    kernels (see `wquant`): requantized from the decoded values, a quarter or a seventh of the
    bytes for each decode step to read.
    """

    name = "torch"

    def __init__(self, device: str, weights: str = "float32") -> None:
        import torch

        from . import wquant

        if weights not in wquant.KINDS:
            raise ValueError(f"weights must be one of {', '.join(wquant.KINDS)}, not {weights!r}")
        self.torch = torch
        self.device = device
        self._dev = torch.device(device)
        if weights == "int4" and not wquant.int4_supported(torch, device):
            raise ValueError(f"torch has no int4 weight-only kernel on {device!r}; "
                             "weights='int8' or 'float32' run there.")
        self.weights = weights
        self._int8_fused = weights == "int8" and wquant.int8_fused(torch, self._dev)

    @property
    def device_name(self) -> str:
        where = self.device
        if self.device == "cuda":
            where = f"cuda ({self.torch.cuda.get_device_name(self._dev)}"
            return f"{where}, torch{self._weights_note()})"
        return f"{where} (torch{self._weights_note()})"

    def _weights_note(self) -> str:
        if self.weights == "float32":
            return ""
        from . import wquant

        if self.weights == "int4":
            return f", int4 weight-only in groups of {wquant.INT4_GROUP}"
        return ", int8 weight-only" + ("" if self._int8_fused else " (widened per call)")

    def asarray(self, a: np.ndarray):
        t = self.torch.from_numpy(np.ascontiguousarray(a, dtype=np.float32))
        return t.to(self._dev) if self.device != "cpu" else t

    def matrix(self, a: np.ndarray):
        """A layer's weight matrix, packed for the weight-only kernel when one was asked for.
        A matrix with NaN or Inf stays float32: min-max codes of a non-finite group would be
        garbage that hides them, float32 carries them into the logits where they show."""
        if self.weights == "float32" or not np.isfinite(a).all():
            return self.asarray(a)
        from . import wquant

        return wquant.pack(self.torch, self._dev, np.ascontiguousarray(a, dtype=np.float32), self.weights)

    def to_numpy(self, x) -> np.ndarray:
        return x.detach().to("cpu").numpy()

    def zeros(self, shape: tuple[int, ...]):
        return self.torch.zeros(shape, dtype=self.torch.float32, device=self._dev)

    def ids(self, token_ids):
        return self.torch.as_tensor(np.asarray(token_ids, dtype=np.int64), device=self._dev)

    def embed(self, table, ids):
        return table[ids]

    def linear(self, x, w, b=None):
        if not isinstance(w, self.torch.Tensor):  # a wquant.QuantMatrix
            from . import wquant

            y = wquant.linear(self.torch, x, w, self._int8_fused)
            return y + b if b is not None else y
        return self.torch.nn.functional.linear(x, w, b)

    def matmul(self, a, b):
        return a @ b

    def transpose(self, x, axes: tuple[int, ...]):
        return x.permute(axes)

    def concat(self, xs, axis: int):
        return self.torch.cat(xs, dim=axis)

    def rms_norm(self, x, weight, eps: float):
        variance = (x * x).mean(dim=-1, keepdim=True)
        return (x * self.torch.rsqrt(variance + eps)) * weight

    def silu(self, x):
        return self.torch.nn.functional.silu(x)

    def sigmoid(self, x):
        return self.torch.sigmoid(x)

    def swiglu(self, gate, up):
        return self.torch.nn.functional.silu(gate) * up

    def geglu(self, gate, up):
        return self.torch.nn.functional.gelu(gate, approximate="tanh") * up

    def clamped_swiglu(self, gate, up, limit: float, alpha: float):
        g = gate.clamp(max=limit)
        return (up.clamp(-limit, limit) + 1) * (g * self.torch.sigmoid(g * alpha))

    def layer_norm(self, x, weight, bias, eps: float):
        return self.torch.nn.functional.layer_norm(x, (x.shape[-1],), weight, bias, eps)

    def gelu(self, x, tanh: bool):
        return self.torch.nn.functional.gelu(x, approximate="tanh" if tanh else "none")

    def softcap(self, x, cap: float):
        return self.torch.tanh(x / cap) * cap

    def rows(self, x, idx):
        return x.index_select(0, idx)

    def add_rows(self, out, idx, values):
        return out.index_add_(0, idx, values)

    def rope(self, x, cos, sin):
        half = x.shape[-1] // 2
        x1, x2 = x[..., :half], x[..., half:]
        return self.torch.cat([x1 * cos - x2 * sin, x2 * cos + x1 * sin], dim=-1)

    def softmax(self, x):
        return self.torch.softmax(x, dim=-1)

    def synchronize(self) -> None:
        if self.device == "cuda":
            self.torch.cuda.synchronize()
        elif self.device == "mps":
            self.torch.mps.synchronize()

    def memory_peak(self) -> int | None:
        """Peak bytes allocated on the accelerator (None on the CPU: the process peak counts)."""
        if self.device == "cuda":
            return int(self.torch.cuda.max_memory_allocated(self._dev))
        if self.device == "mps":
            return int(self.torch.mps.driver_allocated_memory())
        return None

    def reset_memory_peak(self) -> None:
        if self.device == "cuda":
            self.torch.cuda.reset_peak_memory_stats(self._dev)


Backend = Any  # NumpyBackend | TorchBackend
