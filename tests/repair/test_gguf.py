"""GGUF metadata set, changed and removed, and padded token lists trimmed; the output reads
the same with gguf-py except for what was asked."""

from __future__ import annotations

import numpy as np
import pytest

import model_explorer as mx

gguf = pytest.importorskip("gguf")


def make_gguf(path, tokens=32, rows=32, pad_names=True, alignment=None, split_max_tensors=0):
    w = gguf.GGUFWriter(str(path), arch="llama", split_max_tensors=split_max_tensors)
    if alignment:
        w.add_custom_alignment(alignment)
    w.add_name("tiny")
    w.add_block_count(1)
    w.add_uint32("llama.context_length", 64)
    w.add_embedding_length(16)
    w.add_tokenizer_model("llama")
    words = [f"tok{i}" for i in range(min(tokens, rows))]
    words += [f"[PAD{i}]" if pad_names else f"word{i}" for i in range(rows, tokens)]
    w.add_token_list(words)
    w.add_token_scores([float(i) for i in range(tokens)])
    w.add_token_types([1] * tokens)
    w.add_bos_token_id(1)
    rng = np.random.default_rng(0)
    w.add_tensor("token_embd.weight", rng.normal(size=(rows, 16)).astype(np.float32))
    w.add_tensor("blk.0.attn_norm.weight", np.ones(16, np.float32))
    w.add_tensor("blk.0.ffn_up.weight", rng.normal(size=(24, 16)).astype(np.float16))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return path


def fields(path):
    r = gguf.GGUFReader(str(path))
    out = {}
    for name, f in r.fields.items():
        if name.startswith("GGUF."):
            continue
        out[name] = f.contents()
    return out, {t.name: (t.tensor_type, list(t.shape), bytes(t.data.tobytes()), t.data_offset) for t in r.tensors}, r


@pytest.mark.parametrize("alignment", [None, 64])
def test_set_change_and_remove(tmp_path, checked, alignment):
    src = make_gguf(tmp_path / "m.gguf", alignment=alignment)
    dest = tmp_path / "out" / "m.gguf"
    report = checked(src, dest, gguf_set={"tokenizer.ggml.pre": "llama-bpe", "general.name": "renamed",
                                          "llama.context_length": 128},
                     gguf_remove=["tokenizer.ggml.bos_token_id"])
    assert [f.name for f in report.applied] == ["gguf_set", "gguf_remove"]
    (a, ta, ra), (b, tb, rb) = fields(src), fields(dest)
    assert b.pop("tokenizer.ggml.pre") == "llama-bpe"
    assert b.pop("general.name") == "renamed" and a.pop("general.name") == "tiny"
    assert b.pop("llama.context_length") == 128 and a.pop("llama.context_length") == 64
    assert rb.fields["llama.context_length"].types == ra.fields["llama.context_length"].types  # type kept
    assert a.pop("tokenizer.ggml.bos_token_id") == 1
    assert a == b
    assert {k: v[:3] for k, v in ta.items()} == {k: v[:3] for k, v in tb.items()}
    for _, _, _, off in tb.values():
        assert off % (alignment or 32) == 0
    assert all(t.identical for t in report.tensors) and len(report.tensors) == 3


def test_setting_what_is_already_there_is_skipped(tmp_path):
    src = make_gguf(tmp_path / "m.gguf")
    plan = mx.repair_plan(src, gguf_set={"general.name": "tiny"}, gguf_remove=["nope"])
    assert plan.fixes == []
    assert len(plan.notes) == 2


def test_unchanged_gguf_is_copied_byte_for_byte(tmp_path, checked):
    src = make_gguf(tmp_path / "m.gguf")
    checked(src, tmp_path / "out" / "m.gguf")
    assert (tmp_path / "out" / "m.gguf").read_bytes() == src.read_bytes()


