"""What the loading rules' report (load_rules.py) means for a person, one finding per cause: a
base checkpoint under a head class (the head will be initialised at random), a head checkpoint
loaded as the base model (the head is dropped), buffers older versions saved; the checkpoint's
names as the model's tables spell them; and renames offered only when they cannot hurt.
"""

from __future__ import annotations

import re

from ..records import TensorInfo
from ..spans import Finding
from . import load_rules as rules_mod
from .findings import model_finding
from .hparam_shapes import natural, tensor_loc
from .renames import one_to_one, same_role

LIST_SHOWN = 6
# buffers the model computes itself that older saves hold (GPT-2's causal mask is 4-D)
_STALE_LEAVES = ("position_ids", "inv_freq", "masked_bias")
_MASK = re.compile(r"(?:^|\.)(?:attn|attention)\.bias$")


def short(names, n: int = LIST_SHOWN) -> str:
    names = list(names)
    text = ", ".join(repr(x) for x in names[:n])
    return text + (f" and {len(names) - n:,} more" if len(names) > n else "")


def canonical(by_name: dict[str, TensorInfo], e) -> dict[str, TensorInfo]:
    """The stored tensors under the names the model's tables use (checkpoint naming): the legacy
    renamings and `base_model_prefix` applied as transformers applies them."""
    if e is None:
        return dict(by_name)
    p = e.prefix
    out: dict[str, TensorInfo] = {}
    for name, info in by_name.items():
        c, _ = rules_mod.legacy_rename(name) if p is not None else (name, None)
        if p and c not in e.shapes:
            if c.startswith(p + ".") and c[len(p) + 1:] in e.shapes:
                c = c[len(p) + 1:]
            elif f"{p}.{c}" in e.shapes:
                c = f"{p}.{c}"
        out.setdefault(c, info)
    return out


def absent(e, rep: rules_mod.LoadReport, canon: dict[str, TensorInfo]) -> list[str]:
    """Checkpoint names loading leaves unfilled: the tensors transformers reports missing, in the
    checkpoint's naming, and the sources of a fused parameter that are not stored (a converter
    stacks every expert: one absent leaves it incomplete). The head is listed when absent and
    not filled by a tie, whether or not a table counts it as required."""
    filled = set(rep.filled.values()) | rep.tied_filled
    names = set(e.required) | ({e.head} if e.head in e.shapes else set())
    out = []
    for r in names:
        if r in canon:
            continue
        m = e.model_name(r)
        if m in rep.missing or (r == e.head and m not in filled) or (m != r and m in filled and m not in canon):
            out.append(r)
    return sorted(out, key=natural)  # the few absent ones, not every expected name (45,000 in DeepSeek-V3)


def stale_buffer(name: str, info: TensorInfo) -> bool:
    leaf = name.rsplit(".", 1)[-1]
    return leaf in _STALE_LEAVES or bool(_MASK.search(name) and len(info.shape) == 4)


def head_initialised(e, head_new: list[str], unused: list[str], by_name: dict[str, TensorInfo],
                     added: int | None) -> Finding:
    """Tensors only this class has, the checkpoint being of another class of the model: a base
    checkpoint under a head class (`added` names gained the prefix), or a head checkpoint under
    the base class (its pooler, say)."""
    first = next(iter(by_name.values()))
    if added:
        text = (f"The checkpoint holds the base model without its head: its {added:,} tensor names lack the "
                f"{e.prefix + '.'!r} prefix that transformers adds when loading {e.class_name}, and the "
                f"{len(head_new)} head tensor(s) {short(head_new)} will be initialised at random")
    else:
        text = (f"The checkpoint was saved from a head class (its names carry {e.prefix + '.'!r}, which "
                f"transformers strips when loading {e.class_name}); the {len(head_new)} tensor(s) "
                f"{short(head_new)} that only {e.class_name} has will be initialised at random")
    if unused:
        text += f"; {len(unused)} stored tensor(s) it has no place for are ignored: {short(unused)}"
    return model_finding("head_initialised", text + ".", head=head_new, ignored=unused, cls=e.class_name,
                         **tensor_loc(by_name[unused[0]] if unused else first))


def head_dropped(e, dropped: list[str], by_name: dict[str, TensorInfo]) -> Finding:
    return model_finding("head_dropped", f"{len(dropped):,} tensor(s) belong to a head that {e.class_name}, "
                         f"a base model class, does not have: {short(dropped)}. transformers strips the "
                         f"{e.prefix + '.'!r} prefix from the rest and leaves these out.", dropped=dropped,
                         cls=e.class_name, **tensor_loc(by_name[dropped[0]]))


def stale(e, names: list[str], by_name: dict[str, TensorInfo]) -> Finding:
    return model_finding("stale_buffers", f"{len(names):,} stored tensor(s) are buffers the model computes "
                         f"itself, saved by an older version of its code: {short(names)}. {e.source} has no "
                         "parameter for them and does not load them.", buffers=names, **tensor_loc(by_name[names[0]]))


def safe_renames(wanted: dict[str, tuple | None], extra: list[str], by_name: dict[str, TensorInfo],
                 rules: rules_mod.LoadRules) -> dict[str, str]:
    """{stored name: expected name} for a renaming that cannot hurt: forced by names and shapes
    (renames.one_to_one), every tensor keeping its role (same tower, module kind, place in the
    layer pattern, parameter), and the renamed checkpoint loading with nothing missing."""
    pairs = one_to_one(wanted, {n: by_name[n].shape for n in extra})
    if not pairs or not all(same_role(a, b) for a, b in pairs.items()):
        return {}
    after = rules_mod.report(rules, [pairs.get(n, n) for n in by_name])
    return pairs if not after.missing else {}


def config_class_view(ckpt, hp, by_name: dict[str, TensorInfo], e) -> str:
    """What loading with config.json's own class would do, when a library loads the model with
    another (a sentence-transformers encoder under a masked-LM head class): a sentence for the
    layout finding, or "" when that class loads it the same way."""
    from . import expected, hf_build

    cfg = ckpt.metadata.get("config.json")
    if e.class_name is None or not isinstance(cfg, dict) or not expected.transformers_available():
        return ""
    try:
        own = hf_build.from_transformers(cfg)
    except hf_build.NotBuildable:
        return ""
    if own.class_name == e.class_name:
        return ""
    rep = rules_mod.report(own.load_rules(), by_name)
    if not rep.missing and not rep.unexpected:
        return f"config.json's class, {own.class_name}, loads it with nothing missing as well."
    said = [f"{len(rep.missing)} head tensor(s) would be initialised at random "
            f"({short(sorted(rep.missing, key=natural), 4)})"] if rep.missing else []
    if rep.unexpected:
        said.append(f"{len(rep.unexpected)} stored tensor(s) left unused ({short(sorted(rep.unexpected), 4)})")
    lead = ("loads it with nothing missing" if not rules_mod.report(e.load_rules(), by_name).missing
            else "is the class the library loads")
    return f"{e.class_name} {lead}; with config.json's class, {own.class_name}, " + " and ".join(said) + "."
