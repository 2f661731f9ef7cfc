"""Find the quantized layers by the names their libraries give the component tensors.

A layer is a module prefix (`model.layers.0.mlp.gate_proj`) with a family and its components
by role. The families:
- "intpack": GPTQ and AWQ (`.qweight`, `.qzeros`, `.scales`, `.g_idx`; AWQ GEMV-fast
  `.scaled_zeros`);
- "bnb": bitsandbytes, 4-bit (`.weight` + `.weight.absmax`, `.weight.quant_map`,
  `.weight.nested_absmax`, `.weight.nested_quant_map`, `.weight.quant_state.bitsandbytes__nf4`
  or `__fp4`) or LLM.int8 (`.weight` + `.SCB`, `.weight_format`);
- "ct": compressed-tensors (`.weight_packed` or `.weight`, `.weight_scale`,
  `.weight_zero_point`, `.weight_shape`, `.weight_global_scale`);
- "fp8_block": fine-grained FP8 (`.weight` + `.weight_scale_inv`);
- "mxfp4": gpt-oss (`X_blocks` + `X_scales`);
- "sparse": compressed-tensors sparse-bitmask (`.shape`, `.compressed`, `.bitmask`,
  `.row_offsets`) and sparse-24-bitmask (`.shape`, `.compressed`, `.bitmask`).
"""

from __future__ import annotations

from collections.abc import Mapping
from collections.abc import Set as AbstractSet
from dataclasses import dataclass, field

from ...records import TensorInfo
from ...tensormap import records_of

# (suffix, family, role), longest suffixes first so `.weight.absmax` wins over `.weight`.
SUFFIXES = [
    (".weight.quant_state.bitsandbytes__nf4", "bnb", "quant_state"),
    (".weight.quant_state.bitsandbytes__fp4", "bnb", "quant_state"),
    (".weight.nested_quant_map", "bnb", "nested_quant_map"),
    (".weight.nested_absmax", "bnb", "nested_absmax"),
    (".weight.quant_map", "bnb", "quant_map"),
    (".weight.absmax", "bnb", "absmax"),
    (".weight_global_scale", "ct", "weight_global_scale"),
    (".weight_zero_point", "ct", "weight_zero_point"),
    (".weight_scale_inv", "fp8_block", "weight_scale_inv"),
    (".weight_packed", "ct", "weight_packed"),
    (".weight_format", "bnb", "weight_format"),
    (".weight_scale", "ct", "weight_scale"),
    (".weight_shape", "ct", "weight_shape"),
    (".scaled_zeros", "intpack", "scaled_zeros"),
    (".qweight", "intpack", "qweight"),
    (".qzeros", "intpack", "qzeros"),
    (".scales", "intpack", "scales"),
    (".g_idx", "intpack", "g_idx"),
    (".SCB", "bnb", "SCB"),
    (".row_offsets", "sparse", "row_offsets"),
    (".compressed", "sparse", "compressed"),
    (".bitmask", "sparse", "bitmask"),
    (".shape", "sparse", "shape"),
    ("_blocks", "mxfp4", "blocks"),
    ("_scales", "mxfp4", "scales"),
]
# Roles that alone make a layer of that family (a lone `.scales` is MLX's, a lone
# `_scales` is someone else's).
ANCHORS = {"intpack": ("qweight", "qzeros", "g_idx", "scaled_zeros"),
           "bnb": ("quant_state", "absmax", "SCB"),
           "ct": ("weight_packed", "weight_scale", "weight_global_scale", "weight_shape"),
           "fp8_block": ("weight_scale_inv",),
           "mxfp4": ("blocks",),
           "sparse": ("bitmask",)}
# Families whose main component is the layer's own `.weight`.
OWN_WEIGHT = ("bnb", "ct", "fp8_block")


@dataclass
class Layer:
    base: str
    family: str
    parts: dict[str, TensorInfo] = field(default_factory=dict)
    # other families whose components sit on the same prefix (a layer saved twice)
    also: list[str] = field(default_factory=list)

    @property
    def names(self) -> list[str]:
        return [t.name for t in self.parts.values()]

    def first(self) -> TensorInfo:
        return next(iter(self.parts.values()))


