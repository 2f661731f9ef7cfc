"""The kernel side of the Layers tab (computed in steps when asked, sent as one compact
summary) and the Findings view's Fix… buttons (which findings a repair resolves, the FixDialog
for one of them)."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
import widget_test_files as files

import model_explorer as mx
from model_explorer.widgets import Explorer, Findings
from model_explorer.widgets._layers import NO_LAYERS


@pytest.fixture(scope="module")
def llama(tmp_path_factory):
    return files.damaged_llama(tmp_path_factory.mktemp("layers") / "damaged.safetensors")


def test_opening_computes_no_layer_statistics(llama):
    e = Explorer(llama)
    assert e._layer_parts is None and e._layer_names is None
    start = e.answer("layers_start", {})[0]
    assert start == {"total": 54, "done": 0, "layers": 6, "bytes": 6 * 7 * 32 * 32 * 4 + 6 * 2 * 32 * 4,
                     "stats": ["norm", "std", "absmax"]}
    assert not any(e._layer_parts.values())  # counting is not computing


def test_profile_marks_the_zeroed_and_the_scaled_layer(llama):
    e = Explorer(llama)
    s = files.profile_by_requests(e)
    json.dumps(s, allow_nan=False)  # what travels is plain JSON: no NaN, no per-tensor objects
    assert s["layers"] == list(range(6))
    assert s["roles"] == ["attn_norm", "ffn_norm", "q", "k", "v", "o", "gate", "up", "down"]
    assert {k for k in s} == {"stat", "exact", "label", "layers", "roles", "values", "shown", "z",
                              "names", "counts", "marks", "tensor_count", "unread", "unread_note"}
    assert s["unread"] == 0 and s["unread_note"] is None
    for key in ("values", "shown", "z", "counts"):
        assert len(s[key]) == 6 and all(len(row) == 9 for row in s[key]), key
    marks = {(m["layer"], m["role"], m["kind"]) for m in s["marks"]}
    assert marks == {(4, "q", "high"), (2, "down", "zeroed")}
    q = s["roles"].index("q")
    # Tensor names travel as one template per role, not one name per cell.
    assert s["names"] == {"templates": [f"model.layers.{{L}}.{t}.weight" for t in (
        "input_layernorm", "post_attention_layernorm", *(p for p in files.LLAMA_PROJ))], "extra": {}}
    assert s["counts"][4][q] == 1
    assert s["z"][4][q] > 6 and s["shown"][4][q] == 4.0  # 40x the median: clipped at the top
    down = s["roles"].index("down")
    assert s["values"][2][down] == 0 and s["shown"][2][down] == -4.0 and s["z"][2][down] is None
    high = next(m for m in s["marks"] if m["kind"] == "high")
    assert high["code"] == "layer_outlier" and "Layer 4 q" in high["message"]
    assert high["tensor"] == "model.layers.4.self_attn.q_proj.weight"
    zero = next(m for m in s["marks"] if m["kind"] == "zeroed")
    assert "is zero, against the trend" in zero["message"]
    # Another statistic is a pivot of the same table: no statistics computed again.
    parts = list(e._layer_parts[False])
    absmax = e.answer("layers_profile", {"stat": "absmax"})[0]
    assert e._layer_parts[False] == parts and absmax["stat"] == "absmax"
    assert (4, "q") in {(m["layer"], m["role"]) for m in absmax["marks"]}


def test_exact_statistics_are_offered_and_agree(llama):
    e = Explorer(llama)
    s = files.profile_by_requests(e, exact=True)
    assert s["exact"] is True
    assert {(m["layer"], m["role"]) for m in s["marks"]} == {(4, "q"), (2, "down")}
    t = e.checkpoint.read("model.layers.4.self_attn.q_proj.weight")
    q = s["roles"].index("q")
    assert s["values"][4][q] == pytest.approx(float((t.astype("float64") ** 2).sum() ** 0.5), rel=1e-5)


def test_steps_return_within_their_time_and_report_progress(llama, monkeypatch):
    e = Explorer(llama)
    first = e.answer("layers_step", {"seconds": 0.05})[0]
    assert 0 < first["done"] <= first["total"] == 54
    assert e.answer("layers_start", {})[0]["done"] == first["done"]


def test_a_file_without_layers_says_so(made):
    e = Explorer(made["xss"])
    assert e.answer("layers_start", {})[0] == {"total": 0, "note": NO_LAYERS}
    assert "No repeated blocks" in NO_LAYERS


def test_fixable_findings_and_their_fixes(tmp_path):
    e = Explorer(files.prefixed_folder(tmp_path / "m"))
    codes = [f["code"] for f in e.findings]
    fx = e.answer("fixable", {})[0]
    by = {codes[int(i)]: names for i, names in fx["by_finding"].items()}
    assert by == {"key_prefix": ["strip_prefix"], "lm_head_missing": ["tie_lm_head"]}
    assert set(fx["fixes"]) == {"strip_prefix", "tie_lm_head"} and fx["note"] is None
    # The dialog for the prefix finding ticks only its fix; the other stays listed, unticked.
    out = e.answer("fix_dialog", {"finding": codes.index("key_prefix")})[0]
    assert re.fullmatch(r"ipywidget:[0-9a-f]+", out["ref"]) and out["fixes"] == ["strip_prefix"]
    d = e.fix_widget
    assert [b.value for b in d.boxes] == [True, False]
    assert out["dest"] == str(tmp_path / "m.fixed")
    report = d.run()
    assert report is not None and Path(out["dest"], "model.safetensors").is_file()
    after = {f.code for f in mx.open(out["dest"]).findings}
    assert "key_prefix" not in after and "lm_head_missing" in after
    # The source is untouched, and a second Fix… closes the first dialog.
    assert "module.model.embed_tokens.weight" in mx.open(tmp_path / "m").tensors
    e.answer("fix_dialog", {"finding": codes.index("lm_head_missing")})
    assert d.comm is None and [b.value for b in e.fix_widget.boxes] == [False, True]


def test_index_findings_have_the_rebuild_fix_and_a_missing_shard_none(made):
    w = Findings(made["index"])
    codes = [f["code"] for f in w.findings]
    by = {codes[int(i)]: n for i, n in w.answer("fixable", {})[0]["by_finding"].items()}
    assert by == {"missing_tensor": ["rebuild_index"], "orphan_tensor": ["rebuild_index"]}
    with pytest.raises(ValueError, match="has no fix"):
        w.answer("fix_dialog", {"finding": codes.index("missing_shard")})


def test_a_checkpoint_the_repairs_cannot_read_has_a_note_not_an_error(tmp_path):
    import numpy as np

    np.save(tmp_path / "a.npy", np.ones(3, np.float32))
    fx = Explorer(tmp_path / "a.npy").answer("fixable", {})[0]
    assert fx["by_finding"] == {} and fx["note"].startswith("No repair plan")


def test_names_that_do_not_follow_their_role_are_listed_apart():
    from model_explorer.widgets._layers import name_templates

    names = [["model.layers.0.mlp.experts.0.w", None], ["model.layers.1.mlp.experts.3.w", "blk.1.{L}.q"]]
    assert name_templates(names, [0, 1]) == {
        "templates": ["model.layers.{L}.mlp.experts.0.w", None],
        "extra": {"1,0": "model.layers.1.mlp.experts.3.w", "1,1": "blk.1.{L}.q"}}


def test_the_vocabulary_comes_in_pages_of_a_150000_token_tokenizer(tmp_path):
    e = Explorer(files.big_vocab_folder(tmp_path / "big"))
    assert e.checkpoint.derived.tokenizer_object is None  # nothing built at open
    last = e.answer("vocab", {"start": 149_950, "count": 100})[0]
    assert last["total"] == 150_000 and last["start"] == 149_950
    assert [r["id"] for r in last["rows"]] == list(range(149_950, 150_000))  # clipped at the end
    assert last["rows"][-1] == {"id": 149_999, "token": "<|im_end|>", "special": True}
    assert "special" not in last["rows"][0]
    middle = e.answer("vocab", {"start": 299, "count": 2})[0]["rows"]
    assert middle == [{"id": 299, "token": "w299"}, {"id": 300, "token": "a\n\tb"}]
    assert e.answer("vocab", {"start": -5, "count": 2})[0]["rows"][0]["id"] == 0
    assert len(e.answer("vocab", {"start": 0, "count": 10**9})[0]["rows"]) == 1000  # MAX_PAGE
    assert e.answer("vocab", {"start": 10**9})[0]["rows"] == []


def test_layer_findings_reach_the_findings_tab_once_computed(llama):
    e = Explorer(llama)
    before = [f.code for f in e.checkpoint.findings]
    assert e.layer_findings == []  # nothing computed at open
    files.profile_by_requests(e)
    got = e.layer_findings
    json.dumps(got, allow_nan=False)
    assert {(f["code"], f["tensor"]) for f in got} == {
        ("layer_outlier", "model.layers.4.self_attn.q_proj.weight"),
        ("layer_outlier", "model.layers.2.mlp.down_proj.weight")}
    info = e.checkpoint.tensors["model.layers.4.self_attn.q_proj.weight"]
    q = next(f for f in got if "layers.4" in f["tensor"])
    assert (q["file"], q["offset"], q["length"]) == (info.file, info.offset, info.length)
    assert all(f["origin"] == "layers" and f["statistics"] == "sampled" and f["stat"] == "norm" for f in got)
    assert q["severity"] == "warning" and "fix" in q  # the shape of every other finding
    # The profile drawn last is the one listed: exact statistics say so.
    files.profile_by_requests(e, stat="absmax", exact=True)
    assert e.layer_findings and {f["statistics"] for f in e.layer_findings} == {"exact"}
    assert {f["stat"] for f in e.layer_findings} == {"absmax"}
    assert [f.code for f in e.checkpoint.findings] == before  # the checkpoint's own list is left alone
