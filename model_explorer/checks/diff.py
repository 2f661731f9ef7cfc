"""`mx.diff(a, b)`: two checkpoints compared tensor by tensor, across formats too.

Names are matched directly, or through the HF <-> GGUF mapping of the GGUF side's architecture
when one side is GGUF and the other is not (an expert of a Hugging Face MoE against its row of
llama.cpp's stacked ffn_*_exps); what llama.cpp's converter changes is undone on the GGUF side:
the Q/K row permutation (using the head counts from its metadata or config.json) and Gemma's
norms stored as 1 + w. Values are streamed a few rows at a time, so two large models compare in
bounded memory.
"""

from __future__ import annotations

import math

import numpy as np

from ..ggml import Keys
from ..model import families
from ..model.config_gguf import NORMS_PLUS_ONE, QK_PERMUTED
from ..model.hparams import read_hparams
from ..model.tokenizer_compare import compare_tokenizers
from ..records import CheckpointRecord, TensorInfo
from ..safe_text import escape_deep
from ..tensors import names
from ..tensors.read import read
from . import crossformat
from .diff_onnx import onnx_pairs

COLUMNS = ["name", "name_b", "status", "dtype_a", "dtype_b", "shape_a", "shape_b", "max_abs_diff",
           "rel_l2", "cosine"]
CHUNK_ELEMENTS = 1 << 20


def _heads(ckpt: CheckpointRecord) -> tuple[int | None, int | None]:
    arch = _arch(ckpt)
    h = _count(ckpt.meta(Keys.arch(arch, Keys.HEAD_COUNT)))
    kv = _count(ckpt.meta(Keys.arch(arch, Keys.HEAD_COUNT_KV)))
    cfg = ckpt.metadata.get("config.json")
    if isinstance(cfg, dict):
        h = h or _count(cfg.get("num_attention_heads"))
        kv = kv or _count(cfg.get("num_key_value_heads"))
    return h, kv


def _count(v) -> int | None:
    """A head count as the file states it, if it is one (not a per-layer array, not 0)."""
    return v if isinstance(v, int) and not isinstance(v, bool) and v > 0 else None


def _pairs(a: CheckpointRecord, b: CheckpointRecord
           ) -> tuple[list[tuple[str | None, str | None, int | None]], str | None]:
    """Matched names (a, b, row), None where one side lacks it, row: the GGUF side's index into a
    stacked expert tensor (else None); and which side is GGUF when mapping."""
    if (a.format == "gguf") == (b.format == "gguf"):
        pairs = [(n, n if n in b.tensors else None, None) for n in a.tensors]
        return pairs + [(None, m, None) for m in b.tensors if m not in a.tensors], None
    gguf_side = "a" if a.format == "gguf" else "b"
    hf, gg = (b, a) if gguf_side == "a" else (a, b)
    arch = _arch(gg)
    row = families.by_gguf_arch(arch)
    own = row.gguf_names if row else None  # the family's names where llama.cpp's differ from llama's
    pairs, seen = [], set()
    for n in hf.tensors:
        stacked = names.gguf_expert(n)  # one expert: a row of llama.cpp's stack
        m, row = stacked if stacked and stacked[0] in gg.tensors else (names.hf_to_gguf(n, arch, own) or n, None)
        hit = m if m in gg.tensors else None
        seen.add(hit)
        pairs.append((hit, n, row) if gguf_side == "a" else (n, hit, row))
    only_gguf = [(m, None, None) if gguf_side == "a" else (None, m, None) for m in gg.tensors if m not in seen]
    if gguf_side == "b":
        return pairs + only_gguf, gguf_side
    # a is the GGUF: its order (a stack's experts by row), then what only it has, then only b's
    order = {m: i for i, m in enumerate(gg.tensors)}
    matched = sorted((p for p in pairs if p[0] is not None), key=lambda p: (order[p[0]], p[2] or 0))
    return matched + only_gguf + [p for p in pairs if p[0] is None], gguf_side


def _arch(ckpt: CheckpointRecord) -> str | None:
    return ckpt.meta(Keys.ARCHITECTURE)


