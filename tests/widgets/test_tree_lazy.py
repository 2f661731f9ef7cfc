"""The header tree is made as it is opened, from the columns of the tensor map: every node it
shows must carry what the eager tree built from every record and span showed (same labels,
dtypes, shapes, byte counts, header offsets and lengths), and showing, opening and searching
it builds no tensor record and no shard's spans beyond the shard opened."""

from __future__ import annotations

import json
import os

import numpy as np
import widget_test_files as files

import model_explorer as mx
from model_explorer.widgets import Explorer
from model_explorer.widgets._treeparts import HEADER_KINDS
from model_explorer.widgets._treetensors import _split


def _eager(ckpt) -> tuple[dict, list, dict]:
    """What the eager tree showed, from every record and span (the old rules): per tensor
    its leaf, the file header fields, and per group path (count, bytes, missing)."""
    ckpt.build_all()
    entry: dict[str, tuple[int, int]] = {}
    for s in ckpt.spans:
        if s.kind == "tensor_info" and s.tensor and s.tensor not in entry:
            entry[s.tensor] = (s.offset, s.length)
    notes = {m.name: m.note for m in ckpt.index_mismatches if m.kind in ("orphan", "named_twice")}
    leaves = {}
    members = []
    for t in ckpt.tensors.values():
        span = (t.extra or {}).get("info_span")
        off, length = entry.get(t.name) or (tuple(span) if span else (t.offset, t.length))
        leaves[t.name] = (_split(t.name)[1], "tensor", notes.get(t.name), t.label, list(t.shape),
                          t.stored_bytes, t.file, off, length)
        members.append((t.name, t.stored_bytes, False))
    for m in ckpt.index_mismatches:
        if m.kind in ("missing", "duplicate"):
            nb = m.info.stored_bytes if m.info else 0
            members.append((m.name, nb, m.kind == "missing"))
            leaves.setdefault(m.name, (_split(m.name)[1], m.kind, m.note, m.info.kind if m.info else None,
                                       list(m.info.shape) if m.info else None, nb if m.info else None,
                                       m.file, m.offset, m.length))
    many = len(ckpt.files) > 1
    fields = [(f"{os.path.basename(s.file)} > {s.path}" if many else s.path, s.kind, s.value, s.file,
               s.offset, s.length) for s in ckpt.spans if s.kind in HEADER_KINDS and s.tensor is None]
    groups: dict[str, list] = {}
    for name, nb, gone in members:
        prefix = _split(name)[0]
        for d in range(1, len(prefix) + 1):
            g = groups.setdefault(".".join(prefix[:d]), [0, 0, 0])
            g[0], g[1], g[2] = g[0] + 1, g[1] + nb, g[2] + gone
    groups[""] = [len(members), sum(nb for _, nb, _ in members), sum(g for *_, g in members)]
    return leaves, fields, {k: tuple(v) for k, v in groups.items()}


def _open_everything(e: Explorer) -> list[dict]:
    """Open groups until nothing is left closed (array values and opcodes stay shut)."""
    expanded: set[int] = set()
    while True:
        res = e.answer("tree", {"expanded": sorted(expanded), "count": 500})[0]
        rows = res["rows"]
        while len(rows) < res["total"]:
            rows += e.answer("tree", {"expanded": sorted(expanded), "start": len(rows), "count": 500})[0]["rows"]
        closed = {r["id"] for r in rows if r["has_children"] and r["kind"] == "group"} - expanded
        if not closed:
            return rows
        expanded |= closed


def _lazy(rows: list[dict]) -> tuple[dict, list, dict]:
    leaves = {r["tensor"]: (r["label"], r["kind"], r["value"], r["dtype"], r["shape"], r["bytes"],
                            r["file"], r["offset"], r["length"])
              for r in rows if r["kind"] in ("tensor", "missing", "duplicate") and r["tensor"]}
    fields, groups, path, under = [], {}, [], None
    many_files = False
    for r in rows:
        path = path[:r["depth"]]
        if r["depth"] == 0:
            under = r["label"]
        if r["kind"] == "group":
            path.append(r["label"])
            if under == "tensors":
                key = ".".join(path[1:])
                groups[key] = (r["count"], r["bytes"], int((r["value"] or "").split("(")[-1].split(" ")[0])
                               if "missing" in (r["value"] or "") else 0)
            many_files |= under == "file header" and r["depth"] == 1
        elif under == "file header":
            label = f"{path[1]} > {r['label']}" if len(path) > 1 else r["label"]
            fields.append((label, r["kind"], r["value"], r["file"], r["offset"], r["length"]))
    return leaves, fields, groups


def _check_same_as_eager(e: Explorer) -> None:
    rows = _open_everything(e)
    fresh = mx.open(e.checkpoint.source)
    want_leaves, want_fields, want_groups = _eager(fresh)
    leaves, fields, groups = _lazy(rows)
    assert leaves == want_leaves
    assert fields == want_fields
    assert groups == want_groups


def test_lazy_tree_equals_the_eager_tree_for_a_sharded_index(made):
    _check_same_as_eager(Explorer(made["index"]))


def test_lazy_tree_equals_the_eager_tree_for_a_gguf(made):
    _check_same_as_eager(Explorer(made["gguf"]))


