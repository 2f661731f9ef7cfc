"""The engines a model runs on, and the choice between them, made here only: numpy
(numpy_engine.py), torch (torch_engine.py) and llama.cpp (llamacpp.py, for GGUFs).

`wants_llamacpp` decides whether llama.cpp runs a file, `get_backend` which array backend our
decoder runs on, `auto_weights` at what precision torch holds the layer matrices on CUDA;
`is_engine` is the one way to ask whether a backend runs the forward pass itself (llama.cpp)
or hands arrays to our decoder.

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

from ..describe import decoder_refusal
from ..weights import layer_bits_per_weight, layer_labels
from . import llamacpp
from . import torch_wquant as wquant
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


def is_engine(backend) -> bool:
    """Whether `backend` runs the whole forward pass itself (llama.cpp), so no weight, layer or
    activation of ours exists; else it is an array backend our decoder runs on."""
    return isinstance(backend, llamacpp.LlamaCppEngine)


def wants_llamacpp(path: str, device: str, backend: str | None, keep_quantized: bool) -> bool:
    """Whether llama.cpp runs `path`: asked for by name, or a GGUF on a CPU-only machine (the
    faster engine there), or one whose architecture our decoder refuses."""
    if backend == llamacpp.ENGINE:
        if not llamacpp.installed():
            raise RuntimeError(f"backend='llama.cpp' needs a llama.cpp binding ({llamacpp.missing()}).")
        if keep_quantized or device not in ("auto", "cpu"):
            raise ValueError("backend='llama.cpp' runs on the CPU and always keeps the weights "
                             "quantized; leave device and keep_quantized at their defaults.")
        return True
    if not (backend is None and device == "auto" and not keep_quantized and llamacpp.installed()
            and path.endswith(".gguf")):
        return False
    # the engine is chosen before the numpy decoder's reader can refuse the architecture
    return available_devices() == ["cpu"] or decoder_refusal(path) is not None


def auto_weights(be, ckpt, cfg):
    """On CUDA, hold the layer matrices at the file's precision: torch's weight-only kernels for
    4- and 8-bit files, bfloat16 for a bfloat16 file."""
    if getattr(be, "name", None) != "torch" or be.device != "cuda":
        return be
    kind = wquant.kind_for_bits(layer_bits_per_weight(ckpt, cfg))
    if kind == "int4" and not wquant.int4_supported(be.torch, be.device):
        kind = "int8"
    if kind == "float32" and layer_labels(ckpt, cfg) == {"BF16"}:
        kind = "bfloat16"  # held as stored: half the bytes, the GPU's bfloat16 matmuls, no rounding
    return be if kind == "float32" else TorchBackend(be.device, kind)
