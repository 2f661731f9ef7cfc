"""`repair_plan(source)`: the fixes that apply to a checkpoint, each tied to what it resolves and
saying what it will change, and the faults no repair can fix. Nothing is written.

The model-level faults (a wrapper's key prefix, lm_head missing while the config does not tie
it, weights stored transposed) are detected here by one small function each. The plan reads
them from the model layer's findings when present: a finding with the fault's code (the fix's
`codes`) is tied to the fix; otherwise these functions decide.
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from ..checkpoint import Checkpoint
from ..codes import CATALOG
from ..opener import open as open_checkpoint
from ..spans import Finding
from . import config as config_fix
from . import gguf_meta, index, keys, pickle_to_safetensors, safetensors_header
from .build import Build, RepairError, load_json, safetensors_file, side_files, source_dir
from .fix import Fix, Unfixable

TIE_CHOICES = ("config", "copy")


# -- the model-level faults -----------------------------------------------------------------------

def detect_key_prefix(names: Iterable[str]) -> str | None:
    """A prefix every tensor name carries from a wrapper the model layer knows (DataParallel's
    "module.", torch.compile's "_orig_mod.", PEFT's "base_model.model."), or a model saved from an
    outer module ("model." only where names read "model.model.")."""
    from ..model.will_load import KNOWN_PREFIXES

    names = list(names)
    if not names:
        return None
    for p in KNOWN_PREFIXES:
        if all(n.startswith(p) for n in names):
            if p == "model." and not any(n.startswith("model.model.") for n in names):
                continue
            return p
    return None


def _expected(ckpt):
    """The model layer's expected tensors for a config.json model (None: nothing to compare)."""
    from ..model.hparams import read_hparams
    from ..model.will_load import expected_for

    hp = read_hparams(ckpt)
    if hp.origin != "config.json" or not hp.describes_model:
        return None
    return expected_for(ckpt, hp, cross_check=True)[0]


def detect_missing_lm_head(shapes: dict[str, tuple[int, ...]], config: dict | None,
                           e) -> tuple[str, str] | None:
    """(head, embedding) when the embedding is there, the output head is not, and config.json
    does not tie them: the head's name and the embedding it should reuse, or None."""
    if config is None or config.get("tie_word_embeddings") is True:
        return None
    head = e.head if e is not None and e.head else "lm_head.weight"
    embed = (e.tied.get(head) if e is not None else None) or "model.embed_tokens.weight"
    if head in shapes or embed not in shapes:
        return None
    return head, embed


def detect_transposed(shapes: dict[str, tuple[int, ...]], e) -> list[str]:
    """2-D weights whose shape is the reverse of the one the architecture expects (the model
    layer's expected tensors `e`: transformers on the meta device, or the built-in table)."""
    if e is None:
        return []
    out = []
    for name, shape in shapes.items():
        want = e.shapes.get(_as_expected(name, e))
        if want and len(want) == 2 and len(shape) == 2 and tuple(shape) != tuple(want) \
                and tuple(shape[::-1]) == tuple(want):
            out.append(name)
    return out


def _as_expected(name: str, e) -> str:
    """A stored name as the model's tables spell it: transformers adds or strips the model's
    base prefix at load (a base checkpoint under a head class, or the other way round)."""
    p = e.prefix
    if name in e.shapes or not p:
        return name
    if f"{p}.{name}" in e.shapes:
        return f"{p}.{name}"
    if name.startswith(p + ".") and name[len(p) + 1:] in e.shapes:
        return name[len(p) + 1:]
    return name


# -- the plan ---------------------------------------------------------------------------------

@dataclass
class RepairPlan:
    source: str
    format: str
    fixes: list[Fix] = field(default_factory=list)
    unfixable: list[Unfixable] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    findings: list[Finding] = field(default_factory=list)
    build: Build | None = field(default=None, repr=False)

    def select(self, wanted: Iterable[str] | None) -> tuple[list[Fix], list[str]]:
        """The fixes `wanted` names (fix names or finding codes); notes for names matching none."""
        if wanted is None:
            return list(self.fixes), []
        wanted = set(wanted)
        chosen = [f for f in self.fixes if f.matches(wanted)]
        notes = [f"{w!r}: the checkpoint has no such problem to fix; skipped." for w in sorted(wanted)
                 if not any(f.matches({w}) for f in self.fixes)]
        return chosen, notes

    def to_dict(self) -> dict[str, Any]:
        return {"source": self.source, "format": self.format,
                "fixes": [f.to_dict() for f in self.fixes],
                "unfixable": [u.to_dict() for u in self.unfixable], "notes": list(self.notes)}

    def __str__(self) -> str:
        lines = [f"repair plan for {self.source} ({self.format}): {len(self.fixes)} fix(es)"]
        lines += [f"  fix  {f}" for f in self.fixes]
        lines += [f"  cannot fix  {u}" for u in self.unfixable]
        lines += [f"  note  {n}" for n in self.notes]
        return "\n".join(lines)

    def _repr_pretty_(self, p, cycle) -> None:
        p.text(str(self))


