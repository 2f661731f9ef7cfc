"""Repair a 5 GiB checkpoint: peak extra memory (target < 300 MB) and time.

The checkpoint is built on sparse files, so it costs no disk until the repair writes its copy:
two shards of 2.5 GiB (float32 tensors of 64 MiB), one with a non-string `__metadata__` value
and a header not padded to 8 bytes (so that shard is rewritten tensor by tensor), an index whose
total_size is wrong. The repair runs in a fresh process; its peak resident memory (ru_maxrss)
minus its resident memory just before the repair (imports and the opened headers) is the extra
memory the repair needs. The output (5 GiB, really written) is deleted afterwards.

    .venv/bin/python benchmarks/bench_repair.py [GiB]
"""

from __future__ import annotations

import json
import os
import shutil
import struct
import subprocess
import sys
import tempfile

TENSOR_BYTES = 64 * 2**20

CASE = r"""
import json, resource, sys, time
import model_explorer as mx

def rss_mb():
    for line in open("/proc/self/status"):
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024

src, dest = sys.argv[1], sys.argv[2]
plan = mx.repair_plan(src)  # warm: imports and the header readers
before = rss_mb()
calls = []
t0 = time.perf_counter()
report = mx.repair(src, dest, progress=lambda d, t, w: calls.append(d))
seconds = time.perf_counter() - t0
peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
print(json.dumps({"ok": report.ok, "fixes": [f.name for f in report.applied], "seconds": seconds,
                  "rss_before_mb": before, "peak_rss_mb": peak, "extra_mb": peak - before,
                  "progress_calls": len(calls), "tensors": len(report.tensors),
                  "identical": sum(t.identical for t in report.tensors)}))
"""


def shard(path: str, names: list[str], metadata: dict, pad: bool) -> int:
    header = {"__metadata__": metadata}
    for i, name in enumerate(names):
        header[name] = {"dtype": "F32", "shape": [TENSOR_BYTES // 4],
                        "data_offsets": [i * TENSOR_BYTES, (i + 1) * TENSOR_BYTES]}
    raw = json.dumps(header).encode()
    if pad:
        raw += b" " * (-len(raw) % 8)
    elif len(raw) % 8 == 0:
        raw += b" "
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(raw)) + raw)
        f.truncate(8 + len(raw) + len(names) * TENSOR_BYTES)  # sparse: no disk used
    return len(names) * TENSOR_BYTES


def build(folder: str, gib: float) -> int:
    n = int(gib * 2**30 // TENSOR_BYTES)
    names = [f"model.layers.{i // 8}.w{i % 8}.weight" for i in range(n)]
    half = n // 2
    files = {"model-00001-of-00002.safetensors": names[:half], "model-00002-of-00002.safetensors": names[half:]}
    total = 0
    for k, (file, part) in enumerate(files.items()):
        meta = {"format": "pt", "step": 1200} if k == 0 else {"format": "pt"}
        total += shard(os.path.join(folder, file), part, meta, pad=k == 1)
    wm = {name: file for file, part in files.items() for name in part}
    with open(os.path.join(folder, "model.safetensors.index.json"), "w") as f:
        json.dump({"metadata": {"total_size": 1}, "weight_map": wm}, f)
    return total


def main() -> None:
    gib = float(sys.argv[1]) if len(sys.argv) > 1 else 5.0
    tmp = tempfile.mkdtemp(prefix="bench-repair-")
    try:
        src = os.path.join(tmp, "src")
        os.makedirs(src)
        size = build(src, gib)
        out = subprocess.run([sys.executable, "-c", CASE, src, os.path.join(tmp, "fixed")],
                             capture_output=True, text=True, check=False)
        if out.returncode:
            print(out.stderr)
            raise SystemExit(1)
        r = json.loads(out.stdout)
        print(f"repair of a {size / 2**30:.2f} GiB sharded checkpoint ({r['tensors']} tensors; "
              f"fixes {', '.join(r['fixes'])}): ok={r['ok']}")
        print(f"  {r['seconds']:.1f} s ({size / 2**20 / r['seconds']:.0f} MiB/s written, "
              f"hashed and read back), {r['progress_calls']} progress calls")
        print(f"  resident memory before {r['rss_before_mb']:.0f} MB, peak {r['peak_rss_mb']:.0f} MB: "
              f"extra {r['extra_mb']:.0f} MB (target < 300 MB)")
        print(f"  {r['identical']} of {r['tensors']} tensors byte-identical by sha256")
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
