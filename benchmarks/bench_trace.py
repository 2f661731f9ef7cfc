"""What tracing and comparing runs cost (issue 25), on the bundled SmolLM2-135M-Instruct Q4_1.

Side by side, from one process and interleaved rounds (a busy machine slows every column alike;
each column's median round is reported):
- a plain forward pass over the prompt (`model.forward(ids)`, the numpy reference on the CPU),
  and `mx.trace` over the same ids on the same loaded model. Target: trace <= 1.3x plain.
- two plain forward passes (the sample and its Q8_0 conversion), and `mx.compare_runs` of the
  two loaded models over the same ids (both runs, every activation compared, KLD).
- what a trace holds (statistics) beside what its activations would take (keep=True).

    .venv/bin/python benchmarks/bench_trace.py [--tokens 128] [--rounds 5] [--small]

Exit 1 when the trace overhead misses its target.
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

TARGET_TRACE = 1.3
TEXT = ("The history of the printing press begins in the fifteenth century, when Johannes Gutenberg "
        "combined movable metal type, oil-based ink and a wooden screw press. Within fifty years, "
        "presses had spread to more than two hundred cities across Europe, and the price of books "
        "fell sharply. Scholars argue about the consequences: some credit the press with the "
        "Reformation and the scientific revolution, others with the standardisation of languages. ")


def timed(fn) -> float:
    t0 = time.perf_counter()
    fn()
    return time.perf_counter() - t0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--tokens", type=int, default=128, help="prompt length in tokens")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--small", action="store_true", help="16 tokens, 1 round: the smoke run")
    args = ap.parse_args()
    if args.small:
        args.tokens, args.rounds = 16, 1

    import model_explorer as mx
    from model_explorer.samples import sample_path

    try:
        sample = sample_path()
    except (FileNotFoundError, RuntimeError) as e:
        print(f"the bundled sample is not installed ({e}); nothing to measure")
        return 0
    with tempfile.TemporaryDirectory() as tmp:
        q8 = mx.convert(sample, os.path.join(tmp, "smollm2-q8_0.gguf"), format="gguf", dtype="Q8_0")
        a, b = mx.load_model(sample, device="cpu"), mx.load_model(q8, device="cpu")
    ids = (a.encode_prompt(TEXT) * (1 + args.tokens // 64))[:args.tokens]
    a.forward(ids[:4])  # first-call costs (RoPE tables, BLAS threads) out of the figures
    rows: dict[str, list[float]] = {"plain": [], "trace": [], "two plain": [], "compare_runs": []}
    for _ in range(args.rounds):
        rows["plain"].append(timed(lambda: a.forward(ids)))
        rows["trace"].append(timed(lambda: mx.trace(a, ids=ids)))
        rows["two plain"].append(timed(lambda: (a.forward(ids), b.forward(ids))))
        rows["compare_runs"].append(timed(lambda: mx.compare_runs(a, b, ids=ids)))
    med = {k: statistics.median(v) for k, v in rows.items()}
    kept = mx.trace(a, ids=ids, keep=True)
    held = sum(x.nbytes for x in kept.activations.values())
    stats = sum(8 * 9 + 24 * len(s.top) for s in kept.stats)  # the numbers of each ModuleStats
    diff = mx.compare_runs(a, b, ids=ids)

    print(f"SmolLM2-135M-Instruct Q4_1, {len(ids)} tokens, numpy on the CPU, median of {args.rounds} round(s)")
    print(f"{'':<14}{'seconds':>10}{'ratio':>8}")
    print(f"{'plain':<14}{med['plain']:>10.3f}{1.0:>8.2f}")
    trace_ratio = med["trace"] / med["plain"]
    print(f"{'trace':<14}{med['trace']:>10.3f}{trace_ratio:>8.2f}   target <= {TARGET_TRACE}")
    print(f"{'two plain':<14}{med['two plain']:>10.3f}{1.0:>8.2f}")
    print(f"{'compare_runs':<14}{med['compare_runs']:>10.3f}{med['compare_runs'] / med['two plain']:>8.2f}")
    print(f"a trace holds ~{stats / 1024:.0f} KiB of statistics for {len(kept.stats)} activations; "
          f"keep=True holds {held / 2**20:.1f} MiB")
    print(f"Q8_0 against the shipped Q4_1: KLD mean {diff.kld['mean']:.5f}, top-1 {diff.top1_agreement:.1%}, "
          f"first divergence {diff.first_divergence and (diff.first_divergence['layer'], diff.first_divergence['module'])}")
    return 0 if trace_ratio <= TARGET_TRACE else 1


if __name__ == "__main__":
    sys.exit(main())
