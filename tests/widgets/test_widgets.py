"""The kernel side of the views: what each request answers, and what is sent at open."""

from __future__ import annotations

import base64
import html
import json
import re

import numpy as np
import pytest
import traitlets
import widget_test_files as files
from hypothesis import given, settings
from hypothesis import strategies as st

import model_explorer as mx
from model_explorer.hexview import SpanIndex, _innermost_segments
from model_explorer.spans import Span
from model_explorer.widgets import Explorer, Findings, HeaderTree, HexDump, ShardMap, TensorHistogram
from model_explorer.widgets._map import BINS
from model_explorer.widgets._pages import explain


def test_public_names_are_the_widgets(made):
    from model_explorer import widgets

    assert mx.explore is widgets.explore and mx.Explorer is widgets.Explorer
    e = mx.explore(made["gguf"])
    assert isinstance(e, Explorer) and e.view == "explorer"
    ckpt = mx.open(made["gguf"])
    for cls, view in ((HexDump, "hexdump"), (HeaderTree, "tree"), (ShardMap, "shardmap"),
                      (Findings, "findings"), (TensorHistogram, "histogram")):
        for source in (made["gguf"], ckpt):
            w = cls(source)
            assert w.view == view and w.summary["tensor_count"] == 6


def test_bytes_page_matches_the_file_and_names_each_byte(made):
    e = Explorer(made["gguf"])
    raw = made["gguf"].read_bytes()
    meta, (data,) = e.answer("bytes", {"offset": 0, "length": 4096})
    assert data == raw[:4096] and meta["length"] == 4096 and meta["size"] == len(raw)
    owner = {}
    for a, b, k in meta["segs"]:
        for off in range(a, b):
            owner[off] = meta["spans"][k]
    assert owner[0]["kind"] == "magic" and owner[0]["path"] == "magic"
    assert owner[40]["path"] == "KV 0 > general.architecture > key"
    # Innermost wins: byte 40 is inside KV 0 (kind "kv") and inside its key.
    assert owner[40]["kind"] == "key"
    # A page past the end is empty, and pages are capped.
    meta, (data,) = e.answer("bytes", {"offset": len(raw) + 10, "length": 4096})
    assert data == b"" and meta["segs"] == []
    _, (data,) = e.answer("bytes", {"offset": 0, "length": 10**9})
    assert len(data) == min(len(raw), 64 * 1024)


def test_bytes_page_of_the_index_file_for_shard_findings(made):
    e = Explorer(made["index"])
    index = str(made["index"])
    assert index in [f["file"] for f in e.files]
    finding = next(f for f in e.checkpoint.findings if f.code == "missing_shard")
    assert finding.file == index
    _, (data,) = e.answer("bytes", {"file": index, "offset": finding.offset, "length": finding.length})
    assert b"model-00003-of-00003" in data
    # A file outside the checkpoint is never read: the request falls back to its first file.
    meta, _ = e.answer("bytes", {"file": "/etc/passwd", "offset": 0, "length": 16})
    assert meta["file"] != "/etc/passwd"


def _nested_spans(draw_list):
    return [Span(o, n, f"k{i}", f"p{i}") for i, (o, n) in enumerate(draw_list)]


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 200), st.integers(0, 60)), max_size=40))
def test_innermost_segments_never_break(pairs):
    """Any spans, even overlapping ones from damaged files: segments sorted, disjoint, owned
    by a span that covers them."""
    spans = sorted(_nested_spans(pairs), key=lambda s: (s.offset, -s.length))
    starts, ends, owners = _innermost_segments(spans)
    for i, (a, b, k) in enumerate(zip(starts, ends, owners)):
        assert a < b
        assert spans[k].offset <= a and b <= spans[k].end
        if i:
            assert ends[i - 1] <= a


@settings(max_examples=200, deadline=None)
@given(st.lists(st.integers(1, 30), min_size=1, max_size=8), st.data())
def test_span_index_finds_the_innermost_span_when_nested(sizes, data):
    """Properly nested spans (a parser's normal output): the shortest covering span wins, and
    the page segments name the same span as the byte lookup the CLI hexdump uses."""
    spans = []
    pos = 0
    for n in sizes:
        spans.append(Span(pos, n, "outer", f"outer {pos}"))
        inner = data.draw(st.integers(0, n - 1))
        spans.append(Span(pos + inner, data.draw(st.integers(1, n - inner)), "inner", f"inner {pos}"))
        pos += n + data.draw(st.integers(0, 3))
    index = SpanIndex(spans)
    for off in range(pos + 2):
        covering = [s for s in index.spans if s.offset <= off < s.end]
        # Shortest wins; of two equal spans, the later one in file order is nested in the other.
        expected = min(reversed(covering), key=lambda s: s.length) if covering else None
        got = index.at(off)
        assert (got.path if got else None) == (expected.path if expected else None), off
        segs = index.segments(off, off + 1)
        assert (index.spans[segs[0][2]].path if segs else None) == (got.path if got else None)


