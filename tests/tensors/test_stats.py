"""Checkpoint.stats / stats_table: the agreed return format, sampled and exact numbers."""

from __future__ import annotations

import json

import numpy as np
import pytest
from gguf import GGMLQuantizationType as Q
from gguf import quants

from model_explorer.tensors import stats as stats_mod

from .conftest import pack_mlx, write_gguf, write_safetensors

FIELDS = ["name", "dtype", "shape", "total", "count", "exact", "sample", "min", "max", "mean", "std",
          "zeros", "nan", "inf", "hist", "scales", "partial"]


@pytest.fixture
def mixed(tmp_path, opened):
    rng = np.random.default_rng(1)
    big = rng.normal(2.0, 0.5, size=(300, 100)).astype(np.float32)
    big[7, 3] = 0
    weird = np.array([1.0, np.nan, np.inf, -np.inf, 0.0, -2.0], dtype=np.float32)
    path = write_safetensors(tmp_path / "m.safetensors", {
        "big": big, "weird": weird, "nan": np.full(5, np.nan, np.float32),
        "empty": np.zeros((0, 3), np.float32), "const": np.full(10, 0.25, np.float16),
        "ints": np.arange(-50, 50, dtype=np.int64)})
    return opened(path), big


def test_format_is_the_agreed_one_and_json_safe(mixed):
    ckpt, _ = mixed
    for name in ckpt.tensors:
        d = ckpt.stats(name, bins=8).to_dict()
        assert list(d) == FIELDS
        json.dumps(d, allow_nan=False)
        assert len(d["hist"]["edges"]) == 9 and len(d["hist"]["counts"]) == 8
        assert all(type(c) is int for c in d["hist"]["counts"])
        assert type(d["shape"]) is list and type(d["exact"]) is bool


def test_exact_stats_match_numpy(mixed, monkeypatch):
    ckpt, big = mixed
    monkeypatch.setattr(stats_mod, "CHUNK_ELEMENTS", 4096)  # many chunks
    s = ckpt.stats("big", bins=20, exact=True, max_elements=1000)
    assert s.exact and s.count == s.total == big.size and s.sample == "all 30,000 elements"
    assert s.min == float(big.min()) and s.max == float(big.max())
    assert s.mean == pytest.approx(float(big.mean(dtype=np.float64)), rel=1e-6)
    assert s.std == pytest.approx(float(big.std(dtype=np.float64)), rel=1e-5)
    assert s.zeros == pytest.approx(1 / big.size)
    ref, _ = np.histogram(big, bins=np.array(s.hist["edges"]))
    assert np.abs(ref - np.array(s.hist["counts"])).sum() <= 2  # float32 vs float64 bin edges
    assert sum(s.hist["counts"]) == big.size


def test_sampled_stats_say_which_sample(mixed):
    ckpt, big = mixed
    s = ckpt.stats("big", max_elements=3000)
    assert not s.exact and s.count <= 3000 and s.total == big.size
    assert "evenly spaced" in s.sample and "of 29 runs of 1,024 elements" in s.sample
    assert abs(s.mean - 2.0) < 0.1
    again = ckpt.stats("big", exact=True)  # the "exact" button after a sampled call
    assert again.exact and again.count == big.size


def test_nan_inf_zero_and_degenerate_tensors(mixed):
    ckpt, _ = mixed
    w = ckpt.stats("weird")
    assert (w.nan, w.inf, w.min, w.max) == (1, 2, -2.0, 1.0)
    assert w.zeros == pytest.approx(1 / 6) and sum(w.hist["counts"]) == 3
    n = ckpt.stats("nan").to_dict()
    assert n["nan"] == 5 and n["min"] is None and n["mean"] is None and n["std"] is None
    e = ckpt.stats("empty").to_dict()
    assert e["count"] == 0 and e["min"] is None and e["zeros"] == 0.0
    c = ckpt.stats("const")
    assert c.min == c.max == 0.25 and c.std == 0.0 and sum(c.hist["counts"]) == 10
    i = ckpt.stats("ints")
    assert i.dtype == "I64" and i.min == -50 and i.max == 49 and i.mean == pytest.approx(-0.5)


def test_gguf_block_scales_histogram(tmp_path, opened):
    rng = np.random.default_rng(2)
    data = rng.normal(0, 0.02, size=(64, 256)).astype(np.float32)
    raw = quants.quantize(data, Q.Q8_0)
    ckpt = opened(write_gguf(tmp_path / "q.gguf", {"w": (raw, Q.Q8_0)}))
    s = ckpt.stats("w", bins=10, exact=True, max_elements=100)
    d_scales = raw.reshape(-1, 34)[:, :2].copy().view(np.float16).astype(np.float32).ravel()
    assert s.scales["count"] == 512 and sum(s.scales["counts"]) == 512
    assert s.scales["edges"][0] == float(d_scales.min()) and s.scales["edges"][-1] == float(d_scales.max())
    sampled = ckpt.stats("w", max_elements=32 * 10)
    assert sampled.sample == "10 of 512 blocks of 32, evenly spaced" and sampled.scales["count"] == 10
    assert sampled.count == 320


