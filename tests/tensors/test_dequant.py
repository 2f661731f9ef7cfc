"""Our GGUF block decoders against gguf-py's `gguf.quants`, bit for bit."""

from __future__ import annotations

import numpy as np
import pytest
from gguf import GGMLQuantizationType as Q
from gguf import quants

from model_explorer.tensors.dequant import CODECS, dequantize_blocks

# Types gguf-py can both quantize and dequantize: round-trip real-looking data.
QUANTIZABLE = ["Q4_0", "Q4_1", "Q5_0", "Q5_1", "Q8_0", "TQ1_0", "TQ2_0", "MXFP4"]
# Every type gguf-py can dequantize (and so every type we claim to match it on).
REFERENCE = [t.name for t in quants._type_traits if t.name in CODECS]


def same_bits(a: np.ndarray, b: np.ndarray) -> bool:
    return a.shape == b.shape and np.array_equal(a.astype(np.float32).view(np.uint32),
                                                 b.astype(np.float32).view(np.uint32))


def random_blocks(name: str, n: int, rng) -> np.ndarray:
    """Random bytes with every fp16 scale field set to a finite, sane value."""
    codec = CODECS[name]
    blocks = rng.integers(0, 256, size=(n, codec.block_bytes), dtype=np.uint8)
    scale_at = {"Q2_K": (80, 82), "Q3_K": (108,), "Q6_K": (208,), "TQ1_0": (52,), "TQ2_0": (64,),
                "Q4_K": (0, 2), "Q5_K": (0, 2), "Q4_1": (0, 2), "Q5_1": (0, 2), "IQ4_XS": (0,)}
    if name in ("MXFP4", "NVFP4", "IQ1_M"):
        return blocks
    for at in scale_at.get(name, (0,)):
        blocks[:, at:at + 2] = rng.normal(0, 0.05, size=(n, 1)).astype("<f2").view(np.uint8)
    return blocks


def test_every_gguf_py_type_is_covered():
    missing = {t.name for t in quants._type_traits} - set(CODECS) - {"BF16"}
    assert not missing


@pytest.mark.parametrize("name", REFERENCE)
def test_random_blocks_match_gguf_py(name):
    rng = np.random.default_rng(sum(map(ord, name)))
    blocks = random_blocks(name, 200, rng)
    ours = dequantize_blocks(name, blocks)
    with np.errstate(over="ignore", invalid="ignore"):  # random scales overflow, in both
        ref = quants.dequantize(blocks, Q[name]).reshape(len(blocks), -1)
    assert same_bits(ours, ref)


@pytest.mark.parametrize("name", QUANTIZABLE)
def test_quantized_data_matches_gguf_py(name):
    rng = np.random.default_rng(7)
    data = rng.normal(0, 0.02, size=(8, 512)).astype(np.float32)
    data[0, :64] = 0  # an all-zero block
    raw = quants.quantize(data, Q[name])
    codec = CODECS[name]
    ours = dequantize_blocks(name, raw.reshape(-1, codec.block_bytes)).reshape(data.shape)
    assert same_bits(ours, quants.dequantize(raw, Q[name]))
    assert np.abs(ours - data).max() < 0.05  # and it is a real reconstruction


def test_empty_input_gives_empty_output():
    assert dequantize_blocks("Q4_K", np.empty((0, CODECS["Q4_K"].block_bytes), np.uint8)).shape == (0, 256)