def test_step_through_walks_spans_in_file_order_and_explains_them(made):
    e = Explorer(made["gguf"])
    first = e.answer("step", {"index": 0})[0]
    assert first["span"]["kind"] == "magic" and "magic bytes" in first["text"]
    seen = [e.answer("step", {"index": i})[0] for i in range(first["count"])]
    offsets = [s["span"]["offset"] for s in seen]
    assert offsets == sorted(offsets)
    assert all(s["text"] for s in seen)
    # Jumping by offset lands on the first span starting there.
    at = e.answer("step", {"offset": seen[5]["span"]["offset"]})[0]
    assert at["span"]["offset"] == seen[5]["span"]["offset"]
    # Past the end clamps to the last span.
    assert e.answer("step", {"index": 10**6})[0]["index"] == first["count"] - 1


def test_explain_names_the_value_for_every_kind(made):
    for key in ("gguf", "broken"):
        ckpt = mx.open(made[key])
        for s in ckpt.spans:
            text = explain(s, ckpt.format)
            assert text.endswith(".") and len(text) > 20
            if s.value and s.kind not in ("kv",):
                assert s.value in text, (s, text)


def test_tree_groups_gguf_metadata_and_pages_long_arrays(made):
    e = Explorer(made["gguf"])
    roots = e.answer("tree", {"expanded": []})[0]["rows"]
    assert [r["label"] for r in roots] == ["file header", "metadata", "tensors"]
    meta = roots[1]
    rows = e.answer("tree", {"expanded": [meta["id"]]})[0]["rows"]
    namespaces = [r["label"] for r in rows if r["depth"] == 1]
    assert namespaces == ["general", "llama", "tokenizer"]
    tok_ns = next(r for r in rows if r["label"] == "tokenizer")
    rows = e.answer("tree", {"expanded": [meta["id"], tok_ns["id"]]})[0]["rows"]
    tokens = next(r for r in rows if r["label"] == "tokenizer.ggml.tokens")
    assert tokens["kind"] == "array" and tokens["count"] == 250 and tokens["has_children"]
    assert tokens["offset"] is not None
    rows = e.answer("tree", {"expanded": [meta["id"], tok_ns["id"], tokens["id"]]})[0]["rows"]
    pages = [r for r in rows if r["kind"] == "page"]
    assert [p["label"] for p in pages] == ["[0…99]", "[100…199]", "[200…249]"]
    rows = e.answer("tree", {"expanded": [meta["id"], tok_ns["id"], tokens["id"], pages[2]["id"]]})[0]["rows"]
    items = [r for r in rows if r["kind"] == "item"]
    assert (items[0]["label"], items[0]["value"]) == ("[200]", "tok200")


def test_tree_tensors_by_prefix_locate_and_search(made):
    e = Explorer(made["broken"])
    res = e.answer("tree", {"expanded": [], "locate": "model.layers.1.attn.weight"})[0]
    row = res["rows"][res["index"] - res["start"]]
    assert row["tensor"] == "model.layers.1.attn.weight" and row["label"] == "attn.weight"
    assert row["dtype"] == "F32" and row["shape"] == [16, 16] and row["bytes"] == 1024
    # Its header entry is what a selection highlights.
    entry = next(s for s in e.checkpoint.spans if s.kind == "tensor_info" and s.tensor == row["tensor"])
    assert (row["offset"], row["length"]) == (entry.offset, entry.length)
    labels = [r["label"] for r in res["rows"]]
    assert labels[labels.index("layers") + 1:][:3] == ["0", "1", "attn.weight"]  # only layer 1 opens
    found = e.answer("tree", {"expanded": [], "query": "LAYERS.1"})[0]["rows"]
    assert [r["label"] for r in found][-1] == "attn.weight"
    assert not any(r["label"] == "embed.weight" for r in found)