def test_mlx_scales_histogram(tmp_path, opened):
    rng = np.random.default_rng(3)
    codes = rng.integers(0, 16, size=(8, 128))
    scales = rng.uniform(0.01, 0.02, size=(8, 2)).astype(np.float16)
    write_safetensors(tmp_path / "model.safetensors", {
        "l.weight": pack_mlx(codes, 4), "l.scales": scales, "l.biases": np.zeros((8, 2), np.float16)},
        config={"quantization": {"bits": 4, "group_size": 64}})
    s = opened(str(tmp_path)).stats("l.weight", bins=4)
    assert s.dtype == "MLX_Q4" and s.scales["count"] == 16 and sum(s.scales["counts"]) == 16
    assert s.scales["edges"][0] == float(scales.astype(np.float32).min())
    sampled = opened(str(tmp_path)).stats("l.weight", max_elements=256)
    assert sampled.sample == "2 of 8 rows of 128, evenly spaced"


def test_undecodable_tensor_raises_value_error(mixed):
    ckpt, _ = mixed
    ckpt.tensors["ints"].dtype = "NOPE"
    with pytest.raises(ValueError, match="NOPE"):
        ckpt.stats("ints")
    table = ckpt.stats_table()
    assert list(table["name"]) == list(ckpt.tensors)
    row = table.set_index("name").loc["ints"]
    assert "NOPE" in row["error"]
    assert table.set_index("name").loc["big", "mean"] == pytest.approx(2.0, abs=0.05)


@pytest.mark.parametrize("dtype", ["BF16", "F16", "I8", "U16", "F8_E4M3"])
def test_exact_by_bit_patterns_matches_numpy(tmp_path, opened, dtype):
    import ml_dtypes

    npdt = {"BF16": ml_dtypes.bfloat16, "F16": np.float16, "I8": np.int8, "U16": np.uint16,
            "F8_E4M3": ml_dtypes.float8_e4m3fn}[dtype]
    rng = np.random.default_rng(4)
    x = (rng.normal(size=5000) * 50).astype(npdt) if np.dtype(npdt).kind != "u" else \
        rng.integers(0, 60000, size=5000).astype(npdt)
    if dtype in ("BF16", "F16"):
        x[3], x[4], x[5] = np.nan, np.inf, 0
    from safetensors.numpy import save_file

    if dtype in ("BF16", "F8_E4M3"):  # safetensors.numpy cannot write ml_dtypes arrays
        import json
        import struct
        h = json.dumps({"t": {"dtype": dtype, "shape": [5000], "data_offsets": [0, x.nbytes]}}).encode()
        (tmp_path / "m.safetensors").write_bytes(struct.pack("<Q", len(h)) + h + x.tobytes())
    else:
        save_file({"t": x}, str(tmp_path / "m.safetensors"))
    s = opened(str(tmp_path / "m.safetensors")).stats("t", bins=12, exact=True, max_elements=100)
    f = x.astype(np.float64)
    fin = f[np.isfinite(f)]
    assert s.exact and s.count == 5000 and s.nan == int(np.isnan(f).sum()) and s.inf == int(np.isinf(f).sum())
    assert (s.min, s.max) == (fin.min(), fin.max())
    assert s.mean == pytest.approx(fin.mean(), rel=1e-9, abs=1e-12)
    assert s.std == pytest.approx(fin.std(), rel=1e-9)
    assert s.zeros == pytest.approx((f == 0).mean())
    ref, _ = np.histogram(fin, bins=np.array(s.hist["edges"]))
    assert np.abs(ref - np.array(s.hist["counts"])).sum() <= 2 and sum(s.hist["counts"]) == fin.size


def test_exact_big_endian_f16_gguf(tmp_path, opened):
    x = np.linspace(-3, 5, 4096).astype(np.float16)
    ckpt = opened(write_gguf(tmp_path / "be.gguf", {"h": x}, endianess="big"))
    s = ckpt.stats("h", exact=True, max_elements=10)
    assert (s.min, s.max) == (-3.0, 5.0) and s.mean == pytest.approx(float(x.astype(np.float64).mean()))


def test_huge_values_do_not_overflow_the_moments(tmp_path, opened):
    x = np.array([3e38, -3e38, 1e30, 0.0], np.float32)
    s = opened(write_safetensors(tmp_path / "h.safetensors", {"x": x})).stats("x", bins=4)
    assert s.std == pytest.approx(float(x.astype(np.float64).std()), rel=1e-6)
    assert sum(s.hist["counts"]) == 4 and s.hist["counts"][0] == 1 and s.hist["counts"][-1] == 1


def test_sampling_a_sub_byte_tensor_that_ends_mid_unit_copies_no_more_than_the_sample(tmp_path, opened):
    """F4 with 8k - 3 values: the last sampled group ends inside the data and needs padding;
    that must not copy the whole tensor (16 MiB here) out of the memory map."""
    import struct
    import tracemalloc

    n = 2**25 - 3
    nbytes = (n * 4 + 7) // 8
    header = json.dumps({"t": {"dtype": "F4", "shape": [n], "data_offsets": [0, nbytes]}}).encode()
    header += b" " * (-len(header) % 8)
    path = tmp_path / "f4.safetensors"
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(header)) + header)
        f.truncate(8 + len(header) + nbytes)  # zeros, without writing them
    ckpt = opened(str(path))
    tracemalloc.start()
    try:
        s = ckpt.stats("t", max_elements=8192)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert s.count == 8192 and s.min == s.max == 0.0
    assert peak < 2**20, f"peak {peak / 2**20:.1f} MiB"
