"""Deep checks: decode every tensor (streamed, bounded memory) and look at the values.

`deep_check(ckpt)` appends Findings to `ckpt.findings`: NaN/Inf values, all-zero and
constant tensors, norm weights far from 1, values a float16 cast would overflow, tied
weights that differ, config.json contradicting the tensor shapes, MLX scales that are 0 or
not finite. Each finding names the tensor and the worst element (index and byte offset).
"""

from __future__ import annotations

import math
import re
import sys
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from ..ggml import Keys
from ..records import CheckpointRecord, TensorInfo
from ..spans import Finding
from ..tensors.read import Plan, iter_chunks, plan_for, read

F16_MAX = 65504.0
_NORM = re.compile(r"(^|\.)(\w*norm\w*)\.weight$")
# Mean |w| of a norm's scale outside which it is reported. Calibrated on real checkpoints:
# healthy SmolLM2-135M (mx.sample_path()) runs from 0.027 (blk.0.attn_norm, 47% negative) to 1.81
# (output_norm), and early-layer attention norms of other llama-family models are as small;
# final norms reach about 10. So only values no trained model shows are reported: a tenth of
# the smallest, ten times the largest, and a warning past 1000 (a broken or unscaled export).
NORM_MEAN_ABS = (0.002, 100.0)
NORM_MEAN_ABS_WARN = 1000.0
# Tied pairs: (HF names) and (GGUF names)
TIED = [("model.embed_tokens.weight", "lm_head.weight"), ("token_embd.weight", "output.weight")]
TIE_ROWS = 256  # rows compared at a time
BAR_BYTES = 256 * 2**20  # show a progress bar on a terminal for checkpoints bigger than this


@dataclass
class Scan:
    """What one streaming pass over a tensor saw."""

    count: int = 0
    nonzero: int = 0
    nan: int = 0
    inf: int = 0
    neg_inf: int = 0
    first_nan: int | None = None
    first_inf: int | None = None
    lo: float = math.inf
    hi: float = -math.inf
    absmax: float = 0.0
    absmax_at: int | None = None
    abs_sum: float = 0.0
    finite: int = 0


def scan(ckpt: CheckpointRecord, info: TensorInfo) -> Scan:
    s = Scan()
    for start, x in iter_chunks(ckpt, info):
        if x.dtype.kind == "c":
            x = np.abs(x)
        if x.dtype.kind in "biu":
            x = x.astype(np.float64)
        n = x.size
        if not n:
            continue
        s.count += n
        s.nonzero += int(np.count_nonzero(x))
        lo, hi = x.min(), x.max()
        if not (math.isfinite(lo) and math.isfinite(hi)):
            nan = np.isnan(x)
            k = int(np.count_nonzero(nan))
            if k and s.first_nan is None:
                s.first_nan = start + int(np.argmax(nan))
            s.nan += k
            inf = np.isinf(x)
            k = int(np.count_nonzero(inf))
            if k and s.first_inf is None:
                s.first_inf = start + int(np.argmax(inf))
            s.inf += k
            s.neg_inf += int(np.count_nonzero(inf & (x < 0)))
            x = x[~(nan | inf)]
            if not x.size:
                continue
            lo, hi = x.min(), x.max()
            start = None  # positions no longer line up with the chunk
        s.finite += x.size
        s.lo, s.hi = min(s.lo, float(lo)), max(s.hi, float(hi))
        s.abs_sum += float(np.abs(x).sum(dtype=np.float64))
        big = max(abs(float(lo)), abs(float(hi)))
        if big > s.absmax:
            s.absmax = big
            s.absmax_at = None if start is None else start + int(np.argmax(np.abs(x)))
    return s


def _where(plan: Plan, index: int | None) -> tuple[int | None, int | None, str]:
    """Byte offset and length of the unit holding element `index`, and the index as text."""
    info = plan.info
    if index is None:
        return info.offset, info.length, ""
    shape = info.shape or (1,)
    pos = np.unravel_index(index, shape) if info.numel else ()
    if plan.strided is not None:
        return info.offset, info.length, f" at index {list(map(int, pos))}"
    unit = index // plan.unit_elems
    return info.offset + unit * plan.unit_bytes, plan.unit_bytes, f" at index {list(map(int, pos))}"


