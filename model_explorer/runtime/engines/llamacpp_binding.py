"""The one interface the llama.cpp engine (llamacpp.py) talks to, whichever Python binding of
llama.cpp is installed, and the loop shared by the bindings that expose llama.cpp's C API.

A `Session` is one model and one context of llama.cpp holding one sequence:

    session.decode(ids, start, all_logits)  # ids at positions start, start+1, ...; the context
                                            # first forgets every position >= start; returns the
                                            # logits of every id, or of the last one, float32
    session.n_vocab, session.label, session.close()

Each binding has a small adapter module (llamacpp_python, llamacpp_cyllama, llamacpp_sync,
llamacpp_ik) with `MODULE` (what it imports), `PACKAGE` (what pip installs), `check()` and
`open_session(path, n_ctx, threads)`.
Nothing is imported until a binding is asked for: the core runs without any of them.
"""

from __future__ import annotations

import importlib
import importlib.util
import os
import platform
import re
import sys
from types import ModuleType

import numpy as np

# Preference order when several are installed: llama-cpp-python (built from source for this CPU),
# cyllama (prebuilt CPU wheels of upstream llama.cpp that load on glibc 2.17 and later: the one
# `make dev` installs), llama-cpp-py-sync (prebuilt wheels of upstream llama.cpp that need glibc
# 2.38), ik-llama-cpp-python (prebuilt wheels of ik_llama.cpp, a fork with its own CPU kernels and
# logits that are not upstream's: last, so that it only runs where nothing exact is installed).
ADAPTERS = ("llamacpp_python", "llamacpp_cyllama", "llamacpp_sync", "llamacpp_ik")
# Prompt tokens per llama_decode call: llama.cpp aborts the process (it does not raise) when one
# batch holds more tokens than the context's n_batch.
N_BATCH = 512

_failed: dict[str, str] = {}  # binding module -> why it did not load in this process


def adapter(name: str) -> ModuleType:
    return importlib.import_module(f"{__package__}.{name}")


def _loads(ad: ModuleType) -> bool:
    """Whether `ad`'s binding imports and its shared library loads (a failure is kept, with why)."""
    if ad.MODULE in _failed:
        return False
    if ad.MODULE in sys.modules:  # already imported (or a stand-in a test put there)
        return True
    if importlib.util.find_spec(ad.MODULE) is None:
        return False
    try:
        ad.check()
    except (ImportError, OSError, RuntimeError, AttributeError) as e:
        _failed[ad.MODULE] = f"{ad.PACKAGE} is installed but does not load here: {_why(e)}"
        return False
    return True


def _why(e: BaseException) -> str:
    """The loader's complaint, short: a missing glibc version is the common one (wheels built on
    a newer system than their manylinux tag says)."""
    text = str(e)
    need = re.search(r"version `(GLIBC_[\d.]+)' not found", text)
    if need:
        libc, version = platform.libc_ver()
        return f"its shared library needs {need.group(1)}; this system has {libc or 'a C library'} {version}".rstrip()
    return text.splitlines()[0][:200] if text else type(e).__name__


def find() -> ModuleType | None:
    """The adapter of the first binding that loads, or None."""
    return next((ad for ad in map(adapter, ADAPTERS) if _loads(ad)), None)


def problems() -> list[str]:
    """Why each installed binding did not load (for the messages that offer llama.cpp)."""
    return [_failed[m] for m in (adapter(n).MODULE for n in ADAPTERS) if m in _failed]


