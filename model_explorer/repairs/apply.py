"""`repair(source, dest)`: the plan's fixes applied to a copy, written, reopened and checked."""

from __future__ import annotations

import json
import os
from typing import Any

from ..checkpoint import Checkpoint
from ..opener import open as open_checkpoint
from .build import Build, RepairError
from .fix import Fix
from .gguf_meta import write as write_gguf
from .index import index_json
from .plan import RepairPlan, repair_plan
from .report import RepairReport, TensorHashes
from .writer import Counter, Progress, Staging, copy_file, os_error, sha256_range, write_safetensors

FILE_SUFFIXES = (".safetensors", ".gguf")


def repair(source: Any, dest: str | os.PathLike, fixes: list[str] | None = None, overwrite: bool = False,
           progress: Progress | None = None, dry_run: bool = False, deep: bool = False,
           **choices) -> RepairReport:
    """Write a repaired copy of `source` into `dest` and check it.

    fixes: None for every fix the plan proposes, or a list of fix names / finding codes.
    dest: a new folder (or an empty one; a non-empty one only with overwrite=True), or for a
        one-file source a path ending in .safetensors / .gguf. Never the source or inside it.
    progress(bytes done, bytes in all, what) is called as bytes are written.
    choices: as for `repair_plan` (tie, strip_prefix, rename, transpose, gguf_set, gguf_remove...).
    The source is only read. Files are staged under a temporary name inside `dest` and renamed
    when all are complete; on any failure nothing is left behind.
    """
    src_path = source.source if isinstance(source, Checkpoint) else os.fspath(source)
    dest = os.path.abspath(os.fspath(dest))
    _refuse_dest(src_path, dest, overwrite)
    plan = repair_plan(source, deep=deep, **choices)
    selected, skipped = plan.select(fixes)
    skipped += _always(plan, selected)
    _refuse_conflicts(selected)
    report = RepairReport(plan.source, dest, selected, skipped, plan.unfixable, list(plan.notes),
                          dry_run=dry_run)
    if dry_run:
        return report
    build = plan.build
    originals = {t.origin: (t.src_file, t.src_offset, t.length) for _, t in build.tensors()}
    for fix in selected:
        fix.apply(build)
    # A shard every tensor of which went elsewhere is not written (a converted pickle always is).
    build.files = [f for f in build.files if f.tensors or f.verbatim or build.kind == "pytorch"]
    report.notes += build.notes
    report.errors += build.errors
    file_mode = build.single_file and dest.endswith(FILE_SUFFIXES)
    folder = os.path.dirname(dest) if file_mode else dest
    _refuse_overwriting_source(build, folder, dest if file_mode else None)
    staging = Staging(folder, overwrite=overwrite or file_mode)
    try:
        written = _write_all(build, staging, dest if file_mode else None, progress)
        report.files = staging.commit()
    except RepairError:
        staging.abort()
        raise
    except OSError as e:
        staging.abort()
        raise os_error(dest, e) from None
    except BaseException:
        staging.abort()
        raise
    _verify(report, plan, build, written, originals, choices)
    return report


def _always(plan: RepairPlan, selected: list[Fix]) -> list[str]:
    """A pickle source is always converted: no other fix writes a pickle."""
    conv = next((f for f in plan.fixes if f.name == "pickle_to_safetensors"), None)
    if conv is not None and conv not in selected:
        selected.insert(0, conv)
        return ["pickle_to_safetensors: always applied to a pickle source (the repairs write safetensors)."]
    return []


def _inside(path: str, folder: str) -> bool:
    path, folder = os.path.realpath(path), os.path.realpath(folder)
    return path == folder or path.startswith(folder.rstrip(os.sep) + os.sep)