def test_tree_window_is_bounded_with_many_tensors(tmp_path):
    tensors = {f"model.layers.{i}.w{j}": np.zeros(1, np.float32) for i in range(300) for j in range(10)}
    e = Explorer(files.write_safetensors(tmp_path / "many.safetensors", tensors))
    root = next(r for r in e.answer("tree", {"expanded": []})[0]["rows"] if r["label"] == "tensors")
    model = e.answer("tree", {"expanded": [root["id"]]})[0]["rows"][-1]
    layers = e.answer("tree", {"expanded": [root["id"], model["id"]]})[0]["rows"][-1]
    res = e.answer("tree", {"expanded": [root["id"], model["id"], layers["id"]], "start": 250,
                            "count": 10_000})[0]
    assert len(res["rows"]) <= 500
    # Layers sort numerically, not as text.
    assert [r["label"] for r in res["rows"][:3]] == ["246", "247", "248"]  # after 4 rows above layer 0


def test_table_sorts_filters_and_locates(made):
    e = Explorer(made["gguf"])
    rows = e.answer("table", {"sort": "bytes", "desc": True})[0]["rows"]
    assert [r["bytes"] for r in rows] == sorted((r["bytes"] for r in rows), reverse=True)
    res = e.answer("table", {"query": "ATTN_Q"})[0]
    assert res["total"] == 2 and all("attn_q" in r["name"] for r in res["rows"])
    res = e.answer("table", {"sort": "name", "locate": "blk.1.ffn_norm.weight", "count": 2})[0]
    assert res["rows"][res["index"] - res["start"]]["name"] == "blk.1.ffn_norm.weight"
    assert {"name", "dtype", "shape", "params", "bytes", "file", "offset"} <= set(rows[0])


def test_file_map_marks_missing_orphan_and_bins_big_shards(made, tmp_path):
    payload = Explorer(made["index"]).answer("map", {})[0]
    by_name = {f["name"]: f for f in payload["files"]}
    assert by_name["model-00003-of-00003.safetensors"]["missing"]
    first = by_name["model-00001-of-00003.safetensors"]
    assert first["missing_count"] == 1 and first["missing_tensors"] == ["model.layers.0.gone"]
    marks = {s[4]: s[5] for f in payload["files"] for s in f["segments"]}
    assert marks["model.extra"] == "orphan"
    assert 0 < first["data_start"] < first["size"]
    big = {f"t{i}": np.zeros(2, np.float32) for i in range(BINS * 3)}
    payload = Explorer(files.write_safetensors(tmp_path / "big.safetensors", big)).answer("map", {})[0]
    segs = payload["files"][0]["segments"]
    assert len(segs) <= BINS and segs[0][4].startswith("3 tensors from t0")
    assert sum(s[1] for s in segs) == BINS * 3 * 8


def test_tensor_at_selects_by_position(made):
    e = Explorer(made["gguf"])
    t = e.checkpoint.tensors["blk.1.attn_q.weight"]
    sel = e.answer("tensor_at", {"file": t.file, "offset": t.offset + 5})[0]
    assert sel["tensor"] == t.name and sel["offset"] == t.offset


def test_stats_answer_and_plain_error(made, tmp_path):
    e = Explorer(made["gguf"])
    st_ = e.answer("stats", {"name": "token_embd.weight"})[0]
    assert st_["hist"]["counts"] and st_["min"] <= st_["mean"] <= st_["max"]
    json.dumps(st_)  # JSON-safe
    assert "No tensor named" in e.answer("stats", {"name": "nope"})[0]["error"]
    p = files.write_safetensors(tmp_path / "trunc.safetensors", {"a": np.ones(100, np.float32)})
    p.write_bytes(p.read_bytes()[:-40])
    # A file cut inside the tensor: the values that are there, marked partial (issue 39 item 9).
    part = Explorer(p).answer("stats", {"name": "a"})[0]
    assert "error" not in part and part["count"] == 90 and part["total"] == 100
    assert part["partial"].startswith("partial: the file ends inside this tensor; the first 90 of 100 values")


def test_requests_over_the_comm_answer_by_id(made):
    e = Explorer(made["gguf"])
    sent = []
    e.send = lambda content, buffers=None: sent.append((content, buffers))
    e._on_request(e, {"type": "req", "id": 7, "op": "bytes", "args": {"offset": 0, "length": 4}}, [])
    e._on_request(e, {"type": "req", "id": 8, "op": "no_such_op", "args": {}}, [])
    e._on_request(e, {"type": "other"}, [])
    (ok, bufs), (bad, _) = sent
    assert ok["id"] == 7 and ok["ok"] and bufs == [b"GGUF"]
    assert bad["id"] == 8 and not bad["ok"] and "no_such_op" in bad["error"]


