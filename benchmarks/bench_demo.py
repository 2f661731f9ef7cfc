"""Demo benchmark: SmolLM2-135M-Instruct Q4_1 on the CPU, ours (numpy) beside transformers (torch).

Prints, for each side: load + dequantize seconds, prefill and decode tokens/s (greedy), and the
process's peak resident memory; then the ratios and the targets:
- decode tokens/s, ours / transformers >= 0.5 (same weights: both dequantize the same GGUF;
  same threads: the BLAS and torch defaults of this machine);
- peak memory <= 2x the float32 weight size, and lower with on-the-fly dequantization.

Each side runs in its own worker process (so its peak memory is its own and the two thread pools
never compete), and the workers take turns: ours, transformers, ours, transformers... A busy
shared machine then slows both sides alike; each side's best round is reported, every round is
listed. Multithreaded BLAS/OpenMP stalls badly when other processes want the same cores, so
`--threads N` runs both sides with N threads (OPENBLAS/OMP/MKL_NUM_THREADS) for a steadier figure.

Where a llama.cpp binding loads (runtime/engines/llamacpp_binding.py), mx.load_model(backend="llama.cpp")
runs in the same interleaved rounds (the engines table), then beside the binding driven alone.
`--agreement` prints how the numpy decoder's next-token distributions compare with llama.cpp's
own logits (KL, top-1) on the sample and on Gemma 3 270M, and the KLD of a Q4_0 requantization
against its F16 base computed both ways.

`--small` runs only those llama.cpp rows, one round of 8 tokens on one thread (what CI runs:
the standalone-speed comparison still works against the binding `make dev` installs).

    .venv/bin/python benchmarks/bench_demo.py [--new-tokens 64] [--rounds 3] [--threads N] [--agreement] [--small]
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


# -- workers: load, say "ready", then one generation per "run" line on stdin ---------------------

class Ours:
    def __init__(self, kind: str) -> None:
        from model_explorer.runtime import load_model

        t0 = time.perf_counter()
        if kind == "ours-auto":  # what mx.load_model() picks: llama.cpp when a binding loads
            self.model = load_model(None)
        elif kind == "ours-llamacpp":
            self.model = load_model(None, backend="llama.cpp")
        elif kind.startswith("ours-torch"):  # ours-torch[-int8|-int4][-cuda]
            parts = kind.split("-")[2:]
            weights = next((p for p in parts if p in ("int8", "int4")), "float32")
            self.model = load_model(None, device="cuda" if "cuda" in parts else "cpu", backend="torch",
                                    weights=weights)
        else:
            self.model = load_model(None, device="cpu", keep_quantized=kind == "ours-on-the-fly")
        self.load_s = time.perf_counter() - t0
        d = self.model.dequant
        errors = sorted(r.rel_error for r in d.requantized)
        self.info = {"device": self.model.device, "dequant_s": d.seconds, "quantized_bytes": d.quantized_bytes,
                     "dequantized_bytes": d.dequantized_bytes, "resident_bytes": self.model.weights.resident_bytes(),
                     "requant_error_median": errors[len(errors) // 2] if errors else None}

        if kind == "ours":
            self.info.update(self.bandwidth_cap())

    def bandwidth_cap(self) -> dict:
        """What one decode step must read: every matrix the decoder multiplies by, once. Streaming
        exactly those arrays through BLAS's matrix-vector product (best of 3) is the fastest any
        float32 decoder on this machine can go; the step's time over this is its overhead."""
        import numpy as np

        model = self.model
        if model.backend.name != "numpy":
            return {}
        w = model.weights
        mats = [a for i in range(model.config.num_layers) for a in w.layer(i).values()
                if isinstance(a, np.ndarray) and a.ndim == 2] + [w.lm_head]
        nbytes = sum(a.nbytes for a in mats)
        xs = {a.shape[1]: np.ones(a.shape[1], np.float32) for a in mats}
        best = float("inf")
        for _ in range(3):
            t0 = time.perf_counter()
            for a in mats:
                a @ xs[a.shape[1]]
            best = min(best, time.perf_counter() - t0)
        return {"bytes_per_token": nbytes, "cap_tps": 1.0 / best, "stream_gbps": nbytes / best / 1e9}

    def run(self, new_tokens: int) -> dict:
        r = self.model.generate(PROMPT, max_new_tokens=new_tokens, stop_at_eos=False)
        return {"prefill_tps": r.prefill_tps, "decode_tps": r.decode_tps, "prompt_tokens": len(r.prompt_tokens),
                "tokens": r.tokens}