def _refuse_dest(source: str, dest: str, overwrite: bool) -> None:
    if "://" in source:
        raise RepairError(f"{source!r} is remote: download it first; repairs read local files.")
    if not os.path.exists(source):
        raise FileNotFoundError(f"No such file or directory: {source!r}")
    src_root = source if os.path.isdir(source) else (
        os.path.dirname(source) if source.endswith(".index.json") else source)
    if _inside(dest, src_root):
        raise RepairError(f"The destination {dest!r} is the source or inside it; repairs never write "
                          "into the source. Choose a new folder.")
    if os.path.isdir(dest) and os.listdir(dest) and not overwrite:
        raise RepairError(f"The destination {dest!r} is not empty; pass overwrite=True (--overwrite) "
                          "to write into it, or choose a new folder.")
    if os.path.isfile(dest) and not overwrite:
        raise RepairError(f"{dest!r} exists; pass overwrite=True to replace it.")


def _refuse_overwriting_source(build: Build, folder: str, file_dest: str | None) -> None:
    sources = {os.path.realpath(f.source) for f in build.files if f.source}
    if build.gguf is not None:
        sources |= {os.path.realpath(e.path) for e in [build.gguf, *build.gguf_more]}
    sources |= {os.path.realpath(p) for p in build.side_files.values()}
    targets = [file_dest] if file_dest else [os.path.join(folder, f.name) for f in build.files]
    if build.gguf is not None and not file_dest:
        targets += [os.path.join(folder, os.path.basename(e.path)) for e in [build.gguf, *build.gguf_more]]
    if build.config_changed or build.side_files:
        targets.append(os.path.join(folder, "config.json"))
    for t in targets:
        if os.path.realpath(t) in sources:
            raise RepairError(f"Writing {t!r} would replace a source file; choose another destination.")


def _write_all(build: Build, staging: Staging, file_dest: str | None, progress) -> dict[str, str]:
    """Stage every output file; returns output name -> staged path."""
    total = sum(t.length for _, t in build.tensors())
    total += sum(os.path.getsize(f.source) for f in build.files if f.verbatim and f.source)
    if build.gguf is not None:
        total += sum(e.size for e in [build.gguf, *build.gguf_more])
    total += sum(os.path.getsize(p) for n, p in build.side_files.items()
                 if not (n == "config.json" and build.config_changed))
    if build.index_name and not build.single_file and not (build.index_rewrite or build.index_source is None):
        total += os.path.getsize(build.index_source)
    counter = Counter(total, progress)
    staged: dict[str, str] = {}
    if build.gguf is not None:
        for edit in [build.gguf, *build.gguf_more]:  # a split model keeps its files' names
            name = os.path.basename(file_dest or edit.path)
            staged[name] = p = staging.path(name)
            write_gguf(edit, p, counter)
    for f in build.files:
        name = os.path.basename(file_dest) if file_dest else f.name
        staged[name] = p = staging.path(name)
        if f.verbatim and f.source:
            copy_file(f.source, p, counter, f.name)
        else:
            write_safetensors(f, p, counter)
    if build.index_name and not build.single_file:
        p = staging.path(build.index_name)
        if build.index_rewrite or build.index_source is None:
            with open(p, "w", encoding="utf-8") as out:
                json.dump(index_json(build), out, indent=2)
        else:
            copy_file(build.index_source, p, counter, build.index_name)
    for name, path in build.side_files.items():
        if name == "config.json" and build.config_changed:
            continue
        copy_file(path, staging.path(name), counter, name)
    if build.config_changed:
        with open(staging.path("config.json"), "w", encoding="utf-8") as out:
            json.dump(build.config, out, indent=2)
    return staged


def _refuse_conflicts(fixes: list[Fix]) -> None:
    """Two fixes that rename one tensor differently, or two tensors to one name: refused before
    anything is written, naming both."""
    target: dict[str, tuple[str, Fix]] = {}
    for fix in fixes:
        for old, new in fix.renames.items():
            if old in target and target[old][0] != new:
                other = target[old][1]
                raise RepairError(f"Conflicting fixes: {other.name} renames {old!r} to {target[old][0]!r} "
                                  f"but {fix.name} renames it to {new!r}. Choose one (fixes=[...]).")
            target[old] = (new, fix)
    seen: dict[str, str] = {}
    for old, (new, _) in target.items():
        if new in seen:
            raise RepairError(f"Conflicting renames: both {seen[new]!r} and {old!r} would be named {new!r}.")
        seen[new] = old


