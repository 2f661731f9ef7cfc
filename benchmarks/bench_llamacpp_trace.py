"""llama.cpp's own graph traced (issue 42): what reading its tensors through the eval callback
costs, and where our decoder and llama.cpp differ on the real GGUFs `make dev` installs.

Side by side, from one process and interleaved rounds (each column's median round):
- llama.cpp's prompt pass untraced (no callback), the same context (F32 KV cache, flash
  attention off), and llama.cpp's defaults (F16 KV cache, flash attention auto);
- the same pass traced: `mx.trace(..., engine="llama.cpp")`'s work, the named points copied out
  of the graph a tensor at a time and their statistics computed (runs/llamacpp_side.py);
- the process's RSS after loading and its peak over the traced passes, beside the GGUF's size.
Target: traced <= 2x untraced.

--compare (instead of the timing): per layer, our decoder (numpy) against llama.cpp on the same GGUF (SmolLM2-135M Q4_1
and Gemma 3 270M Q4_K_M): the relative L2 of each layer's output (l_out) and its largest point,
the verdict, KLD and top-1 agreement.

    .venv/bin/python benchmarks/bench_llamacpp_trace.py [--model gemma3|smollm2] [--rounds 5] [--compare]

Exit 1 when the traced pass misses its target; without llama-cpp-python or the GGUF it says so and exits 0.
The 8B Q4_K_M case of the issue (8 GB of RSS beside the mapped file) needs a machine with the
file and the memory; this one has neither, so it is not run here.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))  # run from a checkout without installing
sys.path.insert(0, os.path.join(os.path.dirname(HERE), "tests"))

TARGET = 2.0
TEXT = ("The history of the printing press begins in the fifteenth century, when Johannes Gutenberg "
        "combined movable metal type, oil-based ink and a wooden screw press. Within fifty years, "
        "presses had spread to more than two hundred cities across Europe, and the price of books "
        "fell sharply. Scholars argue about the consequences: some credit the press with the "
        "Reformation and the scientific revolution, others with the standardisation of languages. ")


def gguf_path(name: str, into: str) -> str | None:
    import realfiles

    found = realfiles.gemma3_gguf(into) if name == "gemma3" else realfiles.smollm2_gguf()
    return None if found is None else str(found)


def mib(n: int | None) -> str:
    return "n/a" if n is None else f"{n / 2**20:,.0f} MiB"


def bench(path: str, rounds: int, tokens: int) -> int:
    from model_explorer.runs.llamacpp_side import LlamaCppSide
    from model_explorer.runs.trace import StatsRecorder
    from model_explorer.runtime.decoder import drain
    from model_explorer.runtime.engines.llamacpp_eval import EvalSession
    from model_explorer.runtime.process_memory import current_rss, peak_rss, reset_peak

    side = LlamaCppSide(path)
    defaults = EvalSession(path, kv_cache="f16", flash_attention="auto")
    ids = side.encode(TEXT * 4)[:tokens]
    loaded = current_rss()
    columns = {"untraced": lambda: side.session.run(ids, None, None),
               "untraced, llama.cpp defaults": lambda: defaults.run(ids, None, None),
               "traced (mx.trace's work)": lambda: drain(side.steps(ids, StatsRecorder(), progress=False))}
    times: dict[str, list[float]] = {k: [] for k in columns}
    for fn in columns.values():
        fn()  # warm: the mapped file read once
    reset_peak()
    for _ in range(rounds):
        for name, fn in columns.items():
            t0 = time.perf_counter()
            fn()
            times[name].append(time.perf_counter() - t0)
    peak = peak_rss()
    side.free()
    defaults.close()
    med = {k: statistics.median(v) for k, v in times.items()}
    base = med["untraced"]
    print(f"{os.path.basename(path)} ({mib(os.path.getsize(path))}), {len(ids)} tokens, {side.session.threads} threads, "
          f"median of {rounds} interleaved rounds")
    for name, s in med.items():
        print(f"  {name:<30} {s * 1000:8.1f} ms  {s / base:5.2f}x untraced")
    print(f"  RSS after loading {mib(loaded)}, peak over the passes {mib(peak)} (the GGUF is mapped, not copied)")
    ratio = med["traced (mx.trace's work)"] / base
    print(f"traced / untraced: {ratio:.2f}x (target <= {TARGET}x)")
    return 0 if ratio <= TARGET else 1


def compare(path: str) -> None:
    """Our decoder against llama.cpp's own tensors on the same GGUF, per layer."""
    import model_explorer as mx

    d = mx.compare_runs(path, path, prompt=TEXT, b_engine="llama.cpp")
    print(f"{os.path.basename(path)}: a {d.engine_a}, b {d.engine_b}")
    print(f"  {len(d.ids)} tokens; KLD mean {d.kld['mean']:.4g} max {d.kld['max']:.4g} nats; "
          f"top-1 agreement {d.top1_agreement:.1%}; verdict {d.verdict['kind']}")
    by_layer: dict = {}
    for r in d.rows:
        by_layer.setdefault(r["layer"], []).append(r)
    print("  layer  l_out rel L2  largest point")
    for layer, rows in by_layer.items():
        if layer is None:
            continue
        out = next((r["rel_l2"] for r in rows if r["module"] == "residual"), float("nan"))
        worst = max(rows, key=lambda r: r["rel_l2"])
        print(f"  {layer:>5}  {out:11.3g}  {worst['module']} {worst['rel_l2']:.3g}")
    for r in by_layer.get(None, []):
        print(f"  {r['module']:<11} {r['rel_l2']:.3g}")
    print(f"  not compared: {len(d.unpaired)} ({', '.join(sorted({u['module'] for u in d.unpaired}))})")
    print(f"  {d.verdict['sentence']}")


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--model", choices=["gemma3", "smollm2"], default="gemma3")
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--tokens", type=int, default=128)
    p.add_argument("--compare", action="store_true", help="instead: our decoder against llama.cpp, per layer, on both GGUFs")
    args = p.parse_args()
    from model_explorer.runtime.engines.llamacpp_eval import available

    if available() is not None:
        print(f"skipped: {available()}")
        return 0
    with tempfile.TemporaryDirectory() as tmp:
        path = gguf_path(args.model, tmp)
        if path is None:
            print(f"skipped: the {args.model} GGUF is not installed (make dev installs it)")
            return 0
        if not args.compare:
            return bench(path, args.rounds, args.tokens)
        for name in ("smollm2", "gemma3"):
            other = gguf_path(name, tmp)
            if other is not None:
                compare(other)
    return 0


if __name__ == "__main__":
    sys.exit(main())
