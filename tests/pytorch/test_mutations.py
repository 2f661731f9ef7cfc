"""Any byte flipped, inserted or cut in a valid file still opens, quickly, with findings."""

from __future__ import annotations

import pickle
import time

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import model_explorer as mx

from .helpers import Reducer, dump_bytes

pytestmark = pytest.mark.reference
MAX_SECONDS = 2.0


@pytest.fixture(scope="module")
def originals():
    import torch

    state = {"w": torch.arange(6.0).reshape(2, 3), "v": torch.arange(6.0).reshape(2, 3)[:, 1:],
             "nested": {"b": torch.ones(2, dtype=torch.bfloat16)}, "n": 3}
    plain = {"a": [1, 2.5, "x", b"yy"], "t": (None, True), "s": {1, 2}}
    return {
        "zip": dump_bytes(state),
        "legacy": dump_bytes(state, _use_new_zipfile_serialization=False),
        "pickle4": pickle.dumps(plain, protocol=4),
        "pickle0": pickle.dumps(plain, protocol=0),
        "hostile": pickle.dumps({"x": Reducer(print, ("hi",))}, protocol=2),
    }


@pytest.fixture(scope="module")
def workdir(tmp_path_factory):
    return tmp_path_factory.mktemp("mutations")


def open_quickly(path):
    t0 = time.perf_counter()
    ckpt = mx.open(path)
    elapsed = time.perf_counter() - t0
    assert elapsed < MAX_SECONDS, elapsed
    # Everything a view would touch is computable.
    ckpt.summary()
    for f in ckpt.findings:
        str(f)
    for d in ckpt.details.get("files", {}).values():
        assert d["pickle"]["verdict"] in ("safe", "needs_classes", "suspicious", "dangerous")
    return ckpt


mutation = st.tuples(st.sampled_from(["flip", "insert", "cut", "delete"]),
                     st.floats(0, 1, exclude_max=True), st.integers(0, 255),
                     st.integers(1, 16))


def mutate(data: bytes, op) -> bytes:
    kind, where, value, n = op
    i = int(where * len(data))
    if kind == "flip":
        return data[:i] + bytes([data[i] ^ (value or 1)]) + data[i + 1:]
    if kind == "insert":
        return data[:i] + bytes([value]) * n + data[i:]
    if kind == "cut":
        return data[:i]
    return data[:i] + data[i + n:]


@pytest.mark.parametrize("name", ["zip", "legacy", "pickle4", "pickle0", "hostile"])
@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(ops=st.lists(mutation, min_size=1, max_size=3))
def test_mutated_files_open(originals, workdir, name, ops):
    data = originals[name]
    for op in ops:
        if data:
            data = mutate(data, op)
    p = workdir / f"m_{name}.bin"
    p.write_bytes(data)
    open_quickly(p)


@pytest.mark.parametrize("name", ["pickle4", "pickle0", "hostile", "legacy"])
def test_every_truncation_of_a_pickle(originals, workdir, name):
    data = originals[name]
    step = max(1, len(data) // 150)
    for i in range(0, len(data), step):
        p = workdir / f"t_{name}.bin"
        p.write_bytes(data[:i])
        open_quickly(p)


def test_the_hostile_import_survives_mutation_elsewhere(originals, workdir):
    """Damage after the import does not hide it."""
    data = originals["hostile"]
    at = data.index(b"print")
    for i in range(at + 6, len(data)):
        p = workdir / "h.pkl"
        p.write_bytes(data[:i] + b"\xff" + data[i + 1:])
        ckpt = open_quickly(p)
        assert any(f.extra.get("callable") == "builtins.print" for f in ckpt.findings), i
