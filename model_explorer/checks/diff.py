"""`mx.diff(a, b)`: two checkpoints compared tensor by tensor, across formats too.

Names are matched directly, or through the llama-family HF <-> GGUF mapping when one side is
GGUF and the other is not; llama.cpp's Q/K row permutation is undone on the GGUF side using
the head counts from its metadata (or config.json). Values are streamed a few rows at a time,
so two large models compare in bounded memory.
"""

from __future__ import annotations

import math

import numpy as np

from ..ggml import Keys
from ..model import families
from ..model.hparams import read_hparams
from ..model.tokenizer_compare import compare_tokenizers
from ..opener import opened
from ..records import CheckpointRecord, TensorInfo
from ..tensors import names
from ..tensors.read import read

COLUMNS = ["name", "name_b", "status", "dtype_a", "dtype_b", "shape_a", "shape_b", "max_abs_diff",
           "rel_l2", "cosine"]
CHUNK_ELEMENTS = 1 << 20
PERMUTED_ARCHS = ("llama",)  # llama.cpp permutes Q/K rows only for these


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


def _pairs(a: CheckpointRecord, b: CheckpointRecord) -> tuple[list[tuple[str | None, str | None]], str | None]:
    """Matched names (a, b), None where one side lacks it; and which side is GGUF when mapping."""
    gguf_side = None
    if (a.format == "gguf") != (b.format == "gguf"):
        gguf_side = "a" if a.format == "gguf" else "b"
    if gguf_side is None:
        to_b = {n: n for n in a.tensors}
    elif gguf_side == "a":
        to_b = {n: names.gguf_to_hf(n) or n for n in a.tensors}
    else:
        to_b = {n: names.hf_to_gguf(n) or n for n in a.tensors}
        # an HF model with tied embeddings has no lm_head; GGUF has no output.weight then either
    pairs: list[tuple[str | None, str | None]] = []
    seen_b = set()
    for n, m in to_b.items():
        if m in b.tensors:
            pairs.append((n, m))
            seen_b.add(m)
        else:
            pairs.append((n, None))
    pairs += [(None, m) for m in b.tensors if m not in seen_b]
    return pairs, gguf_side


def _arch(ckpt: CheckpointRecord) -> str | None:
    return ckpt.meta(Keys.ARCHITECTURE)


def compare(ca: CheckpointRecord, ta: TensorInfo, cb: CheckpointRecord, tb: TensorInfo,
            heads_a: int | None = None, heads_b: int | None = None, flip_b: bool = False) -> dict:
    """max |a - b|, relative L2 (||a - b|| / ||a||) and cosine, streamed over rows.

    heads_a / heads_b: undo llama.cpp's Q/K permutation on that side over this many heads.
    flip_b: one side holds the transpose of the other's last two axes (a quantized [out, in]
    tensor of an [in, out] parameter, model/families.py): b's are swapped as it is read (chunks
    run over a's first axis); a 2-D pair is then read whole.
    """
    shape = ta.shape
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
        xa = read(ca, ta, rows=sel).astype(np.float64 if _wide(ta) else np.float32)
        xb = read(cb, tb, rows=sel).astype(xa.dtype)
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


def diff(a, b, values: bool = True, tokenizers: bool = True):
    """Compare two checkpoints (paths, URLs or open Checkpoints); returns a pandas DataFrame.

    One row per tensor: status "removed" (only in a), "added" (only in b), "shape" (shapes
    differ), "dtype" (dtypes differ, e.g. a quantized layer against its float base; values
    still compared, so rel_l2 is the quantization error), "changed" or "same". For tensors
    in both with the same shape: max |a - b|, relative L2 difference and cosine similarity.

    With `tokenizers`, both checkpoints' tokenizers encode a few test sentences:
    `table.attrs["tokenizer"]` holds the comparison (model/tokenizer_compare.py) and
    `table.attrs["findings"]` a `tokenizer_mismatch` finding when they encode one differently.
    """
    import pandas as pd

    with opened(a) as ca, opened(b) as cb:
        pairs, gguf_side = _pairs(ca, cb)
        permute = None
        if gguf_side:
            g = ca if gguf_side == "a" else cb
            if _arch(g) in PERMUTED_ARCHS:
                permute = _heads(g)
        rows = []
        for na, nb in pairs:
            ta, tb = ca.tensors.get(na) if na else None, cb.tensors.get(nb) if nb else None
            row = {"name": na if na is not None else nb, "name_b": nb,
                   "dtype_a": ta.kind if ta else None, "dtype_b": tb.kind if tb else None,
                   "shape_a": list(ta.shape) if ta else None, "shape_b": list(tb.shape) if tb else None,
                   "max_abs_diff": None, "rel_l2": None, "cosine": None}
            flip = ta is not None and tb is not None and _flipped(ca, ta, cb, tb)
            if ta is None or tb is None:
                row["status"] = "added" if ta is None else "removed"
            elif tuple(ta.shape) != tuple(tb.shape) and not flip:
                row["status"] = "shape"
            else:
                row["status"] = "dtype" if ta.kind != tb.kind else "same"
                if values:
                    ha = hb = None
                    if permute:
                        gname = na if gguf_side == "a" else nb
                        heads = names.rope_heads(gname, *permute)
                        ha, hb = (heads, None) if gguf_side == "a" else (None, heads)
                    try:
                        row.update(compare(ca, ta, cb, tb, ha, hb, flip_b=flip))
                    except ValueError as e:
                        row["status"] = f"unreadable: {e}"
                    if row["status"] == "same" and row["max_abs_diff"] != 0:
                        row["status"] = "changed"
            rows.append(row)
        table = pd.DataFrame(rows, columns=COLUMNS)
        table.attrs["tokenizer"], table.attrs["findings"] = (compare_tokenizers(ca, cb) if tokenizers
                                                             else (None, []))
        return table
