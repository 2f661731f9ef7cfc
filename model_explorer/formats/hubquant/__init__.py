"""Hub quantization schemes in safetensors folders: GPTQ, AWQ, bitsandbytes, compressed-tensors,
fine-grained FP8 and MXFP4.

`group_hub(ckpt)` reads config.json's `quantization_config` (or, without one, the tensor
names), folds each quantized layer's components into one logical tensor (shape [out, in],
a `Quant` record: codec, label, parameters and components by role) and appends a finding for
every shape that disagrees with another or with the config. It reads no tensor bytes except
the few the shapes depend on (bitsandbytes quant-state JSON, compressed-tensors weight_shape).
"""

from __future__ import annotations

from collections.abc import Mapping

from ...records import CheckpointRecord, TensorInfo
from ...spans import Finding
from . import bnb, ct, fp8, intpack
from .common import finding, quant_of, unusable
from .config import FAMILY_OF_METHOD, Scheme, parse, quant_entry
from .layers import Layer, crowded_bases, find_layers, may_hold_layers

__all__ = ["group_hub", "quant_entry"]

# Main `.weight` dtypes a scheme (by layout) stores quantized: one without its companions is an error.
ORPHAN_DTYPES = {"fp8_block": ("F8_E4M3", "F8_E5M2"), "bnb_int8": ("I8",), "bnb_4bit": ("U8",),
                 "ct": ("F8_E4M3", "F8_E5M2", "I8")}


def group_hub(ckpt: CheckpointRecord) -> bool:
    """Group the Hub-quantized layers; True when a Hub scheme owns this checkpoint (so the
    MLX grouping must not claim its `.scales`)."""
    entry = quant_entry(ckpt.metadata.get("config.json"))
    scheme = parse(entry) if entry else None
    # A block-FP8 model's regular layers are folded in one pass (DeepSeek-V3 has 46,848).
    fast, fast_parts = fp8.group_regular(ckpt.tensors, scheme, crowded_bases(
        ckpt.tensors, ".weight_scale_inv")) if scheme is not None and scheme.layout == "fp8_block" else ([], [])
    if scheme is None and not may_hold_layers(ckpt.tensors.keys()):
        return False
    layers = find_layers(ckpt.tensors, set(fast_parts))
    if scheme is None and not layers:
        return False
    found: list[Finding] = []
    add = found.append
    config_file = _config_file(ckpt)
    if scheme is not None and scheme.layout is None and scheme.method not in FAMILY_OF_METHOD:
        add(Finding.of("quant_not_decoded", f"config.json quantization_config names "
                    f"quant_method {scheme.method!r}, which this tool does not decode: its "
                    "tensors are shown as stored (packed), not as weights.", file=config_file))
        ckpt.details["hubquant"] = {"method": scheme.method, "decoded": False, "inferred": False,
                                    "ignore": list(scheme.ignore)}
        ckpt.findings.extend(found)
        return True
    if scheme is not None and scheme.problems:
        add(Finding.of("quant_config_invalid", f"config.json quantization_config "
                    f"({scheme.method}) has {'; '.join(scheme.problems)}; the tensor shapes are "
                    "used instead.", file=config_file, extra={"problems": scheme.problems}))
    inferred = scheme is None or scheme.layout is None
    grouped: dict[str, TensorInfo] = {}   # first component name -> logical tensor
    absorbed: set[str] = set()
    mismatch: dict[tuple[str, str], list[TensorInfo]] = {}
    codecs: dict[str, int] = {}  # decodable layers per codec
    position = {name: i for i, name in enumerate(ckpt.tensors)}
    for info in fast:
        parts = quant_of(info).parts
        w, s = parts["weight"].name, parts["weight_scale_inv"].name
        grouped[w if position[w] < position[s] else s] = info
    absorbed.update(fast_parts)
    if fast:
        codecs["fp8_block"] = len(fast)
    for layer in layers.values():
        layout = _layout_of(layer)
        expected = scheme.layout if scheme is not None else None
        if layout == "sparse" and expected == "ct":
            expected = "sparse"
        if expected is not None and expected != layout:
            mismatch.setdefault((expected, layout), []).append(layer.first())
        try:
            info = _build(ckpt, layer, layout, scheme if expected == layout else None, add,
                          inferred or expected != layout)
        except (ArithmeticError, IndexError, KeyError, TypeError, ValueError) as e:
            # a combination of shapes no check above foresaw: a finding, never a traceback
            add(finding("quant_packed_shape", f"The components of {layout} layer "
                        f"{layer.base!r} ({', '.join(f'{t.name!r} {t.dtype} {list(t.shape)}' for t in layer.parts.values())}) "
                        f"do not fit together ({type(e).__name__}: {e}).", layer.first()))
            continue
        if info is None:
            continue
        q = quant_of(info)
        if not q.usable:
            grouped[info.name] = info
            continue
        names = [t.name for t in q.parts.values()]
        first = min(names, key=position.__getitem__)
        grouped[first] = info
        absorbed.update(names)
        codecs[q.codec] = codecs.get(q.codec, 0) + 1
    method = scheme.method if scheme is not None else None  # a mismatch needs a scheme
    for (want, got), where in mismatch.items():
        t = where[0]
        add(finding("quant_scheme_mismatch", f"config.json says quant_method "
                    f"{method!r} ({want}), but {len(where)} layer(s) hold {got} tensors, "
                    f"the first {t.name!r}; they are read as the tensors say.", t,
                    expected=want, found=got, count=len(where)))
    if scheme is not None and scheme.layout is not None:
        _orphans(ckpt, scheme, grouped, absorbed, add)
        if not codecs and not any(not quant_of(i).usable for i in grouped.values()):
            add(Finding.of("quant_no_tensors", f"config.json says quant_method "
                        f"{scheme.method!r}, but no tensor carries its components (qweight, "
                        "scales, absmax, weight_scale...); the weights are shown as stored.",
                        file=config_file))
    if inferred and codecs:
        top = max(codecs, key=codecs.__getitem__)
        sample = next(i for i in grouped.values() if quant_of(i).usable and quant_of(i).codec == top)
        q = quant_of(sample)
        why = "config.json is missing" if "config.json" not in ckpt.metadata else \
            "config.json has no quantization_config"
        add(finding("quant_inferred", f"{why}; the tensor names show {q.label} "
                    f"({codecs[top]} layer(s), e.g. {sample.name!r}): bits {q.bits}, "
                    f"group size {q.group_size}, inferred from the names and shapes.",
                    sample, kinds=codecs))
    ckpt.tensors = _replace(ckpt.tensors, grouped, absorbed)
    ckpt.details["hubquant"] = {"method": scheme.method if scheme else None, "decoded": True,
                                "inferred": inferred, "ignore": list(scheme.ignore) if scheme else []}
    ckpt.findings.extend(found)
    return True


