"""The torch engine: the same operations in torch on the CPU, CUDA or MPS, with optional
weight-only int8 / int4 matrices (torch_wquant)."""

from __future__ import annotations

from typing import Any

import numpy as np


class TorchBackend:
    """The same operations in torch, on "cpu", "cuda" or "mps".

    weights: "float32"; "bfloat16" (the layer matrices in bfloat16, multiplied with float32
    accumulation: a bfloat16 file held as stored, half the bytes); or "int8" / "int4" to hold
    them for torch's weight-only kernels (see `wquant`): requantized from the decoded values, a
    quarter or a seventh of the bytes for each decode step to read.
    """

    name = "torch"

    def __init__(self, device: str, weights: str = "float32") -> None:
        import torch

        from . import torch_wquant as wquant

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
        from . import torch_wquant as wquant

        if self.weights == "bfloat16":
            return ", bfloat16 matrices"
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
        from . import torch_wquant as wquant

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
            from . import torch_wquant as wquant

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
