"""Compare backends on one prompt: why the engine of the field is fast, not just that it is.

    rows = compare_backends(prompt="What is the capital of France?")
    pandas.DataFrame(rows)

For each backend (the numpy reference, llama.cpp when installed, torch when installed): load
time, prefill and decode tokens/s, peak memory, the bytes of weights one decode step must read
and the tokens/s that memory bandwidth allows at that size, and whether its greedy tokens agree
with the numpy reference. A decode step reads every weight matrix once, so a backend that keeps
the weights quantized reads a quarter to an eighth of the bytes a float32 one does: that, not
cleverer arithmetic, is most of the gap.
"""

from __future__ import annotations

import gc
import time
from collections.abc import Callable
from typing import Any

import numpy as np

from ..runtime import process_memory as memory
from ..runtime.engines import llamacpp, torch_installed

STREAM_BYTES = 256 * 2**20  # bigger than any cache, so the figure is memory bandwidth


def stream_bandwidth(repeat: int = 3) -> float:
    """Bytes/s at which one thread's matrix-vector product streams a float32 matrix from memory."""
    rows = STREAM_BYTES // (4 * 4096)
    a = np.ones((rows, 4096), np.float32)
    x = np.ones(4096, np.float32)
    best = float("inf")
    for _ in range(repeat):
        t0 = time.perf_counter()
        a @ x
        best = min(best, time.perf_counter() - t0)
    return a.nbytes / best


def weight_bytes_per_token(model) -> int:
    """Bytes of weights one decode step reads: every matrix once, the embedding as one row.

    float32 backends read their dequantized arrays; llama.cpp reads the GGUF's stored blocks.
    """
    if model.is_engine:  # llama.cpp reads the GGUF's own blocks
        from ..opener import open as open_checkpoint

        with open_checkpoint(model.weights.report.gguf_path) as ckpt:
            names = set(ckpt.tensors)
            tied = "output.weight" not in names
            total = 0
            for name, t in ckpt.tensors.items():
                if name == "token_embd.weight" and not tied:
                    total += t.length // max(1, t.shape[0])  # one looked-up row
                else:
                    total += t.length
            return total
    w = model.weights
    total = 0
    for i in range(model.config.num_layers):
        total += sum(int(getattr(a, "nbytes", 0)) for a in w.layer(i).values() if getattr(a, "ndim", 0) == 2)
    return total + int(getattr(w.lm_head, "nbytes", 0))


def _candidates() -> list[str]:
    out = ["numpy"]
    if llamacpp.installed():
        out.append(llamacpp.ENGINE)
    if torch_installed():
        from ..runtime.engines import available_devices

        out.append("torch")
        if "cuda" in available_devices():
            out.append(WEIGHT_ONLY)
    return out


WEIGHT_ONLY = "torch weight-only"


def _load_kwargs(name: str) -> dict[str, Any]:
    """numpy on the CPU; torch in float32 on CUDA when there is one, else on the CPU; and on CUDA
    torch again with the layer matrices at the file's precision for its weight-only kernels."""
    if name == "numpy":
        return {"device": "cpu"}
    if name in ("torch", WEIGHT_ONLY):
        from ..runtime.engines import available_devices

        device = "cuda" if "cuda" in available_devices() else "cpu"
        return {"backend": "torch", "device": device, "weights": "auto" if name == WEIGHT_ONLY else "float32"}
    return {"backend": name}


def compare_backends(source=None, prompt: str = "What is the capital of France?", max_new_tokens: int = 24,
                     chat: bool = True, backends: list[str] | None = None,
                     on_row: Callable[[dict[str, Any]], None] | None = None) -> list[dict[str, Any]]:
    """One row per backend (see the module docstring); the numpy reference runs first."""
    from ..runtime.api import load_model

    backends = backends or _candidates()
    if "numpy" in backends:
        backends = ["numpy"] + [b for b in backends if b != "numpy"]
    bandwidth = stream_bandwidth()
    rows: list[dict[str, Any]] = []
    reference: list[int] | None = None
    for name in backends:
        gc.collect()
        memory.reset_peak()
        model = load_model(source, **_load_kwargs(name))
        try:
            result = model.generate(prompt, max_new_tokens=max_new_tokens, chat=chat, stop_at_eos=False)
            per_token = weight_bytes_per_token(model)
            # The CPU's streaming bandwidth caps CPU backends only; a GPU has its own.
            on_cpu = getattr(model.backend, "device", "cpu") == "cpu"
            row = {"backend": name, "device": model.device, "load_s": model.load_seconds,
                   "prefill_tps": result.prefill_tps, "decode_tps": result.decode_tps,
                   "peak_rss": memory.peak_rss(), "peak_memory": result.peak_memory_bytes,
                   "weight_bytes_per_token": per_token,
                   "bandwidth_gbps": bandwidth / 1e9 if on_cpu else None,
                   "cap_tps": bandwidth / per_token if per_token and on_cpu else None,
                   "tokens": result.tokens, "text": result.text}
        finally:
            model.close()
            del model
        row["share_of_cap"] = row["decode_tps"] / row["cap_tps"] if row["cap_tps"] else None
        if reference is None:
            reference = row["tokens"]
        same = next((i for i, (a, b) in enumerate(zip(row["tokens"], reference)) if a != b),
                    min(len(row["tokens"]), len(reference)))
        row["agrees_with_numpy"] = f"{same}/{len(reference)}"
        rows.append(row)
        if on_row is not None:
            on_row(row)
    return rows