def llama_threads(half: bool = False) -> int:
    """llama.cpp's thread count when none is asked for: OMP_NUM_THREADS where set (it runs on
    OpenMP), else every core this process may use, or half of them (`half`, llama-cpp-python's
    own default). Its threads spin while they wait, so a traced prompt pass takes half: one per
    core starves beside any other work (lesson 08's pass took 14 s instead of 1.4 s on two
    cores, one of them busy); generation, timed against the bandwidth cap, takes every core."""
    omp = os.environ.get("OMP_NUM_THREADS", "")
    if omp.isdigit() and int(omp) > 0:
        return int(omp)
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    return max(1, cores // 2 if half else cores)


def open_session(path: str, n_ctx: int, threads: int):
    ad = find()
    if ad is None:
        raise RuntimeError("no llama.cpp binding loads here" + "".join(f"; {p}" for p in problems()))
    return ad.open_session(path, n_ctx, threads)


class CSession:
    """A session over llama.cpp's C API (llama_batch, llama_decode, llama_get_logits_ith), which
    every binding but llama-cpp-python's high-level one exposes. `api` is the adapter's thin layer
    over its binding: n_vocab, decode(chunk, pos, outputs) (llama_decode of the ids in `chunk` at
    positions pos, pos+1, ..., computing logits at the batch indices in `outputs`; returns its
    code), row(i) (the logits of the last decode's batch index i, float32), forget(start) (drop
    positions >= start, True when done), close(); where it can, `n_ctx` and `n_batch` (the
    context's own, after llama.cpp's rounding and clamping)."""

    def __init__(self, api, label: str) -> None:
        self.api, self.label, self.n_vocab, self.n_past = api, label, api.n_vocab, 0
        self.n_ctx = getattr(api, "n_ctx", None)
        # llama.cpp clamps n_batch to n_ctx and aborts the process (it does not raise) on a
        # batch larger than n_batch: a context smaller than N_BATCH takes smaller chunks
        self.n_batch = min(N_BATCH, getattr(api, "n_batch", N_BATCH))

    def decode(self, ids: list[int], start: int, all_logits: bool) -> np.ndarray:
        if not ids:
            return np.zeros((0, self.n_vocab), np.float32)
        if self.n_ctx is not None and start + len(ids) > self.n_ctx:
            raise ValueError(f"positions {start}..{start + len(ids) - 1} do not fit llama.cpp's context of "
                             f"{self.n_ctx} positions.")
        if start > self.n_past:
            raise ValueError(f"llama.cpp holds {self.n_past} positions; position {start} would leave a gap.")
        if start < self.n_past:
            if not self.api.forget(start):
                raise RuntimeError(f"llama.cpp could not drop positions {start}.. of its cache.")
            self.n_past = start
        rows = []
        for c in range(0, len(ids), self.n_batch):
            chunk = ids[c:c + self.n_batch]
            last = c + len(chunk) == len(ids)
            # batch indices whose logits llama.cpp computes (llama_get_logits_ith takes these)
            outputs = list(range(len(chunk))) if all_logits else [len(chunk) - 1] if last else []
            code = self.api.decode(chunk, self.n_past, outputs)
            if code != 0:
                # 1: no room in the KV cache for the batch; negative: llama.cpp's own error
                raise RuntimeError(f"llama_decode returned {code} at positions {self.n_past}.."
                                   f"{self.n_past + len(chunk) - 1}.")
            self.n_past += len(chunk)
            rows += [np.array(self.api.row(i), dtype=np.float32) for i in outputs]
        return np.stack(rows)

    def close(self) -> None:
        api, self.api = self.api, None
        if api is not None:
            api.close()


class StructBatch:
    """decode(chunk, pos, outputs) for the bindings that hand out llama_batch as the C struct
    (cffi, ctypes): the adapter gives batch(n), free_batch(b) and decode_batch(b)."""

    def decode(self, chunk: list[int], pos: int, outputs: list[int]) -> int:
        b = self.batch(len(chunk))
        try:
            b.n_tokens = len(chunk)
            for i, token in enumerate(chunk):
                b.token[i], b.pos[i], b.n_seq_id[i], b.logits[i] = token, pos + i, 1, int(i in outputs)
                b.seq_id[i][0] = 0
            return self.decode_batch(b)
        finally:
            self.free_batch(b)
