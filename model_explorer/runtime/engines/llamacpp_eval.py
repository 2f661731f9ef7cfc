"""llama.cpp's own intermediate tensors, read through ggml's eval callback (llama-cpp-python).

llama.cpp names the tensors of its graph as it builds it (`attn_norm-0`, `Qcur-0`, `l_out-0`,
`result_output`); a context made with `cb_eval` is asked, node by node, whether the caller wants
to see each one (ask=True), and is handed the computed tensor when it said yes (ask=False). Only
the names the caller wants are asked for, and each is copied out at once, a tensor at a time, so
nothing of a layer is held here past the callback.

Only llama-cpp-python declares `cb_eval` in its `llama_context_params` and ships libggml as shared
libraries (cyllama links llama.cpp statically and exposes no callback): a tensor's name, type,
shape (ne) and strides (nb) are read through a ctypes mirror of the head of `struct ggml_tensor`
(type, buffer, ne[4], nb[4], op: unchanged since ggml's first releases) and its bytes through
`ggml_backend_tensor_get`, which copies from any backend's buffer.

ggml's layout: ne[0] is the fastest axis, so an activation [n_embd, n_tokens] is numpy
(n_tokens, n_embd) and Qcur [head_dim, n_head, n_tokens] is (n_tokens, n_head, head_dim).

Numerics: llama.cpp's defaults keep the KV cache in F16 and pick flash attention itself; a
comparison wants neither rounding, so a session runs with an F32 cache and flash attention off
unless asked otherwise, and says which it used (`numerics`).
"""

from __future__ import annotations

import ctypes
import os
from collections.abc import Callable

import numpy as np

from .llamacpp_binding import llama_threads

GGML_MAX_DIMS = 4
CACHE_TYPES = {"f32": 0, "f16": 1}  # ggml_type of the K and V cache
FLASH = {False: 0, True: 1, "auto": -1}  # llama_flash_attn_type: disabled, enabled, auto
DTYPES = {0: np.float32, 1: np.float16}  # the ggml types an activation is read from
# What llama.cpp's CPU kernels round the activations to before multiplying them by a weight stored
# so (ggml-cpu's vec_dot_type): a quantized or half-precision weight meets rounded activations,
# where our decoder multiplies float32 by float32. Rounding, never a fault.
_Q8_K = ("Q2_K", "Q3_K", "Q4_K", "Q5_K", "Q6_K", "IQ2_XXS", "IQ2_XS", "IQ2_S", "IQ3_XXS", "IQ3_S", "IQ4_XS",
         "IQ1_S", "IQ1_M", "TQ1_0", "TQ2_0")
ACTIVATIONS_AS = {"F16": "F16", "BF16": "BF16", "Q4_0": "Q8_0", "Q5_0": "Q8_0", "Q8_0": "Q8_0", "IQ4_NL": "Q8_0",
                  "MXFP4": "Q8_0", "Q4_1": "Q8_1", "Q5_1": "Q8_1", **{k: "Q8_K" for k in _Q8_K}}


class TensorHead(ctypes.Structure):
    """The first fields of ggml's `struct ggml_tensor` (ggml.h): enough for type and layout."""

    _fields_ = [("type", ctypes.c_int), ("buffer", ctypes.c_void_p),
                ("ne", ctypes.c_int64 * GGML_MAX_DIMS), ("nb", ctypes.c_size_t * GGML_MAX_DIMS), ("op", ctypes.c_int)]


def available() -> str | None:
    """None when llama-cpp-python (the binding with the eval callback) loads here, else why not."""
    try:
        import llama_cpp
    except (ImportError, OSError, RuntimeError) as e:
        return f"llama-cpp-python does not load here ({str(e).splitlines()[0][:160] if str(e) else type(e).__name__})"
    if "cb_eval" not in dict(llama_cpp.llama_context_params._fields_):
        return f"llama-cpp-python {llama_cpp.__version__} declares no cb_eval in llama_context_params"
    return None


