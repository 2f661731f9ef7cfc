"""transformers' loading rules over tensor names: which stored tensor fills which parameter, and
what `from_pretrained(..., output_loading_info=True)` would report as missing and unexpected.

The rules, as transformers 5 applies them (core_model_loading.convert_and_load_state_dict_in_model,
PreTrainedModel.tie_weights and _adjust_missing_and_unexpected_keys):
1. each stored name goes through the model's weight renamings and at most one converter, then the
   legacy renamings (`LayerNorm.gamma` -> `.weight`, `.beta` -> `.bias`, `weight_g`/`weight_v`
   -> `parametrizations.weight.original0/1`, ...);
2. `base_model_prefix` both ways: a name whose prefix-stripped form is a parameter loses the
   prefix (a head checkpoint loaded as the base model), a name that is a parameter once
   prefixed gains it (a base checkpoint under a head class);
3. missing = every state-dict name nothing filled, less tied weights whose partner was stored
   (tying is symmetric at load: a stored target fills a missing source);
4. names matching `_keys_to_ignore_on_load_missing` / `_unexpected` are dropped, and so are a
   stored rotary `inv_freq` and `position_ids` when the model has such buffers (they used to be
   saved and now are not).
Only names are read: no torch here. The transformers build (expected.py) supplies the model's own
renamings; without it the legacy list below stands in (tests hold it equal to transformers').
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

# transformers' "legacy" renamings (conversion_mapping.py), applied to every model's checkpoint
LEGACY_RENAMES: tuple[tuple[str, str], ...] = (
    ("LayerNorm.gamma", "LayerNorm.weight"),
    ("LayerNorm.beta", "LayerNorm.bias"),
    (".weight_g", ".parametrizations.weight.original0"),
    (".weight_v", ".parametrizations.weight.original1"),
    (r"^model\.language_model\.model", "model.language_model"),
    (r"^language_model\.model\.model", "model.language_model"),
)
# buffers older versions saved, dropped at load when the model still has such a buffer
INV_FREQ = r"rotary_emb\.inv_freq"
POSITION_IDS = r"(^|\.)position_ids$"

# stored name -> (renamed name, the other target names of a one-to-many converter, or None)
Renamer = Callable[[str], tuple[str, "list[str] | None"]]


_LEGACY = tuple((re.compile(source), target) for source, target in LEGACY_RENAMES)
_ANY_LEGACY = re.compile("|".join(f"(?:{source})" for source, _ in LEGACY_RENAMES))


def legacy_rename(name: str) -> tuple[str, None]:
    """The legacy renamings alone (what transformers applies to every model). One search tells
    the names none applies to (nearly all), so a 45,000-tensor checkpoint pays one per name."""
    if _ANY_LEGACY.search(name) is None:
        return name, None
    for pattern, target in _LEGACY:
        m = pattern.search(name)
        if m is not None:
            name = name.replace(m.group(0), target, 1)
    return name, None


@dataclass
class LoadRules:
    """How one model class loads a checkpoint: its state-dict names, `base_model_prefix`, the
    renamings its loader applies, its tied pairs (in transformers' order) and ignore patterns."""

    keys: dict[str, tuple[int, ...] | None]
    prefix: str | None = None
    rename: Renamer = legacy_rename
    tied: tuple[tuple[str, str], ...] = ()  # (target, source)
    ignore_missing: tuple[str, ...] = ()
    ignore_unexpected: tuple[str, ...] = ()
    class_name: str = ""

    def _with_prefix(self, name: str) -> str:
        p = self.prefix
        if p is None:
            return name
        stripped = name[len(p) + 1:]  # the prefix and the character after it (its dot)
        if name.startswith(p) and len(name) > len(p) and stripped in self.keys:
            return stripped
        if f"{p}.{name}" in self.keys:
            return f"{p}.{name}"
        return name

    def target(self, stored: str) -> tuple[str, list[str] | None]:
        """The parameter a stored name fills (or the name transformers reports it under), and
        the other targets of a converter that matched it."""
        renamed, others = self.rename(stored)
        renamed = self._with_prefix(renamed)
        if renamed not in self.keys and stored in self.keys:
            renamed, others = self._with_prefix(stored), None
        return renamed, others


@dataclass
class LoadReport:
    """What loading would do: `filled` stored name -> the parameter it fills; `missing` and
    `unexpected` in transformers' own naming (unexpected -> the stored name it came from)."""

    filled: dict[str, str] = field(default_factory=dict)
    missing: set[str] = field(default_factory=set)
    unexpected: dict[str, str] = field(default_factory=dict)
    added: list[str] = field(default_factory=list)  # stored names that gained the base prefix
    stripped: list[str] = field(default_factory=list)  # stored names that lost it
    tied_filled: set[str] = field(default_factory=set)  # missing names a tied partner fills


def _regex(patterns: Iterable[str]) -> re.Pattern | None:
    patterns = list(patterns)
    return re.compile("|".join(f"({p})" for p in patterns)) if patterns else None


def report(rules: LoadRules, stored: Iterable[str]) -> LoadReport:
    """Apply the rules to the stored names (see the module's docstring)."""
    out = LoadReport()
    missing = set(rules.keys)
    p = rules.prefix
    for name in sorted(stored):
        target, others = rules.target(name)
        if target in rules.keys:
            out.filled[name] = target
            missing.discard(target)
            if p and target != name:
                if target == f"{p}.{name}":
                    out.added.append(name)
                elif name == f"{p}.{target}":
                    out.stripped.append(name)
        else:
            out.unexpected[target] = name
            for extra in others or ():
                out.unexpected.setdefault(extra, name)
    before = set(missing)
    _tie(rules.tied, missing)
    out.tied_filled = before - missing
    ignore_missing = _regex(rules.ignore_missing)
    ignore_unexpected = _regex(rules.ignore_unexpected)
    out.missing = {k for k in missing if ignore_missing is None or ignore_missing.search(k) is None}
    out.unexpected = {k: v for k, v in out.unexpected.items()
                      if ignore_unexpected is None or ignore_unexpected.search(k) is None}
    return out


def _tie(tied: tuple[tuple[str, str], ...], missing: set[str]) -> None:
    """transformers' tie_weights(missing_keys=...): a tied target is filled by its source; when
    only the target was stored the pair is swapped; when both are absent another target of the
    same source that was stored stands in; otherwise the target stays missing."""
    for i, (target, source) in enumerate(tied):
        source_there, target_there = source not in missing, target not in missing
        if source_there and target_there:
            continue
        if not source_there and target_there:
            target = source
        elif not source_there and not target_there:
            if not any(s == source and t not in missing for t, s in tied[i + 1:]):
                continue  # nothing to tie from: it stays missing
        missing.discard(target)