def deep_check(ckpt: CheckpointRecord, progress: Callable[[int, int, str], None] | None = None,
               names: list[str] | None = None, model_checks: bool = True,
               seen: Callable[[str, Scan], None] | None = None) -> list[Finding]:
    """Run every value check; append the findings to `ckpt.findings` and return them.

    `names` limits the per-tensor checks to some tensors and `model_checks=False` skips the
    ones over the whole model (tied weights, config shapes), so an audit can split one model
    into tensor ranges on several workers; `seen(name, scan)` receives each tensor's Scan.
    """
    found: list[Finding] = []

    def add(code, msg, info, offset=None, length=None, **extra):
        found.append(Finding.of(code, msg, offset, length, info.name if info else None,
                                info.file if info else None, extra))

    gemma = "gemma" in str(_arch(ckpt)).lower()
    names = list(ckpt.tensors) if names is None else [n for n in names if n in ckpt.tensors]
    bar = None
    if progress is None and sys.stderr.isatty() and ckpt.total_size > BAR_BYTES:
        from tqdm.auto import tqdm

        bar = tqdm(total=len(names), desc="deep check", unit="tensor", file=sys.stderr)
    for i, name in enumerate(names):
        info = ckpt.tensors[name]
        if progress:
            progress(i, len(names), name)
        if bar is not None:
            bar.update(1)
        try:
            plan = plan_for(ckpt, info)
            s = scan(ckpt, info)
        except ValueError as e:
            add("undecodable", f"Tensor {name!r} could not be decoded for the deep "
                f"checks: {e}", info, info.offset, info.length)
            continue
        if seen is not None:
            seen(name, s)
        _value_findings(plan, s, add, gemma)
        if info.quant and info.quant.codec == "mlx_affine":
            _mlx_scales(ckpt, info, add)
    if bar is not None:
        bar.close()
    if model_checks:
        _tied(ckpt, add)
    order = ("error", "warning", "info")
    ckpt.findings.extend(found)
    ckpt.findings.sort(key=lambda f: order.index(f.severity))
    return found


def role_of(info: TensorInfo) -> str:
    """What the tensor is for: the role a graph format's reader read from the operators that take
    it (formats/graph_roles.py), else "scalar" for one element (a counter such as BatchNorm's
    num_batches_tracked or an optimizer's step) and "weight" for the rest."""
    role = info.extra.get("role") if info.extra else None
    if role:
        return role
    return "scalar" if info.numel <= 1 or info.name.endswith("num_batches_tracked") else "weight"


def _masks_only(role: str, s: Scan) -> bool:
    """Inf where a mask puts it: any Inf in a mask, an index, a scalar or an unused constant; only
    −inf in a Gather table (rows a mask picks). NaN never is."""
    if s.nan or not s.inf:
        return False
    if role in ("mask", "index", "scalar", "unused"):
        return True
    return role == "table" and s.neg_inf == s.inf


def _value_findings(plan: Plan, s: Scan, add, gemma: bool) -> None:
    """A weight's values; masks, indices, scalars and constants no node takes are not weights
    (`role_of`): no all-zero, constant or float16 finding on them, and Inf in a mask is meant."""
    info = plan.info
    name = info.name
    role = role_of(info)
    weight = role in ("weight", "bias", "table")
    if (s.nan or s.inf) and not _masks_only(role, s):
        first = min(i for i in (s.first_nan, s.first_inf) if i is not None)
        off, ln, at = _where(plan, first)
        add("nan_inf", f"Tensor {name!r} holds {s.nan:,} NaN and {s.inf:,} Inf values "
            f"out of {s.count:,}; the first{at}.", info, off, ln, nan=s.nan, inf=s.inf, index=first)
    if not weight or role == "bias":
        pass  # not a weight; a zero bias is what converters write where the source had none
    elif s.count and not s.nonzero:
        add("all_zero", f"Tensor {name!r} is all zeros ({s.count:,} elements).", info,
            info.offset, info.length)
    elif s.count > 1 and s.finite == s.count and s.lo == s.hi:
        add("constant", f"Tensor {name!r} holds one value, {s.lo:g}, in all {s.count:,} "
            "elements.", info, info.offset, info.length, value=s.lo)
    if _NORM.search(name) and s.finite and not gemma and s.nonzero:
        mean_abs = s.abs_sum / s.finite
        lo, hi = NORM_MEAN_ABS
        if not lo <= mean_abs <= hi:
            add("norm_exploded" if mean_abs > NORM_MEAN_ABS_WARN else "norm_far_from_one",
                f"Norm weight {name!r} has mean |w| = {mean_abs:.4g} (values from {s.lo:.4g} to "
                f"{s.hi:.4g}, {s.finite:,} elements); trained models keep norm scales between about "
                f"{lo * 10:g} and {hi / 10:g} (SmolLM2-135M: 0.027 to 1.8), so this looks unscaled "
                "or broken.", info, info.offset, info.length, mean_abs=mean_abs, min=s.lo, max=s.hi)
    if weight and info.label in ("F32", "BF16", "F64") and s.absmax > F16_MAX and \
            not (role == "table" and s.hi <= F16_MAX):  # rows of -FLT_MAX: a mask table
        off, ln, at = _where(plan, s.absmax_at)
        add("fp16_overflow", f"Tensor {name!r} ({info.label}) holds |x| = {s.absmax:g}, "
            f"beyond float16's largest value {F16_MAX:g}: a cast to float16 gives Inf{at}.",
            info, off, ln, absmax=s.absmax, index=s.absmax_at)


