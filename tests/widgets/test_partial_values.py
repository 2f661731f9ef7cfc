"""A tensor a cut file holds only part of: the rows that are there, equal to gguf-py's values of
those rows, and never a value from bytes past the end (issue 39 item 9)."""

from __future__ import annotations

import numpy as np
import pytest
import widget_test_files as files

import model_explorer as mx
from model_explorer.tensors.partial import partial_stats, present_part

gguf = pytest.importorskip("gguf")


def test_cut_q8_tensor_gives_its_present_rows(tmp_path):
    ckpt = mx.open(files.cut_gguf(tmp_path / "cut.gguf"))
    info = ckpt.tensors["output.weight"]
    raw = np.frombuffer(ckpt.read_bytes(info.offset, 21 * 2 * 34, info.file), np.uint8).reshape(21, 2 * 34)
    rows = gguf.quants.dequantize(raw, gguf.GGMLQuantizationType.Q8_0)  # gguf-py's values of the rows there
    assert present_part(ckpt, "output.weight") == (21, 64, "rows")
    st = partial_stats(ckpt, "output.weight")
    assert st.count == 21 * 64 and st.total == 64 * 64 and not st.exact
    assert st.min == pytest.approx(rows.min()) and st.max == pytest.approx(rows.max())
    assert st.mean == pytest.approx(rows.mean(), rel=1e-5)
    assert "the first 21 of 64 rows" in st.partial
    assert partial_stats(ckpt, "token_embd.weight") is None  # a whole tensor is not partial
    assert present_part(ckpt, "blk.2.attn_q.weight") is None  # nothing of it is there
