"""Mutated hostile files and containers: mx.open never raises, never hangs, never crashes a
reader (no internal_error), and the payloads never run."""

from __future__ import annotations

import io
import os
import pickle
import time

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import model_explorer as mx

from .gadgets import frame_straddle, gadget_pickles, nested_frames
from .helpers import Reducer, touch_command
from .test_mutations import mutate, mutation

MAX_SECONDS = 2.0


@pytest.fixture(scope="module")
def workdir(tmp_path_factory):
    d = tmp_path_factory.mktemp("hostile_mutations")
    yield d
    assert not (d / "marker").exists()


@pytest.fixture(scope="module")
def originals(workdir):
    marker = workdir / "marker"
    obj = np.empty(2, dtype=object)
    obj[0], obj[1] = {"a": 1}, Reducer(os.system, (touch_command(marker),))
    npy, npz = io.BytesIO(), io.BytesIO()
    np.save(npy, obj, allow_pickle=True)
    np.savez(npz, w=np.ones((2, 3), np.float32), evil=obj)
    gadgets = gadget_pickles(marker)
    return {
        "straddle": frame_straddle(marker),
        "nested": nested_frames(marker),
        "framed": pickle.dumps({f"k{i}": "v" * 40 for i in range(3000)}, protocol=5),
        "glob_os": gadgets["glob_os_attrgetter"],
        "object_npy": npy.getvalue(),
        "npz": npz.getvalue(),
    }


@pytest.mark.parametrize("name", ["straddle", "nested", "framed", "glob_os", "object_npy", "npz"])
@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(ops=st.lists(mutation, min_size=1, max_size=3))
def test_mutated_hostile_files_open(originals, workdir, name, ops):
    data = originals[name]
    for op in ops:
        if data:
            data = mutate(data, op)
    p = workdir / f"m_{name}.bin"
    p.write_bytes(data)
    t0 = time.perf_counter()
    ckpt = mx.open(p)
    assert time.perf_counter() - t0 < MAX_SECONDS
    assert "internal_error" not in {f.code for f in ckpt.findings}, [str(f) for f in ckpt.findings]
    ckpt.summary()
    assert not (workdir / "marker").exists()