def compare(ca: CheckpointRecord, ta: TensorInfo, cb: CheckpointRecord, tb: TensorInfo,
            heads_a: int | None = None, heads_b: int | None = None, flip_b: bool = False,
            row_a: int | None = None, row_b: int | None = None, shift_a: float = 0.0,
            shift_b: float = 0.0) -> dict:
    """max |a - b|, relative L2 (||a - b|| / ||a||) and cosine, streamed over rows.

    heads_a / heads_b: undo llama.cpp's Q/K permutation on that side over this many heads.
    flip_b: one side holds the transpose of the other's last two axes (a quantized [out, in]
    tensor of an [in, out] parameter, model/families.py): b's are swapped as it is read (chunks
    run over a's first axis); a 2-D pair is then read whole.
    row_a / row_b: that side is a stack (llama.cpp's experts) and this row of it is compared (one
    expert, read whole). shift_a / shift_b: subtracted from that side's values (a GGUF's 1 + w).
    """
    whole_a = read(ca, ta, rows=slice(row_a, row_a + 1))[0] if row_a is not None else None
    whole_b = read(cb, tb, rows=slice(row_b, row_b + 1))[0] if row_b is not None else None
    shape = tuple(whole_a.shape) if whole_a is not None else ta.shape
    rows = shape[0] if shape else 1
    inner = math.prod(shape[1:]) if len(shape) > 1 else 1
    step = rows if flip_b and len(shape) == 2 else max(1, CHUNK_ELEMENTS // max(1, inner))
    # a head count that does not split the rows into pairs per head cannot be a permutation
    heads_a, heads_b = (h if h and rows % (2 * h) == 0 else None for h in (heads_a, heads_b))
    for h in (heads_a, heads_b):
        if h:  # whole heads per chunk, so the permutation stays inside one chunk
            per = rows // h
            step = max(per, step // per * per)
    worst = 0.0
    d2 = a2 = b2 = ab = 0.0
    for r in range(0, rows, step):
        sel = slice(r, r + step) if shape else None
        xa = (whole_a[sel] if whole_a is not None else read(ca, ta, rows=sel)).astype(
            np.float64 if _wide(ta) else np.float32)
        if flip_b and len(shape) == 2 and whole_b is None:  # one step; b's rows are a's columns
            xb = read(cb, tb).astype(xa.dtype)
        else:
            xb = (whole_b[sel] if whole_b is not None else read(cb, tb, rows=sel)).astype(xa.dtype)
        if shift_a:
            xa = xa - xa.dtype.type(shift_a)
        if shift_b:
            xb = xb - xb.dtype.type(shift_b)
        if flip_b:
            xb = np.swapaxes(xb, -1, -2)
        if heads_a:
            xa = names.unpermute_qk(xa, len(xa) // (rows // heads_a))
        if heads_b:
            xb = names.unpermute_qk(xb, len(xb) // (rows // heads_b))
        xa, xb = xa.reshape(-1), xb.reshape(-1)
        d = xa - xb
        if d.size:
            m = float(np.max(np.abs(d)))
            if math.isnan(m) or m > worst:  # once NaN, it stays NaN
                worst = m
        d2 += float(np.dot(d, d))
        a2 += float(np.dot(xa, xa))
        b2 += float(np.dot(xb, xb))
        ab += float(np.dot(xa, xb))
    rel = math.sqrt(d2) / math.sqrt(a2) if a2 > 0 else (0.0 if d2 == 0 else math.inf)
    cos = ab / math.sqrt(a2 * b2) if a2 > 0 and b2 > 0 else (1.0 if a2 == b2 == 0 else 0.0)
    return {"max_abs_diff": worst, "rel_l2": rel, "cosine": cos}


def _flipped(ca: CheckpointRecord, ta: TensorInfo, cb: CheckpointRecord, tb: TensorInfo) -> bool:
    """Whether the pair is one parameter in two orientations: the model's [in, out] on one side
    and a Hub-quantized [out, in] logical tensor on the other (gpt-oss MXFP4 experts)."""
    if bool(ta.quant) == bool(tb.quant) or len(ta.shape) < 2:
        return False
    q, plain = (ta, tb) if ta.quant else (tb, ta)
    mt = read_hparams(ca).model_type or read_hparams(cb).model_type
    return (families.is_in_out(mt, plain.name)
            and families.stored_shape(mt, plain.name, tuple(plain.shape), True) == tuple(q.shape))


def _wide(t: TensorInfo) -> bool:
    return t.dtype in ("F64", "I64", "U64", "I32", "U32")


def diff(ca: CheckpointRecord, cb: CheckpointRecord, values: bool = True, tokenizers: bool = True):
    """Compare two open checkpoints; returns a pandas DataFrame (`mx.diff`, in opener.py, opens
    paths and URLs first).

    One row per tensor: status "removed" (only in a), "added" (only in b), "shape" (shapes
    differ), "dtype" (dtypes differ, e.g. a quantized layer against its float base; values
    still compared, so rel_l2 is the quantization error), "changed" or "same". For tensors
    in both with the same shape: max |a - b|, relative L2 difference and cosine similarity.

    With `tokenizers`, both checkpoints' tokenizers encode a few test sentences:
    `table.attrs["tokenizer"]` holds the comparison (model/tokenizer_compare.py) and
    `table.attrs["findings"]` a `tokenizer_mismatch` finding when they encode one differently.
    """

    if crossformat.applies(ca, cb):  # tf_model.h5 / flax_model.msgpack against PyTorch names
        return _crossformat_table(ca, cb, values, tokenizers)
    pairs, gguf_side = _pairs(ca, cb)
    onnx_flips, onnx_note = set(), None
    if "onnx" in (ca.format, cb.format):  # initializer names as the exporter left them
        pairs, onnx_flips, onnx_note = onnx_pairs(ca, cb)
    permute, shifted = None, False
    if gguf_side:
        g = ca if gguf_side == "a" else cb
        if _arch(g) in QK_PERMUTED:
            permute = _heads(g)
        shifted = _arch(g) in NORMS_PLUS_ONE
    rows = []
    for na, nb, stack_row in pairs:
        ta, tb = ca.tensors.get(na) if na else None, cb.tensors.get(nb) if nb else None
        row_a, row_b = (stack_row, None) if gguf_side == "a" else (None, stack_row)
        shape_a = list(ta.shape[1:] if row_a is not None else ta.shape) if ta else None
        shape_b = list(tb.shape[1:] if row_b is not None else tb.shape) if tb else None
        row = {"name": na if na is not None else nb, "name_b": nb if row_b is None else f"{nb}[{row_b}]",
               "dtype_a": ta.label if ta else None, "dtype_b": tb.label if tb else None,
               "shape_a": shape_a, "shape_b": shape_b, "max_abs_diff": None, "rel_l2": None, "cosine": None}
        if row_a is not None:
            row["name"] = f"{na}[{row_a}]"
        flip = ta is not None and tb is not None and stack_row is None and (
            (na, nb) in onnx_flips or _flipped(ca, ta, cb, tb))
        if ta is None or tb is None:
            row["status"] = "added" if ta is None else "removed"
        elif shape_a != shape_b and not flip:
            row["status"] = "shape"
        else:
            row["status"] = "dtype" if ta.label != tb.label else "same"
            if values:
                ha = hb = None
                gname = na if gguf_side == "a" else nb
                if permute:
                    heads = names.rope_heads(gname, *permute)
                    ha, hb = (heads, None) if gguf_side == "a" else (None, heads)
                shift = 1.0 if shifted and gname.endswith("norm.weight") else 0.0
                sa, sb = (shift, 0.0) if gguf_side == "a" else (0.0, shift)
                try:
                    row.update(compare(ca, ta, cb, tb, ha, hb, flip_b=flip, row_a=row_a, row_b=row_b,
                                       shift_a=sa, shift_b=sb))
                except ValueError as e:
                    row["status"] = f"unreadable: {e}"
                _settle(row)
        rows.append(row)
    table = _table(rows, ca, cb, tokenizers)
    table.attrs["onnx_names"] = onnx_note  # how each ONNX name was matched
    return table


def _settle(row: dict) -> None:
    """Equal shapes and dtypes but different values: "changed", not "same"."""
    if row["status"] == "same" and row["max_abs_diff"] != 0:
        row["status"] = "changed"


def _table(rows: list[dict], ca: CheckpointRecord, cb: CheckpointRecord, tokenizers: bool):
    """The comparison as a DataFrame, with the tokenizers' comparison in its attrs."""
    import pandas as pd

    table = pd.DataFrame(escape_deep(rows), columns=COLUMNS)  # names a file gave, made writable
    table.attrs["tokenizer"], table.attrs["findings"] = (compare_tokenizers(ca, cb) if tokenizers
                                                         else (None, []))
    return table


def _crossformat_table(ca: CheckpointRecord, cb: CheckpointRecord, values: bool, tokenizers: bool):
    """diff's table for a TensorFlow or Flax checkpoint against another format: names through
    transformers' conversion, shapes and values compared in the PyTorch layout (checks/crossformat.py)."""

    rows = []
    for na, nb, axes_a, axes_b in crossformat.pairs(ca, cb):
        ta, tb = ca.tensors.get(na) if na else None, cb.tensors.get(nb) if nb else None
        shape_a, shape_b = crossformat.shapes(ta, axes_a, tb, axes_b) if ta and tb else (
            list(ta.shape) if ta else None, list(tb.shape) if tb else None)
        row = {"name": na if na is not None else nb, "name_b": nb, "dtype_a": ta.label if ta else None,
               "dtype_b": tb.label if tb else None, "shape_a": shape_a, "shape_b": shape_b,
               "max_abs_diff": None, "rel_l2": None, "cosine": None}
        if ta is None or tb is None:
            row["status"] = "added" if ta is None else "removed"
        elif shape_a != shape_b:
            row["status"] = "shape"
        else:
            row["status"] = "dtype" if ta.label != tb.label else "same"
            if values:
                try:
                    row.update(crossformat.compare_permuted(ca, ta, axes_a, cb, tb, axes_b) if axes_a or axes_b
                               else compare(ca, ta, cb, tb))
                except ValueError as e:
                    row["status"] = f"unreadable: {e}"
                _settle(row)
        rows.append(row)
    table = _table(rows, ca, cb, tokenizers)
    return table
