"""`mx.compare_runs`: run two checkpoints on the same token ids and say where they part ways.

    d = mx.compare_runs("model-f32/", "model-q8_0.gguf", prompt="The capital of France is")
    d.table()               # per layer x module: cosine, relative L2, max |a - b| of the activations
    d.first_divergence      # {"layer", "module", "cosine", "rel_l2", "tensor", "offset", ...} or None
    d.kld                   # {"mean", "median", "p99", "max"} of KL(P_a || P_b) per position, nats
    d.top1_agreement        # share of positions whose most likely next token agrees
    mx.compare_runs(a, b, text=open("eval.txt").read()).perplexity   # {"a": ..., "b": ...}
    d.show()                # the widget: heatmap, first divergence explained (widgets/runs_view.py)

Both run through the same decoder (runtime/decoder.py), so an HF folder, a GGUF (llama.cpp's q/k row
order undone at load), a Hub-quantized or an MLX folder record the same named points, and each
point maps to the weight tensors feeding it in each checkpoint (trace.module_tensors).

The verdict (verdict.py): the runs agree when their logits are equal within float32 noise;
otherwise `first_divergence` names the first point whose difference leaves float noise, a jump
when it steps up from agreement (a wrong weight, a RoPE base, a norm epsilon) and a drift when
it is there from the start or comes from rounding and grows slowly (quantization, a lower
precision), or a later point that jumps far above the drift.
"""

from __future__ import annotations

from typing import Any

from ..model.config import ModelConfig
from ..runtime.decoder import drain
from ..runtime.memory_budget import WontFit
from .config_diff import config_differences, differing_places
from .engines import open_side
from .pairing import Pairing, together
from .run_diff import RunDiff
from .side import DEFAULT_PROMPT, Side, token_bound
from .side_facts import Facts, facts_after_run, why_unaligned


def _check_shapes(ca, cb) -> None:
    for what in ("num_layers", "hidden_size", "vocab_size"):
        va, vb = getattr(ca, what, None), getattr(cb, what, None)
        if va is not None and vb is not None and va != vb:
            raise ValueError(f"the two models differ in {what} (a {getattr(ca, what)}, b {getattr(cb, what)}): "
                             "their runs cannot be compared module by module.")


def tokenizer_mismatch(a_tokens: list[str], side_b: Side, text: str | None, ids: list[int]) -> dict[str, Any] | None:
    """Where b's tokenizer splits `text` differently from a's ids (None: the same, or no text)."""
    theirs = None if text is None else side_b.encode(text)
    if theirs is None or theirs == ids:
        return None
    at = next((i for i, (x, y) in enumerate(zip(ids, theirs)) if x != y), min(len(ids), len(theirs)))
    return {"position": at, "a_ids": ids, "b_ids": theirs, "a_tokens": a_tokens[at:at + 4],
            "b_tokens": side_b.tokens(theirs[at:at + 4])}


