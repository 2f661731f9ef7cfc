"""PEFT adapters: adapter_config.json + adapter_model.safetensors (or .bin), read and checked.

`read_adapter(ckpt)` says what the adapter is (type, r, alpha, scaling, target modules,
rank_pattern, modules_to_save, base model). `check(ckpt)` checks that every lora_A has its
lora_B, that their ranks agree with r (or rank_pattern), and that lora_B is not all zeros.
`check_base(adapter, base)` checks each pair against the base model's linear layer and says
which hidden size the adapter fits instead; `delta_table(adapter, base)` gives the per-layer
‖B·A‖·scaling relative to the base weight's norm.
"""

from __future__ import annotations

import math
import re
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np

from ..records import CheckpointRecord, TensorInfo
from ..safe_text import escape_deep
from ..spans import Finding
from ..tensors.read import read
from .findings import model_finding
from .hparams import info_span
from .sidefiles import side_json

_PAIR = re.compile(r"^(?P<module>.+)\.lora_(?P<half>[AB])(?:\.(?P<adapter>[\w-]+))?\.weight$")
PEFT_PREFIX = "base_model.model."
ZERO_CHECK_BYTES = 64 * 2**20  # lora_B read at open only while the halves are this small


@dataclass
class AdapterInfo:
    peft_type: str | None
    r: int | None
    alpha: float | None
    scaling: float | None
    use_rslora: bool = False
    use_dora: bool = False
    target_modules: Any = None
    rank_pattern: dict[str, int] = field(default_factory=dict)
    alpha_pattern: dict[str, float] = field(default_factory=dict)
    modules_to_save: list[str] | None = None
    base_model: str | None = None
    task_type: str | None = None
    pairs: int = 0
    file: str | None = None

    def rank_for(self, module: str) -> int | None:
        return _pattern_value(self.rank_pattern, module, self.r)

    def scaling_for(self, module: str, rank: int) -> float | None:
        alpha = _pattern_value(self.alpha_pattern, module, self.alpha)
        if alpha is None or not rank:
            return None
        return alpha / math.sqrt(rank) if self.use_rslora else alpha / rank

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["summary"] = self.summary()
        return d

    def summary(self) -> str:
        kind = (self.peft_type or "?") + (" (DoRA)" if self.use_dora else "")
        targets = self.target_modules if isinstance(self.target_modules, str) else ", ".join(self.target_modules or [])
        return (f"{kind} r={self.r} alpha={self.alpha} scaling={self.scaling:g} on {targets or '?'}; "
                f"{self.pairs} pairs; base {self.base_model or '?'}") if self.scaling is not None else \
            f"{kind} r={self.r} on {targets or '?'}; {self.pairs} pairs; base {self.base_model or '?'}"


def _pattern_value(pattern: dict, module: str, default):
    """PEFT matches a rank_pattern key against the end of the module's dotted name."""
    for key, value in (pattern or {}).items():
        try:
            if key == module or module.endswith("." + key) or re.fullmatch(rf"(.*\.)?{key}", module):
                return value
        except re.error:
            continue
    return default


def _targets(v):
    """target_modules as PEFT allows it: a regex string or a list of names (anything else: None)."""
    if isinstance(v, str):
        return v
    if isinstance(v, list):
        return [x for x in v if isinstance(x, str)]
    return None


def _num(v) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool)


def read_adapter(ckpt: CheckpointRecord) -> AdapterInfo | None:
    """The adapter_config.json beside the weights, or None when there is none (or it is unreadable)."""
    side = side_json(ckpt, "adapter_config.json")
    if side is None or not isinstance(side.value, dict):
        return None
    c = side.value
    r = c.get("r")
    alpha = c.get("lora_alpha")
    info = AdapterInfo(
        peft_type=c.get("peft_type") if isinstance(c.get("peft_type"), str) else None,
        r=r if isinstance(r, int) and not isinstance(r, bool) else None,
        alpha=float(alpha) if _num(alpha) else None, scaling=None,
        use_rslora=bool(c.get("use_rslora")), use_dora=bool(c.get("use_dora")),
        target_modules=_targets(c.get("target_modules")),
        rank_pattern={k: v for k, v in (c.get("rank_pattern") or {}).items() if isinstance(v, int)}
        if isinstance(c.get("rank_pattern"), dict) else {},
        alpha_pattern={k: v for k, v in (c.get("alpha_pattern") or {}).items() if _num(v)}
        if isinstance(c.get("alpha_pattern"), dict) else {},
        modules_to_save=c.get("modules_to_save") if isinstance(c.get("modules_to_save"), list) else None,
        base_model=c.get("base_model_name_or_path") if isinstance(c.get("base_model_name_or_path"), str) else None,
        task_type=c.get("task_type") if isinstance(c.get("task_type"), str) else None, file=side.path)
    if info.r and info.alpha is not None and info.r > 0:
        info.scaling = info.alpha / math.sqrt(info.r) if info.use_rslora else info.alpha / info.r
    info.pairs = len(pairs(ckpt))
    return info


