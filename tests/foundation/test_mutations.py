"""Property-based mutation tests: any byte flipped, inserted or cut in a valid file still opens.

Opening never raises, never hangs (hypothesis `deadline`), and every span stays inside its file.
"""

from __future__ import annotations

import json
import os
import struct

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import model_explorer as mx
from model_explorer.formats.gguf import GGUFArray

from .conftest import (
    ARRAY,
    BOOL,
    F16,
    FLOAT64,
    INT32,
    Q8_0,
    STRING,
    UINT8,
    UINT32,
    GGUFBuilder,
    mlx_dir,
    shard_dir,
    st_bytes,
    st_entry,
)

SETTINGS = settings(max_examples=60, deadline=2000, derandomize=True,
                    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])

_mutation = st.one_of(
    st.tuples(st.just("flip"), st.integers(0, 2**20), st.integers(1, 255)),
    st.tuples(st.just("insert"), st.integers(0, 2**20), st.binary(min_size=1, max_size=12)),
    st.tuples(st.just("cut"), st.integers(0, 2**20), st.integers(1, 48)),
    st.tuples(st.just("set_u64"), st.integers(0, 2**20), st.sampled_from([0, 1, 2**31, 2**62, 2**64 - 1])),
)
mutations = st.lists(_mutation, min_size=1, max_size=3)


def mutate(blob: bytes, muts) -> bytes:
    b = bytearray(blob)
    for kind, pos, arg in muts:
        pos %= len(b) + 1
        if kind == "flip" and pos < len(b):
            b[pos] ^= arg
        elif kind == "insert":
            b[pos:pos] = arg
        elif kind == "cut":
            del b[pos:pos + arg]
        elif kind == "set_u64":
            b[pos:pos + 8] = struct.pack("<Q", arg)
    return bytes(b)


def check_opens(path: str) -> mx.Checkpoint:
    ckpt = mx.open(path)
    sizes = {f: os.path.getsize(f) for f in ckpt.files}
    for s in ckpt.spans:
        assert s.offset >= 0 and s.length >= 0 and s.end <= sizes[s.file], s
    ckpt.summary(), repr(ckpt), [str(f) for f in ckpt.findings]
    for value in ckpt.metadata.values():
        arr = getattr(value, "value", None)
        if isinstance(arr, GGUFArray):
            arr[: 3]
    ckpt.close()
    return ckpt


def _safetensors_blob() -> bytes:
    header = {"__metadata__": {"format": "pt", "\u00e9": "\u00fc"},
              "emb.w\u00e9": st_entry("F16", [2, 3], 0, 12),
              "empty": st_entry("F32", [0], 12, 12),
              "norm": st_entry("BF16", [2], 12, 16)}
    raw = json.dumps(header, ensure_ascii=False).encode()
    raw += b" " * (-len(raw) % 8)
    return st_bytes(raw, bytes(range(16)))


def _gguf_blob(bo: str) -> bytes:
    b = GGUFBuilder(byteorder=bo)
    b.kv("general.architecture", STRING, "llama").kv("llama.block_count", UINT32, 2)
    b.kv("general.alignment", UINT32, 32).kv("flag", BOOL, True).kv("eps", FLOAT64, 1e-5)
    b.kv("tokenizer.ggml.tokens", ARRAY, ["<s>", "a", "\u00e9"], STRING)
    b.kv("tokenizer.ggml.token_type", ARRAY, [1, 2, 3], INT32)
    b.raw_kv("nested", struct.pack(bo + "IIQ", ARRAY, ARRAY, 1) + struct.pack(bo + "IQ", UINT8, 2) + b"\1\2")
    b.tensor("tok_embd", [32, 2], Q8_0, 0).tensor("norm", [4], F16, 96)
    return b.build(b"\1" * 128)


@pytest.fixture(scope="module")
def work(tmp_path_factory):
    return tmp_path_factory.mktemp("mut")


@SETTINGS
@given(muts=mutations)
def test_mutated_safetensors_opens(work, muts):
    path = work / "m.safetensors"
    path.write_bytes(mutate(_safetensors_blob(), muts))
    check_opens(str(path))


@pytest.mark.parametrize("bo", ["<", ">"])
@SETTINGS
@given(muts=mutations)
def test_mutated_gguf_opens(work, bo, muts):
    path = work / f"m{bo == '>'}.gguf"
    path.write_bytes(mutate(_gguf_blob(bo), muts))
    check_opens(str(path))


@pytest.fixture(scope="module")
def shards(tmp_path_factory):
    d, _, _ = shard_dir(tmp_path_factory.mktemp("shards"), n_shards=2)
    names = sorted(os.listdir(d))
    return d, {n: (d / n).read_bytes() for n in names}


@SETTINGS
@given(which=st.integers(0, 2), muts=mutations)
def test_mutated_shard_directory_opens(shards, which, muts):
    d, originals = shards
    name = sorted(originals)[which]
    try:
        (d / name).write_bytes(mutate(originals[name], muts))
        check_opens(str(d))
    finally:
        (d / name).write_bytes(originals[name])


@pytest.fixture(scope="module")
def mlx(tmp_path_factory):
    d, _ = mlx_dir(tmp_path_factory.mktemp("mlx"), rows=2, cols=64)
    return d, {n: (d / n).read_bytes() for n in ("model.safetensors", "config.json")}


@SETTINGS
@given(which=st.sampled_from(["model.safetensors", "config.json"]), muts=mutations)
def test_mutated_mlx_directory_opens(mlx, which, muts):
    d, originals = mlx
    try:
        (d / which).write_bytes(mutate(originals[which], muts))
        check_opens(str(d))
    finally:
        (d / which).write_bytes(originals[which])


@SETTINGS
@given(config=st.recursive(st.none() | st.booleans() | st.integers(-3, 300) | st.text(max_size=4),
                           lambda inner: st.lists(inner, max_size=3)
                           | st.dictionaries(st.sampled_from(["bits", "group_size", "mode",
                                                              "model.layers.0.mlp.up_proj"]), inner),
                           max_leaves=8))
def test_any_quantization_config_opens(mlx, config):
    d, originals = mlx
    try:
        (d / "config.json").write_text(json.dumps({"quantization": config}))
        check_opens(str(d))
    finally:
        (d / "config.json").write_bytes(originals["config.json"])
