"""compressed-tensors (llm-compressor): per-module components named after the weight.

From the compressors (compressed_tensors/compressors/*):
- pack-quantized: `weight_packed` int32 [out, ceil(in*bits/32)], `weight_scale`,
  `weight_shape` int64 [2] (the true [out, in]), asymmetric `weight_zero_point` int32 packed
  along dim 0 [ceil(out*bits/32), groups];
- int-quantized / naive-quantized: `weight` int8 [out, in] (or FP8 for float args),
  `weight_scale`, optional `weight_zero_point` (scale's shape);
- float-quantized: `weight` F8_E4M3 [out, in], `weight_scale`;
- nvfp4-pack-quantized: `weight_packed` uint8 [out, in/2], `weight_scale` F8_E4M3
  [out, in/16], `weight_global_scale` F32 [1].
- mxfp4-pack-quantized: `weight_packed` uint8 [out, in/2], `weight_scale` uint8 E8M0
  [out, in/32].
- sparse-bitmask (compressors/sparse_compressors): `X.shape` int64 [2], `X.compressed` the
  kept values (flat), `X.bitmask` uint8 [out, ceil(in/8)], `X.row_offsets` int64 [out];
  sparse-24-bitmask: `X.shape` int64 [2, 1], `X.compressed` [out, in/2], `X.bitmask`.
Scale shapes by strategy: tensor [1], channel [out, 1], group / tensor_group
[out, ceil(in/group)], block [ceil(out/r), ceil(in/c)].
"""

from __future__ import annotations

import numpy as np

from ...records import Quant
from .common import block_pair, cdiv, finding, is_int, logical, numel, roles, shape_text, unusable


def _args(scheme, base: str) -> tuple[dict, dict | None]:
    """(weights args, input_activations args) of the config group that targets the module."""
    group = scheme.ct_group(base) if scheme and scheme.layout == "ct" else None
    if not group:
        return {}, None
    w = group.get("weights") if isinstance(group.get("weights"), dict) else {}
    a = group.get("input_activations") if isinstance(group.get("input_activations"), dict) else None
    return w, a


def _weight_shape(ckpt, t, add) -> tuple[int, ...] | None:
    """The 16 bytes of `weight_shape` (read at open: they alone give the exact in_features)."""
    if t.dtype not in ("I64", "I32") or numel(t.shape) not in (2, 3) or len(t.shape) not in (1, 2):
        add(finding("quant_packed_shape", f"{t.name!r} should be the int64 [2] original "
                    f"shape; it is {shape_text(t)}.", t))
        return None
    try:
        raw = bytes(ckpt.read_bytes(t.offset, t.length, t.file))
        dims = np.frombuffer(raw, dtype="<i8" if t.dtype == "I64" else "<i4").tolist()
    except (OSError, ValueError):
        return None
    if len(dims) != numel(t.shape) or not all(d > 0 for d in dims):
        add(finding("quant_packed_shape", f"{t.name!r} holds {dims}, not a shape.", t))
        return None
    return tuple(int(d) for d in dims)


def _label(codec: str, w: dict, a: dict | None, bits: int, weight_dtype: str, strategy, block) -> str:
    if codec in ("ct_pack", "ct_int"):
        if not w:  # no config: the activations' precision is not in the tensors
            return f"CT_W{bits}"
        abits = a.get("num_bits") if a and is_int(a.get("num_bits")) else 16
        return f"CT_W{bits}A{abits}"
    if codec == "ct_nvfp4":
        return "NVFP4"
    if codec == "ct_mxfp4":
        return "MXFP4"
    name = {"F8_E4M3": "FP8_E4M3", "F8_E5M2": "FP8_E5M2"}.get(weight_dtype, "FP8")
    if strategy == "block" and block:
        return f"{name}_B{block[0]}" if block[0] == block[1] else f"{name}_B{block[0]}x{block[1]}"
    if strategy == "group" and is_int(w.get("group_size")):
        return f"{name}_G{w['group_size']}"
    return name