def pairs(ckpt: CheckpointRecord) -> dict[str, dict[str, TensorInfo]]:
    """module name (as the base names it) -> {"A": TensorInfo, "B": TensorInfo} (either may be absent)."""
    out: dict[str, dict[str, TensorInfo]] = {}
    for name, info in ckpt.tensors.items():
        m = _PAIR.match(name)
        if m:
            module = m["module"].removeprefix(PEFT_PREFIX)
            out.setdefault(module, {})[m["half"]] = info
    return out


def _loc(info: TensorInfo) -> dict:
    off, ln = info_span(info)
    return {"offset": off, "length": ln, "tensor": info.name, "file": info.file}


def check(ckpt: CheckpointRecord, hp=None) -> list[Finding]:
    side = side_json(ckpt, "adapter_config.json")
    if side is None:
        return []
    out: list[Finding] = []
    if side.problem is not None:
        out.append(side.problem)
    if not isinstance(side.value, dict):
        return out
    c = side.value
    info = read_adapter(ckpt)
    kind = str(c.get("peft_type", "")).upper()
    lora_like = kind in ("LORA", "ADALORA", "") or bool(pairs(ckpt))
    for key, why in (("peft_type", "the adapter type"), ("r", "the rank of every pair"),
                     ("lora_alpha", "the scaling alpha / r")):
        if key == "peft_type" and key not in c:
            out.append(model_finding("adapter_config_invalid", f"adapter_config.json has no 'peft_type' "
                                     f"({why}); PEFT cannot tell which adapter this is.", file=side.path))
        elif key != "peft_type" and lora_like and key not in c:
            out.append(model_finding("adapter_config_invalid", f"adapter_config.json has no {key!r} ({why}); "
                                     "PEFT cannot load the adapter without it.", file=side.path, key=key))
        elif key == "r" and lora_like and (not isinstance(c["r"], int) or isinstance(c["r"], bool) or c["r"] <= 0):
            off, ln = side.where("r")
            out.append(model_finding("adapter_config_invalid", f"adapter_config.json r is {c['r']!r}; a rank "
                                     "is a positive integer.", file=side.path, offset=off, length=ln, key="r"))
    ps = pairs(ckpt)
    b_bytes = sum(p["B"].length for p in ps.values() if "B" in p)
    any_nonzero = False
    checked_zero = b_bytes <= ZERO_CHECK_BYTES
    for module, p in sorted(ps.items()):
        if "A" not in p or "B" not in p:
            have, lack = ("A", "B") if "A" in p else ("B", "A")
            out.append(model_finding("adapter_unpaired", f"{module!r} has lora_{have} but no lora_{lack}.",
                                     **_loc(p[have]), module=module))
            continue
        a, b = p["A"], p["B"]
        if len(a.shape) != 2 or len(b.shape) != 2:
            continue
        if a.shape[0] != b.shape[1]:
            out.append(model_finding("adapter_rank_mismatch", f"{module!r}: lora_A {list(a.shape)} has rank "
                                     f"{a.shape[0]} but lora_B {list(b.shape)} has rank {b.shape[1]}.",
                                     **_loc(b), module=module))
        else:
            want = info.rank_for(module) if info else None
            if want is not None and a.shape[0] != want:
                said = "rank_pattern" if info.rank_pattern and want != info.r else "r"
                off, ln = side.where(said)
                out.append(model_finding("adapter_rank_mismatch", f"{module!r}: the pair has rank {a.shape[0]} "
                                         f"(lora_A {list(a.shape)}, lora_B {list(b.shape)}) but "
                                         f"adapter_config.json {said} says {want}.", **_loc(a), module=module,
                                         expected=want, found=a.shape[0]))
        if checked_zero and not any_nonzero:
            try:
                any_nonzero = bool(np.any(read(ckpt, b)))
            except ValueError:
                any_nonzero = True
    if ps and checked_zero and not any_nonzero:
        first = ps[sorted(ps)[0]].get("B")
        out.append(model_finding("adapter_untrained", f"All {len(ps)} lora_B matrices are zeros: the adapter "
                                 "adds nothing to the base model (it is as initialised).",
                                 **(_loc(first) if first is not None else {"file": side.path})))
    return out


# -- against a base model -------------------------------------------------------------------------

def _base_weight(base: CheckpointRecord, module: str) -> TensorInfo | None:
    name = module + ".weight"
    if name in base.tensors:
        return base.tensors[name]
    if base.format == "gguf":
        from ..tensors.names import hf_to_gguf

        g = hf_to_gguf(name)
        if g is not None:
            return base.tensors.get(g)
    return None