class Transformers:
    def __init__(self, kind: str) -> None:
        import torch
        from transformers import AutoModelForCausalLM

        import model_explorer as mx
        from model_explorer.model.tokenizer import from_gguf
        from model_explorer.samples import sample_path

        path = sample_path()
        with mx.open(path) as ckpt:  # same ids: the tokenizers agree (tests/runtime/test_tokenizer.py)
            self.ids = from_gguf(ckpt.metadata).encode(PROMPT)
        self.torch = torch
        t0 = time.perf_counter()
        self.model = AutoModelForCausalLM.from_pretrained(
            os.path.dirname(path), gguf_file=os.path.basename(path), dtype=torch.float32).eval()
        self.load_s = time.perf_counter() - t0
        self.info = {"device": f"cpu (torch {torch.__version__}, {torch.get_num_threads()} threads)"}

    def run(self, new_tokens: int) -> dict:
        from transformers import DynamicCache

        torch, model = self.torch, self.model
        with torch.inference_mode():
            t0 = time.perf_counter()
            out = model(torch.tensor([self.ids]), past_key_values=DynamicCache(config=model.config),
                        use_cache=True, logits_to_keep=1)
            prefill = time.perf_counter() - t0
            token = int(out.logits[0, -1].argmax())
            tokens = [token]
            t1 = time.perf_counter()
            for _ in range(new_tokens - 1):
                out = model(torch.tensor([[token]]), past_key_values=out.past_key_values, use_cache=True)
                token = int(out.logits[0, -1].argmax())
                tokens.append(token)
            decode = time.perf_counter() - t1
        return {"prefill_tps": len(self.ids) / prefill, "decode_tps": (new_tokens - 1) / decode,
                "prompt_tokens": len(self.ids), "tokens": tokens}


class StandaloneLlamaCpp:
    """The llama.cpp binding alone (whichever llamacpp_binding finds) on the same file and prompt
    ids: one llama_decode for the prompt, then one per token, greedy by argmax over its logits;
    no tokenizer, template, sampler or Model around it."""

    def __init__(self, kind: str) -> None:
        import model_explorer as mx
        from model_explorer.model.tokenizer import from_gguf
        from model_explorer.runtime.engines import llamacpp_binding
        from model_explorer.samples import sample_path

        threads = int(os.environ.get("OMP_NUM_THREADS") or os.cpu_count() or 1)
        with mx.open(sample_path()) as ckpt:
            self.ids = from_gguf(ckpt.metadata).encode(PROMPT)
        t0 = time.perf_counter()
        self.session = llamacpp_binding.open_session(str(sample_path()), 2048, threads)
        self.load_s = time.perf_counter() - t0
        self.info = {"device": f"cpu ({self.session.label}, {threads} threads)"}

    def run(self, new_tokens: int) -> dict:
        s = self.session
        t0 = time.perf_counter()
        token = int(s.decode(self.ids, 0, all_logits=False)[0].argmax())
        prefill = time.perf_counter() - t0
        tokens = [token]
        t1 = time.perf_counter()
        for _ in range(new_tokens - 1):
            token = int(s.decode([token], len(self.ids) + len(tokens) - 1, all_logits=False)[0].argmax())
            tokens.append(token)
        decode = time.perf_counter() - t1
        return {"prefill_tps": len(self.ids) / prefill, "decode_tps": (new_tokens - 1) / decode,
                "prompt_tokens": len(self.ids), "tokens": tokens}


def worker(kind: str) -> None:
    side = (Transformers(kind) if kind == "transformers" else
            StandaloneLlamaCpp(kind) if kind == "llama.cpp" else Ours(kind))
    print(json.dumps({"load_s": side.load_s, **side.info}), flush=True)
    for line in sys.stdin:
        if line.startswith("run"):
            print(json.dumps(side.run(int(line.split()[1]))), flush=True)
    print(json.dumps({"peak_rss": peak_rss()}), flush=True)


