"""Mutations of a valid file, and what opening the result must still hold: no exception, no
internal error, spans inside the file (the same contract as tests/foundation/test_mutations.py)."""

from __future__ import annotations

import os
import struct

from hypothesis import HealthCheck, settings
from hypothesis import strategies as st

import model_explorer as mx

SETTINGS = settings(max_examples=60, deadline=3000, derandomize=True,
                    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
mutations = st.lists(st.one_of(
    st.tuples(st.just("xor"), st.integers(0, 2**20), st.integers(1, 255)),
    st.tuples(st.just("cut"), st.integers(0, 2**20), st.integers(1, 64)),
    st.tuples(st.just("u64"), st.integers(0, 2**20), st.sampled_from([0, 2**31, 2**62, 2**64 - 1])),
), min_size=1, max_size=3)


def mutated(blob: bytes, changes) -> bytes:
    out = bytearray(blob)
    for kind, at, arg in changes:
        at %= len(out) + 1
        if kind == "xor" and at < len(out):
            out[at] ^= arg
        elif kind == "cut":
            del out[at:at + arg]
        elif kind == "u64":
            out[at:at + 8] = struct.pack("<Q", arg)
    return bytes(out)


def opens_cleanly(path: str, read: int = 20) -> mx.Checkpoint:
    """Opening and reading `path` raises nothing but the ValueError of an unreadable tensor."""
    ckpt = mx.open(path)
    size = os.path.getsize(path)
    for s in ckpt.spans:
        assert 0 <= s.offset and 0 <= s.length and s.end <= size, s
    assert "internal_error" not in {f.code for f in ckpt.findings}, [str(f) for f in ckpt.findings]
    ckpt.summary(), [str(f) for f in ckpt.findings]
    for name in list(ckpt.tensors)[:read]:
        try:
            ckpt.read(name)
        except ValueError:
            pass
    return ckpt
