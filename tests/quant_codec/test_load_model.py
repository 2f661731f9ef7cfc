"""mx.load_model runs a compressed-tensors FP8 llama through the same codec as read(), with
logits equal to transformers' own loading of the folder; a scheme without a codec is refused
by name."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import numpy as np
import pytest
from quant_format import layouts as L

import model_explorer as mx
from model_explorer.model.config import UnsupportedModel

from . import ct_build as C

pytestmark = [pytest.mark.reference, pytest.mark.slow]
IDS = [1, 72, 101, 108, 5, 99, 127, 45, 120, 8, 64]


def _demo_helpers():
    path = Path(__file__).parents[1] / "demo" / "conftest.py"
    spec = importlib.util.spec_from_file_location("demo_helpers", path)
    mod = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = mod  # its dataclasses look their module up
    spec.loader.exec_module(mod)
    return mod


# transformers' from_pretrained of these folders fails here (packed zero-point and scale
# sizes mismatch its modules), so the reference is the same transformers model after
# compressed-tensors' own decompress_model: the library's dequantization, run by transformers.
@pytest.mark.parametrize("case", ["fp8_block", "w4a16_asym"])
def test_logits_match_transformers(tmp_path, case):
    torch = pytest.importorskip("torch")
    pytest.importorskip("transformers")
    ref_model, comp = C.save(tmp_path, case)
    comp.decompress_model(ref_model)
    h = _demo_helpers()
    h.write_tokenizer_files(str(tmp_path), h.tiny_vocab(128))
    with torch.no_grad():
        ref = ref_model(torch.tensor([IDS])).logits[0].float().numpy()
    ours = mx.load_model(str(tmp_path), device="cpu").forward(IDS)
    assert ours.shape == ref.shape
    assert np.abs(ours - ref).max() <= 1e-4 * np.abs(ref).max()


def test_scheme_without_codec_is_refused_by_name(tmp_path):
    t, q = L.awq(version="gemv_fast")
    L.write(tmp_path, t, q)
    h = _demo_helpers()
    h.write_tokenizer_files(str(tmp_path), h.tiny_vocab(L.VOCAB))
    with pytest.raises(UnsupportedModel, match="AWQ"):
        mx.load_model(str(tmp_path), device="cpu")
