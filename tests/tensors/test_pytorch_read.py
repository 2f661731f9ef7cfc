"""PyTorch checkpoints: dtype, stride and storage offset applied, against torch.load."""

from __future__ import annotations

import numpy as np
import pytest

import model_explorer as mx

pytestmark = pytest.mark.reference


def test_views_and_dtypes_match_torch_load(tmp_path):
    torch = pytest.importorskip("torch")
    base = torch.arange(24, dtype=torch.float32).reshape(4, 6)
    sd = {"transposed": base.t(), "row": base[2], "column": base[:, 1], "block": base[1:3, 2:5],
          "bf16": torch.randn(3, 5).to(torch.bfloat16), "f16": torch.randn(7).half(),
          "i64": torch.arange(5), "bool": torch.tensor([True, False]), "scalar": torch.tensor(2.5),
          "f8": torch.randn(4).to(torch.float8_e4m3fn), "every_other": base.reshape(-1)[::2]}
    for legacy in (False, True):
        path = tmp_path / f"m{int(legacy)}.pt"
        # torch.load cannot read float8 back from the legacy format: zip only for that one
        torch.save({k: v for k, v in sd.items() if not (legacy and k == "f8")}, path,
                   _use_new_zipfile_serialization=not legacy)
        ref = torch.load(path, weights_only=True)
        ckpt = mx.open(str(path))
        for name, t in ref.items():
            want = t.float().numpy() if t.is_floating_point() else t.numpy()
            got = ckpt.read(name)
            assert got.dtype == want.dtype and np.array_equal(got, want), (legacy, name)
            s = ckpt.stats(name)
            assert s.count == t.numel()
        assert np.array_equal(ckpt.read("transposed", rows=slice(1, 3)), base.t()[1:3].numpy())
        ckpt.close()


def test_meta_tensors_have_no_values_whatever_their_strides(tmp_path):
    torch = pytest.importorskip("torch")
    path = tmp_path / "meta.pt"
    torch.save({"plain": torch.empty(3, 4, device="meta"), "view": torch.empty(3, 4, device="meta").t()}, path)
    with mx.open(str(path)) as ckpt:
        for name in ("plain", "view"):
            with pytest.raises(ValueError, match="meta device"):
                ckpt.read(name)
