"""mx.diff compares the two checkpoints' tokenizers on fixed test sentences: the bundled GGUF
(the project's own rebuild of its vocabulary) against a folder converted from it (tokenizer.json
through the `tokenizers` library) agree; a tokenizer.json with one merge dropped does not."""

from __future__ import annotations

import json
import shutil

import pytest

import model_explorer as mx
from model_explorer.codes import CATALOG
from model_explorer.model.tokenizer_compare import TEST_SENTENCES, compare_tokenizers

pytest.importorskip("tokenizers")


@pytest.fixture(scope="module")
def converted(tmp_path_factory):
    folder = tmp_path_factory.mktemp("tok") / "conv"
    mx.convert(mx.sample_path(), str(folder), format="safetensors", dtype="F32")
    return folder


def _drop_merge(folder, word: str) -> None:
    """Remove the merge that joins `word` from its pieces, so the word splits differently."""
    path = folder / "tokenizer.json"
    data = json.loads(path.read_text("utf-8"))
    merges = data["model"]["merges"]
    pieces = [m.split(" ") if isinstance(m, str) else m for m in merges]
    k = next(i for i, (x, y) in enumerate(pieces) if x + y == word)
    del merges[k]
    path.write_text(json.dumps(data), "utf-8")


def test_gguf_and_its_converted_tokenizer_json_agree(converted):
    table = mx.diff(mx.sample_path(), str(converted), values=False)
    tok = table.attrs["tokenizer"]
    assert tok["compared"] and tok["mismatch"] is None
    assert tok["sentences"] == len(TEST_SENTENCES) + 1  # + the chat-special sentence
    assert table.attrs["findings"] == []


def test_a_dropped_merge_is_a_tokenizer_mismatch(converted, tmp_path):
    bad = tmp_path / "bad"
    shutil.copytree(converted, bad)
    _drop_merge(bad, "Hello")  # "Hello" is one token in SmolLM2's vocabulary
    table = mx.diff(mx.sample_path(), str(bad), values=False)
    m = table.attrs["tokenizer"]["mismatch"]
    assert m["text"] == TEST_SENTENCES[0] and m["ids_a"] != m["ids_b"]
    assert "Hello" in m["tokens_a"] and "Hello" not in m["tokens_b"]
    [f] = table.attrs["findings"]
    assert f.code == "tokenizer_mismatch" and f.severity == "warning"
    assert f.fix == CATALOG["tokenizer_mismatch"].fix and f.file.endswith("tokenizer.json")
    assert f.extra["ids_a"] == m["ids_a"] and str(m["ids_b"]) in f.message


def test_no_tokenizer_on_one_side_is_not_compared(converted, tmp_path):
    bare = tmp_path / "bare"
    shutil.copytree(converted, bare)
    (bare / "tokenizer.json").unlink()
    with mx.open(mx.sample_path()) as a, mx.open(str(bare)) as b:
        result, findings = compare_tokenizers(a, b)
    assert not result["compared"] and "tokenizer.json" in result["reason"] and findings == []