def compare_runs(a, b, prompt: str | None = None, ids=None, text: str | None = None, *,
                 device: str = "cpu", stream: bool | None = None, progress=None,
                 a_engine: str | None = None, b_engine: str | None = None) -> RunDiff:
    """Run `a` and `b` (anything `load_model` takes, or loaded Models) on the same token ids and
    compare them point by point. The ids: `ids` as given, else `text` (then each side's perplexity
    of it is computed too) or `prompt` (default: a plain sentence) tokenized by a's tokenizer; b's
    tokenizer is only checked against it (RunDiff.tokenizer_mismatch).

    The two runs go in lock step, layer by layer: b runs a layer, and a is advanced to the same
    layer as b's points arrive; each of a's activations is dropped once compared, so two streamed
    models (each read from its files a block at a time) compare in the memory of about one layer
    of each. When b does not fit beside a (memory_budget refuses it), a runs first and goes, then b.
    stream: as in load_model (None: block by block when a model does not fit). progress: called
    as progress(label, layers done, layers) ("running a and b" in lock step, else "running a"
    then "running b"); False stops (RunStopped). None shows a progress bar when a run streams.
    Points one run records and the other does not (or of another shape) are `RunDiff.unpaired`.
    a_engine, b_engine: "decoder", "transformers", "onnxruntime", "litert", "llama.cpp"
    (runs/engines.py); None picks by format (an .onnx runs on onnxruntime). b is aligned to a:
    an export's graph nodes are matched to a's modules (align.py)."""
    if text is not None and (prompt is not None or ids is not None):
        raise ValueError("text= is the input the perplexity is measured on: give it alone, without "
                         "prompt= or ids=")
    words = text if text is not None else prompt
    if words is None and ids is None:
        words = DEFAULT_PROMPT
    positions = token_bound(words, ids)
    side_a = open_side(a, a_engine, device, stream, positions)
    side_b = None
    try:
        token_ids = side_a.ids(words, ids)
        facts_a = Facts.of(side_a, token_ids)
        side_b = _open_beside(b, b_engine, side_a, device, stream, positions)
        if side_b is not None:
            try:
                checked = _checked_b(side_b, facts_a, token_ids, words, ids)
                cmp, logits_a, logits_b = together(side_a, side_b, token_ids, progress)
                facts_b = facts_after_run(side_b, cmp, token_ids)
                unaligned_b = list(getattr(side_b, "unaligned", []))
            finally:
                side_b.close()
        else:  # one after the other: a's activations are kept until b has compared them
            cmp = Pairing()
            logits_a = drain(side_a.steps(token_ids, cmp.keep, progress, "running a"))
    finally:
        side_a.close()
    if side_b is None:
        del side_a  # when loaded here, a's weights go before b's arrive
        side_b = open_side(b, b_engine, device, stream, positions)
        try:
            checked = _checked_b(side_b, facts_a, token_ids, words, ids)
            logits_b = drain(side_b.steps(token_ids, cmp, progress, "running b"))
            cmp.finish()
            facts_b = facts_after_run(side_b, cmp, token_ids)
            unaligned_b = list(getattr(side_b, "unaligned", []))
        finally:
            side_b.close()
    for row in cmp.rows:
        key = (row["layer"], row["module"])
        row["tensor"], row["tensor_a"] = facts_b.names.get(key), facts_a.names.get(key)
        row["tensors"] = facts_b.feeding.get(key, [])
        row["kind"], row["kind_a"] = facts_b.kinds.get(row["tensor"]), facts_a.kinds.get(row["tensor_a"])
    config_diff, mismatch = checked
    if facts_a.has_logits != facts_b.has_logits:
        raise ValueError(f"a ({facts_a.engine}) {'has' if facts_a.has_logits else 'has no'} logits and b "
                         f"({facts_b.engine}) {'has' if facts_b.has_logits else 'has no'}: their outputs differ in kind")
    why_unaligned(cmp.unpaired, unaligned_b)
    for row in cmp.rows:
        key = (row["layer"], row["module"])
        row["node_b"] = (facts_b.nodes.get(key) or {}).get("node")
        row["op"] = (facts_b.nodes.get(key) or {}).get("op")
    return RunDiff(facts_a.label, facts_b.label, max(facts_a.config.num_layers, facts_b.config.num_layers), token_ids,
                   facts_a.tokens, cmp.rows, logits_a, logits_b, facts_b.places, mismatch, text, config_diff,
                   facts_a.places, cmp.unpaired, facts_a.engine, facts_b.engine,
                   engine_labels={"a": facts_a.engine_label, "b": facts_b.engine_label},
                   has_logits=facts_a.has_logits, nodes=facts_b.nodes, nodes_a=facts_a.nodes,
                   config_places=differing_places(config_diff, facts_a.config_places, facts_b.config_places))


def _open_beside(b, engine: str | None, side_a: Side, device: str, stream: bool | None,
                 positions: int) -> Side | None:
    """b's side loaded while a is held, or None when b is a itself or does not fit beside a:
    then the runs go one after the other. a is b's reference: an export is aligned to its weights."""
    if b is getattr(side_a, "model", None):
        return None
    try:
        return open_side(b, engine, device, stream, positions, reference=side_a)
    except WontFit:
        if getattr(side_a, "engine", "decoder") != "decoder":
            raise  # only our decoder can go one run after the other
        return None


def _checked_b(side_b: Side, facts_a: Facts, token_ids, words, ids) -> tuple[dict, dict | None]:
    """b's config differences and tokenizer mismatch against a, before b runs."""
    _check_shapes(facts_a.config, side_b.config)
    if not (isinstance(facts_a.config, ModelConfig) and isinstance(side_b.config, ModelConfig)):
        config_diff = {}  # two engines' descriptions: each point's node says what differs (node_note)
    else:
        config_diff = config_differences(facts_a.config, side_b.config, same_format=facts_a.gguf == side_b.gguf)
    return config_diff, tokenizer_mismatch(facts_a.tokens, side_b, words if ids is None else None, token_ids)