_ggml: dict = {}


def _library():
    """The libggml-base llama-cpp-python loaded, with the functions read here typed."""
    if not _ggml:
        import llama_cpp

        lib = ctypes.CDLL(_loaded("libggml-base") or os.path.join(os.path.dirname(llama_cpp.__file__), "lib",
                                                                   "libggml-base.so"))
        lib.ggml_get_name.argtypes, lib.ggml_get_name.restype = [ctypes.c_void_p], ctypes.c_char_p
        lib.ggml_nbytes.argtypes, lib.ggml_nbytes.restype = [ctypes.c_void_p], ctypes.c_size_t
        lib.ggml_op_name.argtypes, lib.ggml_op_name.restype = [ctypes.c_int], ctypes.c_char_p
        lib.ggml_backend_tensor_get.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_size_t, ctypes.c_size_t]
        lib.ggml_backend_tensor_get.restype = None
        quiet = llama_cpp.llama_log_callback(lambda _level, _text, _user: None)  # it logs every graph it reserves
        llama_cpp.llama_log_set(quiet, None)
        _ggml.update(lib=lib, cpp=llama_cpp, quiet=quiet)
    return _ggml["lib"], _ggml["cpp"]


def _loaded(stem: str) -> str | None:
    """The file of a shared library this process has loaded (the copy libllama linked against,
    whatever its name in the wheel), from /proc/self/maps; None elsewhere."""
    try:
        with open("/proc/self/maps") as maps:
            for line in maps:
                path = line.rsplit(" ", 1)[-1].strip()
                if os.path.basename(path).startswith(stem + ".so"):
                    return path
    except OSError:
        pass
    return None


def read_tensor(lib, t: int) -> np.ndarray | None:
    """A copy of ggml tensor `t` as float32 numpy of four axes, ggml's reversed (ne[3], ne[2],
    ne[1], ne[0]: tokens before features); None for a type that is not F32 or F16."""
    head = TensorHead.from_address(t)
    dtype = DTYPES.get(head.type)
    if dtype is None:
        return None
    ne = [int(head.ne[i]) for i in range(GGML_MAX_DIMS)]
    nb = [int(head.nb[i]) for i in range(GGML_MAX_DIMS)]
    span = int(lib.ggml_nbytes(t))
    raw = np.empty(span, np.uint8)
    lib.ggml_backend_tensor_get(t, raw.ctypes.data, 0, span)
    shape = tuple(reversed(ne))
    if dtype is np.float32 and nb == [4, 4 * ne[0], 4 * ne[0] * ne[1], 4 * ne[0] * ne[1] * ne[2]]:
        return raw.view(np.float32).reshape(shape)  # contiguous F32 (the logits): the copy made above is ours
    view = np.lib.stride_tricks.as_strided(raw.view(dtype), shape=shape, strides=tuple(reversed(nb)))
    return np.array(view, dtype=np.float32)