def _config_file(ckpt) -> str | None:
    if "config.json" not in ckpt.metadata or not ckpt.files:
        return None
    from ... import sources

    return sources.join(sources.dirname(ckpt.files[0]), "config.json")


def _layout_of(layer: Layer) -> str:
    if layer.family == "intpack":
        return intpack.orientation(layer.parts) or "gptq"
    if layer.family == "bnb":
        return "bnb_int8" if "SCB" in layer.parts else "bnb_4bit"
    return layer.family  # ct, fp8_block, mxfp4, sparse


def _build(ckpt, layer: Layer, layout: str, scheme, add, inferred: bool):
    if layout == "gptq":
        return intpack.build_gptq(layer, scheme, add, inferred)
    if layout == "awq":
        return intpack.build_awq(layer, scheme, add, inferred)
    if layout == "bnb_4bit":
        return bnb.build_4bit(ckpt, layer, scheme, add, inferred)
    if layout == "bnb_int8":
        return bnb.build_int8(layer, scheme, add, inferred)
    if layout == "ct":
        return ct.build(ckpt, layer, scheme, add, inferred)
    if layout == "sparse":
        return ct.build_sparse(ckpt, layer, scheme, add, inferred)
    if layout == "fp8_block":
        return fp8.build_fp8_block(layer, scheme, add, inferred)
    return fp8.build_mxfp4(layer, scheme, add, inferred)


def _orphans(ckpt, scheme: Scheme, grouped, absorbed, add) -> None:
    """A `.weight` stored in the scheme's quantized dtype without its scales: an error, and
    the tensor is marked so no view shows its codes as weights."""
    layout = scheme.layout
    dtypes = ORPHAN_DTYPES.get(layout) if layout is not None else None
    if layout is None or not dtypes:
        return
    done = {i.name for i in grouped.values()} | absorbed
    for name, t in ckpt.tensors.items():
        if not name.endswith(".weight") or name in done or t.dtype not in dtypes:
            continue
        if layout == "bnb_4bit" and not (len(t.shape) == 2 and t.shape[1] == 1):
            continue
        need = {"fp8_block": "weight_scale_inv", "bnb_int8": "SCB", "bnb_4bit": "weight.quant_state",
                "ct": "weight_scale"}[layout]
        base = name[: -len(".weight")]
        add(finding("quant_missing_companion", f"{name!r} is {t.dtype} in a "
                    f"{scheme.method} model but {base + '.' + need!r} is missing; its stored "
                    "values are codes, not weights, and cannot be dequantized.", t, expected=need))
        grouped[name] = unusable(t, layout, t.dtype, f"no {need}")


def _replace(tensors: Mapping[str, TensorInfo], grouped: dict[str, TensorInfo],
             absorbed: set[str]) -> dict[str, TensorInfo]:
    """The tensors in file order, each layer's logical tensor where its first component was."""
    out: dict[str, TensorInfo] = {}
    for name, t in tensors.items():
        g = grouped.get(name)
        if g is not None:
            out[g.name] = g
        elif name not in absorbed:
            out[name] = t
    return out