def _state_sizes(path) -> tuple[int, int]:
    """(the state's JSON without the assets and the first page, the first page's JSON)."""
    e = Explorer(path)
    state = e.get_state()
    page = json.dumps(state.pop("first_page"))
    assert len(state.pop("first_bytes")) <= 4096  # a binary buffer: one page at most
    return len(json.dumps(state, default=str)) - len(e._esm) - len(e._css), len(page)


def test_state_sent_at_open_is_small_and_does_not_grow_with_tensors(tmp_path):
    sizes = []
    for layers in (200, 900):
        tensors = {f"model.layers.{i}.w{j}": np.zeros(1, np.float32) for i in range(layers) for j in range(25)}
        (tmp_path / str(layers)).mkdir()
        sizes.append(_state_sizes(files.write_safetensors(tmp_path / str(layers) / "m.safetensors", tensors)))
    (small, small_page), (big, big_page) = sizes
    assert small < 20_000 and big < 20_000, sizes
    # The first page's spans are those of its 4 KB, however many tensors follow (the header's
    # length, printed in two of them, is all that differs).
    assert abs(small_page - big_page) < 32 and big_page < 64_000, sizes


def test_mimebundle_has_escaped_static_summary(made):
    e = Explorer(made["xss"])
    data, _ = e._repr_mimebundle_()
    assert "application/vnd.jupyter.widget-view+json" in data
    assert "safetensors" in data["text/plain"] and "2 tensors" in data["text/plain"]
    page = data["text/html"]
    assert "<img" not in page and "<script" not in page
    broken = Explorer(made["broken"])._repr_mimebundle_()[0]["text/html"]
    assert "size_mismatch" in broken and "2 errors" in broken
    assert html.escape("'model.layers.0.attn.weight'", quote=True)[:10] in broken


def test_save_html_is_self_contained_and_inert(made, tmp_path):
    out = Explorer(made["xss"]).save_html(tmp_path / "r.html")
    text = open(out, encoding="utf-8").read()
    assert not re.search(r"""(src|href)\s*=\s*["']?(https?:)?//""", text)
    assert "<img src=x" not in text and "window.__mx_xss=2</script>" not in text
    m = re.search(r'<script type="application/json" id="me-report-data">(.*?)</script>', text, re.S)
    data = json.loads(m.group(1))
    assert data["state"]["summary"]["tensor_count"] == 2
    assert files.XSS_NAME in data["table"]["names"]["strings"]  # the tree is rebuilt from the table
    assert base64.b64decode(data["pages"][0]["b64"]) == made["xss"].read_bytes()[:16384]


def test_explore_run_is_the_explorer_with_a_run_tab_built_when_opened(made):
    ex = mx.explore(made["gguf"], run=True)
    assert isinstance(ex, Explorer) and ex.run and ex.run_widget is None
    assert mx.explore(made["gguf"]).run is False
    # The browser opens the Run tab: the RunDemo is created then, and named by reference.
    answer = ex.answer("run_demo", {})[0]
    from model_explorer.widgets.run_cell import RunDemo

    assert isinstance(ex.run_widget, RunDemo) and ex.run_widget is ex.run_demo()
    assert answer == {"ref": f"anywidget:{ex.run_widget.model_id}"}
    # The README's calls work on what explore() returns.
    ex.selection = {"tensor": "blk.0.attn_q.weight"}
    assert ex.selection["offset"] == ex.checkpoint.tensors["blk.0.attn_q.weight"].offset


def test_unknown_keywords_are_refused(made):
    with pytest.raises(TypeError, match="unexpected keyword argument 'tensr'"):
        TensorHistogram(made["gguf"], tensr="blk.0.attn_q.weight")
    with pytest.raises(TypeError, match="'options'"):
        Explorer(made["gguf"], options={})
    with pytest.raises(TypeError, match="'run'"):
        HexDump(made["gguf"], run=True)
    assert Explorer(made["gguf"], selection={"tensor": "output.weight"}).selection["tensor"] == "output.weight"


def test_selecting_a_tensor_from_python_names_its_first_byte(made):
    ex = Explorer(made["index"])
    name, info = list(ex.checkpoint.tensors.items())[-1]
    ex.selection = {"tensor": name}
    assert ex.selection == {"tensor": name, "file": info.file, "offset": info.offset,
                            "length": info.length, "dtype": info.label, "shape": list(info.shape)}
    assert info.file != ex.checkpoint.files[0]  # the hexdump must change file too
    with pytest.raises(traitlets.TraitError, match="No tensor named 'nope'"):
        ex.selection = {"tensor": "nope"}
    # The browser's own selections are kept as they are, even about a tensor that is missing.
    ex.selection = {"tensor": "nope", "offset": None, "from": "findings"}
    assert ex.selection["offset"] is None
    # A selection that already says where its bytes are is kept as it is (a header entry).
    ex.selection = {"tensor": name, "file": info.file, "offset": 8, "length": 4}
    assert ex.selection["offset"] == 8


