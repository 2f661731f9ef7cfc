"""The torch backend's weight-only int8 / int4 matrices (the run cell's CUDA path).

torch's fused kernels are checked on the CPU, where torch ships them (`_weight_int8pack_mm`,
`_weight_int4pack_mm_for_cpu`): their products against numpy's product with our own
dequantization of the same codes, and a whole model's logits against the float32 reference. The
CUDA kernel (`_weight_int4pack_mm`) takes a different packing that only a GPU can check.
"""

from __future__ import annotations

import numpy as np
import pytest
from conftest import random_state, tiny_config, tiny_vocab, write_hf_dir, write_tokenizer_files

from model_explorer.runtime import load_model
from model_explorer.runtime.engines import torch_wquant as wquant
from model_explorer.runtime.weights import layer_bits_per_weight

torch = pytest.importorskip("torch")


def _rng_matrix(rows: int, cols: int, seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).standard_normal((rows, cols)).astype(np.float32)


def test_int8_round_trip_is_within_half_a_step_per_row():
    w = _rng_matrix(40, 96)
    w[3] = 0.0  # an all-zero row keeps a usable scale
    codes, scale = wquant.quantize_int8(w)
    back = wquant.dequantize_int8(codes, scale)
    assert codes.dtype == np.int8 and np.abs(codes).max() <= 127
    assert np.all(np.abs(back - w) <= scale[:, None] / 2 + 1e-7)
    assert np.all(back[3] == 0)


def test_int4_codes_cover_each_group_and_constant_groups_survive():
    w = _rng_matrix(16, 64, seed=1)
    w[2, :32] = 0.25  # a constant group
    w[5, 32:] = 0.0
    q, scale, zero = wquant.quantize_int4(w)
    assert q.dtype == np.uint8 and q.max() <= 15 and scale.shape == zero.shape == (16, 2)
    back = wquant.dequantize_int4(q, scale, zero)
    assert np.allclose(back[2, :32], 0.25, rtol=0.01)
    assert np.all(back[5, 32:] == 0.0)
    # Min-max groups: every value within about half a step (plus bfloat16 scale rounding).
    step = np.repeat(scale, 32, axis=1)
    assert np.all(np.abs(back - w) <= 0.6 * step + 1e-6)
    assert 0.0 < wquant.relative_rms_error(back, w) < 0.12  # ~step / sqrt(12) for Gaussian groups


@pytest.mark.parametrize("kind", ["int8", "int4"])
@pytest.mark.parametrize("shape", [(64, 64), (96, 160), (48, 96)])
@pytest.mark.parametrize("rows", [1, 7])
def test_fused_kernels_equal_numpy_on_our_dequantized_values(kind, shape, rows):
    w = _rng_matrix(*shape, seed=2)
    m = wquant.pack(torch, torch.device("cpu"), w, kind)
    if kind == "int8":
        codes, scale = wquant.quantize_int8(w)
        deq = wquant.dequantize_int8(codes, scale)
    else:
        deq = wquant.dequantize_int4(*wquant.quantize_int4(w))
    x = np.random.default_rng(3).standard_normal((rows, shape[1])).astype(np.float32)
    y = wquant.linear(torch, torch.from_numpy(x), m, wquant.int8_fused(torch, torch.device("cpu"))).numpy()
    ref = x @ deq.T
    assert np.abs(y - ref).max() <= 1e-4 * np.abs(ref).max()
    assert m.kind == kind and m.shape == shape
    assert m.rel_error == pytest.approx(wquant.relative_rms_error(deq, w))


@pytest.mark.parametrize("shape", [(32, 48), (40, 64)])  # 48 % 32 != 0; 40 rows % 16 != 0 on a CPU
def test_a_shape_tinygemm_cannot_tile_falls_back_to_int8(shape):
    assert wquant.pack(torch, torch.device("cpu"), _rng_matrix(*shape), "int4").kind == "int8"


