"""Reading over HTTP: a local server that honours Range and counts what it sends.

Files are padded (sparse) to ~50 MB of tensor data; opening them must move kilobytes.
"""

from __future__ import annotations

import json
import os

import numpy as np
import pytest
import safetensors.numpy

import model_explorer as mx
from model_explorer.sources import RemoteSource

from .conftest import ARRAY, F32, STRING, UINT32, GGUFBuilder, shard_dir, st_bytes, st_entry

BIG = 50 * 1024 * 1024
KB = 1024


def _sparse_extend(path, size: int) -> None:
    with open(path, "r+b") as f:
        f.truncate(size)


def test_large_safetensors_over_http_moves_kilobytes(served):
    root, base, server = served
    n = BIG // 4
    header = {f"layer.{i}": st_entry("F32", [n // 8], i * (n // 8) * 4, (i + 1) * (n // 8) * 4) for i in range(8)}
    header["__metadata__"] = {"format": "pt"}
    path = root / "big model.safetensors"
    path.write_bytes(st_bytes(header))
    _sparse_extend(path, path.stat().st_size + n * 4)

    local = mx.open(str(path))
    server.bytes_sent = 0
    ckpt = mx.open(f"{base}/big%20model.safetensors")
    assert server.bytes_sent < 128 * KB, server.requests
    assert all(end - start < 1 << 20 for _, start, end in server.requests)  # no whole-file GET
    assert ckpt.findings == [] and ckpt.metadata == {"format": "pt"}
    assert [(t.name, t.offset, t.length) for t in ckpt.tensors.values()] == \
        [(t.name, t.offset, t.length) for t in local.tensors.values()]
    assert [(s.offset, s.length, s.path) for s in ckpt.spans] == [(s.offset, s.length, s.path) for s in local.spans]
    # a tensor's bytes come by range
    t = ckpt.tensors["layer.7"]
    assert ckpt.read_bytes(t.end - 16, 16) == b"\0" * 16
    src = ckpt.byte_source()
    assert isinstance(src, RemoteSource) and src.requests <= 3


def test_large_gguf_over_http_moves_about_its_header(served):
    root, base, server = served
    b = GGUFBuilder().kv("general.architecture", STRING, "llama").kv("llama.block_count", UINT32, 4)
    tokens = [f"tok{i}\u00e9" for i in range(20000)]
    b.kv("tokenizer.ggml.tokens", ARRAY, tokens, STRING)
    rows = BIG // 4 // 4096 // 4  # four tensors, BIG bytes in all
    for i in range(4):
        b.tensor(f"blk.{i}.w", [4096, rows], F32, i * 4096 * rows * 4)
    blob = b.build()
    path = root / "big.gguf"
    path.write_bytes(blob)
    _sparse_extend(path, len(blob) + BIG)

    server.bytes_sent = 0
    ckpt = mx.open(f"{base}/big.gguf")
    assert ckpt.findings == [], [str(f) for f in ckpt.findings]
    header = len(blob)  # ~270 KB of vocabulary
    assert server.bytes_sent < 2 * header + 64 * KB and len(server.requests) <= 8
    assert all(end - start < 1 << 20 for _, start, end in server.requests)
    assert ckpt.tensors["blk.3.w"].end == os.path.getsize(path)
    toks = ckpt.metadata["tokenizer.ggml.tokens"].value
    assert toks[19999] == "tok19999\u00e9" and toks.to_list() == tokens


def test_sharded_index_over_http(served):
    root, base, server = served
    d, index, arrays = shard_dir(root, folder="repo")
    local = mx.open(str(d))
    server.bytes_sent = 0
    ckpt = mx.open(f"{base}/repo/model.safetensors.index.json")
    assert ckpt.findings == [], [str(f) for f in ckpt.findings]
    assert ckpt.files == [f"{base}/repo/{os.path.basename(f)}" for f in local.files]
    assert sorted(ckpt.tensors) == sorted(arrays)
    name = "layers.2.w1"
    t = ckpt.tensors[name]
    assert ckpt.read_bytes(t.offset, t.length, t.file) == arrays[name].tobytes()
    assert server.bytes_sent < 64 * KB


def test_sharded_index_over_http_reports_a_missing_shard(served):
    root, base, _ = served
    d, _, _ = shard_dir(root, folder="repo")
    (d / "model-00003-of-00003.safetensors").unlink()
    ckpt = mx.open(f"{base}/repo/model.safetensors.index.json")
    assert [f.code for f in ckpt.errors] == ["missing_shard"]


def test_odd_shard_names_over_http(served):
    root, base, _ = served
    names = {1: "sub dir/a #1.safetensors", 2: "b?.safetensors", 3: "c%41.safetensors"}
    d, _, arrays = shard_dir(root, folder="odd", shard_name=lambda i, n: names[i])
    ckpt = mx.open(f"{base}/odd/model.safetensors.index.json")
    assert ckpt.findings == [], [str(f) for f in ckpt.findings]
    assert sorted(ckpt.tensors) == sorted(arrays)


def test_split_gguf_over_http(served):
    import gguf

    root, base, _ = served
    w = gguf.GGUFWriter(str(root / "m.gguf"), "llama", split_max_tensors=1)
    for i in range(3):
        w.add_tensor(f"t{i}", np.full(8, i, np.float32))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    ckpt = mx.open(f"{base}/m-00002-of-00003.gguf")
    assert ckpt.findings == [] and list(ckpt.tensors) == ["t0", "t1", "t2"]
    assert ckpt.files[0] == f"{base}/m-00001-of-00003.gguf"


def test_directory_listing_over_http(served):
    root, base, _ = served
    d = root / "plain"
    d.mkdir()
    safetensors.numpy.save_file({"a": np.zeros(2, np.float32)}, str(d / "model.safetensors"))
    (d / "config.json").write_text('{"model_type": "x"}')
    ckpt = mx.open(f"{base}/plain/")
    assert list(ckpt.tensors) == ["a"] and ckpt.metadata["config.json"] == {"model_type": "x"}


def test_missing_url_raises(served):
    _, base, _ = served
    with pytest.raises(FileNotFoundError):
        mx.open(f"{base}/nope.safetensors")


def test_remote_prefix_grows_by_doubling(served):
    root, base, server = served
    (root / "f.bin").write_bytes(bytes(range(256)) * 4096)  # 1 MiB
    src = RemoteSource(f"{base}/f.bin")
    for n in range(1, 700_000, 997):  # many small, growing prefix reads
        assert len(src.prefix(n)) >= n
    assert src.requests <= 5 and src.bytes_read < 1_100_000
    assert src.read(1000, 4) == bytes([232, 233, 234, 235])
    assert src.read(src.size - 2, 10) == bytes([254, 255])


def test_a_server_that_fails_mid_read(served):
    root, base, _ = served
    d, _, _ = shard_dir(root, folder="repo")
    (d / "model-00002-of-00003.safetensors").rename(d / "broken.safetensors")
    index = json.loads((d / "model.safetensors.index.json").read_text())
    index["weight_map"] = {k: ("broken.safetensors" if "00002" in v else v) for k, v in index["weight_map"].items()}
    (d / "model.safetensors.index.json").write_text(json.dumps(index))
    ckpt = mx.open(f"{base}/repo/model.safetensors.index.json")
    f = next(f for f in ckpt.errors if f.code == "unreadable_shard")
    assert f.file == f"{base}/repo/broken.safetensors" and len(ckpt.tensors) == 4
    with pytest.raises(OSError):
        mx.open(f"{base}/repo/broken.safetensors")


def test_mlx_model_over_http(served):
    from .conftest import mlx_dir

    root, base, _ = served
    mlx_dir(root, folder="mlx")
    ckpt = mx.open(f"{base}/mlx/model.safetensors")  # config.json beside it is found by URL
    w = ckpt.tensors["model.layers.0.mlp.up_proj.weight"]
    assert ckpt.findings == [] and (w.label, w.shape) == ("MLX_Q4", (8, 128))