def check_base(adapter: CheckpointRecord, base: CheckpointRecord) -> list[Finding]:
    """Each pair's shape against the base's linear layer: lora_A [r, in], lora_B [out, r]."""
    out: list[Finding] = []
    missing = []
    for module, p in sorted(pairs(adapter).items()):
        if "A" not in p or "B" not in p:
            continue
        a, b = p["A"], p["B"]
        w = _base_weight(base, module)
        if w is None:
            missing.append(module)
            continue
        if len(w.shape) != 2:
            continue
        out_f, in_f = w.shape
        if base.format == "gguf" and w.shape == (in_f, out_f):
            pass
        if a.shape[1] != in_f or b.shape[0] != out_f:
            fits = _fits(a.shape[1], b.shape[0], module)
            out.append(model_finding("adapter_base_mismatch", f"{module!r}: the pair maps {a.shape[1]} inputs "
                                     f"to {b.shape[0]} outputs (lora_A {list(a.shape)}, lora_B {list(b.shape)}), "
                                     f"but the base's {w.name!r} is [{out_f}, {in_f}] ({out_f} outputs, "
                                     f"{in_f} inputs). {fits}", **_loc(a), module=module,
                                     adapter_in=a.shape[1], adapter_out=b.shape[0], base_shape=[out_f, in_f]))
    if missing:
        out.append(model_finding("adapter_base_missing", f"{len(missing)} module(s) the adapter targets are not "
                                 f"in the base model: {', '.join(repr(m) for m in missing[:5])}"
                                 + (f" and {len(missing) - 5} more" if len(missing) > 5 else "") + ".",
                                 modules=missing))
    return out


def _fits(in_f: int, out_f: int, module: str) -> str:
    leaf = module.rsplit(".", 1)[-1]
    if leaf in ("q_proj", "o_proj", "gate_proj", "up_proj", "k_proj", "v_proj"):
        hidden = out_f if leaf == "o_proj" else in_f
        return f"The adapter was trained for a base with hidden size {hidden}."
    if leaf == "down_proj":
        return f"The adapter was trained for a base with hidden size {out_f} (intermediate size {in_f})."
    return f"The adapter fits a layer with {in_f} inputs and {out_f} outputs."


def delta_table(adapter: CheckpointRecord, base: CheckpointRecord | None = None):
    """A DataFrame, one row per LoRA pair: layer, module, rank, scaling, ‖B·A‖·scaling (Frobenius)
    and, with a base, the base weight's norm and the ratio (which layers the adapter changes most).

    ‖B·A‖ is computed from the r×r products BᵀB and A·Aᵀ, never the full [out, in] matrix.
    """
    import pandas as pd

    info = read_adapter(adapter)
    rows = []
    for module, p in sorted(pairs(adapter).items(), key=lambda kv: _natural(kv[0])):
        if "A" not in p or "B" not in p:
            continue
        a = read(adapter, p["A"]).astype(np.float64)
        b = read(adapter, p["B"]).astype(np.float64)
        if a.ndim != 2 or b.ndim != 2 or a.shape[0] != b.shape[1]:
            continue
        rank = a.shape[0]
        scaling = (info.scaling_for(module, rank) if info else None) or 1.0
        delta = math.sqrt(max(0.0, float(np.trace((b.T @ b) @ (a @ a.T))))) * scaling
        m = re.search(r"\.(\d+)\.", module)
        row = {"layer": int(m[1]) if m else None, "module": module, "rank": rank, "scaling": scaling,
               "delta_norm": delta}
        if base is not None:
            w = _base_weight(base, module)
            if w is not None:
                wn = float(np.linalg.norm(read(base, w).astype(np.float64)))
                row.update(base_norm=wn, relative=delta / wn if wn else float("inf"))
        rows.append(row)
    cols = ["layer", "module", "rank", "scaling", "delta_norm"] + (["base_norm", "relative"] if base is not None else [])
    return pd.DataFrame(escape_deep(rows), columns=cols)


def plot_deltas(table, ax=None):
    """Bar chart of the relative (or absolute) delta per module, in layer order; returns the Axes."""
    import matplotlib.pyplot as plt

    if ax is None:
        _, ax = plt.subplots(figsize=(8, 3))
    col = "relative" if "relative" in table else "delta_norm"
    ax.bar(range(len(table)), table[col].to_numpy())
    ax.set_xlabel("LoRA pair (layer order)")
    ax.set_ylabel("‖B·A‖·scaling / ‖W‖" if col == "relative" else "‖B·A‖·scaling")
    return ax


def _natural(name: str):
    return [int(t) if t.isdigit() else t for t in re.split(r"(\d+)", name)]