def test_widened_int8_fallback_equals_the_fused_kernel():
    w, x = _rng_matrix(64, 96, seed=4), torch.from_numpy(_rng_matrix(3, 96, seed=5))
    m = wquant.pack(torch, torch.device("cpu"), w, "int8")
    fused, widened = wquant.linear(torch, x, m, True), wquant.linear(torch, x, m, False)
    assert torch.allclose(fused, widened, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("bits, kind", [(4.1, "int4"), (4.85, "int4"), (5.0, "int4"), (5.5, "int8"),
                                        (8.5, "int8"), (16.0, "float32"), (32.0, "float32"),
                                        (None, "float32")])
def test_auto_holds_no_more_precision_than_the_file(bits, kind):
    assert wquant.kind_for_bits(bits) == kind


LAYER_MATRICES = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")


def on_int4_grid(state: dict[str, np.ndarray], seed: int = 8) -> dict[str, np.ndarray]:
    """The layer matrices replaced by values a 4-bit file holds: per group of 32, (q - 8) * s + z
    with q using both ends of 0..15 and s, z exact in bfloat16, so requantizing finds them again."""
    rng = np.random.default_rng(seed)
    out = dict(state)
    for name, w in state.items():
        if not any(part in name for part in LAYER_MATRICES) or w.ndim != 2:
            continue
        rows, cols = w.shape
        q = rng.integers(0, 16, (rows, cols // 32, 32))
        q[..., 0], q[..., 1] = 0, 15
        s = rng.choice([2.0 ** -5, 2.0 ** -6, 3 * 2.0 ** -7], (rows, cols // 32, 1))
        z = rng.integers(-4, 5, (rows, cols // 32, 1)) * 2.0 ** -6
        out[name] = ((q - 8) * s + z).reshape(rows, cols).astype(np.float32)
    return out


def _write_model(folder: str, state: dict[str, np.ndarray], cfg: dict) -> str:
    write_hf_dir(folder, cfg, state)
    write_tokenizer_files(folder, tiny_vocab(cfg["vocab_size"]))
    return folder


@pytest.fixture(scope="module")
def tiny_model(tmp_path_factory):
    cfg = tiny_config("llama")
    return _write_model(str(tmp_path_factory.mktemp("wo")), random_state(cfg, seed=7), cfg)


@pytest.fixture(scope="module")
def int4_grid_model(tmp_path_factory):
    cfg = tiny_config("llama")
    return _write_model(str(tmp_path_factory.mktemp("grid")), on_int4_grid(random_state(cfg, seed=7)), cfg)


IDS = [1, 72, 101, 108, 108, 111, 3, 200, 17, 5, 99, 287]


def test_a_4_bit_model_held_as_int4_gives_the_float32_logits(int4_grid_model):
    """The whole layout (packing, group order, scale/zero interleave) checked end to end: weights
    already on a 4-bit grid come back exactly, so the logits are the float32 reference's."""
    ref = load_model(int4_grid_model, device="cpu").forward(IDS)
    model = load_model(int4_grid_model, device="cpu", backend="torch", weights="int4")
    assert np.linalg.norm(model.forward(IDS) - ref) / np.linalg.norm(ref) < 1e-5
    assert max(r.rel_error for r in model.dequant.requantized) == 0.0


@pytest.mark.parametrize("kind, bound", [("int8", 0.03), ("int4", 0.6)])
def test_a_model_held_for_weight_only_kernels_stays_close_to_float32(tiny_model, kind, bound):
    """Gaussian random weights are int4's worst case (~8% per matrix, compounding over layers);
    the bound is loose there, the exact check is the 4-bit-grid model above."""
    ref = load_model(tiny_model, device="cpu").forward(IDS)
    model = load_model(tiny_model, device="cpu", backend="torch", weights=kind)
    ours = model.forward(IDS)
    assert np.linalg.norm(ours - ref) / np.linalg.norm(ref) < bound
    report = model.dequant
    # Every layer matrix (qkv, o, gate_up, down per layer) was requantized and says by how much.
    assert len(report.requantized) == 4 * model.config.num_layers
    assert {r.kind for r in report.requantized} == {kind}
    assert all(0 < r.rel_error < 0.1 for r in report.requantized)
    assert f"requantized to {kind}" in report.summary()
    assert kind in model.device
    float_model = load_model(tiny_model, device="cpu", backend="torch")
    assert model.weights.resident_bytes() < float_model.weights.resident_bytes()
    assert not float_model.dequant.requantized


def test_a_model_held_for_int4_generates(tiny_model):
    result = load_model(tiny_model, device="cpu", backend="torch", weights="int4").generate(
        "the", max_new_tokens=4, stop_at_eos=False)
    assert len(result.tokens) == 4 and "int4" in result.device


def test_auto_on_a_cpu_keeps_float32(tiny_model):
    model = load_model(tiny_model, device="cpu", backend="torch")
    assert model.backend.weights == "float32" and not model.dequant.requantized


@pytest.mark.parametrize("kwargs, message", [
    ({"device": "cpu", "weights": "int4"}, "numpy reference holds float32"),
    ({"device": "cpu", "backend": "torch", "weights": "int4", "keep_quantized": True}, "keep_quantized"),
    ({"device": "cpu", "weights": "int3"}, "weights must be"),
])
def test_weights_that_cannot_run_are_refused_with_the_reason(tiny_model, kwargs, message):
    with pytest.raises(ValueError, match=message):
        load_model(tiny_model, **kwargs)


def test_stored_bits_per_weight_of_the_sample(sample_gguf):
    import model_explorer as mx
    from model_explorer.model.config_gguf import from_gguf

    with mx.open(sample_gguf) as ckpt:
        # Q4_1: 20 bytes per 32 weights; "auto" on CUDA would hold it as int4.
        assert layer_bits_per_weight(ckpt, from_gguf(ckpt.metadata, set(ckpt.tensors))) == 5.0


def test_a_matrix_with_nan_stays_float32_and_the_report_says_so(tmp_path):
    cfg = tiny_config("llama")
    state = random_state(cfg, seed=9)
    state["model.layers.1.mlp.down_proj.weight"][3, 5] = np.nan
    folder = _write_model(str(tmp_path), state, cfg)
    model = load_model(folder, device="cpu", backend="torch", weights="int4")
    kept = [r for r in model.dequant.requantized if r.kind == "float32"]
    assert [r.name for r in kept] == ["layer 1 down"]
    assert "1 layer matrices kept float32 (they hold NaN or Inf)" in model.dequant.summary()
    assert np.isnan(model.forward(IDS)).any()  # the NaN reaches the logits, as in float32


@pytest.mark.parametrize("kind", ["int8", "int4"])
def test_quantizing_by_blocks_of_rows_equals_one_pass(kind, monkeypatch):
    """Big matrices are quantized a block of rows at a time; the result must not depend on it."""
    w = _rng_matrix(208, 64, seed=11)
    whole = wquant.pack(torch, torch.device("cpu"), w, kind)
    monkeypatch.setattr(wquant, "CHUNK_VALUES", 64 * 16)  # 16 rows a block
    blocks = wquant.pack(torch, torch.device("cpu"), w, kind)
    assert torch.equal(whole.data, blocks.data) and torch.equal(whole.scales, blocks.scales)
    assert blocks.rel_error == pytest.approx(whole.rel_error, rel=1e-9)


@pytest.mark.parametrize("dtype, kind", [("bfloat16", "bfloat16"), ("float16", "float32"), ("float32", "float32")])
def test_auto_on_cuda_holds_a_bfloat16_file_as_bfloat16(tmp_path, dtype, kind):
    """What weights="auto" picks on CUDA for float files (decided before anything reaches the
    device): bfloat16 only where the file stores bfloat16, since float16 has more mantissa."""
    import ml_dtypes

    from model_explorer import open as open_checkpoint
    from model_explorer.model.config import from_hf
    from model_explorer.runtime.api import _auto_weights
    from model_explorer.runtime.engines.torch_engine import TorchBackend

    cfg = tiny_config("llama")
    cast = ml_dtypes.bfloat16 if dtype == "bfloat16" else np.dtype(dtype)
    state = {k: v.astype(cast) for k, v in random_state(cfg, seed=3).items()}
    folder = write_hf_dir(str(tmp_path / dtype), cfg, state)
    with open_checkpoint(folder) as ckpt:
        be = _auto_weights(TorchBackend("cuda"), ckpt, from_hf(ckpt.metadata["config.json"]))
    assert be.weights == kind
    m = load_model(folder, device="cpu", backend="torch", weights="bfloat16")
    rows = m.weights.report.requantized
    exact = dtype == "bfloat16"  # held as stored: no rounding at all
    assert all((r.rel_error == 0.0) == exact for r in rows) and rows
