"""The quantization summary of a checkpoint: scheme, bits, group or block size, the modules
left unquantized, bits per weight and the real mix of labels ("Q4_K", "GPTQ_Q4", "BF16"), for
safetensors (Hub schemes, MLX) and GGUF (`general.file_type` by name and the tensor types it
actually holds)."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

from ...ggml import Keys
from ...records import CheckpointRecord, TensorInfo

MAX_MODULES = 64
# Quant fields the summary lists under "params" (bits, group size, symmetry and blocks have
# their own keys).
SUMMARY_PARAMS = ("checkpoint_format", "version", "quant_type", "nested", "strategy",
                  "value_type", "scale_dtype")


def quant_summary(ckpt: CheckpointRecord) -> dict[str, Any] | None:
    """None for a model with no quantization at all."""
    if ckpt.format == "gguf":
        return _gguf(ckpt)
    hub = ckpt.details.get("hubquant") or {}
    # a record still held as columns is a plain one: only built records can be quantized
    if not hub and not any(t.quant and t.quant.usable for t in ckpt.tensors.built_values()):
        return None
    quantized: dict[str, list] = {}  # label -> [first tensor, parameters, bytes]
    rows = _mix(ckpt.tensors.values(), lambda t: t.label, quantized)
    q_params = sum(q[1] for q in quantized.values())
    q_bytes = sum(q[2] for q in quantized.values())
    out: dict[str, Any] = {"scheme": hub.get("method") or _scheme_of(quantized), "label": None,
                           "decoded": hub.get("decoded", True)}
    if quantized:
        top = max(quantized.values(), key=lambda q: q[1])[0]  # most parameters; first met on ties
        q = top.quant
        params = q.params()
        out.update(label=top.label, codec=q.codec, bits=q.bits, group_size=q.group_size,
                   sym=q.sym, act_order=bool(q.act_order),
                   params={k: params[k] for k in SUMMARY_PARAMS if k in params},
                   inferred=q.inferred)
        if q.block is not None:
            out["block_size"] = list(q.block)
    out["unquantized_modules"] = _float_modules(ckpt)
    if hub.get("ignore"):
        out["config_ignore"] = list(hub["ignore"])
    out["bits_per_weight"] = 8 * q_bytes / q_params if q_params else None
    out.update(_totals(rows))
    out["mix"] = rows
    out["text"] = _text(out["bits_per_weight"], rows)
    return out


def quantization_text(q: Any) -> str | None:
    """The summary as one line for people, as the Overview, the model card and the CLI write it:
    "MOSTLY_Q4_1: 5.74 bits per weight: Q4_1 79% of weights at 5, Q8_0 21% at 8.5, F32 norms".
    None when there is no summary (or no text in it)."""
    if not isinstance(q, dict) or not q.get("text"):
        return None
    label = q.get("label") or q.get("scheme")
    return f"{label}: {q['text']}" if label else q["text"]


def _gguf(ckpt: CheckpointRecord) -> dict[str, Any] | None:
    kv = ckpt.metadata.get(Keys.FILE_TYPE)
    ftype = getattr(kv, "value", kv)
    rows = _mix(ckpt.tensors.values(), lambda t: t.dtype)
    if not rows:
        return None
    out: dict[str, Any] = {"scheme": "gguf", "file_type": _file_type_name(ftype),
                           "file_type_id": ftype if type(ftype) is int else None}
    out["label"] = out["file_type"] or (rows[0]["label"] if rows else None)
    out.update(_totals(rows))
    out["bits_per_weight"] = out["overall_bits_per_weight"]
    out["mix"] = rows
    out["text"] = _text(out["bits_per_weight"], rows)
    return out


def _file_type_name(ftype) -> str | None:
    if type(ftype) is not int:
        return None
    import gguf  # a core dependency; imported only here, for its LlamaFileType names

    try:
        return gguf.LlamaFileType(ftype).name
    except ValueError:
        return f"FILE_TYPE_{ftype}"


def _mix(tensors: Iterable[TensorInfo], key: Callable[[TensorInfo], str],
         quantized: dict[str, list] | None = None) -> list[dict[str, Any]]:
    """Per label: tensors, parameters, bytes, bits per weight, shares; most parameters first.
    `quantized`, when given, gets per label of the usable quantized tensors
    [first tensor, parameters, bytes] (one pass over the tensors serves both)."""
    acc: dict[str, dict[str, Any]] = {}
    for t in tensors:
        k = key(t)
        n, b = t.numel, t.stored_bytes
        row = acc.get(k)
        if row is None:
            row = acc[k] = {"label": k, "tensors": 0, "parameters": 0, "bytes": 0,
                            "one_dim": True, "norms": True}
        row["tensors"] += 1
        row["parameters"] += n
        row["bytes"] += b
        row["one_dim"] &= len(t.shape) <= 1
        row["norms"] &= "norm" in t.name
        if quantized is not None and t.quant and t.quant.usable:
            q = quantized.get(k)
            if q is None:
                quantized[k] = [t, n, b]
            else:
                q[1] += n
                q[2] += b
    params = sum(r["parameters"] for r in acc.values()) or 1
    nbytes = sum(r["bytes"] for r in acc.values()) or 1
    for r in acc.values():
        r["bits_per_weight"] = 8 * r["bytes"] / r["parameters"] if r["parameters"] else None
        r["share_parameters"] = r["parameters"] / params
        r["share_bytes"] = r["bytes"] / nbytes
    return sorted(acc.values(), key=lambda r: -r["parameters"])


def _totals(rows) -> dict[str, Any]:
    params = sum(r["parameters"] for r in rows)
    nbytes = sum(r["bytes"] for r in rows)
    return {"parameters": params, "bytes": nbytes,
            "overall_bits_per_weight": 8 * nbytes / params if params else None}


def _text(bpw, rows) -> str:
    """"4.95 bits per weight: Q4_K 79% of weights at 4.5, Q6_K 20% at 6.56, F32 norms"."""
    parts = []
    for i, r in enumerate(rows):
        pct = 100 * r["share_parameters"]
        if pct < 1 and r["one_dim"]:
            parts.append(f"{r['label']} {'norms' if r['norms'] else '1-D tensors'}")
            continue
        share = f"{pct:.0f}%" if pct >= 1 else "<1%"
        of = " of weights" if i == 0 else ""
        at = f" at {r['bits_per_weight']:.3g}" if r["bits_per_weight"] is not None else ""
        parts.append(f"{r['label']} {share}{of}{at}")
    head = f"{bpw:.3g} bits per weight" if bpw else "bits per weight unknown"
    return head + (": " + ", ".join(parts) if parts else "")


def _scheme_of(quantized: dict[str, list]) -> str | None:
    if not quantized:
        return None
    codec = next(iter(quantized.values()))[0].quant.codec
    return "mlx" if codec.startswith("mlx") else codec


def _float_modules(ckpt: CheckpointRecord) -> list[str]:
    """Modules whose 2-D `.weight` is stored as plain floats (embeddings, lm_head, ...)."""
    out = []
    for name, t in ckpt.tensors.items():
        if t.quant or not name.endswith(".weight") or len(t.shape) != 2:
            continue
        if t.dtype in ("F16", "BF16", "F32", "F64"):
            out.append(name[: -len(".weight")])
    return out[:MAX_MODULES] + ([f"... {len(out) - MAX_MODULES} more"] if len(out) > MAX_MODULES else [])