class EvalSession:
    """A GGUF loaded by llama-cpp-python, run over one prompt at a time with the eval callback on.

    run(ids, wanted, take): every id at positions 0.. in one batch (one ubatch), logits of every
    position; `wanted(name, op)` says whether the tensor llama.cpp named so, made by ggml op `op`
    ("MUL_MAT", "RESHAPE", "ROPE"), is to be copied (asked once per node, in graph order),
    `take(name, array)` receives the copy. An exception raised by
    `take` stops the graph at that node and is raised again after llama_decode returns.
    wanted=None: no callback, the same context untraced (what the benchmark times against)."""

    def __init__(self, path: str, threads: int | None = None, kv_cache: str = "f32",
                 flash_attention: bool | str = False) -> None:
        if kv_cache not in CACHE_TYPES:
            raise ValueError(f"kv_cache must be one of {', '.join(CACHE_TYPES)}, not {kv_cache!r}")
        if flash_attention not in FLASH:
            raise ValueError(f"flash_attention must be True, False or 'auto', not {flash_attention!r}")
        why = available()
        if why:
            raise RuntimeError(f"tracing llama.cpp needs its eval callback: {why} (pip install llama-cpp-python)")
        self.lib, self.cpp = _library()
        self.path, self.kv_cache, self.flash_attention = path, kv_cache, flash_attention
        self.threads = threads or llama_threads(half=True)
        self.cpp.llama_backend_init()
        mp = self.cpp.llama_model_default_params()
        mp.n_gpu_layers = 0
        self.model = self.cpp.llama_model_load_from_file(os.fsencode(path), mp)
        if not self.model:
            raise RuntimeError(f"llama.cpp could not load {path}")
        self.n_vocab = int(self.cpp.llama_vocab_n_tokens(self.cpp.llama_model_get_vocab(self.model)))
        self.label = f"llama.cpp via llama-cpp-python {self.cpp.__version__}"

    @property
    def numerics(self) -> str:
        """The cache type and attention path the runs use, in words."""
        flash = {False: "off", True: "on", "auto": "auto (llama.cpp decides)"}[self.flash_attention]
        return f"KV cache {self.kv_cache.upper()}, flash attention {flash}"

    def run(self, ids: list[int], wanted: Callable[[str, str], bool] | None,
            take: Callable[[str, np.ndarray], None] | None) -> np.ndarray:
        cpp, lib = self.cpp, self.lib
        n = len(ids)
        failed: list[BaseException] = []

        def callback(t, ask, _user) -> bool:
            try:
                name = (lib.ggml_get_name(t) or b"").decode("utf-8", "replace")
                if ask:
                    op = (lib.ggml_op_name(TensorHead.from_address(t).op) or b"").decode("ascii", "replace")
                    return wanted is not None and bool(wanted(name, op))
                array = read_tensor(lib, t)
                if array is not None and take is not None:
                    take(name, array)
                return True
            except BaseException as e:  # noqa: BLE001 - raised again after llama_decode returns
                failed.append(e)
                return False  # stops the graph here

        hook = cpp.ggml_backend_sched_eval_callback(callback)  # held until the context is freed
        cp = cpp.llama_context_default_params()
        cp.n_ctx = max(n, 16)
        cp.n_batch = cp.n_ubatch = max(n, 16)  # one ubatch: each tensor once, every position in it
        cp.n_seq_max = 1
        cp.n_threads = cp.n_threads_batch = self.threads
        cp.type_k = cp.type_v = CACHE_TYPES[self.kv_cache]
        cp.flash_attn_type = FLASH[self.flash_attention]
        if wanted is not None:
            cp.cb_eval, cp.cb_eval_user_data = hook, None
        cp.swa_full = True
        cp.no_perf = True
        ctx = cpp.llama_init_from_model(self.model, cp)
        if not ctx:
            raise RuntimeError(f"llama.cpp could not make a context of {n} positions for {self.path}")
        batch = cpp.llama_batch_init(n, 0, 1)
        try:
            batch.n_tokens = n
            for i, token in enumerate(ids):
                batch.token[i], batch.pos[i], batch.n_seq_id[i], batch.logits[i] = int(token), i, 1, 1
                batch.seq_id[i][0] = 0
            code = cpp.llama_decode(ctx, batch)
            if failed:
                raise failed[0]
            if code != 0:
                raise RuntimeError(f"llama_decode returned {code} over {n} positions of {self.path}")
            logits = cpp.llama_get_logits(ctx)
            return np.ctypeslib.as_array(logits, shape=(n, self.n_vocab)).astype(np.float32)
        finally:
            cpp.llama_batch_free(batch)
            cpp.llama_free(ctx)
            del hook

    def close(self) -> None:
        model, self.model = getattr(self, "model", None), None
        if model:
            self.cpp.llama_model_free(model)
