"""Safetensors parity with the reference reader on what it rejects, and bounded work on
headers built to amplify it (a million overlapping entries: scaled down here; the full-size
figure is in benchmarks/bench_scanners.py)."""

from __future__ import annotations

import json
import struct
import time

import pytest
from safetensors import safe_open

from model_explorer.formats import safetensors as st
from model_explorer.spans import MAX_FINDINGS_PER_CODE

from .conftest import codes, finding, open_bytes, st_bytes


def reference_rejects(path) -> bool:
    try:
        with safe_open(str(path), "np"):
            return False
    except Exception:  # noqa: BLE001 - any refusal counts
        return True


@pytest.mark.parametrize("value", [3, 1.5, None, True, ["a"], {"k": "v"}])
def test_non_string_metadata_is_an_error_like_the_reference(tmp_path, value):
    raw = json.dumps({"__metadata__": {"n": value}}).encode()
    ckpt = open_bytes(tmp_path, st_bytes(raw))
    assert finding(ckpt, "metadata_not_string").severity == "error"
    assert reference_rejects(tmp_path / "model.safetensors")


@pytest.mark.parametrize("header", [
    '{"a\\ud800":{"dtype":"U8","shape":[1],"data_offsets":[0,1]}}',
    '{"__metadata__":{"k":"\\udc00"}}',
    '{"__metadata__":{"\\ud83d":"v"}}',
])
def test_lone_surrogates_are_errors_like_the_reference(tmp_path, header):
    data = b"\0" if '"a' in header else b""
    ckpt = open_bytes(tmp_path, st_bytes(header.encode(), data))
    assert finding(ckpt, "lone_surrogate").severity == "error"
    assert reference_rejects(tmp_path / "model.safetensors")


def test_a_valid_surrogate_pair_is_fine(tmp_path):
    header = '{"a\\ud83d\\ude00":{"dtype":"U8","shape":[1],"data_offsets":[0,1]}}'
    ckpt = open_bytes(tmp_path, st_bytes(header.encode(), b"\0"))
    assert not ckpt.errors and "a\U0001F600" in ckpt.tensors


def overlapping_header(n: int) -> bytes:
    parts = ",".join(f'"t{i}":{{"dtype":"F32","shape":[1],"data_offsets":[0,4]}}' for i in range(n))
    raw = ("{" + parts + "}").encode()
    return struct.pack("<Q", len(raw)) + raw + b"\0" * 4


def test_overlapping_entries_are_capped(tmp_path, monkeypatch):
    """Every entry overlaps the first: findings are capped, labels and listed tensors too."""
    monkeypatch.setattr(st, "MAX_LABELLED_ENTRIES", 2_000)
    monkeypatch.setattr(st, "MAX_LISTED_TENSORS", 5_000)
    n = 20_000
    t0 = time.perf_counter()
    ckpt = open_bytes(tmp_path, overlapping_header(n))
    assert time.perf_counter() - t0 < 5
    overlap = [f for f in ckpt.findings if f.code == "data_overlap"]
    assert len(overlap) == MAX_FINDINGS_PER_CODE + 1 and overlap[-1].extra["total"] == 5_000 - 1
    assert {"header_labels_capped", "header_too_many_entries"} <= codes(ckpt)
    assert len(ckpt.tensors) == 5_000
    assert len(ckpt.spans) < 5 * 2_000 + 100
    assert reference_rejects(tmp_path / "model.safetensors")


def test_duplicates_past_the_listing_cap_are_still_found(tmp_path, monkeypatch):
    monkeypatch.setattr(st, "MAX_LISTED_TENSORS", 2)
    entry = '{"dtype":"U8","shape":[1],"data_offsets":[%d,%d]}'
    header = "{" + ",".join(f'"t{i}":' + entry % (i, i + 1) for i in range(4)) + \
             ',"t3":' + entry % (4, 5) + "}"
    ckpt = open_bytes(tmp_path, st_bytes(header.encode(), b"\0" * 5))
    assert "duplicate_key" in codes(ckpt)


def test_a_late_json_error_undoes_the_entries_before_it(tmp_path):
    entry = '"t%d":{"dtype":"U8","shape":[1],"data_offsets":[%d,%d]}'
    header = "{" + ",".join(entry % (i, i, i + 1) for i in range(50)) + ",,}"
    ckpt = open_bytes(tmp_path, st_bytes(header.encode(), b"\0" * 50))
    assert codes(ckpt) == {"header_not_json"} and not ckpt.tensors
