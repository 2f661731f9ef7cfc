"""llama.cpp's own forward pass as a Side of `mx.trace` and `mx.compare_runs`: the tensors its
graph computes, read through ggml's eval callback (runtime/engines/llamacpp_eval.py), not ours.

    mx.trace("model.gguf", engine="llama.cpp")
    mx.compare_runs("hf-folder/", "model.gguf", b_engine="llama.cpp")

llama.cpp names its tensors `<name>-<layer>`; each maps onto the point our decoder records at the
same place (runtime/decoder.py MODULES), reshaped to our layout:

    attn_norm-N -> (N, attn_norm)    Qcur-N, Kcur-N, Vcur-N -> (N, q), (N, k), (N, v) before RoPE
    attn_out-N  -> (N, attn_out)     ffn_inp-N (sa_out-N) -> (N, attn_residual)
    ffn_norm-N  -> (N, ffn_norm)     ffn_out-N -> (N, ffn_out)    l_out-N -> (N, residual)
    embd (Gemma: inp_scaled) -> embed    result_norm -> final_norm    result_output -> logits

A name occurs more than once in a pass (Qcur names the projection, the projection plus its bias,
its reshape into heads and the rotated q): q, k and v are the reshape into heads (a view of the
fused projection where q, k, v are one matrix), after the bias and before RoPE, the point ours
records; of every other name the first. Where the family norms q and k
(Gemma 3, Qwen 3) `Qcur_normed`/`Kcur_normed` are our q and k. Q and K rows of a Llama GGUF are
permuted for llama.cpp's interleaved RoPE (the converter does it; our reader undoes it for the
weights): its Qcur/Kcur are un-permuted here the same way (tensors/names.unpermute_qk).

Tensors of llama.cpp with no point of ours (`kqv_out`, the attention before its output
projection; Gemma's `attn_post_norm`, `ffn_post_norm`) are recorded under their own names, so a
comparison lists them as points only llama.cpp records rather than dropping them; our points it
has no tensor for (Gemma's and Qwen2's attn_out: their graphs leave the output projection's
result unnamed) are listed the same way.

A mixture-of-experts layer (llm_graph_context::build_moe_ffn, llama.cpp as llama-cpp-python 0.3.36
vendors it) has one point of ours, its output; the rest are llama.cpp's own, per token (T), over
the E experts, or per chosen expert in the router's order (k of them):

    ffn_moe_out-N -> (N, ffn_out)       where the family has no shared expert (Mixtral, Qwen3-MoE:
                                        llama.cpp names no ffn_out then); beside one (Qwen2-MoE,
                                        DeepSeek) ffn_out-N, the sum plus the shared expert's, is
                                        ffn_out and ffn_moe_out-N is kept under its name
    ffn_moe_logits-N, ffn_moe_probs-N [T, E]     the router's logits and softmax (sigmoid: DeepSeek)
    ffn_moe_weights-N [T, k]            the chosen experts' probabilities; then, where the family
                                        does, ffn_moe_weights_norm-N (renormalised to 1),
                                        ffn_moe_weights_scaled-N, ffn_moe_weights_softmax-N (gpt-oss)
    ffn_moe_gate-N, ffn_moe_up-N, ffn_moe_down-N, ffn_moe_weighted-N [T, k, width]
                                        each chosen expert's projections, its output, times its weight
    ffn_shexp-N, ffn_shexp_gate-N, ffn_shexp_out-N   the shared expert's output, its sigmoid gate
                                        [T, 1] (Qwen2-MoE), the two multiplied

(also ffn_moe_logits_biased, ffn_moe_probs_biased and ffn_moe_gate_up where a family makes them).
The chosen experts' ids (ffn_moe_argsort, ffn_moe_topk) are integers the callback does not read.
Each names the GGUF tensors it reads, most direct first (MOE_PARTS): the stacked experts
`blk.N.ffn_{down,gate,up}_exps.weight` for an expert's output and for ffn_out (a fault in one
expert's rows is named by its layer's stacked tensor), `blk.N.ffn_gate_inp.weight` for the router.
"""

from __future__ import annotations

import os
from typing import Any

import numpy as np

