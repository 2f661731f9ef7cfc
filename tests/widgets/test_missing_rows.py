"""Tensors an index names but no shard holds show as marked rows in the table, the tree and
the file map, and the summary says how many of the indexed tensors can be read."""

from __future__ import annotations

from model_explorer.widgets import Explorer
from model_explorer.widgets._static import summary_html, summary_text


def test_table_shows_missing_rows_marked_and_filterable(made):
    e = Explorer(made["index"])
    rows = e.answer("table", {"query": "", "count": 100})[0]["rows"]
    by_name = {r["name"]: r for r in rows}
    gone = by_name["model.layers.2.w"]
    assert gone["mark"] == "missing" and gone["note"] == "missing: shard model-00003-of-00003.safetensors"
    assert gone["path"] == str(made["index"]) and gone["bytes"] is None  # selects its index entry
    assert by_name["model.layers.0.gone"]["note"].startswith("missing: not in shard")
    assert by_name["model.extra"]["mark"] == "orphan"
    assert "mark" not in by_name["model.layers.0.w"]
    hits = e.answer("table", {"query": "missing: shard model-00003"})[0]
    assert [r["name"] for r in hits["rows"]] == ["model.layers.2.w"]
    assert e.answer("table", {"query": "missing"})[0]["total"] == 2
    for col in ("name", "dtype", "shape", "params", "bytes", "file", "offset"):
        assert e.answer("table", {"sort": col, "count": 100})[0]["total"] == len(rows)
    # The missing rows are not tensors: reading and statistics never see them.
    assert "model.layers.2.w" not in e.checkpoint.tensors
    stats = e.answer("stats", {"name": "model.layers.2.w"})[0]
    assert "error" not in stats and stats["note"].startswith("missing: shard")
    e.selection = {"tensor": "model.layers.2.w"}
    sel = e.selection
    assert sel["file"] == str(made["index"]) and sel["offset"] is not None


def test_tree_places_missing_tensors_under_their_groups(made):
    e = Explorer(made["index"])
    res = e.answer("tree", {"locate": "model.layers.2.w"})[0]
    row = res["rows"][res["index"] - res["start"]]
    assert row["kind"] == "missing" and row["value"] == "missing: shard model-00003-of-00003.safetensors"
    root = next(r for r in res["rows"] if r["label"] == "tensors")
    assert root["value"] == "6 tensors (2 missing)"
    found = e.answer("tree", {"query": "missing: shard"})[0]["rows"]
    assert [r["tensor"] for r in found if r["kind"] == "missing"] == ["model.layers.2.w"]
    orphan = e.answer("tree", {"query": "orphan"})[0]["rows"]
    assert any(r["tensor"] == "model.extra" and r["value"] == "orphan: not in the index" for r in orphan)


def test_file_map_lists_the_missing_shard_tensors(made):
    payload = Explorer(made["index"]).answer("map", {})[0]
    gone = next(f for f in payload["files"] if f["missing"])
    assert gone["missing_tensors"] == ["model.layers.2.w"] and gone["missing_count"] == 1
    assert gone["missing_note"] == "missing: shard model-00003-of-00003.safetensors"


def test_summary_counts_readable_indexed_tensors(made):
    e = Explorer(made["index"])
    assert (e.summary["readable_indexed_tensors"], e.summary["indexed_tensors"]) == (3, 5)
    assert "3 of 5 indexed tensors readable" in summary_text(e.checkpoint)
    assert "3 of 5 indexed tensors readable" in summary_html(e.checkpoint)
