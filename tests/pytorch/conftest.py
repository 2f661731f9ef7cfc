"""Fixtures: the same rich state dict saved by torch.save as zip and as legacy."""

from __future__ import annotations

import pytest

from .helpers import rich_state


@pytest.fixture(scope="session")
def torch_files(tmp_path_factory):
    """{'zip': path, 'legacy': path} of the same rich state dict."""
    import torch

    d = tmp_path_factory.mktemp("torch_files")
    state = rich_state()
    paths = {"zip": d / "model.pt", "legacy": d / "legacy.pt"}
    torch.save(state, paths["zip"])
    torch.save(state, paths["legacy"], _use_new_zipfile_serialization=False)
    return paths