def test_overview_says_what_the_model_is(made):
    facts = {row[0]: row[1] for row in Explorer(made["gguf"]).summary["overview"]["facts"]}
    assert facts["architecture"] == "llama" and facts["name"] == "tiny test model"
    assert facts["format"].startswith("GGUF v3, 1 file") and "KiB" in facts["format"]
    assert "Q8_0" in facts["quantization"] and facts["layers"] == "2"
    meta = Explorer(made["xss"]).summary["overview"]
    assert meta["metadata"] == [["note", files.XSS_META]]
    facts = {row[0]: row[1] for row in meta["facts"]}
    assert facts["quantization"] == "none: F32 × 2" and "no config.json" in facts["architecture"]


def test_histogram_needs_a_real_tensor(made):
    h = TensorHistogram(made["gguf"], tensor="blk.0.attn_q.weight")
    assert h.selection["tensor"] == "blk.0.attn_q.weight"
    with pytest.raises(KeyError, match="no_such"):
        TensorHistogram(made["gguf"], tensor="no_such")


def test_pickle_tree_shows_imports_structure_and_opcodes(tmp_path):
    e = Explorer(files.evil_pickle(tmp_path / "evil.pkl"))
    roots = e.answer("tree", {"expanded": []})[0]["rows"]
    assert [r["label"] for r in roots] == ["pickle imports", "pickle structure", "pickle opcodes"]
    assert "dangerous" in roots[0]["value"]
    rows = e.answer("tree", {"expanded": [r["id"] for r in roots]})[0]["rows"]
    imports = [r for r in rows if r["kind"] == "import"]
    assert imports[0]["label"] in ("posix.system", "os.system") and imports[0]["offset"] is not None
    assert any(r["label"] == files.XSS_NAME and r["value"] == files.XSS_META for r in rows)
    opcodes = [r for r in rows if r["kind"] == "opcode"]
    assert opcodes[-1]["label"].endswith("STOP")
    step = e.answer("step", {"offset": imports[0]["offset"]})[0]
    assert "import" in step["text"] and "never runs" in step["text"]


@pytest.mark.reference
def test_torch_zip_structure_selects_tensor_data(tmp_path):
    torch = pytest.importorskip("torch")
    path = tmp_path / "m.pt"
    torch.save({"w": torch.ones(3, 4)}, path)
    e = Explorer(path)
    roots = e.answer("tree", {"expanded": []})[0]["rows"]
    structure = next(r for r in roots if r["label"] == "pickle structure")
    ref = next(r for r in e.answer("tree", {"expanded": [structure["id"]]})[0]["rows"] if r["kind"] == "ref")
    t = e.checkpoint.tensors["w"]
    assert (ref["tensor"], ref["offset"], ref["length"]) == ("w", t.offset, 48)
    texts = [e.answer("step", {"index": i})[0]["text"] for i in range(e.answer("step", {})[0]["count"])]
    assert any(x.startswith("A zip local file header") for x in texts)
    assert any(x.startswith("Pickle opcode BINPERSID") for x in texts)


def test_report_tree_leaves_out_groups_made_by_searches(made):
    e = Explorer(made["broken"])
    e.answer("tree", {"expanded": [], "query": "layers.1"})
    rows = e.tree.all_rows(10_000)
    assert not any(r["label"].startswith("tensors matching") for r in rows)
    ids = {r["id"] for r in rows}
    assert all(r["parent"] is None or r["parent"] in ids for r in rows)
    assert [r["label"] for r in rows if r["parent"] is None] == [r.label for r in e.tree.roots]


def test_first_page_travels_with_the_state(tmp_path):
    # The hexdump's first request is answered before it is asked: the state carries the same
    # answer, so the first bytes draw without a round trip (and in a notebook reopened without
    # its kernel).
    path = tmp_path / "m.safetensors"
    files.write_safetensors(path, {"a": np.arange(2048, dtype=np.float32)})
    ex = mx.explore(path)
    data, buffers = ex.answer("bytes", {"offset": 0, "length": 4096})
    assert ex.first_page == data and ex.first_bytes == buffers[0]
    assert ex.first_bytes[:8] == path.read_bytes()[:8] and len(ex.first_bytes) == 4096
    assert ex.get_state()["first_bytes"]  # synced: it goes to the browser as a buffer
