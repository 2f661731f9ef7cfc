"""Byte sources and the opener's plumbing: bounds, file:// paths, never reading tensor data."""

from __future__ import annotations

import pytest

import model_explorer as mx
from model_explorer import sources
from model_explorer.sources import LocalSource

from .conftest import F32, GGUFBuilder, finding, st_bytes, st_entry, write

GIB = 2**30


def test_local_source_bounds(tmp_path):
    src = LocalSource(write(tmp_path, "f.bin", bytes(range(10))))
    assert src.size == 10 and src.read(8, 100) == b"\x08\x09" and src.read(10, 1) == b""
    assert src.read(-5, 2) == b"\x00\x01" and src.read(3, 0) == b""
    assert bytes(src.prefix(4)[:4]) == b"\x00\x01\x02\x03"
    src.close()
    empty = LocalSource(write(tmp_path, "e.bin", b""))
    assert empty.size == 0 and empty.read(0, 8) == b"" and bytes(empty.prefix(8)) == b""


@pytest.mark.parametrize("fmt", ["safetensors", "gguf"])
def test_opening_a_huge_sparse_file_reads_only_the_header(tmp_path, fmt):
    path = tmp_path / f"huge.{fmt}"
    if fmt == "safetensors":
        header = st_bytes({f"w{i}": st_entry("F32", [GIB // 16], i * GIB // 4, (i + 1) * GIB // 4)
                           for i in range(8)})
    else:
        b = GGUFBuilder()
        for i in range(8):
            b.tensor(f"w{i}", [GIB // 16], F32, i * GIB // 4)
        header = b.build()
    path.write_bytes(header)
    with open(path, "r+b") as f:
        f.truncate(len(header) + 2 * GIB)
    ckpt = mx.open(str(path))
    assert not ckpt.errors and len(ckpt.tensors) == 8
    assert ckpt.byte_source().bytes_read <= 65 * 1024  # a 64 KiB first read at most, whatever the size


def test_file_url_and_pathlike(tmp_path):
    path = write(tmp_path, "a.safetensors", st_bytes({"a": st_entry("U8", [1], 0, 1)}, b"x"))
    assert list(mx.open(f"file://{path}").tensors) == ["a"]
    assert list(mx.open(tmp_path / "a.safetensors").tensors) == ["a"]


def test_join_and_basename_round_trip_for_urls():
    base = "http://host/repo"
    url = sources.join(base, "sub dir/a #1?.safetensors")
    assert url == "http://host/repo/sub%20dir/a%20%231%3F.safetensors"
    assert sources.basename(url) == "a #1?.safetensors"
    assert sources.dirname(url) == "http://host/repo/sub%20dir"
    assert sources.join("s3://bucket/m", "x.gguf") == "s3://bucket/m/x.gguf"


def test_unknown_bytes(tmp_path):
    ckpt = mx.open(write(tmp_path, "notes.txt", b"hello world, not a model"))
    f = finding(ckpt, "unknown_format")
    assert (f.offset, ckpt.format) == (0, "unknown")


def test_bad_magic_in_a_gguf_named_file(tmp_path):
    ckpt = mx.open(write(tmp_path, "m.gguf", b"GGML" + b"\0" * 40))
    assert finding(ckpt, "bad_magic").offset == 0 and ckpt.format == "gguf"


def test_empty_file(tmp_path):
    ckpt = mx.open(write(tmp_path, "m.safetensors", b""))
    assert finding(ckpt, "truncated").offset == 0


def test_parent_in_repo_stops_at_a_hub_repository_root(tmp_path):
    from model_explorer import sources

    assert sources.parent_in_repo("hf://org/repo") is None  # above a repo is no repo: no request
    assert sources.parent_in_repo("hf://org/repo/1_Pooling") == "hf://org/repo"
    assert sources.parent_in_repo("hf://datasets/org/repo") is None
    assert sources.parent_in_repo(str(tmp_path / "m")) == str(tmp_path)