from ..model.config import UnsupportedModel
from ..runtime.engines.llamacpp_eval import ACTIVATIONS_AS, EvalSession
from ..runtime.experts import is_moe
from ..runtime.weights import part_name
from ..tensors.names import (
    GGUF_EXPERT_BIASES,
    GGUF_EXPERTS,
    GGUF_GATE_UP_EXPS,
    GGUF_PARTS,
    GGUF_SCORE_BIAS,
    GGUF_SHARED,
    unpermute_qk,
)
from .points import MODULE_PARTS, config_place
from .side import Point, decoder_points, prompt_ids, token_texts, with_progress

ENGINE = "llama.cpp"
LAYER_NAMES = {"attn_norm": "attn_norm", "Qcur": "q", "Kcur": "k", "Vcur": "v", "attn_out": "attn_out",
               "ffn_inp": "attn_residual", "sa_out": "attn_residual", "ffn_norm": "ffn_norm",
               "ffn_out": "ffn_out", "l_out": "residual"}
HEADS = ("Qcur-", "Kcur-", "Vcur-")  # taken where they are laid out in heads
QK_NORMED = {"Qcur_normed": "q", "Kcur_normed": "k"}  # replace Qcur/Kcur where the family norms q and k
OWN = ("kqv_out", "attn_post_norm", "ffn_post_norm")  # llama.cpp's, with no point of ours
OUTER_NAMES = {"result_norm": "final_norm", "result_output": "logits"}
EMBED, EMBED_SCALED = "embd", "inp_scaled"  # the embedding rows; Gemma's scaled by sqrt(hidden)
OWN_PARTS = {"kqv_out": ("v", "q", "k"), "attn_post_norm": ("attn_out_norm", "o"), "ffn_post_norm": ("ffn_out_norm", "down")}

# A mixture-of-experts layer (llm_graph_context::build_moe_ffn), in the order it computes them: the
# router's logits and probabilities over every expert, the chosen experts' weights (renormalised,
# scaled), each chosen expert's projections and output [tokens, experts used, width], their
# weighted sum; a shared expert's output, its sigmoid gate and the two multiplied. Ours records
# none of these but the sum: the layer's ffn_out where the family has no shared expert (llama.cpp
# names no ffn_out then); beside a shared expert llama.cpp's ffn_out is the sum plus its output.
MOE_OWN = ("ffn_moe_logits", "ffn_moe_logits_biased", "ffn_moe_probs", "ffn_moe_probs_biased", "ffn_moe_weights",
           "ffn_moe_weights_softmax", "ffn_moe_weights_norm", "ffn_moe_weights_scaled", "ffn_moe_gate_up",
           "ffn_moe_gate", "ffn_moe_up", "ffn_moe_down", "ffn_moe_weighted", "ffn_moe_out", "ffn_shexp",
           "ffn_shexp_gate", "ffn_shexp_out")
MOE_OUT = "ffn_moe_out"  # the routed experts' weighted sum
PER_EXPERT = ("ffn_moe_gate_up", "ffn_moe_gate", "ffn_moe_up", "ffn_moe_down", "ffn_moe_weighted")  # [w, k, T]
# The GGUF tensors each reads, most direct first: the router (gpt-oss's bias, DeepSeek's choice
# bias), the stacked experts (gate and up apart or fused, gpt-oss's biases), the shared expert.
ROUTER = ("blk.{i}.ffn_gate_inp.weight", "blk.{i}.ffn_gate_inp.bias")
CHOICE = (*ROUTER, GGUF_SCORE_BIAS)
GATE, UP, DOWN = GGUF_EXPERTS
SH_GATE, SH_UP, SH_DOWN, SH_GATE_INP = GGUF_SHARED
EXPERTS = (DOWN, GATE, UP, GGUF_GATE_UP_EXPS, *GGUF_EXPERT_BIASES, *CHOICE)
SHARED = (SH_DOWN, SH_GATE, SH_UP)
MOE_PARTS = {
    "ffn_moe_logits": ROUTER, "ffn_moe_logits_biased": ROUTER[::-1], "ffn_moe_probs": ROUTER,
    "ffn_moe_probs_biased": (GGUF_SCORE_BIAS, *ROUTER), "ffn_moe_weights": CHOICE, "ffn_moe_weights_softmax": CHOICE,
    "ffn_moe_weights_norm": CHOICE, "ffn_moe_weights_scaled": CHOICE, "ffn_moe_gate_up": (GGUF_GATE_UP_EXPS, *CHOICE),
    "ffn_moe_gate": (GATE, GGUF_GATE_UP_EXPS, *CHOICE), "ffn_moe_up": (UP, GGUF_GATE_UP_EXPS, *CHOICE),
    "ffn_moe_down": EXPERTS, "ffn_moe_weighted": EXPERTS, "ffn_moe_out": EXPERTS,
    "ffn_shexp": SHARED, "ffn_shexp_gate": (SH_GATE_INP,), "ffn_shexp_out": (SH_GATE_INP, *SHARED),
    # our points of an MoE layer: the experts stand where a dense layer's down projection does
    "ffn_out": (*EXPERTS, *SHARED, SH_GATE_INP),
}


