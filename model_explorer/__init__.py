"""model_explorer: see inside safetensors, GGUF and PyTorch checkpoints without running them.

    import model_explorer as mx
    ckpt = mx.open("model.safetensors")   # readers: spans, tensors, findings
    mx.explore("model.gguf")              # the notebook explorer
"""

from __future__ import annotations

import importlib

from .checkpoint import Checkpoint, TensorInfo
from .opener import adapter_deltas, card, memory, open
from .spans import Finding, Span

__version__ = "0.1.0"

# Heavier parts load on first use, so `import model_explorer` stays cheap for the CLI.
_LAZY = {
    "diff": "model_explorer.opener",
    "graph": "model_explorer.opener",
    "explore": "model_explorer.widgets",
    "Explorer": "model_explorer.widgets",
    "HexDump": "model_explorer.widgets",
    "HeaderTree": "model_explorer.widgets",
    "ShardMap": "model_explorer.widgets",
    "TensorHistogram": "model_explorer.widgets",
    "Findings": "model_explorer.widgets",
    "RunDemo": "model_explorer.widgets.run_cell",
    "load_model": "model_explorer.runtime",
    "generate": "model_explorer.runtime",
    "trace": "model_explorer.runs.trace",
    "Trace": "model_explorer.runs.trace",
    "compare_runs": "model_explorer.runs.compare_runs",
    "RunDiff": "model_explorer.runs.compare_runs",
    "RunsView": "model_explorer.widgets.runs_view",
    "convert": "model_explorer.conversion",
    "random_model": "model_explorer.conversion.random_model",
    "sample_path": "model_explorer.samples",
    "audit": "model_explorer.audits",
    "scan": "model_explorer.audits",
    "plot_layers": "model_explorer.opener",
    "layer_profile": "model_explorer.opener",
    "layer_findings": "model_explorer.opener",
    "repair": "model_explorer.repairs",
    "repair_plan": "model_explorer.repairs",
    "FixDialog": "model_explorer.widgets.fix_dialog",
}


def __getattr__(name: str):
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'model_explorer' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    if module.startswith("model_explorer.runs."):
        importlib.import_module("model_explorer.widgets.runs_view")  # their .show() (viewers.py)
    if name == "graph":
        importlib.import_module("model_explorer.widgets.graph_view")  # Graph.show() (viewers.py)
    globals()[name] = value
    return value


def __dir__():
    return sorted(list(globals()) + list(_LAZY))


__all__ = ["Checkpoint", "Finding", "Span", "TensorInfo", "open", "card", "memory", "adapter_deltas",
           "__version__", *_LAZY]
