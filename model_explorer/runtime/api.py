"""`load_model` and `Model`: a checkpoint turned into something that generates text.

    model = load_model()                       # the bundled SmolLM2-135M-Instruct Q4_1 GGUF
    result = model.generate("What is the capital of France?", chat=True, max_new_tokens=32)
    print(result.text); print(result.report())
    model.forward([1, 2, 3])                   # numpy logits, shape (3, vocab_size)
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ..model.config import ModelConfig, UnsupportedModel
from ..model.tokenizer import StreamDecoder, Tokenizer
from . import memory_budget
from . import process_memory as memory
from .decoder import Decoder, KVCache
from .describe import config_of, describe
from .engines import auto_weights, get_backend, is_engine, wants_llamacpp
from .engines import torch_wquant as wquant
from .memory_budget import RunPlan, WontFit
from .sampling import choose
from .streamed import StreamedWeights
from .weights import DequantReport, Weights

PREFILL_CHUNK = 512


@dataclass
class GenerationResult:
    """What one `generate` call produced and how fast.

    text: the generated text (prompt excluded, special tokens dropped).
    tokens: generated token ids; prompt_tokens: the ids fed in.
    prefill_tps: prompt tokens per second of the first forward pass.
    decode_tps: tokens per second of the one-token forward passes that followed (sampling and
        detokenizing included, time inside the `stream` callback excluded).
    peak_memory_bytes: the accelerator's peak on a GPU, else the process's peak resident memory
        during this call (Linux resets the peak per call; elsewhere it is the process lifetime peak).
    dequant: the model's DequantReport (per-tensor dequantize time and sizes).
    """

    text: str
    tokens: list[int]
    prompt_tokens: list[int]
    prefill_seconds: float
    decode_seconds: float
    prefill_tps: float
    decode_tps: float
    decode_steps: int
    device: str
    peak_memory_bytes: int | None
    host_peak_memory_bytes: int | None
    dequant: DequantReport
    stop_reason: str  # "eos" | "max_new_tokens" | "stopped" (the stream callback returned False)
    prompt: str = ""
    load_seconds: float = 0.0

    def report(self) -> str:
        """The timing report, a few lines of text."""
        lines = [
            f"device: {self.device}",
            f"prompt: {len(self.prompt_tokens)} tokens, prefill {self.prefill_seconds:.3f} s "
            f"({self.prefill_tps:.1f} tokens/s)",
            f"generated: {len(self.tokens)} tokens ({self.stop_reason}), decode {self.decode_seconds:.3f} s "
            f"({self.decode_tps:.1f} tokens/s)",
            f"peak memory: {memory.describe(self.peak_memory_bytes)}"
            + (f" (host {memory.describe(self.host_peak_memory_bytes)})"
               if self.host_peak_memory_bytes != self.peak_memory_bytes else ""),
            f"load: {self.load_seconds:.2f} s; {self.dequant.summary()}",
        ]
        return "\n".join(lines)

    def to_dict(self) -> dict[str, Any]:
        d = {k: getattr(self, k) for k in self.__dataclass_fields__ if k != "dequant"}
        d["dequant"] = {"mode": self.dequant.mode, "seconds": self.dequant.seconds,
                        "quantized_bytes": self.dequant.quantized_bytes,
                        "dequantized_bytes": self.dequant.dequantized_bytes}
        return d


@dataclass
class Model:
    """A loaded decoder model: config (its family's features: `config.features()`), tokenizer,
    weights, and the backend they live on.

    Build with `load_model`. `forward` gives numpy logits; `generate` gives text and timings.
    """

    config: ModelConfig
    # None when the folder has no tokenizer files: forward(ids) runs, text needs one.
    tokenizer: Tokenizer | None
    weights: Weights
    backend: Any
    source: str
    load_seconds: float = 0.0
    load_peak_memory_bytes: int | None = None
    tokenizer_problem: str | None = None
    # How the run holds its weights and why (memory_budget.RunPlan); None on engines that decide
    # for themselves (llama.cpp, torch).
    run_plan: RunPlan | None = None
    decoder: Decoder = field(init=False, repr=False)

    def __post_init__(self) -> None:
        # An engine (llama.cpp) runs the whole forward pass itself; arrays get our decoder.
        self.decoder = self.backend if self.is_engine else Decoder(self.config, self.weights, self.backend)

    @property
    def is_engine(self) -> bool:
        """Whether the backend runs the forward pass itself (llama.cpp): no weights of ours."""
        return is_engine(self.backend)

    def close(self) -> None:
        """Close the checkpoint's files (a keep_quantized model cannot generate after this)."""
        self.weights.ckpt.close()
        close_engine = getattr(self.backend, "close", None)
        if close_engine is not None:
            close_engine()

    def __enter__(self) -> Model:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def __del__(self) -> None:
        try:
            self.close()
        except Exception:  # noqa: BLE001 - interpreter shutdown: nothing left to do
            pass

    @property
    def device(self) -> str:
        """Human-readable device and backend, e.g. "cpu (numpy)" or "cuda (NVIDIA H100, torch)"."""
        return self.backend.device_name

    @property
    def dequant(self) -> DequantReport:
        return self.weights.report

    def __repr__(self) -> str:
        c = self.config
        features = c.features()
        return (f"<Model {c.architecture} {c.num_layers} layers, hidden {c.hidden_size}, vocab "
                f"{c.vocab_size}" + (f" ({'; '.join(features)})" if features else "")
                + f" on {self.device}; {self.dequant.summary()}>")

    # -- forward ---------------------------------------------------------------------------------

    def new_cache(self, capacity: int = 256) -> KVCache:
        """An empty KV cache; pass it to `forward` to continue a sequence token by token."""
        return self.decoder.new_cache(capacity)

    def forward(self, token_ids, cache: KVCache | None = None, last_only: bool = False) -> np.ndarray:
        """float32 numpy logits, shape (len(token_ids), vocab_size) (or (1, vocab) if last_only).

        Without `cache` the ids are a whole sequence from position 0; with one, they continue it.
        """
        ids = self._check_ids(token_ids)
        cache = cache if cache is not None else self.new_cache(len(ids))
        return self.backend.to_numpy(self.decoder.forward(ids, cache, last_only))

    def _check_ids(self, token_ids) -> list[int]:
        ids = [int(i) for i in np.asarray(token_ids).reshape(-1)]
        if not ids:
            raise ValueError("forward needs at least one token id")
        bad = [i for i in ids if not 0 <= i < self.config.vocab_size]
        if bad:
            raise ValueError(f"token id {bad[0]} is outside the vocabulary (0..{self.config.vocab_size - 1})")
        return ids

    # -- generate --------------------------------------------------------------------------------

    def _need_tokenizer(self) -> Tokenizer:
        if self.tokenizer is None:
            raise UnsupportedModel(f"{self.source!r} has no tokenizer, so text cannot be turned into token "
                                   f"ids: {self.tokenizer_problem or 'no tokenizer.json'}. Add tokenizer.json "
                                   "(and tokenizer_config.json for the chat template) from the model's "
                                   "repository; forward(token_ids) runs without one.")
        return self.tokenizer

    def encode_prompt(self, prompt: str | list[dict[str, str]], chat: bool = False) -> list[int]:
        """Token ids for a prompt; with chat=True (or a list of {"role", "content"} messages) the
        model's chat template wraps it first."""
        self._need_tokenizer()
        if isinstance(prompt, list):
            return self.tokenizer.encode_chat(prompt)
        if chat:
            return self.tokenizer.encode_chat([{"role": "user", "content": prompt}])
        return self.tokenizer.encode(prompt)

    def generate(self, prompt: str | list[dict[str, str]] = "", max_new_tokens: int = 64,
                 temperature: float = 0.0, top_k: int = 0, top_p: float = 1.0, seed: int | None = None,
                 chat: bool = False, stream: Callable[[str], Any] | None = None,
                 stop_at_eos: bool = True) -> GenerationResult:
        """Continue `prompt` by up to `max_new_tokens` tokens.

        temperature 0 (default) is greedy and deterministic; otherwise tokens are sampled with
        `top_k` / `top_p` from a generator seeded with `seed`. `stream(piece)` is called with
        each new piece of text as soon as it decodes; if it returns False, generation stops
        there (stop_reason "stopped"). Generation also stops at an end-of-sequence id.
        """
        ids = self.encode_prompt(prompt, chat)
        if not ids:
            ids = [self.tokenizer.bos_id] if self.tokenizer.bos_id is not None else []
        if not ids:
            raise ValueError("The prompt encodes to no tokens and the model has no BOS token to start from.")
        prompt_text = self.tokenizer.decode(ids)
        rng = np.random.default_rng(seed)
        eos = set(self.tokenizer.eos_ids) if stop_at_eos else set()
        streamer = StreamDecoder(self.tokenizer)
        b = self.backend
        memory.reset_peak()
        b.reset_memory_peak()
        cache = self.new_cache(len(ids) + max(0, max_new_tokens))

        t0 = time.perf_counter()
        checked = self._check_ids(ids)
        # Long prompts go in chunks, so the attention scores stay (chunk x context), not (n x n).
        for start in range(0, len(checked), PREFILL_CHUNK):
            logits = self.decoder.forward(checked[start:start + PREFILL_CHUNK], cache, last_only=True)
        logits = b.to_numpy(logits)
        prefill = time.perf_counter() - t0

        generated: list[int] = []
        stop, steps = "max_new_tokens", 0
        in_callback = 0.0  # time spent in `stream` is the caller's, not the model's
        t1 = time.perf_counter()
        while len(generated) < max_new_tokens:
            token = choose(logits[-1], temperature, top_k, top_p, rng)
            if token in eos:
                stop = "eos"
                break
            generated.append(token)
            if stream is not None:
                piece = streamer.push(token)
                if piece:
                    tc = time.perf_counter()
                    verdict = stream(piece)
                    in_callback += time.perf_counter() - tc
                    if verdict is False:
                        stop = "stopped"
                        break
            if len(generated) == max_new_tokens:
                break
            logits = b.to_numpy(self.decoder.forward([token], cache, last_only=True))
            steps += 1
        decode = time.perf_counter() - t1 - in_callback
        if stream is not None and stop != "stopped":
            tail = streamer.flush()
            if tail:
                stream(tail)
        host_peak = memory.peak_rss()
        device_peak = b.memory_peak()
        return GenerationResult(
            text=self.tokenizer.decode(generated, skip_special_tokens=True), tokens=generated,
            prompt_tokens=ids, prefill_seconds=prefill, decode_seconds=decode,
            prefill_tps=len(ids) / prefill if prefill > 0 else float("inf"),
            decode_tps=steps / decode if steps and decode > 0 else 0.0, decode_steps=steps,
            device=self.device, peak_memory_bytes=device_peak if device_peak is not None else host_peak,
            host_peak_memory_bytes=host_peak, dequant=self.dequant, stop_reason=stop,
            prompt=prompt_text, load_seconds=self.load_seconds)


def load_model(source: str | os.PathLike | None = None, device: str = "auto", *,
               keep_quantized: bool = False, backend: str | None = None, weights: str = "auto",
               progress: Callable[[int, int, str], Any] | None = None, context: int = 2048,
               cache_dir: str | None = None, stream: bool | None = None) -> Model:
    """Load a decoder checkpoint (the families in model/config.py, from config.json or GGUF) to generate with.

    source: a GGUF file (hyperparameters, tokenizer and chat template from its metadata), a
        Hugging Face folder (config.json + safetensors + tokenizer.json), an MLX-quantized folder,
        or None for the bundled SmolLM2-135M-Instruct sample.
    device: "auto" | "cpu" | "cuda" | "mps". "cpu" runs numpy; "auto" uses a GPU when torch finds
        one, else llama.cpp when a binding of it loads (llamacpp_binding.py) and the source is a GGUF,
        else numpy; a GGUF whose architecture the numpy decoder does not run goes to llama.cpp
        under "auto" whenever a binding loads (without one, the refusal says so). backend="torch" runs torch even on the CPU; backend="llama.cpp" runs llama.cpp
        (safetensors and MLX sources are converted to a Q8_0 GGUF first, once, into `cache_dir`,
        default ~/.cache/model_explorer/gguf); backend="numpy" forces the readable reference.
    context: positions llama.cpp reserves its KV cache for (its other backends grow as needed).
    keep_quantized: keep layer weights in their stored (quantized) form and dequantize each layer
        during every forward pass: lower peak memory, slower generation.
    weights: how a torch backend holds the layer matrices: "float32", "int8" or "int4" (torch's
        weight-only kernels; requantized from the decoded values, the load report gives the
        error), or "auto": on CUDA no more precision than the file stored (4-bit files -> int4,
        8-bit -> int8, float -> float32), float32 elsewhere (those kernels are slow on CPUs
        without AVX-512, and the numpy reference always runs the decoded values as they are).
    progress: called as progress(done, total, tensor_name) after each tensor is dequantized.
    stream: on the numpy engine, None decides before loading (memory_budget.plan, over `context`
        positions): every weight in memory when that fits, else streamed (each layer read from
        the file when the pass reaches it: runtime/streamed.py), else WontFit (a MemoryError)
        naming the need, the memory available and the choices. True streams; False never does.

    Raises UnsupportedModel (a ValueError) naming what is missing when the checkpoint is not a
    model the runtime can run, FileNotFoundError when the source does not exist.
    """
    from ..opener import open as open_checkpoint
    from ..samples import sample_path

    path = os.fspath(source) if source is not None else sample_path()
    if weights not in ("auto", *wquant.KINDS):
        raise ValueError(f"weights must be 'auto' or one of {', '.join(wquant.KINDS)}, not {weights!r}")
    if keep_quantized and weights not in ("auto", "float32"):
        raise ValueError("keep_quantized=True dequantizes the file's blocks layer by layer; it does "
                         f"not combine with weights={weights!r}, which holds requantized matrices.")
    if wants_llamacpp(path, device, backend, keep_quantized):
        if weights != "auto":
            raise ValueError("llama.cpp runs the GGUF's own blocks; leave weights='auto' for it.")
        return _load_llamacpp(path, context, cache_dir)
    be = get_backend(device, backend, "float32" if weights == "auto" else weights)
    memory.reset_peak()
    t0 = time.perf_counter()
    ckpt = open_checkpoint(path)
    try:
        cfg, tokenizer, tokenizer_problem = describe(ckpt, path)
        if weights == "auto" and not keep_quantized:
            be = auto_weights(be, ckpt, cfg)
        run_plan = None
        if be.name == "numpy":
            run_plan = memory_budget.plan(ckpt, context, stream, cfg=cfg)
            if run_plan.mode == "refused":
                raise WontFit(run_plan)
        elif stream:
            raise ValueError("stream=True runs on the numpy engine (device='cpu'); torch holds "
                             "its weights on the device")
        if run_plan is not None and run_plan.streams:
            held = StreamedWeights(ckpt, cfg, be, progress=progress)
        else:
            held = Weights(ckpt, cfg, be, keep_quantized=keep_quantized, progress=progress)
    except BaseException:
        ckpt.close()
        raise
    if not (keep_quantized or isinstance(held, StreamedWeights)):
        ckpt.close()  # every weight is in memory now
    be.synchronize()
    seconds = time.perf_counter() - t0
    return Model(cfg, tokenizer, held, be, path, seconds, be.memory_peak() or memory.peak_rss(),
                 tokenizer_problem, run_plan)


def engine_plan(source: str | os.PathLike | None = None, device: str = "auto", context: int = 2048) -> str:
    """Which engine `load_model(source, device)` will run and why, with the memory it will take,
    said before anything is loaded (the run cell shows it): llama.cpp for a GGUF when a binding
    loads, torch on a GPU, else numpy in memory, streamed, or refused (memory_budget.plan)."""
    from ..model.memory import llamacpp_text
    from ..opener import open as open_checkpoint
    from ..samples import sample_path

    path = os.fspath(source) if source is not None else sample_path()
    if wants_llamacpp(path, device, None, False):
        with open_checkpoint(path) as ckpt:
            return ("llama.cpp: a GGUF and a llama.cpp binding that loads; it runs the file's own blocks, "
                    "quantized as stored. It will hold " + llamacpp_text(ckpt, context))
    be = get_backend(device, None, "float32")
    if be.name != "numpy":
        return f"torch on {be.device}: weights held on the device"
    # device "cpu" asks for the numpy reference where "auto" would run llama.cpp: say so
    other = (". Device \"auto\" would run llama.cpp instead (the file's own quantized blocks: faster, "
             "less memory)." if device == "cpu" and wants_llamacpp(path, "auto", None, False) else "")
    with open_checkpoint(path) as ckpt:
        # the config says which layers stream block by block; without it, the upper bound
        return "numpy on the CPU, " + memory_budget.plan(ckpt, context, cfg=config_of(ckpt)).text + other


# the choice lives in engines/ (these names stay for callers of the module)
_auto_weights, _wants_llamacpp = auto_weights, wants_llamacpp


def _load_llamacpp(path: str, context: int, cache_dir: str | None) -> Model:
    """Our tokenizer, template and sampler around llama.cpp's forward pass."""
    from ..opener import open as open_checkpoint
    from .engines import llamacpp

    memory.reset_peak()
    t0 = time.perf_counter()
    with open_checkpoint(path) as ckpt:
        cfg, tokenizer, tokenizer_problem = describe(ckpt, path, engine=ckpt.format == "gguf")
    gguf, converted = llamacpp.cached_gguf(path, cache_dir)
    engine = llamacpp.LlamaCppEngine(gguf, n_ctx=context)
    weights = llamacpp.EngineWeights(llamacpp.EngineReport(gguf, converted))
    return Model(cfg, tokenizer, weights, engine, path, time.perf_counter() - t0, memory.peak_rss(),
                 tokenizer_problem)