def test_padded_token_list_is_trimmed(tmp_path, checked):
    src = make_gguf(tmp_path / "m.gguf", tokens=40, rows=32)
    assert any(f.code == "tokens_beyond_embedding" for f in mx.open(src).findings)
    report = checked(src, tmp_path / "out" / "m.gguf")
    assert [f.name for f in report.applied] == ["trim_tokens"]
    b, tb, _ = fields(tmp_path / "out" / "m.gguf")
    assert len(b["tokenizer.ggml.tokens"]) == 32 == len(b["tokenizer.ggml.scores"]) == len(b["tokenizer.ggml.token_type"])
    assert b["tokenizer.ggml.tokens"][-1] == "tok31"
    assert not [f for f in mx.open(tmp_path / "out" / "m.gguf", deep=True).findings
                if f.code in ("tokens_beyond_embedding", "config_mismatch")]


def test_real_words_past_the_embedding_are_not_trimmed(tmp_path):
    src = make_gguf(tmp_path / "m.gguf", tokens=40, rows=32, pad_names=False)
    plan = mx.repair_plan(src)
    assert plan.fixes == [] and plan.unfixable[0].code == "tokens_beyond_embedding"


def test_alignment_cannot_be_changed(tmp_path):
    src = make_gguf(tmp_path / "m.gguf")
    with pytest.raises(mx.repairs.RepairError, match="alignment"):
        mx.repair(src, tmp_path / "out.gguf", gguf_set={"general.alignment": 64})
    assert not (tmp_path / "out.gguf").exists()


def make_split(directory, per_split=1):
    """The tiny model of make_gguf written as llama.cpp's split files (one tensor a split)."""
    directory.mkdir(parents=True, exist_ok=True)
    make_gguf(directory / "m.gguf", split_max_tensors=per_split)
    return sorted(directory.iterdir())


def test_split_model_metadata_set_in_its_first_split(tmp_path, checked):
    parts = make_split(tmp_path / "src")
    assert len(parts) == 3
    report = checked(parts[1], tmp_path / "out", gguf_set={"tokenizer.ggml.pre": "llama-bpe"})
    assert [f.name for f in report.applied] == ["gguf_set"]
    out = sorted((tmp_path / "out").iterdir())
    assert [p.name for p in out] == [p.name for p in parts]
    a, ta, _ = fields(parts[0])
    b, tb, _ = fields(out[0])
    assert b.pop("tokenizer.ggml.pre") == "llama-bpe" and a == b
    assert {k: v[:3] for k, v in ta.items()} == {k: v[:3] for k, v in tb.items()}
    for p, q in zip(parts[1:], out[1:]):  # the other splits hold no model metadata: copied as they are
        assert p.read_bytes() == q.read_bytes()
    assert all(t.identical for t in report.tensors) and len(report.tensors) == 3
    assert mx.open(out[0]).metadata["tokenizer.ggml.pre"].value == "llama-bpe"


def test_split_keys_set_right(tmp_path, checked):
    parts = make_split(tmp_path / "src")
    # A wrong tensor count in the first split (written by a repair) and a wrong split.no in the second.
    mx.repair(parts[0], tmp_path / "bad", gguf_set={"split.tensors.count": 7})
    bad = sorted((tmp_path / "bad").iterdir())
    r = gguf.GGUFReader(str(bad[1]), "r+")
    r.fields["split.no"].parts[-1][0] = 5
    del r
    found = {f.code for f in mx.open(bad[0]).findings}
    assert {"split_tensor_count", "split_number"} <= found
    report = checked(bad[0], tmp_path / "fixed")
    assert sorted(f.name for f in report.applied) == ["split_number", "split_tensor_count"]
    fixed = sorted((tmp_path / "fixed").iterdir())
    assert not {f.code for f in mx.open(fixed[0]).findings} & found
    assert fields(fixed[1])[0]["split.no"] == 1 and fields(fixed[0])[0]["split.tensors.count"] == 3
    assert fixed[2].read_bytes() == parts[2].read_bytes()


def test_missing_split_cannot_be_fixed(tmp_path):
    parts = make_split(tmp_path / "src")
    parts[1].unlink()
    plan = mx.repair_plan(parts[0])
    assert "missing_split" in [u.code for u in plan.unfixable]
    assert plan.fixes == []  # split.tensors.count is right about the model: not "fixed" to what is left