def repair_plan(source: Any, deep: bool = False, tie: str = "config", strip_prefix: str | None = None,
                rename: dict[str, str] | None = None, transpose: list[str] | None = None,
                gguf_set: dict | None = None, gguf_remove: list | None = None,
                trim_tokens: bool = True, fix_config: bool = True) -> RepairPlan:
    """The fixes that apply to `source` (a path or an open Checkpoint) and what cannot be fixed.

    Choices: tie="config" (set tie_word_embeddings, no bytes) or "copy" (write lm_head as a copy
    of the embedding) when lm_head is missing; strip_prefix, rename and transpose force those
    fixes with explicit names (otherwise they are detected); gguf_set / gguf_remove edit GGUF
    metadata. deep=True decodes every tensor first, so NaN/Inf and fp16 overflow are listed.
    """
    if tie not in TIE_CHOICES:
        raise RepairError(f"tie must be one of {TIE_CHOICES}; got {tie!r}.")
    ckpt = source if isinstance(source, Checkpoint) else _open(source, deep)
    plan = RepairPlan(ckpt.source, ckpt.format, findings=list(ckpt.findings))
    if ckpt.format == "gguf":
        _gguf_plan(ckpt, plan, gguf_set, gguf_remove, trim_tokens)
    elif ckpt.format in ("safetensors", "pytorch", "pickle"):
        if gguf_set or gguf_remove:
            plan.notes.append("gguf_set/gguf_remove: the source is not GGUF; skipped.")
        _tensor_plan(ckpt, plan, tie, strip_prefix, rename, transpose, fix_config)
    else:
        raise RepairError(f"{ckpt.source!r} is {ckpt.format}; repair reads safetensors, GGUF and "
                          "PyTorch checkpoints.")
    for f in ckpt.findings:  # the catalog says which faults no repair can fix, and why
        why = CATALOG[f.code].unfixable if f.code in CATALOG else ""
        if why and not any(f in x.resolves for x in plan.fixes):
            plan.unfixable.append(Unfixable(f.code, f.message, f"{why} {f.fix}".rstrip(), f))
    return plan


def _open(source: Any, deep: bool) -> Checkpoint:
    path = os.fspath(source)
    if "://" in path:
        raise RepairError(f"{path!r} is remote: download it first; repairs read local files.")
    return open_checkpoint(path, deep=deep)


def _gguf_plan(ckpt, plan: RepairPlan, gguf_set, gguf_remove, trim_tokens) -> None:
    edits = gguf_meta.split_edits(ckpt) if len(ckpt.files) > 1 else [gguf_meta.edit_for(ckpt)]
    build = Build(ckpt.source, "gguf", gguf=edits[0], gguf_more=edits[1:],
                  single_file=not os.path.isdir(ckpt.source) and len(edits) == 1)
    plan.build = build
    fixes, unfixable, notes = gguf_meta.propose(ckpt, edits[0], gguf_set, gguf_remove, trim_tokens)
    if len(edits) > 1:
        more, lost = gguf_meta.propose_splits(ckpt, edits)
        fixes += more
        unfixable += lost
    plan.fixes += fixes
    plan.unfixable += unfixable
    plan.notes += notes


def base_build(ckpt) -> Build:
    """The output as a straight copy of the source: every file verbatim, the pickles converted."""
    single = not os.path.isdir(ckpt.source) and not ckpt.source.endswith(".index.json")
    kind = "pytorch" if ckpt.format in ("pytorch", "pickle") else ckpt.format
    build = Build(ckpt.source, kind, single_file=single)
    index_file = ckpt.details.get("index_file")
    if index_file:
        build.index_source = index_file
        build.index_name = os.path.basename(index_file)
        try:
            meta = load_json(index_file).get("metadata")
            build.index_meta = {k: v for k, v in meta.items() if k != "total_size"} if isinstance(meta, dict) else {}
        except (OSError, ValueError, AttributeError):
            build.index_meta = {}
    config = ckpt.metadata.get("config.json")
    build.config = dict(config) if isinstance(config, dict) else None
    if kind == "safetensors":
        for path in ckpt.files:
            build.files.append(safetensors_file(path, os.path.basename(path)))
    if not single:
        build.side_files = side_files(source_dir(ckpt.source), set())
    return build


