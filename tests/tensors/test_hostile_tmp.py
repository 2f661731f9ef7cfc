"""Untrusted headers: whatever dtype, shape, offset and length a file claims, reading and
statistics either work or raise ValueError; never another exception, never a huge allocation."""

from __future__ import annotations

import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import model_explorer as mx

from .conftest import write_gguf

DTYPES = ["F32", "F16", "BF16", "Q4_0", "Q8_0", "Q4_K", "Q6_K", "IQ4_NL", "IQ2_XXS", "I8", "U64", "F4",
          "F6_E2M3", "BOOL", "C64", "Q8_1", "Q1_0", "NOPE"]


@settings(max_examples=150, deadline=1500, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(dtype=st.sampled_from(DTYPES),
       shape=st.lists(st.integers(0, 1 << 40), min_size=0, max_size=3),
       offset=st.integers(0, 1 << 14), length=st.integers(0, 1 << 40),
       rows=st.one_of(st.none(), st.integers(-3, 3), st.slices(10)),
       exact=st.booleans())
def test_claims_never_crash(tmp_path_factory, dtype, shape, offset, length, rows, exact):
    folder = tmp_path_factory.mktemp("h")
    path = write_gguf(folder / "h.gguf", {"w": np.arange(512, dtype=np.float32)})
    ckpt = mx.open(path)
    try:
        info = ckpt.tensors["w"]
        info.dtype, info.shape, info.offset, info.length = dtype, tuple(shape), offset, length
        for call in (lambda: ckpt.read("w", rows=rows), lambda: ckpt.stats("w", exact=exact),
                     lambda: ckpt.blocks("w")):
            try:
                call()
            except (ValueError, IndexError):
                pass
    finally:
        ckpt.close()
