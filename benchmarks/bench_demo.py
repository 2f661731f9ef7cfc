"""Demo benchmark: SmolLM2-135M-Instruct Q4_1 on the CPU, ours (numpy) beside transformers (torch).

Prints, for each side: load + dequantize seconds, prefill and decode tokens/s (greedy, best of
`--repeats` runs so a busy machine hurts both sides alike), and the process's peak resident
memory; then the ratios and the targets:
- decode tokens/s, ours / transformers >= 0.5 (same weights: both dequantize the same GGUF;
  same threads: BLAS and torch defaults on this machine);
- peak memory <= 2x the float32 weight size, and lower with on-the-fly dequantization.

Each measurement runs in a fresh child process, so its peak memory is its own.

    .venv/bin/python benchmarks/bench_demo.py [--new-tokens 64] [--repeats 3]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))  # run from a checkout without installing

PROMPT = ("The history of the printing press begins in the fifteenth century, when Johannes Gutenberg "
          "combined movable metal type, oil-based ink and a wooden screw press. Within fifty years, "
          "presses had spread to more than two hundred cities across Europe, and the price of books "
          "fell sharply. Scholars argue about the consequences: some credit the press with the "
          "Reformation and the scientific revolution, others with the standardisation of languages. "
          "In this essay we look at three of those consequences in turn. First,")


def peak_rss() -> int:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) * 1024
    import resource

    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


# -- children ----------------------------------------------------------------------------------------

def child_ours(args) -> dict:
    from model_explorer.demo import load_model

    t0 = time.perf_counter()
    model = load_model(None, device="cpu", keep_quantized=args.kind == "ours-on-the-fly",
                       backend="torch" if args.kind == "ours-torch" else None)
    load = time.perf_counter() - t0
    runs = []
    for _ in range(args.repeats):
        r = model.generate(PROMPT, max_new_tokens=args.new_tokens, stop_at_eos=False)
        runs.append(r)
    best_prefill = max(r.prefill_tps for r in runs)
    best_decode = max(r.decode_tps for r in runs)
    d = model.dequant
    return {"load_s": load, "dequant_s": d.seconds if d.mode == "load" else None,
            "prefill_tps": best_prefill, "decode_tps": best_decode, "prompt_tokens": len(runs[0].prompt_tokens),
            "tokens": runs[0].tokens, "peak_rss": peak_rss(), "device": model.device,
            "quantized_bytes": d.quantized_bytes, "dequantized_bytes": d.dequantized_bytes,
            "resident_bytes": model.weights.resident_bytes()}


def child_transformers(args) -> dict:
    import torch
    from transformers import AutoModelForCausalLM, DynamicCache

    from model_explorer.samples import sample_path

    path = sample_path()
    # Same prompt ids as ours: the tokenizers agree (tests/demo/test_tokenizer.py).
    ids = _prompt_ids(path)
    t0 = time.perf_counter()
    model = AutoModelForCausalLM.from_pretrained(os.path.dirname(path), gguf_file=os.path.basename(path),
                                                 dtype=torch.float32).eval()
    load = time.perf_counter() - t0
    prefills, decodes, tokens = [], [], []
    with torch.inference_mode():
        for _ in range(args.repeats):
            cache = DynamicCache(config=model.config)
            t0 = time.perf_counter()
            out = model(torch.tensor([ids]), past_key_values=cache, use_cache=True, logits_to_keep=1)
            prefills.append(len(ids) / (time.perf_counter() - t0))
            token = int(out.logits[0, -1].argmax())
            tokens = [token]
            t1 = time.perf_counter()
            for _ in range(args.new_tokens - 1):
                out = model(torch.tensor([[token]]), past_key_values=out.past_key_values, use_cache=True)
                token = int(out.logits[0, -1].argmax())
                tokens.append(token)
            decodes.append((args.new_tokens - 1) / (time.perf_counter() - t1))
    return {"load_s": load, "dequant_s": None, "prefill_tps": max(prefills), "decode_tps": max(decodes),
            "prompt_tokens": len(ids), "tokens": tokens, "peak_rss": peak_rss(),
            "device": f"cpu (torch {torch.__version__}, {torch.get_num_threads()} threads)"}


def _prompt_ids(path: str) -> list[int]:
    import model_explorer as mx
    from model_explorer.demo.tokenizer import from_gguf

    with mx.open(path) as ckpt:
        return from_gguf(ckpt.metadata).encode(PROMPT)


def run_child(kind: str, args) -> dict:
    cmd = [sys.executable, os.path.abspath(__file__), "--child", kind, "--new-tokens", str(args.new_tokens),
           "--repeats", str(args.repeats)]
    proc = subprocess.run(cmd, capture_output=True, text=True)
    if proc.returncode != 0:
        raise SystemExit(f"{kind} failed:\n{proc.stderr[-3000:]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


# -- report ------------------------------------------------------------------------------------------

def mib(n) -> str:
    return "-" if n is None else f"{n / 2**20:.0f} MiB"


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--new-tokens", type=int, default=64)
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--child", help=argparse.SUPPRESS)
    p.add_argument("--skip-reference", action="store_true", help="do not run transformers")
    args = p.parse_args()
    if args.child:
        args.kind = args.child
        result = child_transformers(args) if args.child == "transformers" else child_ours(args)
        print(json.dumps(result))
        return 0

    try:
        from model_explorer.samples import sample_path

        sample_path()
    except FileNotFoundError as e:
        print(f"skipped: {e}")
        return 0
    print(f"SmolLM2-135M-Instruct Q4_1 GGUF, {os.cpu_count()} CPU cores, greedy, {args.new_tokens} new tokens, "
          f"best of {args.repeats}", flush=True)
    ours = run_child("ours", args)
    lazy = run_child("ours-on-the-fly", argparse.Namespace(**{**vars(args), "new_tokens": 8, "repeats": 1}))
    ref = None if args.skip_reference else run_child("transformers", args)
    ours_torch = None if args.skip_reference else run_child("ours-torch", args)
    f32 = ours["dequantized_bytes"]

    rows = [("load + dequantize (s)", f"{ours['load_s']:.2f}", ref and f"{ref['load_s']:.2f}", None),
            ("  of which dequantize (s)", f"{ours['dequant_s']:.2f}", None, None),
            (f"prefill ({ours['prompt_tokens']} tokens), tokens/s", f"{ours['prefill_tps']:.1f}",
             ref and f"{ref['prefill_tps']:.1f}", ref and ours["prefill_tps"] / ref["prefill_tps"]),
            ("decode, tokens/s", f"{ours['decode_tps']:.1f}", ref and f"{ref['decode_tps']:.1f}",
             ref and ours["decode_tps"] / ref["decode_tps"]),
            ("peak RSS (load + generate)", mib(ours["peak_rss"]), ref and mib(ref["peak_rss"]),
             ref and ours["peak_rss"] / ref["peak_rss"])]
    print(f"\n{'':36} {'ours (numpy)':>14} {'transformers':>14} {'ours/ref':>9}")
    for label, a, b, ratio in rows:
        print(f"{label:36} {a:>14} {b or '-':>14} {'' if ratio is None else f'{ratio:.2f}x':>9}")
    print(f"\nours: {ours['device']}; reference: {ref['device'] if ref else 'not run'}")
    if ref:
        same = next((i for i, (a, b) in enumerate(zip(ours["tokens"], ref["tokens"])) if a != b), len(ref["tokens"]))
        print(f"greedy tokens identical for the first {same} of {len(ref['tokens'])}")
    print(f"\nweights: {mib(ours['quantized_bytes'])} stored (Q4_1/Q8_0/F32) -> {mib(f32)} as float32")
    print(f"peak RSS, dequantize at load:     {mib(ours['peak_rss'])} = {ours['peak_rss'] / f32:.2f}x the float32 "
          f"weights (target <= 2x)")
    print(f"peak RSS, dequantize on the fly:  {mib(lazy['peak_rss'])} = {lazy['peak_rss'] / f32:.2f}x "
          f"(weights held between passes: {mib(lazy['resident_bytes'])}); decode {lazy['decode_tps']:.2f} tokens/s")
    if ours_torch:
        print(f"our decoder on the torch CPU backend: prefill {ours_torch['prefill_tps']:.1f}, decode "
              f"{ours_torch['decode_tps']:.1f} tokens/s, peak RSS {mib(ours_torch['peak_rss'])}")
    ok = True
    if ref:
        ratio = ours["decode_tps"] / ref["decode_tps"]
        print(f"decode speed vs transformers: {ratio:.2f}x (target >= 0.5): {'ok' if ratio >= 0.5 else 'MISSED'}")
        ok &= ratio >= 0.5
    ok &= ours["peak_rss"] <= 2 * f32 and lazy["peak_rss"] < ours["peak_rss"]
    print(f"memory targets: {'ok' if ours['peak_rss'] <= 2 * f32 and lazy['peak_rss'] < ours['peak_rss'] else 'MISSED'}")
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