def find_layers(tensors: Mapping[str, TensorInfo], skip: AbstractSet[str] = frozenset()) -> dict[str, Layer]:
    """Every quantized layer the tensor names show, keyed by module prefix, in file order;
    names in `skip` (components already grouped) are left out."""
    found: dict[str, dict[str, dict[str, str]]] = {}
    # One C call per name picks the few candidates; only they are matched, and only the
    # records of the layers found are built (a map of 90,000 tensors builds none when nothing
    # is quantized).
    for name in [n for n in tensors if n.endswith(_ANY_SUFFIX) and n not in skip]:
        hit = _match(name)
        if hit is not None:
            base, family, role = hit
            found.setdefault(base, {}).setdefault(family, {})[role] = name
    chosen: list[tuple[str, str, dict[str, str], list[str]]] = []
    for base, families in found.items():
        real = [f for f, parts in families.items() if not parts.keys().isdisjoint(ANCHORS[f])]
        if not real:
            continue
        family = "sparse" if "sparse" in real else real[0]
        parts = dict(families[family])
        if family == "sparse":  # sparse values may also be quantized: their scales join them
            parts.update(families.get("ct", {}))
            real = [f for f in real if f not in ("sparse", "ct")]
        else:
            real = [f for f in real if f != family]
        if family in OWN_WEIGHT and base + ".weight" in tensors:
            parts = {"weight": base + ".weight", **parts}
        if family == "bnb" and "weight_format" in families.get("bnb", {}):
            parts["weight_format"] = families["bnb"]["weight_format"]
        chosen.append((base, family, parts, real))
    wanted = [n for _, _, parts, _ in chosen for n in parts.values()]
    got = iter(records_of(tensors, wanted))
    return {base: Layer(base, family, {role: next(got) for role in parts}, real)
            for base, family, parts, real in chosen}


def crowded_bases(tensors, suffix: str) -> set[str]:
    """Module prefixes holding some component other than `suffix` (a `.weight_scale_inv`
    beside a `.weight_scale`, say): such a prefix is grouped the per-layer way."""
    out = set()
    for name in tensors:
        if name.endswith(_ANY_SUFFIX) and not name.endswith(suffix):
            hit = _match(name)
            if hit is not None:
                out.add(hit[0])
    return out


_ANY_SUFFIX = tuple(suffix for suffix, _, _ in SUFFIXES)
# The suffixes of the roles that make a layer (ANCHORS): a model none of whose names ends so has
# no Hub-quantized layer (an MLX model's thousands of `.scales` are not matched one by one).
ANCHOR_SUFFIXES = tuple(suffix for suffix, family, role in SUFFIXES if role in ANCHORS[family])


def may_hold_layers(names) -> bool:
    return any(n.endswith(ANCHOR_SUFFIXES) for n in names)
# the same table, by last dotted segment, so each name costs a dict lookup or two
_BY_LAST = {suffix[1:]: (family, role) for suffix, family, role in SUFFIXES
            if suffix.startswith(".") and suffix.count(".") == 1}
_BY_WEIGHT_LAST = {suffix[len(".weight."):]: (family, role) for suffix, family, role in SUFFIXES
                   if suffix.startswith(".weight.")}


def _match(name: str) -> tuple[str, str, str] | None:
    head, dot, last = name.rpartition(".")
    if dot and head:
        hit = _BY_LAST.get(last)
        if hit is not None:
            return (head, *hit)
        if head.endswith(".weight") and len(head) > 7:
            hit = _BY_WEIGHT_LAST.get(last)
            if hit is not None:
                return (head[:-7], *hit)
        if last.startswith("bitsandbytes__") and head.endswith(".weight.quant_state"):
            hit = _BY_WEIGHT_LAST.get("quant_state." + last)
            if hit is not None:
                return (head[: -len(".weight.quant_state")], *hit)
    for suffix, family, role in (("_blocks", "mxfp4", "blocks"), ("_scales", "mxfp4", "scales")):
        if name.endswith(suffix) and len(name) > len(suffix):
            return name[: -len(suffix)], family, role
    return None
