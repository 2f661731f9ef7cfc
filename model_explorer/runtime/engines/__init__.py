"""The engines a model runs on, and the choice between them: numpy (numpy_engine.py), torch
(torch_engine.py) and llama.cpp (llamacpp.py, for GGUFs).

The decoder (runtime/decoder.py) is written once against the numpy and torch engines' shared
interface, so it runs on numpy (CPU, always available) or on torch (CUDA, MPS, or torch's CPU
kernels) when torch is installed. Arrays are float32 throughout; shapes are numpy-style tuples.
"""

from __future__ import annotations

import importlib.util
import os
import platform
import re
import sys

from .numpy_engine import NumpyBackend
from .torch_engine import TorchBackend

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
    """Devices this machine can run a model on: "cpu" always, "cuda"/"mps" when torch sees them.

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
