import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))

import widget_test_files as files  # noqa: E402


@pytest.fixture(scope="module")
def made(tmp_path_factory):
    d = tmp_path_factory.mktemp("widget-files")
    return {
        "broken": files.broken_safetensors(d / "broken.safetensors"),
        "gguf": files.small_gguf(d / "small.gguf"),
        "xss": files.xss_safetensors(d / "xss.safetensors"),
        "index": files.sharded(d / "shards"),
    }
