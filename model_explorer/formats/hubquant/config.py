"""config.json `quantization_config`: which scheme, with the library's own fields.

Field names follow what each library writes: AutoGPTQ / GPTQModel (`bits`, `group_size`,
`sym`, `desc_act`, `checkpoint_format` or `format`, `dynamic`), AutoAWQ (`version` or
`format`, `zero_point`, `modules_to_not_convert`), transformers' BitsAndBytesConfig
(`load_in_4bit`, `bnb_4bit_quant_type`, `bnb_4bit_use_double_quant`, `llm_int8_skip_modules`),
compressed-tensors (`format`, `config_groups`, `ignore`), FineGrainedFP8Config
(`weight_block_size`, `modules_to_not_convert`) and Mxfp4Config.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

from .common import is_int, module_matches

GPTQ_BITS = (2, 3, 4, 8)
# quant_method -> the family of tensors it writes (see layers.py)
FAMILY_OF_METHOD = {"gptq": "intpack", "awq": "intpack", "bitsandbytes": "bnb",
                    "compressed-tensors": "ct", "fp8": "fp8_block", "mxfp4": "mxfp4"}


@dataclass
class Scheme:
    """What the config says about the whole model."""

    method: str                     # quant_method as written, lower case
    layout: str | None              # the tensors it promises: gptq, awq, bnb_4bit, bnb_int8, ct,
                                    # fp8_block, mxfp4; None: not decoded
    bits: int | None = None
    group_size: int | None = None   # None: per channel / per tensor
    sym: bool | None = None
    params: dict[str, Any] = field(default_factory=dict)
    ignore: list[str] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)  # fields that are not what the library allows
    groups: list[dict] = field(default_factory=list)   # compressed-tensors config_groups
    raw: dict = field(default_factory=dict)

    @property
    def family(self) -> str | None:
        return FAMILY_OF_METHOD.get(self.method) if self.layout else None

    def layer(self, module: str) -> dict[str, Any] | None:
        """Per-layer parameters (GPTQModel `dynamic` overrides); None when the layer is skipped."""
        dynamic = self.params.get("dynamic")
        out = {"bits": self.bits, "group_size": self.group_size, "sym": self.sym,
               "desc_act": self.params.get("desc_act")}
        if isinstance(dynamic, dict):
            for pattern, override in dynamic.items():
                if not isinstance(pattern, str):
                    continue
                negative = pattern.startswith("-:")
                body = pattern[2:] if pattern[:2] in ("-:", "+:") else pattern
                try:
                    hit = re.match(body, module) is not None
                except re.error:
                    continue
                if hit and negative:
                    return None
                if hit and isinstance(override, dict):
                    for k in ("bits", "group_size", "sym", "desc_act"):
                        if k in override:
                            out[k] = override[k]
                    break
        return out

    def ct_group(self, module: str) -> dict | None:
        """The compressed-tensors config group whose targets name this module (a "Linear"
        target matches any module that carries quantized weights)."""
        best = None
        for g in self.groups:
            targets = t if isinstance(t := g.get("targets"), list) else []
            named = [t for t in targets if isinstance(t, str) and t != "Linear"]
            if named and module_matches(module, named):
                return g
            if "Linear" in targets and best is None:
                best = g
        return best


def quant_entry(config: Any) -> dict | None:
    """The `quantization_config` entry when it names a quant_method (MLX's has none)."""
    if not isinstance(config, dict):
        return None
    q = config.get("quantization_config")
    if not isinstance(q, dict):
        q = config.get("quantization")
    return q if isinstance(q, dict) and isinstance(q.get("quant_method"), str) else None


def parse(q: dict) -> Scheme:
    method = q["quant_method"].strip().lower()
    parser = PARSERS.get(method)
    if parser is None:
        return Scheme(method, None, raw=q)
    s = parser(q)
    s.raw = q
    return s


def _bits_group(q: dict, s: Scheme, allowed=GPTQ_BITS) -> None:
    bits, group = q.get("bits", q.get("w_bit")), q.get("group_size", q.get("q_group_size"))
    if is_int(bits) and bits in allowed:
        s.bits = bits
    elif bits is not None:
        s.problems.append(f"bits = {bits!r} (expected one of {list(allowed)})")
    if is_int(group) and (group > 0 or group == -1):
        s.group_size = None if group == -1 else group
    elif group is not None:
        s.problems.append(f"group_size = {group!r} (expected a positive int or -1)")
    else:
        s.group_size = 128  # both libraries' default


def _gptq(q: dict) -> Scheme:
    s = Scheme("gptq", "gptq")
    _bits_group(q, s)
    s.sym = q.get("sym", True) is not False
    fmt = q.get("checkpoint_format", q.get("format", "gptq"))
    fmt = fmt.lower() if isinstance(fmt, str) else "gptq"
    if fmt not in ("gptq", "gptq_v2"):
        s.problems.append(f"checkpoint_format = {fmt!r} (decoded layouts: 'gptq', 'gptq_v2')")
    s.params = {"desc_act": bool(q.get("desc_act", False)), "checkpoint_format": fmt}
    if isinstance(q.get("dynamic"), dict):
        s.params["dynamic"] = q["dynamic"]
    return s


def _awq(q: dict) -> Scheme:
    s = Scheme("awq", "awq")
    _bits_group(q, s, allowed=(4,))
    version = q.get("version", q.get("format", "gemm"))
    s.params = {"version": version.lower() if isinstance(version, str) else "gemm"}
    s.sym = q.get("zero_point", True) is False
    s.ignore = [m for m in q.get("modules_to_not_convert") or [] if isinstance(m, str)]
    return s


def _bnb(q: dict) -> Scheme:
    four = q.get("load_in_4bit", q.get("_load_in_4bit")) is True
    eight = q.get("load_in_8bit", q.get("_load_in_8bit")) is True
    skip = [m for m in q.get("llm_int8_skip_modules") or [] if isinstance(m, str)]
    if four and not eight:
        qt = q.get("bnb_4bit_quant_type", "fp4")
        s = Scheme("bitsandbytes", "bnb_4bit", 4, 64, True, ignore=skip)
        s.params = {"quant_type": qt if qt in ("nf4", "fp4") else qt,
                    "nested": q.get("bnb_4bit_use_double_quant") is True}
        if qt not in ("nf4", "fp4"):
            s.problems.append(f"bnb_4bit_quant_type = {qt!r} (expected 'nf4' or 'fp4')")
        return s
    s = Scheme("bitsandbytes", "bnb_int8", 8, None, True, ignore=skip)
    if not eight:
        s.layout = None  # neither flag: the tensors will say which
        s.problems.append("neither load_in_4bit nor load_in_8bit is true")
    return s


def _ct(q: dict) -> Scheme:
    s = Scheme("compressed-tensors", "ct")
    fmt = q.get("format")
    s.params = {"format": fmt if isinstance(fmt, str) else None}
    groups = q.get("config_groups")
    if isinstance(groups, dict):
        s.groups = [g for g in groups.values() if isinstance(g, dict)]
    s.ignore = [m for m in q.get("ignore") or [] if isinstance(m, str)]
    if s.groups:
        w = w if isinstance(w := s.groups[0].get("weights"), dict) else {}
        s.bits = w.get("num_bits") if is_int(w.get("num_bits")) else None
        s.group_size = w.get("group_size") if is_int(w.get("group_size")) else None
        s.sym = w.get("symmetric", True) is not False
        s.params.update({k: w.get(k) for k in ("type", "strategy", "block_structure", "actorder")
                         if w.get(k) is not None})
    sparsity = q.get("sparsity_config")
    if isinstance(sparsity, dict) and isinstance(sparsity.get("format"), str) \
            and sparsity["format"] != "dense":
        s.params["sparsity"] = sparsity["format"]
    return s


def _fp8(q: dict) -> Scheme:
    s = Scheme("fp8", "fp8_block", 8, None, True)
    block = q.get("weight_block_size")
    if isinstance(block, list) and len(block) == 2 and all(is_int(b) and b > 0 for b in block):
        s.params["block_size"] = list(block)
    elif block is not None:
        s.problems.append(f"weight_block_size = {block!r} (expected [rows, columns])")
    s.params["activation_scheme"] = q.get("activation_scheme", "dynamic")
    if q.get("scale_fmt") is not None:
        s.params["scale_fmt"] = q.get("scale_fmt")
    s.ignore = [m for m in q.get("modules_to_not_convert") or [] if isinstance(m, str)]
    return s


def _mxfp4(q: dict) -> Scheme:
    s = Scheme("mxfp4", "mxfp4", 4, 32, True)
    s.params["block_size"] = 32
    s.ignore = [m for m in q.get("modules_to_not_convert") or [] if isinstance(m, str)]
    return s


PARSERS = {"gptq": _gptq, "awq": _awq, "bitsandbytes": _bnb, "compressed-tensors": _ct,
           "fp8": _fp8, "mxfp4": _mxfp4}