class LlamaCppSide:
    """A GGUF run by llama.cpp (llama-cpp-python), its points read from its own graph."""

    per_layer = False  # llama_decode runs the whole pass in one call
    gguf = True
    engine = ENGINE

    def __init__(self, path: str, kv_cache: str = "f32", flash_attention: bool | str = False,
                 threads: int | None = None, owned: bool = False) -> None:
        from ..opener import open as open_checkpoint
        from ..runtime.describe import describe

        path = os.fspath(path)
        if not path.endswith(".gguf"):
            raise UnsupportedModel(f"engine='llama.cpp' traces a GGUF; {path!r} is not one (mx.convert(..., "
                                   "format='gguf') writes one).")
        self.ckpt = open_checkpoint(path)
        try:
            self.config, self.tokenizer, _ = describe(self.ckpt, path, engine=True)
            self.session = EvalSession(path, threads, kv_cache, flash_attention)
        except BaseException:
            self.ckpt.close()
            raise
        self.label, self.owned = path, owned
        self.num_layers = self.config.num_layers
        self.numerics = self.session.numerics
        self.engine_label = f"{self.session.label}, {self.numerics}"
        names = dict(LAYER_NAMES)
        if self.config.qk_norm:
            names.update(QK_NORMED)
            del names["Qcur"], names["Kcur"]
        self._names = {**names, **{n: n for n in OWN}}
        shared = bool(self.config.shared_expert_size)
        self._moe_own = tuple(n for n in MOE_OWN if shared or n != MOE_OUT) if self.config.experts else ()
        self._names.update({n: n for n in self._moe_own})
        if self.config.experts and not shared:
            self._names[MOE_OUT] = "ffn_out"
        self._outer = {**OUTER_NAMES, (EMBED_SCALED if self.config.embed_scale != 1.0 else EMBED): "embed"}

    # -- the points --------------------------------------------------------------------------

    def point_of(self, name: str) -> Point | None:
        """The point llama.cpp's tensor `name` stands for, None for one not recorded."""
        if name in self._outer:
            return None, self._outer[name]
        base, _, layer = name.rpartition("-")
        if base in self._names and layer.isdigit():
            return int(layer), self._names[base]
        return None

    def points(self) -> list[Point]:
        ours = decoder_points(self.num_layers)
        own = [(i, n) for i in range(self.num_layers)
               for n in OWN + (self._moe_own if is_moe(self.config, i) else ()) if n in self._names]
        return ours[:-2] + own + ours[-2:]

    def _shaped(self, point: Point, x: np.ndarray, n: int) -> np.ndarray:
        """llama.cpp's tensor in our decoder's layout: (tokens, heads, head_dim) for q, k, v with
        Llama's q/k rows back in HF order; (tokens, features) otherwise."""
        cfg, module = self.config, point[1]
        if module in PER_EXPERT:  # one row per token and chosen expert, in the router's order
            return x.reshape(n, cfg.experts_per_token, -1)
        x = x.reshape(n, -1)
        if module in ("q", "k", "v"):
            heads = cfg.num_heads if module == "q" else cfg.num_kv_heads
            if module != "v" and cfg.gguf_qk_permuted:  # the projection's rows, each head's pairs back apart
                x = np.ascontiguousarray(unpermute_qk(x.T, heads).T)
            x = x.reshape(n, heads, -1)
        return x

    def steps(self, ids: list[int], recorder, progress=None, label: str = "tracing"):
        """The whole pass in the first step (llama_decode runs it in one call); recorder gets
        each point as llama.cpp computes it; returns the float32 logits."""
        record = with_progress(recorder, progress, label, self.num_layers)
        n, seen = len(ids), set()

        def wanted(name: str, op: str) -> bool:
            point = self.point_of(name)
            if point is None or point in seen:
                return False
            if name.startswith(HEADS) and op not in ("RESHAPE", "VIEW"):
                return False  # q, k, v: in heads, after the bias, before RoPE
            seen.add(point)
            return True

        def take(name: str, x: np.ndarray) -> None:
            point = self.point_of(name)
            if point is not None:
                record(point[0], point[1], self._shaped(point, x, n))

        logits = self.session.run(ids, wanted, take)
        yield self.num_layers - 1  # every layer is done
        return logits

    # -- the weights behind a point ------------------------------------------------------------

    def weights(self, point: Point) -> list[str]:
        layer, module = point
        parts = OWN_PARTS.get(module) or MODULE_PARTS.get(module, ())
        names = [part_name(self.config, p, layer, True) for p in parts if p in GGUF_PARTS]
        if layer is not None and is_moe(self.config, layer) and module in (*MOE_PARTS, "residual"):
            experts = [t.format(i=layer) for t in MOE_PARTS["ffn_out" if module == "residual" else module]]
            names = names + experts if module == "residual" else experts + names  # residual: its norm first
        if module == "logits" and "output.weight" not in self.ckpt.tensors:
            names = [part_name(self.config, "embed", None, True)]
        return [n for n in dict.fromkeys(names) if n in self.ckpt.tensors]

    def place(self, name: str | None) -> dict[str, Any]:
        info = self.ckpt.tensors.get(name) if name else None
        if info is None:
            return {"tensor": name, "file": None, "offset": None, "length": None}
        return {"tensor": name, "file": info.file, "offset": int(info.offset), "length": int(info.length)}

    def config_place(self, field: str) -> dict[str, Any] | None:
        return config_place(self.ckpt, field)

    def kind(self, name: str | None) -> str | None:
        """How the weight is stored, with the rounding llama.cpp adds to what it multiplies: the
        activations a quantized or half weight meets (ACTIVATIONS_AS), and behind the attention
        output an F16 KV cache. The verdict calls a difference of kinds rounding (a drift)."""
        info = self.ckpt.tensors.get(name) if name else None
        if info is None:
            return None
        rounding = [f"activations as {ACTIVATIONS_AS[info.label]}"] if info.label in ACTIVATIONS_AS else []
        if self.session.kv_cache != "f32" and name.endswith("attn_output.weight"):
            rounding.append(f"K/V cached as {self.session.kv_cache.upper()}")
        return f"{info.label} ({', '.join(rounding)} in llama.cpp)" if rounding else info.label

    def nonfinite_weight(self, point: Point) -> str | None:
        from ..tensors.read import Undecodable

        for name in self.weights(point):
            try:
                if not np.isfinite(self.ckpt.read(name)).all():
                    return name
            except (Undecodable, ValueError, MemoryError):
                continue
        return None

    # -- tokens ----------------------------------------------------------------------------------

    def ids(self, prompt: str | None, ids) -> list[int]:
        return prompt_ids(self, prompt, ids)

    def encode_prompt(self, text: str) -> list[int]:
        """Our tokenizer of the GGUF (the same ids our decoder's side makes)."""
        if self.tokenizer is None:
            raise UnsupportedModel(f"{self.label!r} has no tokenizer we read: pass ids=")
        return self.tokenizer.encode(text)

    def _check_ids(self, token_ids) -> list[int]:
        ids = [int(i) for i in np.asarray(token_ids).reshape(-1)]
        if not ids:
            raise ValueError("a run needs at least one token id")
        bad = [i for i in ids if not 0 <= i < self.session.n_vocab]
        if bad:
            raise ValueError(f"token id {bad[0]} is outside llama.cpp's vocabulary (0..{self.session.n_vocab - 1})")
        return ids

    def encode(self, text: str) -> list[int] | None:
        return None if self.tokenizer is None else self.encode_prompt(text)

    def tokens(self, ids: list[int]) -> list[str]:
        return token_texts(self, ids)

    def close(self) -> None:
        if self.owned:
            self.free()

    def free(self) -> None:
        self.session.close()
        self.ckpt.close()