def _expected_names(ckpt, names: list[str], renamed: dict[str, str], prefix_fix):
    """The renaming the model layer found forced (model/renames.py), from source names to the
    names the architecture expects; None when it found none."""
    said = next((f for f in ckpt.findings if f.code in ("missing_tensors", "unexpected_tensors")
                 and isinstance(f.extra.get("renames"), dict)), None)
    if said is None:
        return None
    # The model layer judged the names without a wrapper's prefix: map back to the stored names.
    source_of = {v: k for k, v in renamed.items()}
    mapping = {source_of.get(a, a): b for a, b in said.extra["renames"].items()
               if isinstance(a, str) and isinstance(b, str)}
    fix = keys.rename(names, mapping)
    if fix is None:
        return None
    fix.name = "rename_expected"
    fix.codes = ("missing_tensors", "unexpected_tensors")
    if prefix_fix is not None:  # the prefix fix names these tensors the same, so the two agree
        prefix_fix.renames.update({a: b for a, b in fix.renames.items() if a in prefix_fix.renames})
    return fix


def _tensor_plan(ckpt, plan: RepairPlan, tie, strip, rename, transpose, fix_config) -> None:
    build = base_build(ckpt)
    plan.build = build
    if build.kind == "pytorch":
        lost = pickle_to_safetensors.base(ckpt, build)
        build.errors += lost
        plan.fixes.append(pickle_to_safetensors.fix(ckpt, build))
        if build.index_source and build.index_name and build.index_name.endswith(".bin.index.json"):
            build.index_name = "model.safetensors.index.json"
    else:
        plan.fixes += index.propose(build, ckpt.findings)
        fixes, unfixable = safetensors_header.propose(build)
        plan.fixes += fixes
        plan.unfixable += unfixable
    names = [t.origin for _, t in build.tensors()]
    shapes = {t.origin: t.shape for _, t in build.tensors()}
    # Names as the model will see them once the prefix is gone: the later faults are judged on these.
    # The model layer's finding names the prefix when it ran; the names alone otherwise (a pickle
    # converted on the way has no model check of its own).
    said = next((f.extra.get("prefix") for f in ckpt.findings if f.code == "key_prefix"
                 and isinstance(f.extra.get("prefix"), str)), None)
    prefix = strip if strip is not None else (said or detect_key_prefix(names))
    if strip is not None and not any(n.startswith(strip) for n in names):
        plan.notes.append(f"strip_prefix: no tensor name starts with {strip!r}; skipped.")
        prefix = None
    renamed = {n: n for n in names}
    prefix_fix = None
    if prefix:
        prefix_fix = keys.strip_prefix(names, prefix)
        if prefix_fix:
            plan.fixes.append(prefix_fix)
            renamed.update(prefix_fix.renames)
    if rename:
        missing = [a for a in rename if a not in shapes]
        plan.notes += [f"rename: no tensor {a!r}; skipped." for a in missing]
        fix = keys.rename(names, rename)
        if fix:
            plan.fixes.append(fix)
            renamed.update(fix.renames)
    elif rename is None:
        fix = _expected_names(ckpt, names, renamed, prefix_fix)
        if fix:
            plan.fixes.append(fix)
            renamed.update(fix.renames)
    eff = {renamed[n]: shapes[n] for n in names}
    back = {v: k for k, v in renamed.items()}
    cfg = build.config
    expected = _expected(ckpt)  # once: both checks below read it
    missing_head = detect_missing_lm_head(eff, cfg, expected)
    if missing_head:
        head, embed = missing_head
        if tie == "copy":
            hit = keys.by_origin(build, back[embed])
            plan.fixes.append(keys.copy_head(back[embed], head, hit[1].length))
        else:
            plan.fixes.append(config_fix.tie_in_config())
    wanted = transpose if transpose is not None else detect_transposed(eff, expected)
    if wanted:
        fix, notes = keys.transpose(build, [back.get(n, n) for n in wanted])
        plan.notes += notes
        if fix:
            plan.fixes.append(fix)
            for n in fix.changes["tensors"]:
                eff[renamed[n]] = eff[renamed[n]][::-1]
    if fix_config and cfg is not None:
        fix = config_fix.correct(cfg, eff, ckpt.findings)
        if fix:
            plan.fixes.append(fix)
