"""llama.cpp through cyllama: upstream llama.cpp's C API as Cython classes (LlamaModel,
LlamaContext, LlamaBatch), with prebuilt CPU wheels (manylinux2014, AVX2) that load on glibc 2.17
and later. The one `make dev` installs: CI starts from a clean clone on two cores, where building
llama-cpp-python from source takes about ten minutes.

cyllama 0.2.18 is the last release with CPython 3.11 wheels (later ones are cp312-abi3). Its
LlamaContext.get_logits_ith asks the model for `n_vocab`, which its LlamaModel does not have
(AttributeError): the model here is a subclass that answers it from the vocabulary."""

from __future__ import annotations

import numpy as np

from .llamacpp_binding import N_BATCH, CSession

MODULE = "cyllama"
PACKAGE = "cyllama"

_state: dict = {}  # the binding module and the model class, once per process


def check() -> None:
    _library()


def _library():
    if not _state:
        from cyllama.llama import llama_cpp as cy  # loads llama.cpp (ImportError when it cannot)

        class Model(cy.LlamaModel):
            @property
            def n_vocab(self) -> int:
                return self.get_vocab().n_vocab

        cy.disable_logging()  # llama.cpp logs every load to stderr
        cy.llama_backend_init()
        _state.update(cy=cy, Model=Model)
    return _state["cy"], _state["Model"]


class _Api:
    def __init__(self, path: str, n_ctx: int, threads: int) -> None:
        cy, model_class = _library()
        self.cy = cy
        mp = cy.LlamaModelParams()
        mp.n_gpu_layers = 0
        try:
            self.model = model_class(path, mp)
        except (ValueError, RuntimeError) as e:
            raise RuntimeError(f"llama.cpp could not load {path}: {e}") from None
        cp = cy.LlamaContextParams()
        cp.n_ctx, cp.n_batch, cp.n_ubatch = n_ctx, N_BATCH, N_BATCH
        cp.n_threads = cp.n_threads_batch = threads
        cp.embeddings = False
        cp.swa_full = True  # sliding-window layers keep every position, so any rewind works
        try:
            self.ctx = cy.LlamaContext(self.model, cp)
        except (ValueError, RuntimeError) as e:
            self.model.close()
            raise RuntimeError(f"llama.cpp could not make a context of {n_ctx} positions for {path}: {e}") from None
        self.n_vocab = self.model.n_vocab
        self.n_ctx, self.n_batch = self.ctx.n_ctx, self.ctx.n_batch

    def decode(self, chunk: list[int], pos: int, outputs: list[int]) -> int:
        b = self.cy.LlamaBatch(n_tokens=len(chunk), embd=0, n_seq_max=1)
        try:
            wanted = set(outputs)
            for i, token in enumerate(chunk):
                b.add(token, pos + i, [0], i in wanted)
            # cyllama raises where llama_decode returns non-zero (ValueError: no KV slot or a bad
            # batch; RuntimeError: llama.cpp's own error)
            self.ctx.decode(b)
        except (ValueError, RuntimeError) as e:
            raise RuntimeError(f"llama_decode failed at positions {pos}..{pos + len(chunk) - 1}: {e}") from None
        finally:
            b.close()
        return 0

    def row(self, i: int) -> np.ndarray:
        logits = self.ctx.get_logits_ith(i)  # a list of n_vocab floats, None for a batch index without
        if logits is None:
            raise RuntimeError(f"llama.cpp computed no logits at batch index {i}.")
        return np.asarray(logits, dtype=np.float32)

    def forget(self, start: int) -> bool:
        return bool(self.ctx.memory_seq_rm(-1, start, -1))

    def close(self) -> None:
        self.ctx.close()
        self.model.close()


def open_session(path: str, n_ctx: int, threads: int) -> CSession:
    import cyllama
    from cyllama._internal import build_config

    build = build_config.versions().get("llama_cpp_version", "")
    return CSession(_Api(path, n_ctx, threads),
                    f"llama.cpp {build} via {PACKAGE} {cyllama.__version__}".replace("  ", " "))
