"""Audit and deep-scan benchmark, side by side in one run.

1. Audit of N (default 2,000) small checkpoints on local disk (safetensors, sharded folders, GGUF,
   plain and hostile pickles, truncated files): models/s with 1 and 2 Dask workers, beside
   picklescan and modelscan on the same tree (their own CLIs, when installed).
2. Bytes read per model against its size (headers only: flat).
3. Audit of 200 models over HTTP from a local server adding 50 ms to every request: 8 concurrent
   tasks against 1 (target >= 5x).
4. Exact scan (mx.scan) of a 163-shard synthetic model: 2 workers against 1 (target >= 1.6x), and
   each worker's peak memory.
5. DeepSeek-V3 (163 shards, ~690 GB) on paper: workers needed for a 10-minute scan from S3, from
   the measured per-worker throughput and per-request latency.

    .venv/bin/python benchmarks/bench_audit.py [--models 2000] [--http-models 200] [--quick]
"""

from __future__ import annotations

import argparse
import functools
import math
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, ROOT)  # run from a checkout without installing; tests.audit.synth builds files

import numpy as np  # noqa: E402

import model_explorer as mx  # noqa: E402
from tests.audit.synth import mixed_tree, small_tensors, write_gguf, write_safetensors, write_sharded  # noqa: E402

LATENCY = 0.05
DEEPSEEK_BYTES = 690e9
DEEPSEEK_SHARDS = 163
TARGET_SECONDS = 600
S3_STREAM_BYTES_S = 90e6  # assumed: one S3 GET stream in-region (a common figure), not measured here


def _client(workers: int, threads: int = 1):
    from dask.distributed import Client, LocalCluster

    cluster = LocalCluster(n_workers=workers, threads_per_worker=threads, processes=True,
                           dashboard_address=None, silence_logs=50)
    return Client(cluster)


def _close(client) -> None:
    cluster = client.cluster
    client.close()
    cluster.close()


def _warm_imports() -> None:
    import model_explorer.audits.task
    import model_explorer.opener  # noqa: F401


def _timed_audit(sources, workers: int, threads: int = 1, **kw):
    client = _client(workers, threads)
    try:
        client.run(_warm_imports)
        t = time.perf_counter()
        result = mx.audit(sources, client=client, progress=False, **kw)
        return time.perf_counter() - t, result
    finally:
        _close(client)


def _run_cli(cmd: list[str]) -> tuple[float | None, str]:
    exe = shutil.which(cmd[0], path=os.path.dirname(sys.executable)) or shutil.which(cmd[0])
    if exe is None:
        return None, "not installed"
    t = time.perf_counter()
    p = subprocess.run([exe, *cmd[1:]], capture_output=True, text=True)
    text = (p.stdout + p.stderr).strip().splitlines()
    return time.perf_counter() - t, " | ".join(line.strip() for line in text[-3:])


def bench_local_tree(tmp: str, n: int) -> None:
    root = os.path.join(tmp, "tree")
    marker = os.path.join(tmp, "PWNED")
    t = time.perf_counter()
    counts = mixed_tree(root, n, marker=marker)
    print(f"\n== audit of {n} small checkpoints on local disk ({counts}; built in {time.perf_counter() - t:.1f} s)")
    rates = {}
    for workers in (1, 2):
        secs, (m, _) = _timed_audit(root, workers)
        rates[workers] = len(m) / secs
        print(f"model_explorer audit, {workers} worker(s): {len(m)} models in {secs:.1f} s = "
              f"{rates[workers]:.0f} models/s; {int((m['status'] != 'ok').sum())} unreadable, "
              f"{int((m['pickle_verdict'] == 'dangerous').sum())} dangerous pickles, "
              f"{int((m['errors'] > 0).sum())} with errors")
    print(f"  2 workers / 1 worker: {rates[2] / rates[1]:.2f}x")
    for name, cmd in (("picklescan", ["picklescan", "-p", root]), ("modelscan", ["modelscan", "-p", root])):
        secs, last = _run_cli(cmd)
        if secs is None:
            print(f"{name}: {last}")
        else:
            print(f"{name} (its own CLI, one process, same tree): {secs:.1f} s = {n / secs:.0f} models/s; "
                  f"its last lines: {last[:160]!r}")
    print(f"hostile pickle ran: {os.path.exists(marker)}")


