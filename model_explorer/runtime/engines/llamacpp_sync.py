"""llama.cpp through llama-cpp-py-sync: upstream llama.cpp's C API by cffi (ABI mode), with
prebuilt CPU wheels that bundle libllama and libggml. Its wheels say manylinux2014 but their
libraries need glibc 2.38 (C23's __isoc23_strtol and kin): on an older system, such as Debian 12
with glibc 2.36, the library does not load, and the binding is reported as installed but unusable."""

from __future__ import annotations

import numpy as np

from .llamacpp_binding import N_BATCH, CSession, StructBatch

MODULE = "llama_cpp_py_sync"
PACKAGE = "llama-cpp-py-sync"

_state: dict = {}  # the library, its ffi and the log callback, once per process


def check() -> None:
    _library()


def _library():
    if not _state:
        from llama_cpp_py_sync import _cffi_bindings as cb

        lib, ffi = cb.get_lib(), cb.get_ffi()  # RuntimeError when the shared library does not load
        # llama.cpp logs every load to stderr; a no-op callback keeps notebooks and tests quiet
        quiet = ffi.callback("void(enum ggml_log_level, const char *, void *)", lambda *a: None)
        lib.llama_log_set(quiet, ffi.NULL)
        lib.llama_backend_init()
        _state.update(lib=lib, ffi=ffi, quiet=quiet)
    return _state["lib"], _state["ffi"]


class _Api(StructBatch):
    def __init__(self, path: str, n_ctx: int, threads: int) -> None:
        lib, ffi = self.lib, self.ffi = _library()
        mp = lib.llama_model_default_params()
        mp.n_gpu_layers = 0
        self.model = lib.llama_model_load_from_file(path.encode(), mp)
        if self.model == ffi.NULL:
            raise RuntimeError(f"llama.cpp could not load {path}")
        cp = lib.llama_context_default_params()
        cp.n_ctx, cp.n_batch, cp.n_ubatch = n_ctx, N_BATCH, N_BATCH
        cp.n_threads = cp.n_threads_batch = threads
        cp.embeddings = False
        cp.swa_full = True  # sliding-window layers keep every position, so any rewind works
        self.ctx = lib.llama_init_from_model(self.model, cp)
        if self.ctx == ffi.NULL:
            lib.llama_model_free(self.model)
            raise RuntimeError(f"llama.cpp could not make a context of {n_ctx} positions for {path}")
        self.n_vocab = lib.llama_vocab_n_tokens(lib.llama_model_get_vocab(self.model))
        self.memory = lib.llama_get_memory(self.ctx)

    def batch(self, n: int):
        return self.lib.llama_batch_init(n, 0, 1)

    def free_batch(self, b) -> None:
        self.lib.llama_batch_free(b)

    def decode_batch(self, b) -> int:
        return self.lib.llama_decode(self.ctx, b)

    def row(self, i: int) -> np.ndarray:
        ptr = self.lib.llama_get_logits_ith(self.ctx, i)
        return np.frombuffer(self.ffi.buffer(ptr, 4 * self.n_vocab), dtype=np.float32)

    def forget(self, start: int) -> bool:
        return bool(self.lib.llama_memory_seq_rm(self.memory, -1, start, -1))

    def close(self) -> None:
        self.lib.llama_free(self.ctx)
        self.lib.llama_model_free(self.model)


def open_session(path: str, n_ctx: int, threads: int) -> CSession:
    import llama_cpp_py_sync as pkg

    return CSession(_Api(path, n_ctx, threads),
                    f"llama.cpp {pkg.__llama_cpp_tag__} via {PACKAGE} {pkg.__version__}")
