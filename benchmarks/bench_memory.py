"""Memory estimate against measurement: the demo on the bundled SmolLM2-135M GGUF, CPU (numpy).

For each context N, a fresh worker process loads the model, then generates from a prompt of
N - 8 tokens up to N tokens; the generation's peak resident memory (Linux VmHWM, reset before the
call) is compared with `mx.memory(sample, context=N).demo_total_bytes` (float32 weights and KV
cache, one prefill chunk's activations, the interpreter). Target: within 15%.

    .venv/bin/python benchmarks/bench_memory.py [--contexts 512 2048] [--threads 2]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))

TARGET = 0.15
NEW_TOKENS = 8


def worker(context: int) -> dict:
    import model_explorer as mx
    from model_explorer.runtime import load_model

    model = load_model(None, device="cpu")
    ids = [(7 * i) % 40000 + 100 for i in range(context - NEW_TOKENS)]
    text = model.tokenizer.decode(ids)
    prompt_ids = model.tokenizer.encode(text)[: context - NEW_TOKENS]
    text = model.tokenizer.decode(prompt_ids)
    r = model.generate(text, max_new_tokens=NEW_TOKENS, stop_at_eos=False)
    n = len(r.prompt_tokens) + NEW_TOKENS
    est = mx.memory(mx.sample_path(), context=n, kv_dtype="f32")
    return {"context": n, "measured": r.peak_memory_bytes, "estimate": est.demo_total_bytes,
            "weights_f32": est.demo_weights_bytes, "load_peak": model.load_peak_memory_bytes}


def main() -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--contexts", type=int, nargs="+", default=[512, 2048])
    p.add_argument("--threads", type=int, default=None)
    p.add_argument("--worker", type=int, default=None, help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.worker:
        print(json.dumps(worker(args.worker)))
        return 0
    env = dict(os.environ)
    if args.threads:
        for k in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
            env[k] = str(args.threads)
    ok = True
    print(f"{'context':>8} {'measured MiB':>13} {'estimate MiB':>13} {'error':>7}")
    for c in args.contexts:
        out = subprocess.run([sys.executable, __file__, "--worker", str(c)], capture_output=True, text=True,
                             env=env, check=True)
        row = json.loads(out.stdout.strip().splitlines()[-1])
        err = (row["estimate"] - row["measured"]) / row["measured"]
        ok &= abs(err) <= TARGET
        print(f"{row['context']:>8} {row['measured'] / 2**20:>13.1f} {row['estimate'] / 2**20:>13.1f} "
              f"{err:>+7.1%}")
    print(f"target: within {TARGET:.0%} of the measured peak: {'met' if ok else 'MISSED'}")
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
