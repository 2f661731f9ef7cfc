"""The offline report of a 20,000-tensor sharded folder with one shard deleted: its size, the
time to write it, and the same checkpoint's size on disk beside it.

A report attached to a bug ticket carries the sampled statistics, the histogram and the first
bytes of every tensor; the target is under 3 MB for this 2.3 MB checkpoint.

    .venv/bin/python benchmarks/bench_report.py
"""

from __future__ import annotations

import json
import struct
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

SHARDS = 50
TENSORS = 20_000
MISSING_SHARD = 23
TARGET = 3 * 1024 * 1024


def write_folder(folder: Path, shards: int = SHARDS, tensors: int = TENSORS,
                 missing: int | None = MISSING_SHARD) -> Path:
    """`shards` shards of small F16 tensors with llama-like names; shard `missing` deleted."""
    folder.mkdir(parents=True, exist_ok=True)
    suffixes = ["self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj", "self_attn.o_proj",
                "mlp.gate_proj", "mlp.up_proj", "mlp.down_proj", "input_layernorm",
                "post_attention_layernorm", "self_attn.rotary"]
    rng = np.random.default_rng(0)
    per = tensors // shards
    weight_map: dict[str, str] = {}
    for s in range(shards):
        name = f"model-{s + 1:05d}-of-{shards:05d}.safetensors"
        header: dict = {}
        blobs, pos = [], 0
        for i in range(s * per, (s + 1) * per):
            layer, k = divmod(i, len(suffixes))
            tname = f"model.layers.{layer}.{suffixes[k]}.weight"
            data = rng.standard_normal(8).astype(np.float16).tobytes()
            header[tname] = {"dtype": "F16", "shape": [8], "data_offsets": [pos, pos + len(data)]}
            blobs.append(data)
            weight_map[tname] = name
            pos += len(data)
        if s + 1 == missing:
            continue
        text = json.dumps(header).encode()
        text += b" " * (-len(text) % 8)
        (folder / name).write_bytes(struct.pack("<Q", len(text)) + text + b"".join(blobs))
    index = folder / "model.safetensors.index.json"
    index.write_text(json.dumps({"metadata": {}, "weight_map": weight_map}))
    return folder


def main() -> int:
    from model_explorer.widgets import Explorer

    with tempfile.TemporaryDirectory(prefix="bench-report-") as tmp:
        folder = write_folder(Path(tmp) / "model")
        on_disk = sum(p.stat().st_size for p in folder.iterdir())
        shards = sum(p.stat().st_size for p in folder.glob("*.safetensors"))
        t = time.perf_counter()
        ex = Explorer(str(folder))
        path = ex.save_html(Path(tmp) / "report.html")
        seconds = time.perf_counter() - t
        size = Path(path).stat().st_size
        ckpt = ex.checkpoint
        readable, indexed = ckpt.indexed_counts()
        print(f"checkpoint: {len(ckpt.files)} shards, {readable:,} of {indexed:,} indexed tensors "
              f"readable, {on_disk / 2**20:.2f} MB on disk ({shards / 2**20:.2f} MB of shards)")
        print(f"report: {size / 2**20:.2f} MB (target < {TARGET / 2**20:.0f} MB), written in "
              f"{seconds:.1f} s; ratio report/checkpoint {size / on_disk:.2f}")
        return 0 if size < TARGET else 1


if __name__ == "__main__":
    raise SystemExit(main())
