"""llama.cpp through llama-cpp-python (PyPI has no wheel of it: pip builds llama.cpp from source,
about ten minutes on two cores, with a compiler and cmake that a stock Debian image lacks; first
in preference where someone built it, for their own CPU). Its `Llama` holds the context; eval()
keeps only the last position's logits, so every position's logits take one eval per token."""

from __future__ import annotations

import numpy as np

MODULE = "llama_cpp"
PACKAGE = "llama-cpp-python"


def check() -> None:
    import llama_cpp  # noqa: F401 - loads libllama, raising when it cannot


class Session:
    def __init__(self, path: str, n_ctx: int, threads: int) -> None:
        import llama_cpp

        self.lib = llama_cpp
        self.llm = llama_cpp.Llama(model_path=path, n_ctx=n_ctx, n_threads=threads, n_threads_batch=threads,
                                   n_batch=512, logits_all=False, n_gpu_layers=0, verbose=False)
        self.n_vocab = self.llm.n_vocab()
        self.label = f"llama.cpp via {PACKAGE} {getattr(llama_cpp, '__version__', '')}".rstrip()

    def _last(self) -> np.ndarray:
        ptr = self.lib.llama_get_logits_ith(self.llm.ctx, -1)
        return np.ctypeslib.as_array(ptr, shape=(self.n_vocab,)).astype(np.float32)

    def decode(self, ids: list[int], start: int, all_logits: bool) -> np.ndarray:
        # eval() drops every position from n_tokens on, so this also rewinds
        self.llm.n_tokens = start
        if not all_logits:
            self.llm.eval(ids)
            return self._last()[None]
        rows = []
        for i in ids:
            self.llm.eval([i])
            rows.append(self._last())
        return np.stack(rows)

    def close(self) -> None:
        llm, self.llm = self.llm, None
        if llm is not None:
            llm.close()


def open_session(path: str, n_ctx: int, threads: int) -> Session:
    return Session(path, n_ctx, threads)