def build(ckpt, layer, scheme, add, inferred: bool):
    p = layer.parts
    w_args, a_args = _args(scheme, layer.base)
    packed, weight, scale = p.get("weight_packed"), p.get("weight"), p.get("weight_scale")
    main = packed or weight
    if main is None:
        add(finding("quant_missing_companion", f"compressed-tensors layer {layer.base!r} "
                    f"has {', '.join(repr(n) for n in layer.names)} but neither "
                    f"{layer.base + '.weight_packed'!r} nor {layer.base + '.weight'!r}.",
                    layer.first()))
        return None
    if not main.shape:
        add(finding("quant_packed_shape", f"{main.name!r} is {shape_text(main)}; a "
                    "quantized weight is at least 2-D.", main))
        return unusable(main, "ct", "CT", "not 2-D")
    # The codec the tensors show; the config's format is checked against it below.
    if packed is not None:
        if "weight_global_scale" in p:
            codec = "ct_nvfp4"
        elif packed.dtype == "U8" and (w_args.get("type") == "float" or (
                scale is not None and scale.dtype in ("U8", "F8_E8M0"))):
            codec = "ct_mxfp4"
        else:
            codec = "ct_pack"
    else:
        codec = "ct_float" if weight.dtype.startswith("F8") else "ct_int"
    bits = w_args.get("num_bits") if is_int(w_args.get("num_bits")) else (
        4 if codec in ("ct_nvfp4", "ct_mxfp4") else 8 if codec in ("ct_float", "ct_int") else None)
    strategy = w_args.get("strategy")
    block = w_args.get("block_structure")
    if scale is None:
        add(finding("quant_missing_companion", f"{main.name!r} is compressed-tensors "
                    f"quantized but {layer.base + '.weight_scale'!r} is missing; it cannot be "
                    "dequantized.", main, expected=["weight_scale"]))
        return unusable(main, codec, _label(codec, w_args, a_args, bits or 0, main.dtype, strategy,
                                           block), "no weight_scale")
    # logical [out, in]
    if codec == "ct_pack":
        shape = _weight_shape(ckpt, p["weight_shape"], add) if "weight_shape" in p else None
        if bits is None and shape is not None and len(packed.shape) >= 1:
            # no config: the fewest bits whose dense packing gives the stored width
            bits = next((b for b in range(1, 9) if cdiv(shape[-1] * b, 32) == packed.shape[-1]), None)
        if bits is None:
            add(finding("quant_packed_shape", f"{packed.name!r} is pack-quantized but no "
                        "config group gives its num_bits.", packed))
            return None
        if shape is None:
            if "weight_shape" not in p:
                add(finding("quant_shape_inferred", f"{layer.base + '.weight_shape'!r} "
                            "is missing; in_features is taken from the packed width.", packed))
            shape = packed.shape[:-1] + (packed.shape[-1] * 32 // bits,)
        if tuple(packed.shape) != tuple(shape[:-1]) + (cdiv(shape[-1] * bits, 32),) \
                or packed.dtype != "I32":
            add(finding("quant_packed_shape", f"{packed.name!r} is {shape_text(packed)}; "
                        f"weight shape {list(shape)} at {bits} bits packs into int32 "
                        f"{list(shape[:-1]) + [cdiv(shape[-1] * bits, 32)]}.", packed,
                        expected=list(shape[:-1]) + [cdiv(shape[-1] * bits, 32)],
                        found=list(packed.shape)))
    elif codec in ("ct_nvfp4", "ct_mxfp4"):
        shape = packed.shape[:-1] + (packed.shape[-1] * 2,)
    else:
        shape = weight.shape
    if len(shape) < 2:
        add(finding("quant_packed_shape", f"{main.name!r} is {shape_text(main)}; a "
                    "quantized weight is at least 2-D.", main))
        return unusable(main, codec, codec.upper(), "not 2-D")
    out, in_f = shape[-2], shape[-1]
    group = w_args.get("group_size") if is_int(w_args.get("group_size")) else (
        16 if codec == "ct_nvfp4" else 32 if codec == "ct_mxfp4" else None)
    if strategy is None:  # no config: read the strategy off the scale's shape
        strategy = _strategy_from(scale, out, in_f)
        if strategy == "group" and scale.shape and scale.shape[-1]:
            group = cdiv(in_f, scale.shape[-1])
        if strategy == "block" and all(scale.shape[-2:]):
            block = [cdiv(out, scale.shape[-2]), cdiv(in_f, scale.shape[-1])]
    label = _label(codec, w_args, a_args, bits or 0, main.dtype, strategy, block)
    want = _scale_shape(strategy, shape, group, block)
    if want is not None and tuple(scale.shape) != want and not (
            strategy == "tensor" and scale.numel == 1):
        add(finding("quant_groups_mismatch", f"{scale.name!r} is {shape_text(scale)}; "
                    f"strategy {strategy!r} on weight {list(shape)} needs {list(want)} scales.",
                    scale, expected=list(want), found=list(scale.shape)))
    zp = p.get("weight_zero_point")
    if zp is not None and want is not None and codec == "ct_pack" and bits is not None \
            and strategy in ("group", "channel"):
        zwant = shape[:-2] + (cdiv(out * bits, 32), want[-1])
        if tuple(zp.shape) != zwant:
            add(finding("quant_groups_mismatch", f"{zp.name!r} is {shape_text(zp)}; "
                        f"zero points packed along the output dim need {list(zwant)}.", zp,
                        expected=list(zwant), found=list(zp.shape)))
    quant = Quant(codec=codec, label=label, bits=bits, group_size=group,
                  sym=w_args.get("symmetric", zp is None) is not False, strategy=strategy,
                  value_type=w_args.get("type", "float" if codec in ("ct_float", "ct_nvfp4", "ct_mxfp4") else "int"),
                  block=block_pair(block), act_order=w_args.get("actorder"),
                  parts=roles(p, ("weight_packed", "weight", "weight_scale", "weight_zero_point",
                                  "weight_shape", "weight_global_scale")))
    return logical(layer.base + ".weight", main, shape, quant, inferred)


def _strategy_from(scale, out: int, in_f: int) -> str | None:
    s = tuple(scale.shape)
    if scale.numel == 1:
        return "tensor"
    if s == (out, 1):
        return "channel"
    if len(s) == 2 and s[0] == out:
        return "group"
    if len(s) == 2:
        return "block"
    return None


def _scale_shape(strategy, shape, group, block) -> tuple[int, ...] | None:
    out, in_f = shape[-2], shape[-1]
    lead = tuple(shape[:-2])
    if strategy == "tensor":
        return (1,)
    if strategy == "channel":
        return lead + (out, 1)
    if strategy in ("group", "tensor_group") and is_int(group) and group > 0:
        return lead + (out, cdiv(in_f, group))
    if strategy == "block" and isinstance(block, list) and len(block) == 2 \
            and all(is_int(b) and b > 0 for b in block):
        return lead + (cdiv(out, block[0]), cdiv(in_f, block[1]))
    return None


def build_sparse(ckpt, layer, scheme, add, inferred: bool):
    """Sparse values with a bitmask of where they go (and, quantized, their scales)."""
    p = layer.parts
    values, mask = p.get("compressed"), p["bitmask"]
    fmt = scheme.params.get("sparsity") if scheme and scheme.layout == "ct" else None
    codec = "ct_sparse_24" if (fmt == "sparse-24-bitmask" or (fmt is None and "row_offsets" not in p)) \
        else "ct_sparse_bitmask"
    label = "CT_SPARSE_24" if codec == "ct_sparse_24" else "CT_SPARSE"
    if values is None or "shape" not in p:
        gone = [r for r in ("compressed", "shape") if r not in p]
        add(finding("quant_missing_companion", f"{mask.name!r} is a sparsity bitmask but "
                    f"{', '.join(repr(layer.base + '.' + r) for r in gone)} is missing.", mask, expected=gone))
        return None
    shape = _weight_shape(ckpt, p["shape"], add)
    if shape is None or len(shape) != 2:
        return None
    out, in_f = shape
    if tuple(mask.shape) != (out, cdiv(in_f, 8)) or mask.dtype not in ("U8", "I8", "BOOL"):
        add(finding("quant_groups_mismatch", f"{mask.name!r} is {shape_text(mask)}; a "
                    f"bitmask of {list(shape)} is uint8 {[out, cdiv(in_f, 8)]}.", mask,
                    expected=[out, cdiv(in_f, 8)], found=list(mask.shape)))
    if codec == "ct_sparse_24" and values.numel * 2 != out * in_f:
        add(finding("quant_packed_shape", f"{values.name!r} holds {values.numel} values; "
                    f"2:4 sparsity of {list(shape)} keeps {out * in_f // 2}.", values,
                    expected=out * in_f // 2, found=values.numel))
    ro = p.get("row_offsets")
    if ro is not None and ro.numel != out:
        add(finding("quant_groups_mismatch", f"{ro.name!r} has {ro.numel} row offsets for "
                    f"{out} rows.", ro, expected=out, found=ro.numel))
    w_args, _ = _args(scheme, layer.base)
    quant = Quant(codec=codec, label=label, bits=w_args.get("num_bits"), sym=True,
                  sparsity=fmt or codec[3:].replace("_", "-"), values_dtype=values.dtype,
                  strategy=w_args.get("strategy"),
                  parts=roles(p, ("compressed", "bitmask", "shape", "row_offsets", "weight_scale",
                                  "weight_zero_point")))
    return logical(layer.base + ".weight", values, shape, quant, inferred)
