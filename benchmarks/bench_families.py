"""Every model family the run cell knows, side by side on the engines (issue 24's figures).

For a tiny random model of each family, saved by transformers itself (so the folder is what a
user downloads, only smaller): load seconds and greedy decode tokens/s of
- the numpy reference (`mx.load_model(folder, backend="numpy")`),
- the torch backend on the CPU (`backend="torch"`),
- transformers (`AutoModelForCausalLM.from_pretrained`, float32, its own KV cache),
all from one run, each side timing the same loop: a prompt of PROMPT tokens, then one token at a
time, greedy. A family the decoder refuses prints the refusal (which names the feature). The
last column says whether the numpy reference's first greedy tokens equal transformers'.

    .venv/bin/python benchmarks/bench_families.py [--small] [--only gemma2,qwen3] [--tokens 32]

--small: fewer layers and tokens (the suite's smoke run). Figures on tiny models measure the
per-token overhead of each engine (Python, dispatch), not the weight bandwidth that dominates
real models; benchmarks/bench_demo.py measures that on the 135M sample.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))  # run from a checkout without installing

SIZES = dict(vocab_size=512, hidden_size=128, intermediate_size=256, num_attention_heads=4,
             num_key_value_heads=2, head_dim=32, max_position_embeddings=512, bos_token_id=1,
             eos_token_id=2, pad_token_id=0)
# What each family needs beyond the shared sizes to be a small, valid model of its kind.
MOE = dict(num_experts=4, num_experts_per_tok=2, moe_intermediate_size=64)
FAMILIES: dict[str, dict] = {
    "llama": {}, "mistral": dict(sliding_window=None), "qwen2": {}, "qwen3": {},
    "qwen3_moe": MOE, "qwen2_moe": dict(MOE, shared_expert_intermediate_size=128),
    "mixtral": dict(num_local_experts=4, num_experts_per_tok=2, sliding_window=None),
    "gemma": {}, "gemma2": dict(sliding_window=16), "gemma3_text": dict(sliding_window=16),
    "phi3": dict(sliding_window=None), "olmo2": {}, "smollm3": {}, "granite": {},
    "gpt2": dict(n_embd=128, n_layer=2, n_head=4, n_positions=512, n_inner=256),  # n_inner: GPT-2 ignores intermediate_size
    "gpt_neox": dict(rotary_pct=0.25),
    "gpt_oss": dict(num_local_experts=4, num_experts_per_tok=2, sliding_window=16),
    "deepseek_v3": dict(n_routed_experts=4, num_experts_per_tok=2, moe_intermediate_size=64,
                        n_group=2, topk_group=1, first_k_dense_replace=1, q_lora_rank=64,
                        kv_lora_rank=32, qk_nope_head_dim=16, qk_rope_head_dim=16, v_head_dim=32,
                        head_dim=16),  # transformers' rotary reads head_dim as the RoPE part
}


def save_family(family: str, layers: int, folder: Path) -> str:
    import torch
    import transformers

    cfg = transformers.AutoConfig.for_model(family, **{**SIZES, "num_hidden_layers": layers, **FAMILIES[family]})
    torch.manual_seed(0)
    model = transformers.AutoModelForCausalLM.from_config(cfg).float().eval()
    out = folder / family
    model.save_pretrained(out)
    return str(out)


def ours(folder: str, backend: str, prompt: list[int], new: int) -> dict:
    import model_explorer as mx
    from model_explorer.model.config import UnsupportedModel

    t = time.perf_counter()
    try:
        model = mx.load_model(folder, backend=backend, device="cpu" if backend == "numpy" else "auto")
    except UnsupportedModel as e:
        return {"refused": str(e)}
    load = time.perf_counter() - t
    cache = model.new_cache(len(prompt) + new + 1)
    logits = np.asarray(model.forward(prompt, cache, last_only=True))
    tokens = [int(np.argmax(logits[-1]))]
    t = time.perf_counter()
    for _ in range(new - 1):
        logits = np.asarray(model.forward([tokens[-1]], cache, last_only=True))
        tokens.append(int(np.argmax(logits[-1])))
    decode = time.perf_counter() - t
    model.close()
    return {"load": load, "tps": (new - 1) / decode, "tokens": tokens}


def reference(folder: str, prompt: list[int], new: int) -> dict:
    import torch
    import transformers

    t = time.perf_counter()
    model = transformers.AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32).eval()
    load = time.perf_counter() - t
    with torch.no_grad():
        out = model(torch.tensor([prompt]), use_cache=True)
        cache, tokens = out.past_key_values, [int(out.logits[0, -1].argmax())]
        t = time.perf_counter()
        for _ in range(new - 1):
            out = model(torch.tensor([[tokens[-1]]]), past_key_values=cache, use_cache=True)
            cache = out.past_key_values
            tokens.append(int(out.logits[0, -1].argmax()))
        decode = time.perf_counter() - t
    return {"load": load, "tps": (new - 1) / decode, "tokens": tokens}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--small", action="store_true", help="2 layers, 8 tokens: the smoke run")
    ap.add_argument("--only", default="", help="comma-separated families")
    ap.add_argument("--tokens", type=int, default=32)
    ap.add_argument("--layers", type=int, default=4)
    args = ap.parse_args()
    try:
        import torch  # noqa: F401
        import transformers  # noqa: F401
    except ImportError:
        print("bench_families needs torch and transformers (make dev installs them).")
        return 0
    import warnings

    import transformers

    transformers.logging.set_verbosity_error()
    transformers.utils.logging.disable_progress_bar()
    warnings.filterwarnings("ignore")
    layers, new = (2, 8) if args.small else (args.layers, args.tokens)
    families = [f for f in args.only.split(",") if f] or list(FAMILIES)
    prompt = [1, 17, 42, 99, 7, 256, 33, 5, 401, 64, 12, 300, 8, 77, 150, 3]
    print(f"tiny models: hidden {SIZES['hidden_size']}, {layers} layers, vocab {SIZES['vocab_size']}; "
          f"prompt {len(prompt)} tokens, {new} greedy tokens; float32, CPU")
    head = (f"{'family':<12} {'numpy load ms':>13} {'tok/s':>7} {'torch load ms':>13} {'tok/s':>7} "
            f"{'transformers load ms':>20} {'tok/s':>7}  greedy = transformers")
    print(head)
    print("-" * len(head))
    runs = {}
    with tempfile.TemporaryDirectory(prefix="mx-bench-families-") as tmp:
        for fam in families:
            try:
                folder = save_family(fam, layers, Path(tmp))
            except Exception as e:  # noqa: BLE001 - a family this transformers cannot build
                print(f"{fam:<12} transformers cannot build it here: {type(e).__name__}: {e}"[:160])
                continue
            try:
                ref = reference(folder, prompt, new)
            except Exception as e:  # noqa: BLE001 - reported, the other families still run
                print(f"{fam:<12} transformers cannot run it here: {type(e).__name__}: {e}"[:160])
                continue
            np_run = ours(folder, "numpy", prompt, new)
            if "refused" in np_run:
                print(f"{fam:<12} {'refused':>13} {'':>7} {'':>13} {'':>7} {1e3 * ref['load']:>20.0f} "
                      f"{ref['tps']:>7.0f}  {np_run['refused'][:100]}")
                runs[fam] = None
                continue
            th = ours(folder, "torch", prompt, new)
            same = "yes" if np_run["tokens"] == ref["tokens"] else \
                f"no (first {next(i for i, (a, b) in enumerate(zip(np_run['tokens'], ref['tokens'])) if a != b)})"
            print(f"{fam:<12} {1e3 * np_run['load']:>13.1f} {np_run['tps']:>7.0f} "
                  f"{1e3 * th.get('load', float('nan')):>13.1f} {th.get('tps', float('nan')):>7.0f} "
                  f"{1e3 * ref['load']:>20.0f} {ref['tps']:>7.0f}  {same}")
            runs[fam] = np_run["tokens"] == ref["tokens"]
    ran = [f for f, ok in runs.items() if ok is not None]
    print(f"\nthe numpy reference and torch backend run {len(ran)} of {len(runs)} families: {', '.join(ran)}")
    refused = [f for f, ok in runs.items() if ok is None]
    if refused:
        print(f"refused (the message names the missing feature): {', '.join(refused)}")
    return 0 if all(ok for ok in runs.values() if ok is not None) else 1


if __name__ == "__main__":
    sys.exit(main())
