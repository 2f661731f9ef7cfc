"""Which ONNX initializer is which weight of the checkpoint it was exported from (or of the float
export it was quantized from), for `mx.diff`.

In the order tried, most reliable first:
1. the same name, or the same name once a quantizer's suffix is removed (onnxruntime's
   `_quantized` of quantize_dynamic/static, `_Q4`/`_Q8` of MatMulNBits), or its longest dotted
   tail (a wrapper module's attribute before every name: `model.model.norm.weight`);
2. an anonymous initializer (torch's TorchScript exporter names a weight it transposed for MatMul
   `onnx::MatMul_123`) taken by a MatMul/Gemm/Conv node that the exporter named after its module
   (`/model/layers.0/mlp/fc1/MatMul`): the module's `.weight`, when its shape is the same or the
   transpose; a module path that does not name a tensor is tried without its leading scopes (a
   wrapper module exported around the model adds one: `/model/model/layers.0/...`);
3. what is left, by values: the one tensor left on the other side with the same or transposed
   shape whose sum and sum of squares agree (within 2 %), and only when exactly one does.
A square matrix fits both ways, so its orientation is read from its first rows: the same
orientation when they point the same way (cosine > 0.9, whatever the scale), else the transpose.
What is not matched: weights the exporter folded into others (a BatchNorm into its Conv, a scale
into a MatMul), split (an LSTM's gates sliced into several initializers) or shared between tied
layers; they show as added / removed.
"""

from __future__ import annotations

import math
import re

import numpy as np

from ..records import CheckpointRecord, TensorInfo
from ..tensors.read import iter_chunks, read

SUFFIX = re.compile(r"(_quantized|_Q\d+)$")
MODULE_NODE = re.compile(r"^/(.+)/(MatMul|Gemm|Conv|ConvTranspose|Gather)[^/]*$")
MAX_VALUE_MATCH = 1 << 26  # elements read to fingerprint one tensor; larger ones are not tried
TOLERANCE = 0.02


def _users(ckpt: CheckpointRecord) -> dict[str, list]:
    out: dict[str, list] = {}
    for d in (ckpt.details.get("files") or {}).values():
        out.update((d.get("onnx") or {}).get("users") or {})
    return out


def _fits(x: TensorInfo, y: TensorInfo) -> str | None:
    """"same" or "flip" when y's shape equals x's or its 2-D transpose, else None."""
    if tuple(x.shape) == tuple(y.shape):
        return "same"
    if len(x.shape) == 2 and tuple(x.shape) == tuple(reversed(y.shape)):
        return "flip"
    return None


def _by_module(name: str, users: dict[str, list], known) -> str | None:
    """The `.weight` of the module whose node takes this tensor, from the node's name: the longest
    tail of the module path that names a tensor in `known` (else the whole path)."""
    for _op, index, _trans, node in users.get(name, ()):
        m = MODULE_NODE.match(node or "")
        if m and index in (0, 1):
            parts = m[1].split("/")
            for start in range(len(parts)):
                candidate = ".".join(parts[start:]) + ".weight"
                if candidate in known:
                    return candidate
            return ".".join(parts) + ".weight"
    return None


def _tail_in(name: str, known) -> str | None:
    """The longest tail of a dotted name that names a tensor in `known`: a wrapper module exported
    around the model puts its attribute before every parameter (`model.model.norm.weight`)."""
    parts = name.split(".")
    for start in range(1, len(parts)):
        candidate = ".".join(parts[start:])
        if candidate in known:
            return candidate
    return None


def _orientation(ca: CheckpointRecord, x: TensorInfo, cb: CheckpointRecord, y: TensorInfo) -> str | None:
    """_fits, with a square matrix's orientation read from its first rows (see the docstring)."""
    fit = _fits(x, y)
    if fit != "same" or len(x.shape) != 2 or x.shape[0] != x.shape[1] or x.shape[0] < 2:
        return fit
    rows = slice(0, min(4, int(x.shape[0])))
    try:
        a = np.asarray(read(ca, x, rows=rows), dtype=np.float64).ravel()
        b = np.asarray(read(cb, y, rows=rows), dtype=np.float64).ravel()
    except (ValueError, OSError):
        return fit
    norm = float(np.linalg.norm(a) * np.linalg.norm(b))
    if norm == 0 or not math.isfinite(norm):
        return fit
    return "same" if float(np.dot(a, b)) / norm > 0.9 else "flip"


