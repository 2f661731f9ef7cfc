"""Real sizes (issue 31): trace and compare_runs of 8B- and 70B-shaped checkpoints in bounded memory.

The checkpoints are written by model_explorer/conversion/sized_model.py (random weights, tensor by tensor), then each
run goes in a fresh process that reports its own peak resident set (VmHWM): memory measured,
not estimated. Beside each time stands its FLOP bound, 2 x parameters x tokens / the float32
matmul rate measured in this run on the model's own layer shapes.

Targets on a 2-core, 24 GB machine:
- trace of the 8B Q4_K_M GGUF over 128 tokens: peak RSS <= 6 GB, time <= 2x the FLOP bound;
- compare_runs of the 8B bf16 folder against that GGUF: peak RSS <= 8 GB;
- trace of a 70B-shaped Q4_K GGUF (about 40 GB on disk): peak RSS <= 8 GB; skipped, and said so,
  when the disk lacks the room;
- trace of the 8B GPTQ folder (4 bits, groups of 128, about 5.5 GB): the GGUF trace's RSS target;
- decode through llama.cpp next to the streamed numpy path (when a llama.cpp binding loads): the
  8B GGUF, a short prompt then --decode greedy steps, seconds per token and peak RSS side by side.

    .venv/bin/python benchmarks/bench_real_sizes.py [--size 8b|70b|both] [--tokens 128] [--decode 16]
                                                    [--dir DIR] [--keep]
    .venv/bin/python benchmarks/bench_real_sizes.py --small      # a tiny shape: the smoke run

Exit 1 when a target is missed.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, ROOT)
sys.path.insert(0, HERE)

import numpy as np  # noqa: E402

from model_explorer.conversion import sized_model as big  # noqa: E402

GB = 1e9
CHILD = r"""
import json, sys, time
sys.path.insert(0, {root!r})
import model_explorer as mx
job = json.loads(sys.argv[1])
ids = list(range(1, job["tokens"] + 1))
extra = {{}}
t0 = time.perf_counter()
if job["kind"] == "trace":
    r = mx.trace(job["a"], ids=ids)
    what = repr(r).splitlines()[0]
elif job["kind"] == "compare":
    r = mx.compare_runs(job["a"], job["b"], ids=ids)
    what = r.summary().splitlines()[0]
else:  # decode: the prompt, then greedy steps one token at a time
    how = {{"backend": "llama.cpp"}} if job["engine"] == "llama.cpp" else {{"device": "cpu", "stream": True}}
    m = mx.load_model(job["a"], context=len(ids) + job["steps"] + 1, **how)
    cache = m.new_cache(len(ids) + job["steps"])
    t1 = time.perf_counter()
    logits = m.forward(ids, cache, last_only=True)
    t2 = time.perf_counter()
    out = []
    for _ in range(job["steps"]):
        out.append(int(logits[-1].argmax()))
        logits = m.forward(out[-1:], cache, last_only=True)
    t3 = time.perf_counter()
    extra = {{"load": t1 - t0, "prefill": t2 - t1, "per_token": (t3 - t2) / job["steps"]}}
    plan = getattr(m, "run_plan", None)
    what = "greedy ids " + " ".join(map(str, out[:6])) + "; " + m.device + (f", {{plan.mode}}" if plan else "")
seconds = time.perf_counter() - t0
with open("/proc/self/status") as f:
    hwm = next(int(l.split()[1]) * 1024 for l in f if l.startswith("VmHWM:"))
print(json.dumps({{"seconds": seconds, "peak_rss": hwm, "what": what, **extra}}))
"""


def sgemm_rate(shape: big.Shape, tokens: int) -> float:
    """float32 FLOP/s of x @ W.T on the model's widest layer matrix (median of 3)."""
    rng = np.random.default_rng(0)
    x = rng.standard_normal((tokens, shape.hidden), dtype=np.float32)
    w = rng.standard_normal((shape.intermediate, shape.hidden), dtype=np.float32)
    x @ w.T
    times = []
    for _ in range(3):
        t0 = time.perf_counter()
        x @ w.T
        times.append(time.perf_counter() - t0)
    return 2 * tokens * shape.hidden * shape.intermediate / sorted(times)[1]


