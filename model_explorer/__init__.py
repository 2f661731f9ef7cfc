"""model_explorer: see inside safetensors, GGUF and PyTorch checkpoints without running them."""

from __future__ import annotations

from .checkpoint import Checkpoint, TensorInfo
from .opener import open
from .spans import Finding, Span

__version__ = "0.1.0"

__all__ = ["Checkpoint", "Finding", "Span", "TensorInfo", "open", "__version__"]
