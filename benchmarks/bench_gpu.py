"""The GPU check of issue 31: an 8B-shaped model end to end on CUDA, beside the CPU reference.

One prepared run for a session that is lent a GPU machine (a few minutes of device time):
1. writes the 8B-shaped bf16 folder (conversion/sized_model.py, random weights, 16 GB) and its
   Q4_K_M GGUF;
2. on CUDA with weights="auto" (the bf16 folder held as bfloat16, the GGUF as int4): load time,
   a trace over the prompt, greedy decode (seconds per token), torch's peak device memory;
3. the same prompt through the numpy reference on the CPU (streamed): the top-1 agreement and
   the largest logit difference of each CUDA run against it (printed, not judged: random
   weights give near-flat logits, where bfloat16 or int4 rounding may swap the top token).

    python benchmarks/bench_gpu.py [--size 8b|tiny] [--tokens 64] [--decode 16] [--dir DIR]
    python benchmarks/bench_gpu.py --small    # the tiny shape; on the CPU's torch when no CUDA

Every family on CUDA in bfloat16 against transformers: `MODEL_EXPLORER_TEST_DEVICE=cuda pytest
tests/runtime/test_families.py -k bfloat16`.
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))  # run from a checkout without installing

import numpy as np  # noqa: E402

from model_explorer.conversion import sized_model as big  # noqa: E402

GB = 1e9


def _device() -> str:
    try:
        import torch
    except ImportError:
        return "none"
    return "cuda" if torch.cuda.is_available() else "cpu"


def _cuda_run(path: str, ids: list[int], steps: int, device: str) -> dict:
    import torch

    import model_explorer as mx

    if device == "cuda":
        torch.cuda.reset_peak_memory_stats()
    t0 = time.perf_counter()
    model = mx.load_model(path, device=device, backend="torch")
    load = time.perf_counter() - t0
    t0 = time.perf_counter()
    trace = mx.trace(model, ids=ids)
    traced = time.perf_counter() - t0
    cache = model.new_cache(len(ids) + steps)
    logits = model.forward(ids, cache)
    token = int(np.argmax(logits[-1]))
    t0 = time.perf_counter()
    for _ in range(steps):
        token = int(np.argmax(model.forward([token], cache)[-1]))
    per_token = (time.perf_counter() - t0) / max(1, steps)
    peak = torch.cuda.max_memory_allocated() if device == "cuda" else 0
    out = {"device": model.device, "load": load, "trace": traced, "per_token": per_token,
           "peak": peak, "logits": trace.logits, "what": repr(trace)}
    model.close()
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--size", choices=("8b", "tiny"), default="8b")
    ap.add_argument("--tokens", type=int, default=64)
    ap.add_argument("--decode", type=int, default=16)
    ap.add_argument("--dir", default=None)
    ap.add_argument("--small", action="store_true", help="the tiny shape, 8 tokens: the smoke run")
    args = ap.parse_args()
    if args.small:
        args.size, args.tokens, args.decode = "tiny", 8, 2
    device = _device()
    if device == "none":
        print("torch is not installed: nothing to check")
        return 0
    if device == "cpu" and not args.small:
        print("no CUDA device here: run with --small for the smoke run, or on a GPU machine")
        return 0
    shape = big.TINY if args.size == "tiny" else big.LLAMA_8B
    work = args.dir or tempfile.mkdtemp(prefix="mx-gpu-")
    os.makedirs(work, exist_ok=True)
    ids = list(range(1, args.tokens + 1))
    try:
        folder, gguf = os.path.join(work, f"{args.size}-bf16"), os.path.join(work, f"{args.size}-q4_k_m.gguf")
        t0 = time.perf_counter()
        if not os.path.exists(os.path.join(folder, "config.json")):
            big.write_bf16_folder(folder, shape, shard_bytes=(1 << 20) if args.small else 5 << 30)
        if not os.path.exists(gguf):
            big.write_gguf(gguf, shape)
        print(f"{args.size}: {shape.parameters / 1e9:.3g}B parameters, written in {time.perf_counter() - t0:.0f} s; "
              f"{args.tokens}-token prompt, {args.decode} decode steps on {device}")
        import model_explorer as mx

        for label, path in (("bf16 folder", folder), ("Q4_K_M GGUF", gguf)):
            t0 = time.perf_counter()
            reference = mx.trace(path, ids=ids, device="cpu", stream=True, progress=False).logits
            cpu = time.perf_counter() - t0
            r = _cuda_run(path, ids, args.decode, device)
            agree = float((r["logits"].argmax(-1) == reference.argmax(-1)).mean())
            rel = float(np.abs(r["logits"] - reference).max() / np.abs(reference).max())
            print(f"  {label:<12} {r['device']}")
            print(f"    load {r['load']:.1f} s, trace {r['trace']:.2f} s, {r['per_token'] * 1e3:.1f} ms per token, "
                  f"peak device memory {r['peak'] / GB:.2f} GB; CPU reference (numpy, streamed) {cpu:.1f} s")
            print(f"    against the CPU reference: top-1 agreement {agree:.1%}, max |diff| / max |logit| {rel:.3g}")
    finally:
        if not args.dir:
            shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
