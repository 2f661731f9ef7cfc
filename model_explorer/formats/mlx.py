"""MLX affine quantization: `x.weight` (packed uint32), `x.scales` and `x.biases` as one tensor."""

from __future__ import annotations

import dataclasses
from typing import Any

from ..records import CheckpointRecord, Quant, TensorInfo
from ..spans import Finding
from ..tensormap import records_of

VALID_BITS = (2, 3, 4, 5, 6, 8)


def quantization_config(config: dict | None) -> dict | None:
    if not isinstance(config, dict):
        return None
    q = config.get("quantization") or config.get("quantization_config")
    # GPTQ/AWQ/bitsandbytes name their method; MLX's entry does not.
    return q if isinstance(q, dict) and "bits" in q and "quant_method" not in q else None


def group_mlx(ckpt: CheckpointRecord, qconfig: dict | None) -> None:
    """Fold every `.weight/.scales/.biases` triple into one quantized TensorInfo."""
    tensors = ckpt.tensors
    names = tensors.keys()  # membership in C, not through the map's own methods
    # GPTQ/AWQ also name a tensor `.scales`; beside a `.qweight` or `.qzeros` it is theirs.
    scale_names = [n for n in names if n.endswith(".scales")
                   and n[:-7] + ".qweight" not in names and n[:-7] + ".qzeros" not in names]
    if not scale_names and not qconfig:
        return
    if scale_names and not qconfig:
        ckpt.findings.append(Finding.of(
            "mlx_no_config", "The tensors look MLX-quantized (.scales/.biases) but no "
            "config.json with a \"quantization\" entry says how; bits and group size are inferred.",
            tensor=scale_names[0]))
    # The records read below, built in one pass per table (a TensorMap) and looked up in C.
    wanted = [n for s in scale_names for n in (s[:-7] + ".weight", s, s[:-7] + ".biases") if n in names]
    found = dict(zip(wanted, records_of(tensors, wanted)))
    record = found.get
    default = qconfig or {}
    grouped: dict[str, TensorInfo] = {}
    absorbed: set[str] = set()
    for sname in scale_names:
        base = sname[: -len(".scales")]
        wname, bname = base + ".weight", base + ".biases"
        weight, scales, biases = record(wname), found[sname], record(bname)
        if weight is None:
            ckpt.findings.append(_err("mlx_missing_weight", f"{sname!r} has no {wname!r} to scale.",
                                      scales))
            continue
        bits, group, mode = _layer_params(qconfig, base, default)
        if biases is None and mode == "affine":  # the float modes (mxfp4, ...) have no biases
            ckpt.findings.append(_err("mlx_missing_biases", f"{wname!r} is quantized ({sname!r} "
                                      f"exists) but {bname!r} is missing; it cannot be dequantized.",
                                      weight))
        quant = _check_shapes(ckpt, weight, scales, biases, bits, group)
        if quant is None:
            continue
        if mode != "affine":
            quant = dataclasses.replace(quant, codec=f"mlx_{mode}", label=f"MLX_{mode.upper()}")
        absorbed.add(sname)
        if biases is not None:
            absorbed.add(bname)
        logical = weight.shape[:-1] + (weight.shape[-1] * 32 // quant.bits,)
        grouped[wname] = TensorInfo(wname, weight.dtype, logical, weight.file, weight.offset,
                                    weight.length, quant=quant,
                                    extra={"packed_shape": weight.shape})
    if qconfig:
        for name, t in tensors.items():
            if name.endswith(".weight") and t.dtype == "U32" and name not in grouped:
                if name[: -len(".weight")] + ".scales" not in names:
                    ckpt.findings.append(_err(
                        "mlx_missing_scales", f"{name!r} is packed uint32 in a quantized model, but "
                        f"{name[:-7] + '.scales'!r} is missing; it cannot be dequantized.", t))
    if grouped:
        ckpt.tensors = {name: grouped.get(name, t) for name, t in tensors.items() if name not in absorbed}
        ckpt.details["mlx"] = {"bits": default.get("bits"), "group_size": default.get("group_size")}


def _layer_params(qconfig, base: str, default: dict) -> tuple[Any, Any, str]:
    """Bits, group size and mode of one layer: its own entry in the config, else the default."""
    layer = qconfig.get(base) if qconfig else None
    params = {**default, **layer} if isinstance(layer, dict) else default
    mode = params.get("mode", "affine")
    return params.get("bits"), params.get("group_size"), mode if isinstance(mode, str) else "affine"


def _err(code: str, msg: str, t: TensorInfo) -> Finding:
    return Finding.of(code, msg, t.offset, t.length, t.name, t.file)


def _check_shapes(ckpt, weight, scales, biases, bits, group) -> Quant | None:
    """Bits and group size must explain the shapes; infer them when the config is silent."""
    if weight.dtype != "U32" or not weight.shape:
        ckpt.findings.append(_err("mlx_bad_weight", f"{weight.name!r} has scales, so it should be "
                                  f"packed U32; it is {weight.dtype} {list(weight.shape)}.", weight))
        return None
    packed_cols, n_groups = weight.shape[-1], scales.shape[-1] if scales.shape else 0
    if scales.shape[:-1] != weight.shape[:-1] or n_groups == 0:
        ckpt.findings.append(_err("mlx_scales_shape", f"{scales.name!r} has shape "
                                  f"{list(scales.shape)}; for weight {list(weight.shape)} it should "
                                  f"be {list(weight.shape[:-1])} + [groups].", scales))
        return None
    if biases is not None and biases.shape != scales.shape:
        ckpt.findings.append(_err("mlx_scales_shape", f"{biases.name!r} has shape "
                                  f"{list(biases.shape)}, unlike {scales.name!r} "
                                  f"{list(scales.shape)}.", biases))
    # type(...) is int: 4.0 == 4 would make every logical dimension a float, and True == 1.
    bits_ok = type(bits) is int and bits in VALID_BITS
    group_ok = type(group) is int and group > 0
    inferred = not (bits_ok and group_ok) or packed_cols * 32 != n_groups * group * bits
    if inferred:
        fits = [(b, packed_cols * 32 // b // n_groups) for b in VALID_BITS
                    if packed_cols * 32 % b == 0 and (packed_cols * 32 // b) % n_groups == 0]
        # Shapes alone are ambiguous (4-bit/64 looks like 8-bit/32): prefer the stated group
        # size, then the stated bits, then MLX's defaults.
        fits = sorted(((b, g) for b, g in fits if g in (32, 64, 128)),
                          key=lambda bg: (bg[1] != group, bg[0] != bits, bg[1] != 64,
                                          bg[0] not in (4, 8), bg[0]))
        if bits is not None:
            ckpt.findings.append(_err(
                "mlx_scales_shape", f"{weight.name!r} is {list(weight.shape)} packed uint32 with "
                f"{n_groups} scale groups per row; bits={bits} and group_size={group} would need "
                f"{packed_cols * 32 // bits if bits_ok else '?'} columns in groups of "
                f"{group} = {(packed_cols * 32 // bits) // group if bits_ok and group_ok else '?'} groups."
                + (f" The shapes fit bits={fits[0][0]}, group_size={fits[0][1]}."
                   if fits else ""), scales))
        if not fits:
            return None
        bits, group = fits[0]
    parts = {"scales": scales} if biases is None else {"scales": scales, "biases": biases}
    return Quant(codec="mlx_affine", label=f"MLX_Q{bits}", bits=bits, group_size=group,
                 parts=parts, inferred=inferred)