def bench_bytes_flat(tmp: str) -> None:
    print("\n== bytes read per model against its size (headers only)")
    folder = os.path.join(tmp, "sizes")
    os.makedirs(folder)
    srcs = []
    for width in (16, 256, 2048):
        t = small_tensors(0, 4, width)
        srcs.append(write_safetensors(os.path.join(folder, f"w{width}.safetensors"), t))
        srcs.append(write_gguf(os.path.join(folder, f"w{width}.gguf"), t))
        srcs.append(write_sharded(os.path.join(folder, f"w{width}_sharded"), t, 2, {"model_type": "llama"}))
    m, _ = mx.audit(srcs, workers=1, progress=False)
    for r in m.to_dict("records"):
        print(f"  {os.path.basename(r['source']):<26} {r['format']:<12} {r['bytes']:>12,} bytes on disk  "
              f"{r['bytes_read']:>8,} read")


def _slow_server(root: str):
    sys.path.insert(0, os.path.join(ROOT, "tests"))
    from conftest import _RangeHandler, _Server

    class Slow(_RangeHandler):  # the tests' Range-honouring handler, 50 ms slower on every request
        def _serve(self, head: bool) -> None:
            time.sleep(LATENCY)
            super()._serve(head)

    server = _Server(("127.0.0.1", 0), functools.partial(Slow, directory=root))
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server, f"http://127.0.0.1:{server.server_address[1]}"


def bench_http(tmp: str, n: int) -> dict:
    print(f"\n== audit of {n} models over HTTP, {LATENCY * 1000:.0f} ms added to every request")
    root = os.path.join(tmp, "www")
    os.makedirs(root)
    for i in range(n):
        write_safetensors(os.path.join(root, f"m{i:04d}.safetensors"), small_tensors(i, 4, 32))
    server, base = _slow_server(root)
    urls = [f"{base}/m{i:04d}.safetensors" for i in range(n)]
    out = {}
    for workers, threads in ((1, 1), (1, 8)):
        server.requests.clear()
        secs, (m, _) = _timed_audit(urls, workers, threads)
        out[threads] = secs
        print(f"{workers} worker x {threads} thread(s) = {workers * threads} concurrent: {len(m)} models in "
              f"{secs:.1f} s ({len(m) / secs:.1f} models/s), {int((m['status'] != 'ok').sum())} unreadable, "
              f"{len(server.requests) / len(m):.1f} GETs per model (HEADs not counted), "
              f"{m['bytes_read'].mean():,.0f} bytes read per model")
    print(f"  8 concurrent / 1: {out[1] / out[8]:.1f}x (target >= 5x)")
    server.shutdown()
    return {"speedup": out[1] / out[8]}


def _blas_one_thread() -> None:
    os.environ["OPENBLAS_NUM_THREADS"] = "1"
    try:
        from threadpoolctl import threadpool_limits

        threadpool_limits(1)
    except ImportError:
        pass


