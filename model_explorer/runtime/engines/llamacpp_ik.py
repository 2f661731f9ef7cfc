"""llama.cpp through ik-llama-cpp-python: ik_llama.cpp (a fork of llama.cpp with its own CPU
matmul kernels and older C API: llama_kv_cache_seq_rm, llama_free_model) by ctypes, with
prebuilt manylinux_2_28 CPU wheels. Its logits are the fork's: close to upstream's, not equal.

Measured against the numpy decoder (tests/runtime/test_llamacpp.py): with ik-llama-cpp-python 0.1.5,
a Q4_1 matrix multiplied by 32 or more rows at once (prompt processing) gives logits off by more
than their own size (relative L2 error 3.9 on the SmolLM2 sample, 0.2 below 32 rows and in
upstream llama.cpp at every size); F16, Q8_0, Q4_0 and Q4_K are right at every size. The context
therefore works through at most UBATCH rows at a time."""

from __future__ import annotations

import ctypes

import numpy as np

from .llamacpp_binding import N_BATCH, CSession, StructBatch

MODULE = "ik_llama_cpp"
PACKAGE = "ik-llama-cpp-python"

UBATCH = 16  # rows per matmul: below the 32 at which the fork's batched Q4_1 kernel goes wrong
_state: dict = {}
_LOG = ctypes.CFUNCTYPE(None, ctypes.c_int, ctypes.c_char_p, ctypes.c_void_p)


def check() -> None:
    _library()


def _library():
    if not _state:
        from ik_llama_cpp import _ctypes_api as api  # loads libllama (OSError when it cannot)

        lib = api._lib
        lib.llama_log_set.argtypes, lib.llama_log_set.restype = [_LOG, ctypes.c_void_p], None
        lib.llama_kv_cache_seq_rm.argtypes = [ctypes.c_void_p, ctypes.c_int32, ctypes.c_int32, ctypes.c_int32]
        lib.llama_kv_cache_seq_rm.restype = ctypes.c_bool
        quiet = _LOG(lambda *a: None)  # llama.cpp logs every load to stderr
        lib.llama_log_set(quiet, None)
        api.llama_backend_init()
        _state.update(api=api, quiet=quiet)
    return _state["api"]


class _Api(StructBatch):
    def __init__(self, path: str, n_ctx: int, threads: int) -> None:
        api = self.api = _library()
        mp = api.llama_model_default_params()
        mp.n_gpu_layers = 0
        self.model = api.llama_model_load_from_file(path.encode(), mp)
        if not self.model:
            raise RuntimeError(f"llama.cpp could not load {path}")
        cp = api.llama_context_default_params()
        cp.n_ctx, cp.n_batch, cp.n_ubatch = n_ctx, N_BATCH, UBATCH
        cp.n_threads = cp.n_threads_batch = threads
        cp.logits_all = cp.embeddings = False
        self.ctx = api.llama_init_from_model(self.model, cp)
        if not self.ctx:
            api.llama_free_model(self.model)
            raise RuntimeError(f"llama.cpp could not make a context of {n_ctx} positions for {path}")
        self.n_vocab = api.llama_vocab_n_tokens(api.llama_model_get_vocab(self.model))

    def batch(self, n: int):
        return self.api.llama_batch_init(n, 0, 1)

    def free_batch(self, b) -> None:
        self.api.llama_batch_free(b)

    def decode_batch(self, b) -> int:
        return self.api.llama_decode(self.ctx, b)

    def row(self, i: int) -> np.ndarray:
        return np.ctypeslib.as_array(self.api.llama_get_logits_ith(self.ctx, i), shape=(self.n_vocab,))

    def forget(self, start: int) -> bool:
        return bool(self.api._lib.llama_kv_cache_seq_rm(self.ctx, -1, start, -1))

    def close(self) -> None:
        self.api.llama_free(self.ctx)
        self.api.llama_free_model(self.model)


def open_session(path: str, n_ctx: int, threads: int) -> CSession:
    import ik_llama_cpp

    return CSession(_Api(path, n_ctx, threads), f"ik_llama.cpp via {PACKAGE} {ik_llama_cpp.__version__}")
