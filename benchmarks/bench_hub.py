"""Opening a model on the Hub without downloading it (issue 26).

A local server answers the Hub's HTTP API as huggingface_hub calls it (tests/hub/fakehub.py,
HF_ENDPOINT) with a fixed delay per request, serving a DeepSeek-V3-shaped repository: 163 FP8
shards with real headers (627 GiB of virtual data), their 8.7 MB index and config.json.

Ours: a fresh process runs `mx.open("hf://org/deepseek-v3")` (the first Hub open of the process,
huggingface_hub's import included); wall time, and the requests and bytes the server saw.
Target: <= 3 s at 50 ms per request, <= 2 requests per shard (the CDN redirect + one range).
Beside it, from the same run and server: huggingface_hub's own
`HfApi().get_safetensors_metadata(repo)` (index download + one header parse per shard, in threads).

    .venv/bin/python benchmarks/bench_hub.py [--shards 163] [--delay 0.05] [--repeat 3] [--small]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests" / "hub"))

TARGET_SECONDS = 3.0
TARGET_PER_SHARD = 2.0

OURS = """
import json, time
t0 = time.perf_counter()
import model_explorer as mx
t1 = time.perf_counter()
ckpt = mx.open("hf://org/deepseek-v3")
t2 = time.perf_counter()
print(json.dumps({"import": t1 - t0, "open": t2 - t1, "tensors": len(ckpt.tensors),
                  "files": len(ckpt.files), "errors": len(ckpt.errors), "hub": ckpt.details["hub"]}))
"""

REFERENCE = """
import json, time
t0 = time.perf_counter()
from huggingface_hub import HfApi
t1 = time.perf_counter()
meta = HfApi().get_safetensors_metadata("org/deepseek-v3")
t2 = time.perf_counter()
print(json.dumps({"import": t1 - t0, "open": t2 - t1, "files": len(meta.files_metadata),
                  "tensors": sum(len(f.tensors) for f in meta.files_metadata.values())}))
"""


def run(code: str, env: dict) -> dict:
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=600)
    if out.returncode != 0:
        raise RuntimeError(out.stderr.strip().splitlines()[-1] if out.stderr.strip() else "failed")
    return json.loads(out.stdout.strip().splitlines()[-1])


def main() -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--shards", type=int, default=163)
    p.add_argument("--delay", type=float, default=0.05, help="seconds the server waits per request")
    p.add_argument("--repeat", type=int, default=3)
    p.add_argument("--small", action="store_true", help="a smoke run: 20 shards, 10 ms, once")
    a = p.parse_args()
    if a.small:
        a.shards, a.delay, a.repeat = 20, 0.01, 1
    import hub_layouts as L
    from fakehub import FakeHub, Repo

    files = L.deepseek_v3(a.shards)
    size = sum(f.size if hasattr(f, "size") else len(f) for f in files.values())
    print(f"DeepSeek-V3-shaped repo: {a.shards} shards, {size / 2**30:,.0f} GiB, index "
          f"{len(files['model.safetensors.index.json']) / 1e6:.1f} MB; {a.delay * 1000:.0f} ms per request")
    ok = True
    with FakeHub({"org/deepseek-v3": Repo({"main": files})}, delay=a.delay) as hub, \
            tempfile.TemporaryDirectory() as home:
        env = dict(os.environ, HF_ENDPOINT=hub.url, HF_HOME=home, HF_HUB_DISABLE_TELEMETRY="1",
                   HF_HUB_DISABLE_PROGRESS_BARS="1", PYTHONPATH=str(ROOT))
        env.pop("HF_TOKEN", None)
        times, runs = [], []
        for _ in range(a.repeat):
            hub.reset()
            r = run(OURS, env)
            r["server_requests"] = len(hub.log)
            r["server_shard_requests"] = sum(1 for _m, path, _r in hub.log if path.endswith(".safetensors"))
            r["server_bytes"] = hub.bytes_sent
            times.append(r["open"])
            runs.append(r)
        r = runs[-1]
        t = statistics.median(times)
        per_shard = r["server_shard_requests"] / a.shards
        print(f"ours       mx.open('hf://...'): {t:6.2f} s median of {a.repeat} "
              f"({', '.join(f'{x:.2f}' for x in times)}); {r['files']} files, {r['tensors']:,} tensors, "
              f"{r['errors']} errors")
        print(f"           requests: {r['server_requests']} at the server ({r['hub']['api_requests']} API, "
              f"{r['hub']['range_requests']} ranges, {r['hub']['redirects']} redirects); "
              f"{per_shard:.2f} per shard; {r['server_bytes'] / 2**20:.1f} MiB sent "
              f"({r['hub']['bytes'] / 2**20:.1f} MiB of file bytes)")
        hub.reset()
        try:
            ref = run(REFERENCE, env)
            ref_requests = len(hub.log)
            print(f"reference  HfApi.get_safetensors_metadata: {ref['open']:6.2f} s; {ref['files']} files, "
                  f"{ref['tensors']:,} tensors; {ref_requests} requests, {hub.bytes_sent / 2**20:.1f} MiB sent")
            print(f"ratio      ours / reference: {t / ref['open']:.2f}x")
        except (RuntimeError, subprocess.TimeoutExpired) as e:
            print(f"reference  HfApi.get_safetensors_metadata failed against this server: {e}")
    met_t = t <= TARGET_SECONDS
    met_r = per_shard <= TARGET_PER_SHARD
    print(f"target: open <= {TARGET_SECONDS:.0f} s: {'met' if met_t else 'MISSED'}; <= "
          f"{TARGET_PER_SHARD:.0f} requests per shard: {'met' if met_r else 'MISSED'}")
    ok = met_t and met_r
    return 0 if ok or a.small else 1


if __name__ == "__main__":
    sys.exit(main())