def _mlx_scales(ckpt: CheckpointRecord, info: TensorInfo, add) -> None:
    scales_info = info.quant.parts.get("scales") if info.quant else None
    if scales_info is None:
        return
    try:
        sc = read(ckpt, scales_info).astype(np.float32).reshape(-1)
    except ValueError:
        return
    bad = (sc == 0) | ~np.isfinite(sc)
    k = int(np.count_nonzero(bad))
    if k:
        first = int(np.argmax(bad))
        itemsize = scales_info.length // max(1, scales_info.numel)
        pos = list(map(int, np.unravel_index(first, scales_info.shape)))
        add("mlx_bad_scales", f"{k:,} of the {sc.size:,} scales of {info.name!r} are zero "
            f"or not finite; the first at {scales_info.name!r} index {pos} is {sc[first]!r}.",
            info, scales_info.offset + first * itemsize, itemsize, count=k, index=first)


def _config(ckpt: CheckpointRecord) -> dict:
    c = ckpt.metadata.get("config.json")
    return c if isinstance(c, dict) else {}


def _arch(ckpt: CheckpointRecord):
    kv = ckpt.metadata.get(Keys.ARCHITECTURE)
    return getattr(kv, "value", None) or _config(ckpt).get("model_type")


def _tied(ckpt: CheckpointRecord, add) -> None:
    cfg = _config(ckpt)
    for a, b in TIED:
        ta, tb = ckpt.tensors.get(a), ckpt.tensors.get(b)
        if ta is None or tb is None or ta.shape != tb.shape or not ta.shape:
            continue
        said_tied = cfg.get("tie_word_embeddings") is True
        try:
            worst, where = 0.0, None
            dot = na = nb = 0.0
            for r in range(0, ta.shape[0], TIE_ROWS):
                xa = read(ckpt, ta, rows=slice(r, r + TIE_ROWS)).astype(np.float32)
                xb = read(ckpt, tb, rows=slice(r, r + TIE_ROWS)).astype(np.float32)
                d = np.abs(xa - xb)
                m = float(np.nanmax(d)) if d.size else 0.0
                if m > worst:
                    worst, where = m, r * math.prod(ta.shape[1:]) + int(np.nanargmax(d))
                dot += float(np.dot(xa.ravel(), xb.ravel()))
                na += float(np.dot(xa.ravel(), xa.ravel()))
                nb += float(np.dot(xb.ravel(), xb.ravel()))
        except ValueError:
            continue
        if worst == 0:
            continue
        cos = dot / math.sqrt(na * nb) if na and nb else 0.0
        if said_tied or cos > 0.999:
            plan = plan_for(ckpt, tb)
            off, ln, at = _where(plan, where)
            why = ("config.json says tie_word_embeddings" if said_tied else
                   f"they look like one tied tensor (cosine {cos:.5f})")
            add("tied_weights_differ" if said_tied else "tied_weights_close",
                f"{a!r} and {b!r} differ although {why}: max |difference| {worst:g}{at}.",
                tb, off, ln, max_abs_diff=worst, cosine=cos, index=where)