class Worker:
    """A worker process driven line by line."""

    def __init__(self, kind: str, threads: int | None = None) -> None:
        self.kind = kind
        env = dict(os.environ)
        if threads:
            env.update({v: str(threads) for v in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS")})
        self.proc = subprocess.Popen([sys.executable, os.path.abspath(__file__), "--worker", kind],
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, env=env)
        self.info = self._reply()
        self.rounds: list[dict] = []

    def _reply(self) -> dict:
        line = self.proc.stdout.readline()
        if not line:
            raise SystemExit(f"the {self.kind} worker failed (its error is above)")
        return json.loads(line)

    def run(self, new_tokens: int) -> None:
        self.proc.stdin.write(f"run {new_tokens}\n")
        self.proc.stdin.flush()
        self.rounds.append(self._reply())

    def finish(self) -> dict:
        self.proc.stdin.close()
        self.info.update(self._reply())
        self.proc.wait()
        best = lambda key: max(r[key] for r in self.rounds)  # noqa: E731
        return {**self.info, "prefill_tps": best("prefill_tps"), "decode_tps": best("decode_tps"),
                "prompt_tokens": self.rounds[0]["prompt_tokens"], "tokens": self.rounds[0]["tokens"],
                "decode_rounds": [r["decode_tps"] for r in self.rounds]}


def measure(kinds: list[str], rounds: int, new_tokens: int, threads: int | None = None) -> dict[str, dict]:
    """Load every side (one at a time), then run them in turns, `rounds` times."""
    workers = []
    for kind in kinds:
        workers.append(Worker(kind, threads))
    for _ in range(rounds):
        for w in workers:
            w.run(new_tokens)
    return {w.kind: w.finish() for w in workers}


# -- report ------------------------------------------------------------------------------------------

def mib(n) -> str:
    return "-" if n is None else f"{n / 2**20:.0f} MiB"


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--new-tokens", type=int, default=64)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--threads", type=int, default=None,
                   help="BLAS/OpenMP threads for both sides (default: the libraries' own default)")
    p.add_argument("--skip-reference", action="store_true", help="do not run transformers")
    p.add_argument("--weight-only", action="store_true",
                   help="only the torch backend's float32 / int8 / int4 weights (and CUDA when present)")
    p.add_argument("--agreement", action="store_true",
                   help="only the numpy decoder's logits against llama.cpp's (KL, top-1, KLD against a base)")
    p.add_argument("--small", action="store_true",
                   help="only mx.load_model() on llama.cpp beside the binding alone: 1 round, 8 tokens, 1 thread")
    p.add_argument("--worker", help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.worker:
        worker(args.worker)
        return 0
    try:
        from model_explorer.samples import sample_path

        sample_path()
    except FileNotFoundError as e:
        print(f"skipped: {e}")
        return 0
    if args.weight_only:
        return weight_only_report(args)
    if args.agreement:
        return agreement_report()
    if args.small:
        args.rounds, args.new_tokens, args.threads = 1, 8, 1
        return 0 if engine_report(args, thread_counts=[1]) else 1
    threads = f"{args.threads} threads per side" if args.threads else "default threads"
    print(f"SmolLM2-135M-Instruct Q4_1 GGUF, {os.cpu_count()} CPU cores, {threads}, greedy, {args.new_tokens} "
          f"new tokens, best of {args.rounds} interleaved rounds", flush=True)
    from model_explorer.runtime.engines import llamacpp

    kinds = ["ours"] + ([] if args.skip_reference else ["transformers", "ours-torch"])
    kinds += ["ours-llamacpp"] if llamacpp.installed() else []
    res = measure(kinds, args.rounds, args.new_tokens, args.threads)
    lazy = measure(["ours-on-the-fly"], 1, 4, args.threads)["ours-on-the-fly"]
    engine_ok = engine_report(args)
    ours, ref, ours_torch = res["ours"], res.get("transformers"), res.get("ours-torch")
    f32 = ours["dequantized_bytes"]

    def ratio(key):
        return ref and ours[key] / ref[key]

    rows = [("load + dequantize (s)", f"{ours['load_s']:.2f}", ref and f"{ref['load_s']:.2f}", ratio("load_s")),
            ("  of which dequantize (s)", f"{ours['dequant_s']:.2f}", None, None),
            (f"prefill ({ours['prompt_tokens']} tokens), tokens/s", f"{ours['prefill_tps']:.1f}",
             ref and f"{ref['prefill_tps']:.1f}", ratio("prefill_tps")),
            ("decode, tokens/s", f"{ours['decode_tps']:.1f}", ref and f"{ref['decode_tps']:.1f}", ratio("decode_tps")),
            ("peak RSS (load + generate)", mib(ours["peak_rss"]), ref and mib(ref["peak_rss"]), ratio("peak_rss"))]
    print(f"\n{'':36} {'ours (numpy)':>14} {'transformers':>14} {'ours/ref':>9}")
    for label, a, b, r in rows:
        print(f"{label:36} {a:>14} {b or '-':>14} {'' if r is None else f'{r:.2f}x':>9}")
    print(f"\nours: {ours['device']}; reference: {ref['device'] if ref else 'not run'}")
    for kind, r in res.items():
        print(f"decode tokens/s per round, {kind}: " + ", ".join(f"{x:.1f}" for x in r["decode_rounds"]))
    if ref:
        same = next((i for i, (a, b) in enumerate(zip(ours["tokens"], ref["tokens"])) if a != b), len(ref["tokens"]))
        print(f"greedy tokens identical for the first {same} of {len(ref['tokens'])}")
    if ours_torch:
        print(f"our decoder on the torch CPU backend: prefill {ours_torch['prefill_tps']:.1f}, decode "
              f"{ours_torch['decode_tps']:.1f} tokens/s, peak RSS {mib(ours_torch['peak_rss'])}")
    print_engines(res)
    print(f"\nweights: {mib(ours['quantized_bytes'])} stored (Q4_1/Q8_0/F32) -> {mib(f32)} as float32")
    print(f"peak RSS, dequantize at load:     {mib(ours['peak_rss'])} = {ours['peak_rss'] / f32:.2f}x the float32 "
          f"weights (target <= 2x)")
    print(f"peak RSS, dequantize on the fly:  {mib(lazy['peak_rss'])} = {lazy['peak_rss'] / f32:.2f}x "
          f"(weights held between passes: {mib(lazy['resident_bytes'])}); decode {lazy['decode_tps']:.2f} tokens/s")
    ok = True
    if "cap_tps" in ours:
        share = ours["decode_tps"] / ours["cap_tps"]
        print(f"bandwidth cap: a decode step reads {mib(ours['bytes_per_token'])} of float32 weights; "
              f"streaming them alone runs at {ours['stream_gbps']:.1f} GB/s = {ours['cap_tps']:.1f} tokens/s; "
              f"the numpy decoder reaches {share:.0%} of that cap (target >= 70%): "
              f"{'ok' if share >= 0.7 else 'MISSED'}")
    if ref:
        r = ours["decode_tps"] / ref["decode_tps"]
        print(f"decode speed vs transformers: {r:.2f}x (target >= 0.5): {'ok' if r >= 0.5 else 'MISSED'}")
        ok &= r >= 0.5
    mem_ok = ours["peak_rss"] <= 2 * f32 and lazy["peak_rss"] < ours["peak_rss"]
    print(f"memory targets: {'ok' if mem_ok else 'MISSED'}")
    return 0 if ok and mem_ok and engine_ok else 1


def print_engines(res: dict[str, dict]) -> None:
    """Every engine of this run side by side (same prompt, same rounds, interleaved)."""
    print(f"\n{'engine':18} {'prefill tok/s':>13} {'decode tok/s':>12} {'peak RSS':>9} {'= numpy':>8}  device")
    ref = res["ours"]["tokens"]
    for kind, r in res.items():
        same = next((i for i, (a, b) in enumerate(zip(r["tokens"], ref)) if a != b), len(ref))
        print(f"{kind:18} {r['prefill_tps']:13.1f} {r['decode_tps']:12.1f} {mib(r['peak_rss']):>9} "
              f"{same:>4}/{len(ref)}  {r['device']}")


def agreement_report() -> int:
    """KL(numpy || llama.cpp) and top-1 agreement at every position of PROMPT, on the sample (Q4_1)
    and Gemma 3 270M (Q4_K_M, when its packages are installed); then the KLD of the sample's F16
    rounding requantized to Q4_0 against that F16 base, from each engine's own logits."""
    import tempfile

    import numpy as np

    import model_explorer as mx
    from model_explorer.runs.metrics import kl_per_position, kld_summary
    from model_explorer.runtime import load_model
    from model_explorer.runtime.engines import llamacpp
    from model_explorer.samples import sample_path

    if not llamacpp.installed():
        print(f"no llama.cpp binding loads ({llamacpp.missing()})")
        return 0
    sys.path.insert(0, os.path.join(os.path.dirname(HERE), "tests"))
    import realfiles

    def logits(path, **kw):
        model = load_model(path, **kw)
        try:
            return model.forward(model.encode_prompt(PROMPT)), model.device
        finally:
            model.close()

    def row(label, a, b):
        k = kld_summary(kl_per_position(a, b))
        print(f"{label:44} {len(a):5} {k['mean']:9.5f} {k['median']:9.5f} {k['p99']:9.5f} {k['max']:9.5f} "
              f"{np.mean(a.argmax(1) == b.argmax(1)):6.1%}")

    with tempfile.TemporaryDirectory() as tmp:
        files = {"SmolLM2-135M-Instruct Q4_1": sample_path(), "Gemma 3 270M Q4_K_M": realfiles.gemma3_gguf(tmp)}
        print(f"{'KL(P_a || P_b), nats, per position':44} {'n':>5} {'mean':>9} {'median':>9} {'p99':>9} "
              f"{'max':>9} {'top-1':>6}")
        for name, path in files.items():
            if path is None:
                print(f"{name}: not installed")
                continue
            ours, _ = logits(str(path), device="cpu")
            theirs, device = logits(str(path), backend="llama.cpp")
            row(f"{name}: a numpy, b llama.cpp", ours, theirs)
        f16 = mx.convert(sample_path(), os.path.join(tmp, "smol-f16.gguf"), format="gguf", dtype="F16")
        q4 = mx.convert(f16, os.path.join(tmp, "smol-q4_0.gguf"), format="gguf", dtype="Q4_0")
        for engine, kw in (("numpy", {"device": "cpu"}), ("llama.cpp", {"backend": "llama.cpp"})):
            row(f"SmolLM2 a F16, b Q4_0 of it, both {engine}", logits(f16, **kw)[0], logits(q4, **kw)[0])
        print(f"llama.cpp: {device}")
    return 0


def weight_only_report(args) -> int:
    """The torch backend holding its layer matrices as float32, int8 and int4 (torch's weight-only
    kernels), beside the numpy reference; on CUDA too when torch sees a GPU."""
    from model_explorer.runtime.engines import available_devices

    kinds = ["ours", "ours-torch", "ours-torch-int8", "ours-torch-int4"]
    if "cuda" in available_devices():
        kinds += ["ours-torch-cuda", "ours-torch-int8-cuda", "ours-torch-int4-cuda"]
    res = measure(kinds, args.rounds, args.new_tokens, args.threads)
    ref = res["ours"]["tokens"]
    print(f"\n{'':22} {'device':52} {'load s':>7} {'prefill':>8} {'decode':>8} {'held':>10} {'peak RSS':>10} "
          f"{'requant err':>11} {'= numpy':>8}")
    for kind, r in res.items():
        same = next((i for i, (a, b) in enumerate(zip(r["tokens"], ref)) if a != b), len(ref))
        err = r.get("requant_error_median")
        print(f"{kind:22} {r['device'][:52]:52} {r['load_s']:7.2f} {r['prefill_tps']:8.1f} {r['decode_tps']:8.1f} "
              f"{mib(r['resident_bytes']):>10} {mib(r['peak_rss']):>10} "
              f"{'-' if err is None else f'{err:.2%}':>11} {same:>4}/{len(ref)}")
    return 0


def engine_report(args, thread_counts: list[int] | None = None) -> bool:
    """mx.load_model() on llama.cpp beside the binding driven alone: same file, same threads."""
    from model_explorer.runtime.engines import llamacpp

    if not llamacpp.installed():
        print(f"\nno llama.cpp binding loads ({llamacpp.missing()}): the llama.cpp rows are skipped")
        return True
    ok = True
    for threads in thread_counts or sorted({1, 2, args.threads or 2}):
        res = measure(["ours-auto", "llama.cpp"], args.rounds, args.new_tokens, threads)
        ours, ref = res["ours-auto"], res["llama.cpp"]
        print(f"\nllama.cpp, {threads} thread(s): mx.load_model() [{ours['device']}] vs standalone [{ref['device']}]")
        rows = [("load (s)", ours["load_s"], ref["load_s"]), ("prefill tokens/s", ours["prefill_tps"], ref["prefill_tps"]),
                ("decode tokens/s", ours["decode_tps"], ref["decode_tps"]),
                ("peak RSS (MiB)", ours["peak_rss"] / 2**20, ref["peak_rss"] / 2**20)]
        for label, a, b in rows:
            print(f"  {label:20} {a:10.2f} {b:10.2f}   {a / b:5.2f}x")
        same = next((i for i, (a, b) in enumerate(zip(ours["tokens"], ref["tokens"])) if a != b), len(ref["tokens"]))
        print(f"  greedy tokens identical for the first {same} of {len(ref['tokens'])} (ours tokenised by "
              "model_explorer, standalone by llama.cpp)")
        checks = {"decode >= 0.95x": ours["decode_tps"] >= 0.95 * ref["decode_tps"],
                  "prefill >= 0.95x": ours["prefill_tps"] >= 0.95 * ref["prefill_tps"],
                  "load < 0.5 s": ours["load_s"] < 0.5, "peak RSS <= 1.2x": ours["peak_rss"] <= 1.2 * ref["peak_rss"]}
        print("  targets: " + ", ".join(f"{k} {'ok' if v else 'MISSED'}" for k, v in checks.items()))
        ok &= all(checks.values())
    return ok


if __name__ == "__main__":
    raise SystemExit(main())