def run_child(job: dict) -> dict:
    code = CHILD.format(root=ROOT)
    out = subprocess.run([sys.executable, "-c", code, json.dumps(job)], capture_output=True, text=True)
    if out.returncode != 0:
        return {"error": (out.stderr.strip().splitlines() or ["?"])[-1]}
    return json.loads(out.stdout.strip().splitlines()[-1])


def row(name: str, r: dict, bound: float | None, rss_target: float | None, time_factor: float | None) -> bool:
    if "error" in r:
        print(f"{name:<44} failed: {r['error']}")
        return False
    ratio = r["seconds"] / bound if bound else None
    ok = (rss_target is None or r["peak_rss"] <= rss_target) and (time_factor is None or ratio <= time_factor)
    targets = []
    if rss_target:
        targets.append(f"RSS <= {rss_target / GB:.0f} GB")
    if time_factor:
        targets.append(f"<= {time_factor:g}x bound")
    print(f"{name:<44} {r['seconds']:8.1f} s  bound {bound or 0:7.1f} s  x{ratio or 0:5.2f}  "
          f"peak RSS {r['peak_rss'] / GB:6.2f} GB  [{', '.join(targets) or 'no target'}: "
          f"{'met' if ok else 'MISSED'}]")
    print(f"{'':<44} {r['what'][:110]}")
    return ok


DECODE_PROMPT = 8  # tokens before the decode steps: the rows compare seconds per decoded token


def decode_rows(label: str, gguf_path: str, steps: int) -> bool:
    """The same greedy decode through llama.cpp and through the streamed numpy path, each in a
    fresh process: load, prompt, seconds per decoded token and peak RSS side by side."""
    from model_explorer.runtime.engines import llamacpp, llamacpp_binding

    if llamacpp_binding.find() is None:
        print(f"decode {label}: skipped: no llama.cpp binding loads here ({llamacpp.missing()})")
        return True
    print(f"decode {label} Q4_K_M, {DECODE_PROMPT}-token prompt then {steps} greedy steps, each engine "
          "in a fresh process:")
    print(f"  {'engine':<24} {'load':>7} {'prompt':>8} {'per token':>10} {'peak RSS':>9}")
    per_token = {}
    for engine in ("llama.cpp", "numpy, streamed"):
        r = run_child({"kind": "decode", "engine": engine, "a": gguf_path, "tokens": DECODE_PROMPT,
                       "steps": steps})
        if "error" in r:
            print(f"  {engine:<24} failed: {r['error']}")
            return False
        per_token[engine] = r["per_token"]
        print(f"  {engine:<24} {r['load']:6.1f}s {r['prefill']:7.2f}s {r['per_token']:9.3f}s "
              f"{r['peak_rss'] / GB:6.2f} GB   {r['what'][:100]}")
    print(f"  streamed numpy takes {per_token['numpy, streamed'] / per_token['llama.cpp']:.1f}x "
          "llama.cpp's time per token")
    return True