def test_lazy_tree_equals_the_eager_tree_for_a_damaged_file(made):
    _check_same_as_eager(Explorer(made["broken"]))


def test_lazy_tree_equals_the_eager_tree_for_lazily_read_shards(tmp_path):
    e = Explorer(_many_shards(tmp_path, missing=True))
    assert e.checkpoint.spans.pending() and e.checkpoint.tensors.unbuilt()
    _check_same_as_eager(e)


def _many_shards(tmp_path, shards: int = 4, per: int = 30, missing: bool = False):
    weight_map = {}
    for s in range(shards):
        name = f"model-{s + 1:05d}-of-{shards:05d}.safetensors"
        tensors = {f"model.layers.{s * per + i}.mlp.w{i % 3}": np.full((2, i + 1), i, np.float32)
                   for i in range(per)}
        files.write_safetensors(tmp_path / name, tensors, compact=True)
        weight_map.update(dict.fromkeys(tensors, name))
    if missing:  # one entry in a shard that is not there, one a shard does not hold
        weight_map["model.layers.5.mlp.gone"] = f"model-{shards + 1:05d}-of-{shards:05d}.safetensors"
        weight_map["model.norm.weight"] = "model-00001-of-00004.safetensors"
    index = tmp_path / "model.safetensors.index.json"
    index.write_text(json.dumps({"metadata": {}, "weight_map": weight_map}))
    return index


def test_showing_opening_and_searching_builds_no_record_and_one_shard(tmp_path):
    e = Explorer(_many_shards(tmp_path))
    ckpt = e.checkpoint
    unbuilt, pending = ckpt.tensors.unbuilt(), list(ckpt.spans.pending())
    assert len(pending) >= 3  # the reader left the shards' spans for later
    roots = e.answer("tree", {"expanded": []})[0]["rows"]
    assert [r["label"] for r in roots] == ["file header", "tensors"]
    assert roots[0]["value"] == "4 files" and roots[1]["value"] == "120 tensors"
    tensors = roots[1]
    model = e.answer("tree", {"expanded": [tensors["id"]]})[0]["rows"][-1]
    layers = e.answer("tree", {"expanded": [tensors["id"], model["id"]]})[0]["rows"][-1]
    rows = e.answer("tree", {"expanded": [tensors["id"], model["id"], layers["id"]], "count": 500})[0]["rows"]
    assert [r["label"] for r in rows if r["depth"] == 3][:3] == ["0", "1", "2"]
    found = e.answer("tree", {"expanded": [], "query": "LAYERS.61.mlp"})[0]["rows"]
    leaf = next(r for r in found if r["kind"] == "tensor")
    assert leaf["tensor"] == "model.layers.61.mlp.w1" and leaf["shape"] == [2, 2]
    assert e.answer("tree", {"expanded": [], "query": "no such name"})[0]["total"] == 0
    assert ckpt.tensors.unbuilt() == unbuilt and ckpt.spans.pending() == pending
    # Opening one shard's header fields builds that shard's spans, and no other.
    shards = e.answer("tree", {"expanded": [roots[0]["id"]]})[0]["rows"]
    second = next(r for r in shards if r["label"] == "model-00002-of-00004.safetensors")
    assert second["has_children"] and second["value"] is None
    rows = e.answer("tree", {"expanded": [roots[0]["id"], second["id"]]})[0]["rows"]
    assert [r["label"] for r in rows if r["depth"] == 2] == ["header length", "JSON header", "header padding (spaces)"]
    assert next(r for r in rows if r["id"] == second["id"])["value"] == "3 fields"
    assert len(ckpt.spans.pending()) == len(pending) - 1
    # A selection still finds its tensor's node (and the tree opens its way to it).
    res = e.answer("tree", {"expanded": [], "locate": "model.layers.100.mlp.w1"})[0]
    row = res["rows"][res["index"] - res["start"]]
    assert row["tensor"] == "model.layers.100.mlp.w1" and row["offset"] is not None


def test_search_is_bounded_and_counts_every_match(tmp_path):
    tensors = {f"blk.{i}.w": np.zeros(1, np.float32) for i in range(2500)}
    e = Explorer(files.write_safetensors(tmp_path / "m.safetensors", tensors))
    rows = e.answer("tree", {"expanded": [], "query": ".w", "count": 5})[0]
    group = rows["rows"][0]
    assert group["label"] == "tensors matching '.w' (first 2000 of 2500)" and group["count"] == 2000
    # A query never matches across two names.
    assert e.answer("tree", {"expanded": [], "query": "w\nblk"})[0]["total"] == 0


def test_a_part_that_fails_shows_why_and_the_rest_stays(made, monkeypatch):
    from model_explorer.widgets import _treeparts

    def boom(*_a):
        raise ValueError("damaged <b>header</b>")

    monkeypatch.setattr(_treeparts, "json_node", boom)
    monkeypatch.setattr("model_explorer.widgets._tree.gguf_metadata", boom)
    roots = Explorer(made["gguf"]).answer("tree", {"expanded": []})[0]["rows"]
    assert [r["label"] for r in roots] == ["file header", "cannot be shown", "tensors"]
    assert roots[1]["kind"] == "error" and "damaged <b>header</b>" in roots[1]["value"]