def _fingerprint(ckpt: CheckpointRecord, t: TensorInfo) -> tuple[float, float] | None:
    if t.numel > MAX_VALUE_MATCH or t.numel < 2:
        return None
    total = squares = 0.0
    try:
        for _, chunk in iter_chunks(ckpt, t):
            c = np.asarray(chunk, dtype=np.float64)
            total += float(c.sum())
            squares += float(np.dot(c, c))
    except (ValueError, OSError):
        return None
    return (total, squares) if math.isfinite(squares) else None


def _close(a: tuple[float, float], b: tuple[float, float], n: int) -> bool:
    scale = max(a[1], b[1])
    return abs(a[1] - b[1]) <= TOLERANCE * scale and \
        abs(a[0] - b[0]) <= TOLERANCE * math.sqrt(scale * n) + 1e-12


def onnx_pairs(a: CheckpointRecord, b: CheckpointRecord):
    """(pairs, flipped, note): pairs (name_a, name_b, None) in a's order then b's unmatched;
    `flipped` the pairs whose b side is the transpose; `note` how each pair was found."""
    onnx_side = a if a.format == "onnx" else b
    other = b if onnx_side is a else a
    users = _users(onnx_side)
    taken: dict[str, str] = {}   # onnx name -> other name
    how: dict[str, str] = {}
    used: set[str] = set()

    def take(n: str, m: str, why: str) -> None:
        taken[n], how[n] = m, why
        used.add(m)

    other_users = _users(other) if other.format == "onnx" else {}
    other_names = {SUFFIX.sub("", m): m for m in other.tensors} if other.format == "onnx" else {}
    for n in onnx_side.tensors:
        base = SUFFIX.sub("", n)
        m = n if n in other.tensors else base if base in other.tensors else other_names.get(base)
        if m is None:
            m = _tail_in(base, other.tensors)
        if m is not None and m not in used:
            take(n, m, "name")
    for n, t in onnx_side.tensors.items():
        if n in taken:
            continue
        m = _by_module(n, users, other.tensors)
        if m is None and other_users:
            continue
        if m is not None and m in other.tensors and m not in used and _fits(t, other.tensors[m]):
            take(n, m, "module")
    _by_values(onnx_side, other, taken, take)
    flipped = set()
    pairs = []
    for n, t in onnx_side.tensors.items():
        m = taken.get(n)
        if m is not None and _orientation(onnx_side, t, other, other.tensors[m]) == "flip":
            flipped.add((n, m) if onnx_side is a else (m, n))
        pairs.append((n, m, None) if onnx_side is a else (m, n, None))
    rest = [(None, m, None) if onnx_side is a else (m, None, None) for m in other.tensors if m not in used]
    if onnx_side is a:
        pairs += rest
    else:  # the other side's order, then what only the ONNX side has
        order = {m: i for i, m in enumerate(other.tensors)}
        matched = sorted((p for p in pairs if p[0] is not None), key=lambda p: order[p[0]])
        pairs = matched + rest + [p for p in pairs if p[0] is None]
    note = {"name": sorted(k for k, v in how.items() if v == "name"),
            "module": sorted(k for k, v in how.items() if v == "module"),
            "values": sorted(k for k, v in how.items() if v == "values")}
    return pairs, flipped, note


def _by_values(onnx_side, other, taken, take) -> None:
    left_x = [t for n, t in onnx_side.tensors.items() if n not in taken and t.numel > 1]
    left_y = [t for m, t in other.tensors.items() if m not in taken.values() and t.numel > 1]
    if not left_x or not left_y:
        return
    prints: dict[int, tuple] = {}

    def fp(ckpt, t):
        key = id(t)
        if key not in prints:
            prints[key] = _fingerprint(ckpt, t)
        return prints[key]

    claims: dict[str, list[str]] = {}
    for x in left_x:
        shaped = [y for y in left_y if _fits(x, y)]
        if not shaped or fp(onnx_side, x) is None:
            continue
        hits = [y for y in shaped if fp(other, y) is not None and _close(fp(onnx_side, x), fp(other, y), x.numel)]
        if len(hits) == 1:
            claims.setdefault(hits[0].name, []).append(x.name)
    for m, xs in claims.items():
        if len(xs) == 1:  # unambiguous both ways
            take(xs[0], m, "values")