def gptq_row(label: str, shape: big.Shape, work: str, tokens: int, bound: float, small: bool) -> bool:
    """Trace of the GPTQ folder of the same shape (4 bits, groups of 128), the GGUF trace's RSS target."""
    folder = os.path.join(work, f"{label}-gptq")
    need = big.gptq_folder_bytes(shape)
    if not os.path.exists(os.path.join(folder, "config.json")):
        if shutil.disk_usage(work).free < need * 1.1:
            print(f"trace {label} GPTQ: skipped: the folder needs {need / GB:.1f} GB and {work} has "
                  f"{shutil.disk_usage(work).free / GB:.1f} GB free")
            return True
        t0 = time.perf_counter()
        big.write_gptq_folder(folder, shape, shard_bytes=(1 << 20) if small else 5 << 30)
        print(f"  wrote {folder} ({need / GB:.2f} GB) in {time.perf_counter() - t0:.0f} s")
    return row(f"trace {label} GPTQ 4-bit g128", run_child({"kind": "trace", "a": folder, "tokens": tokens}),
               bound, None if small else 6 * GB, None)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--size", choices=("8b", "70b", "both"), default="8b")
    ap.add_argument("--tokens", type=int, default=128)
    ap.add_argument("--decode", type=int, default=16, help="greedy decode steps of the llama.cpp / streamed rows")
    ap.add_argument("--dir", default=None, help="where the checkpoints are written (default: a temp dir)")
    ap.add_argument("--keep", action="store_true", help="keep the checkpoints (reused when present)")
    ap.add_argument("--small", action="store_true", help="a tiny shape, 16 tokens: the smoke run")
    args = ap.parse_args()
    work = args.dir or tempfile.mkdtemp(prefix="mx-real-sizes-")
    os.makedirs(work, exist_ok=True)
    sizes = [("tiny", big.TINY)] if args.small else \
        [(s, {"8b": big.LLAMA_8B, "70b": big.LLAMA_70B}[s]) for s in (("8b", "70b") if args.size == "both" else (args.size,))]
    tokens = 16 if args.small else args.tokens
    steps = 4 if args.small else args.decode
    ok = True
    try:
        for label, shape in sizes:
            rate = sgemm_rate(shape, tokens)
            bound = 2 * shape.parameters * tokens / rate
            print(f"{label}: {shape.parameters / 1e9:.3g}B parameters, {tokens} tokens; float32 matmul "
                  f"{rate / 1e9:.1f} GFLOP/s on this machine -> FLOP bound {bound:.1f} s")
            mix = "q4_k" if label == "70b" else "q4_k_m"
            gguf_path = os.path.join(work, f"{label}-{mix}.gguf")
            need = shape.parameters * 0.57  # Q4_K_M: about 4.6 bits per weight
            if not os.path.exists(gguf_path) and shutil.disk_usage(work).free < need * 1.1:
                print(f"{label}: skipped: the GGUF needs about {need / GB:.0f} GB and {work} has "
                      f"{shutil.disk_usage(work).free / GB:.0f} GB free")
                continue
            if not os.path.exists(gguf_path):
                t0 = time.perf_counter()
                big.write_gguf(gguf_path, shape, mix)
                print(f"  wrote {gguf_path} ({os.path.getsize(gguf_path) / GB:.2f} GB) in {time.perf_counter() - t0:.0f} s")
            small_limits = label == "tiny"
            rss = None if small_limits else (6 if label == "8b" else 8) * GB
            ok &= row(f"trace {label} {mix.upper()}", run_child({"kind": "trace", "a": gguf_path, "tokens": tokens}),
                      bound, rss, None if small_limits else 2.0)
            if label == "70b":
                continue
            ok &= decode_rows(label, gguf_path, steps)
            ok &= gptq_row(label, shape, work, tokens, bound, small_limits)
            folder = os.path.join(work, f"{label}-bf16")
            if not os.path.exists(os.path.join(folder, "config.json")):
                if shutil.disk_usage(work).free < 2.2 * shape.parameters:
                    print(f"  compare_runs skipped: the bf16 folder needs {2 * shape.parameters / GB:.0f} GB")
                    continue
                t0 = time.perf_counter()
                big.write_bf16_folder(folder, shape, shard_bytes=(1 << 20) if small_limits else 5 << 30)
                print(f"  wrote {folder} in {time.perf_counter() - t0:.0f} s")
            ok &= row(f"compare_runs {label} bf16 vs {mix.upper()}",
                      run_child({"kind": "compare", "a": folder, "b": gguf_path, "tokens": tokens}),
                      2 * bound, None if small_limits else 8 * GB, None)
    finally:
        if not args.keep and not args.dir:
            shutil.rmtree(work, ignore_errors=True)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