# -- checking the output ----------------------------------------------------------------------

def _verify(report: RepairReport, plan: RepairPlan, build: Build, staged: dict[str, str],
            originals: dict[str, tuple], choices: dict) -> None:
    """Hash every tensor, reopen the output, and list the fixed faults still found there."""
    out_path = report.files[0] if build.single_file and len(report.files) == 1 else report.dest
    if build.gguf_more:  # a split model is opened at its first split
        out_path = os.path.join(report.dest, os.path.basename(build.gguf.path))
    out = open_checkpoint(out_path)
    try:
        report.findings = list(out.findings)  # the model layer's config checks run at open
        placed: dict[str, list] = {}
        for _, t in build.tensors():
            placed.setdefault(t.origin, []).append(t)
        for origin, (file, offset, length) in originals.items():
            src_hash = _safe_hash(file, offset, length)
            if not placed.get(origin):
                report.tensors.append(TensorHashes("", origin, src_hash, None, changes=["dropped"]))
            for t in placed.get(origin, []):  # a copy (lm_head) is listed beside its original
                info = out.tensors.get(t.name)
                out_hash = _safe_hash(info.file, info.offset, info.length) if info else None
                report.tensors.append(TensorHashes(t.name, origin, src_hash, out_hash,
                                                   os.path.basename(info.file) if info else "",
                                                   list(t.changed)))
        if build.gguf is not None:
            _gguf_hashes(report, plan, out)
        _remaining(report, out, choices)
    finally:
        out.close()


def _safe_hash(file: str | None, offset: int, length: int) -> str | None:
    try:
        return sha256_range(file, offset, length) if file else None
    except (OSError, RepairError):
        return None


def _gguf_hashes(report: RepairReport, plan: RepairPlan, out) -> None:
    src = open_checkpoint(plan.source)
    try:
        for name, info in src.tensors.items():
            o = out.tensors.get(name)
            report.tensors.append(TensorHashes(name if o else "", name, _safe_hash(info.file, info.offset, info.length),
                                               _safe_hash(o.file, o.offset, o.length) if o else None,
                                               os.path.basename(o.file) if o else ""))
    finally:
        src.close()


def _remaining(report: RepairReport, out, choices: dict) -> None:
    """The fixed findings (by code and tensor) and detected faults still in the output."""
    renames = {}
    for fix in report.applied:
        renames.update(fix.renames)
    now = {(f.code, f.tensor) for f in report.findings}
    now_codes = {f.code for f in report.findings}
    for fix in report.applied:
        for f in fix.resolves:
            tensor = renames.get(f.tensor, f.tensor)
            if (f.code, tensor) in now or (tensor is None and f.code in now_codes):
                report.remaining.append(f"{fix.name}: {f.code} still found ({f.message})")
    # Detected faults: the plan of the output must not propose the same fix again.
    again_choices = {k: v for k, v in choices.items() if k in ("tie", "fix_config", "trim_tokens")}
    try:
        names = {f.name for f in repair_plan(out, **again_choices).fixes}
    except RepairError as e:
        report.remaining.append(f"the output cannot be planned again: {e}")
        return
    for fix in report.applied:
        if fix.name in names and fix.name not in ("rename", "gguf_set", "gguf_remove",
                                                   "pickle_to_safetensors"):
            report.remaining.append(f"{fix.name}: the output still needs it")
    for key, value in (choices.get("gguf_set") or {}).items():
        kv = out.metadata.get(key)
        if getattr(kv, "value", None) != value and not isinstance(value, (list, tuple)):
            report.remaining.append(f"gguf_set: {key} reads back as {getattr(kv, 'value', None)!r}")
    for key in choices.get("gguf_remove") or []:
        if key in out.metadata:
            report.remaining.append(f"gguf_remove: {key} is still there")