def _peak_rss_mb() -> float:
    import resource

    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def bench_deep(tmp: str, shards: int, elems: int, rounds: int = 3) -> dict:
    print(f"\n== exact scan (mx.scan) of a {shards}-shard synthetic model")
    folder = os.path.join(tmp, "big")
    rng = np.random.default_rng(0)
    tensors = {}
    for s in range(shards):
        for k in range(2):
            tensors[f"model.layers.{s}.mlp.{'up' if k else 'down'}_proj.weight"] = \
                (rng.standard_normal(elems, dtype=np.float32) * (1 + s / shards)).reshape(-1, 256)
    write_sharded(folder, tensors, shards, {"model_type": "llama"})
    total = sum(a.nbytes for a in tensors.values())
    del tensors
    out: dict[int, float] = {}
    tables = {}
    clients = {w: _client(w) for w in (1, 2)}
    try:
        for client in clients.values():
            client.run(_blas_one_thread)
            mx.scan(folder, client=client, progress=False)  # warm: page cache, headers
        # Rounds alternate 1, 2, 1, 2...: a busy shared machine slows both alike; best round kept.
        for _ in range(rounds):
            for w, client in clients.items():
                t = time.perf_counter()
                tables[w] = mx.scan(folder, client=client, progress=False)
                out[w] = min(out.get(w, math.inf), time.perf_counter() - t)
        for w, client in clients.items():
            peaks = client.run(_peak_rss_mb)
            print(f"{w} worker(s): {len(tables[w])} tensors, {total / 2**20:.0f} MiB in {out[w]:.2f} s = "
                  f"{total / out[w] / 2**20:.0f} MiB/s (best of {rounds}); peak RSS per worker "
                  f"{max(peaks.values()):.0f} MiB (the shards are memory-mapped: page cache counts)")
    finally:
        for client in clients.values():
            _close(client)
    print(f"  load average while running: {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores")
    print(f"  2 workers / 1 worker: {out[1] / out[2]:.2f}x (target >= 1.6x); tables equal: "
          f"{tables[1].equals(tables[2])}")
    return {"bytes_per_s_1": total / out[1], "speedup": out[1] / out[2]}


def deepseek_on_paper(deep: dict, chunk: int = 2 * 2**20) -> None:
    print("\n== DeepSeek-V3 (163 shards, ~690 GB) on paper: a full exact scan in 10 minutes from S3")
    need = DEEPSEEK_BYTES / TARGET_SECONDS
    cpu = deep["bytes_per_s_1"]
    per_stream = chunk / (LATENCY + chunk / S3_STREAM_BYTES_S)
    threads = max(1, math.ceil(cpu / per_stream))
    per_worker = min(cpu, per_stream * threads)
    workers = math.ceil(need / per_worker)
    print(f"needed: {DEEPSEEK_BYTES / 1e9:.0f} GB / {TARGET_SECONDS} s = {need / 1e9:.2f} GB/s")
    print(f"measured: one worker (one core) streams exact statistics at {cpu / 1e6:.0f} MB/s; the HTTP run "
          f"paid {LATENCY * 1000:.0f} ms per request (S3's first-byte latency is of that order)")
    print(f"one read stream of {chunk / 2**20:.0f} MiB ranges at {S3_STREAM_BYTES_S / 1e6:.0f} MB/s (assumed "
          f"per-connection S3 rate) gives {per_stream / 1e6:.0f} MB/s, so {threads} concurrent reads per worker "
          f"keep its core busy")
    print(f"=> {workers} single-core workers, e.g. {math.ceil(workers / 8)} machine(s) of 8 cores, in the "
          f"bucket's region; each worker also reads the {DEEPSEEK_SHARDS} shard headers once "
          f"(~{DEEPSEEK_SHARDS * 2 * LATENCY:.0f} s serial at 2 requests a shard)")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--models", type=int, default=2000)
    ap.add_argument("--http-models", type=int, default=200)
    ap.add_argument("--shards", type=int, default=163)
    ap.add_argument("--elems", type=int, default=256 * 1024, help="float32 elements per tensor (2 per shard)")
    ap.add_argument("--quick", action="store_true", help="small sizes, to check the script runs")
    ap.add_argument("--only", choices=["local", "bytes", "http", "deep"], help="run one part (deep includes the paper case)")
    args = ap.parse_args()
    if args.quick:
        args.models, args.http_models, args.shards, args.elems = 120, 24, 16, 64 * 1024
    print(f"machine: {os.cpu_count()} cores; dask {__import__('dask').__version__}")
    tmp = tempfile.mkdtemp(prefix="bench_audit_")
    try:
        if args.only in (None, "local"):
            bench_local_tree(tmp, args.models)
        if args.only in (None, "bytes"):
            bench_bytes_flat(tmp)
        if args.only in (None, "http"):
            bench_http(tmp, args.http_models)
        if args.only in (None, "deep"):
            deepseek_on_paper(bench_deep(tmp, args.shards, args.elems))
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
