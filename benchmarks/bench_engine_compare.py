"""What a cross-engine comparison costs (issue 41): transformers against onnxruntime on one
random BERT and one random Llama made here (saved with save_pretrained, exported with
torch.onnx dynamo=False), side by side with a plain run of each engine.

Columns, each the median of interleaved rounds (a busy machine slows every column alike):
- plain transformers: one `model(input_ids, attention_mask)` under no_grad;
- plain onnxruntime: one `session.run` of the export as written (default optimizations), and
  with graph optimizations off (what the side runs, so values keep their names);
- trace transformers / trace onnxruntime: `mx.trace` on each engine (hooks; every aligned value
  an output), the side opened once beforehand (opening is reported on its own);
- compare: `mx.compare_runs(folder, export)`, both sides opened, aligned, run and compared.

    .venv/bin/python benchmarks/bench_engine_compare.py [--tokens 128] [--rounds 3] [--small]
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


def timed(fn) -> float:
    t0 = time.perf_counter()
    fn()
    return time.perf_counter() - t0


def make(root: str, kind: str, hidden: int, layers: int, tokens: int):
    """(folder, onnx path, the torch model) of a random model of `kind`."""
    import torch
    import transformers

    torch.manual_seed(0)
    if kind == "bert":
        model = transformers.BertModel(transformers.BertConfig(
            vocab_size=1000, hidden_size=hidden, num_hidden_layers=layers, num_attention_heads=4,
            intermediate_size=4 * hidden, max_position_embeddings=max(512, tokens))).eval()
        attr, output = "bert", "last_hidden_state"
    else:
        model = transformers.LlamaForCausalLM(transformers.LlamaConfig(
            vocab_size=1000, hidden_size=hidden, num_hidden_layers=layers, num_attention_heads=4,
            num_key_value_heads=2, intermediate_size=4 * hidden, max_position_embeddings=max(512, tokens))).eval()
        attr, output = "model", "logits"

    class Wrap(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            setattr(self, attr, model)

        def forward(self, input_ids, attention_mask):
            kw = {"use_cache": False} if attr == "model" else {}
            return getattr(self, attr)(input_ids=input_ids, attention_mask=attention_mask, return_dict=False, **kw)[0]

    folder = os.path.join(root, kind)
    model.save_pretrained(folder)
    ids = torch.arange(1, tokens + 1)[None] % 1000
    path = os.path.join(root, f"{kind}.onnx")
    torch.onnx.export(Wrap().eval(), (ids, torch.ones_like(ids)), path, dynamo=False, opset_version=17,
                      input_names=["input_ids", "attention_mask"], output_names=[output],
                      dynamic_axes={"input_ids": {1: "n"}, "attention_mask": {1: "n"}})
    return folder, path, model


def bench(kind: str, root: str, hidden: int, layers: int, tokens: int, rounds: int) -> dict[str, float]:
    import numpy as np
    import onnxruntime as ort
    import torch

    import model_explorer as mx
    from model_explorer.runs.engines import open_side

    folder, path, model = make(root, kind, hidden, layers, tokens)
    ids = [1 + (i * 7) % 999 for i in range(tokens)]
    x = torch.tensor([ids])
    feeds = {"input_ids": np.asarray([ids], np.int64), "attention_mask": np.ones((1, tokens), np.int64)}
    plain = ort.InferenceSession(path, providers=["CPUExecutionProvider"])
    opts = ort.SessionOptions()
    opts.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    unopt = ort.InferenceSession(path, opts, providers=["CPUExecutionProvider"])
    t0 = time.perf_counter()
    hf_side = open_side(folder, "transformers")
    open_hf = time.perf_counter() - t0
    t0 = time.perf_counter()
    ort_side = open_side(path, "onnxruntime", reference=hf_side)
    open_ort = time.perf_counter() - t0

    from model_explorer.runs.pairing import together
    from model_explorer.runs.trace import StatsRecorder
    from model_explorer.runtime.decoder import drain

    columns: dict[str, list[float]] = {k: [] for k in (
        "plain transformers", "plain onnxruntime", "plain onnxruntime, no optimizations", "trace transformers",
        "trace onnxruntime", "compare, sides open", "compare_runs, end to end")}
    for _ in range(rounds):
        with torch.no_grad():
            columns["plain transformers"].append(timed(lambda: model(input_ids=x, attention_mask=torch.ones_like(x))))
        columns["plain onnxruntime"].append(timed(lambda: plain.run(None, feeds)))
        columns["plain onnxruntime, no optimizations"].append(timed(lambda: unopt.run(None, feeds)))
        columns["trace transformers"].append(timed(lambda: drain(hf_side.steps(ids, StatsRecorder()))))
        columns["trace onnxruntime"].append(timed(lambda: drain(ort_side.steps(ids, StatsRecorder()))))
        columns["compare, sides open"].append(timed(lambda: together(hf_side, ort_side, ids, False)))
        columns["compare_runs, end to end"].append(timed(lambda: mx.compare_runs(folder, path, ids=ids)))
    hf_side.close()
    ort_side.close()
    out = {k: statistics.median(v) for k, v in columns.items()}
    out["open transformers side"], out["open onnxruntime side (align)"] = open_hf, open_ort
    out["aligned points"] = float(len(ort_side.aligned))
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--tokens", type=int, default=128)
    ap.add_argument("--hidden", type=int, default=256)
    ap.add_argument("--layers", type=int, default=4)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--small", action="store_true", help="16 tokens, 64 wide, 2 layers, 1 round")
    args = ap.parse_args()
    if args.small:
        args.tokens, args.hidden, args.layers, args.rounds = 16, 64, 2, 1
    print(f"{args.tokens} tokens, hidden {args.hidden}, {args.layers} layers, median of {args.rounds} rounds")
    with tempfile.TemporaryDirectory() as root:
        for kind in ("bert", "llama"):
            r = bench(kind, root, args.hidden, args.layers, args.tokens, args.rounds)
            both = r["plain transformers"] + r["plain onnxruntime, no optimizations"]
            print(f"\n{kind}: {int(r.pop('aligned points'))} points aligned")
            for name, secs in r.items():
                print(f"  {name:<40} {secs * 1000:9.2f} ms")
            print(f"  compare (sides open) / both plain runs (no optimizations): "
                  f"{r['compare, sides open'] / both:.2f}x")
    return 0


if __name__ == "__main__":
    sys.exit(main())
