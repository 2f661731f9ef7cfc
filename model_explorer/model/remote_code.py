"""The Python a model folder asks its loader to run: `auto_map` in config.json (and the tokenizer,
processor and feature-extractor configs) names classes in the folder's *.py files, which
transformers imports when it is called with trust_remote_code=True.

The *.py files of a folder with an auto_map are read as bytes and parsed (code_audit), never
imported. The files auto_map names, and those they import from the folder, are what loading
runs (the others are listed, not judged: loading never runs them); a target in another
repository (`org/repo--module.Class`) is downloaded and run by transformers and is named here as
not read.
"""

from __future__ import annotations

from dataclasses import dataclass

from .. import sources
from ..records import CheckpointRecord
from ..spans import Finding
from .code_audit import SEVERE, ModuleReport, audit_python
from .findings import model_finding
from .json_literals import read_range
from .sidefiles import model_dir, side_json

AUTO_MAP_FILES = ("config.json", "tokenizer_config.json", "processor_config.json", "preprocessor_config.json")
MAX_PY_FILE = 4 * 1024 * 1024
MAX_PY_FILES = 200
MAX_CALL_FINDINGS = 20


@dataclass
class Target:
    ref: str  # "modeling_x.XForCausalLM" or "org/repo--modeling_x.XForCausalLM"
    auto_class: str  # "AutoModelForCausalLM"
    side: str  # the config file that names it
    loc: dict

    @property
    def repo(self) -> str | None:
        return self.ref.split("--", 1)[0] if "--" in self.ref else None

    @property
    def module(self) -> str:
        return self.ref.split("--", 1)[-1].rsplit(".", 1)[0]


def _targets(ckpt: CheckpointRecord) -> list[Target]:
    out = []
    for name in AUTO_MAP_FILES:
        side = side_json(ckpt, name)
        auto_map = (side.value or {}).get("auto_map") if side is not None and isinstance(side.value, dict) else None
        if not isinstance(auto_map, dict):
            continue
        offset, length = side.where("auto_map")
        loc = {"file": side.path, "offset": offset, "length": length}
        for auto_class, refs in auto_map.items():
            for ref in refs if isinstance(refs, list) else [refs]:
                if isinstance(ref, str) and ref:
                    out.append(Target(ref, str(auto_class), name, loc))
    return out


def _py_files(ckpt: CheckpointRecord) -> dict[str, str]:
    """module name -> path of each *.py in the model folder."""
    folder = model_dir(ckpt)
    try:
        names = [n for n in sources.listdir(folder) if n.endswith(".py")][:MAX_PY_FILES]
    except (OSError, ValueError):
        return {}
    return {n[:-3]: sources.join(folder, n) for n in names}


def _read(path: str) -> bytes | None:
    try:
        src = sources.open_source(path)
        size = src.size
        src.close()
    except OSError:
        return None
    return read_range(path, 0, min(size, MAX_PY_FILE)) if size else b""


def auto_map(ckpt: CheckpointRecord) -> list[dict]:
    """What auto_map names, for the Model tab: per entry the config file that names it (and the
    bytes of its auto_map), the auto class, the reference and the code file it runs (None when the
    code is not in the folder: another repository's, or missing)."""
    files = _py_files(ckpt)
    return [{"side": t.side, "auto_class": t.auto_class, "ref": t.ref, **t.loc,
             "code": None if t.repo else files.get(t.module),
             "code_name": None if t.repo else f"{t.module}.py"} for t in _targets(ckpt)]


def check(ckpt: CheckpointRecord) -> list[Finding]:
    targets = _targets(ckpt)
    if not targets:  # without auto_map, loading runs none of the folder's Python
        return []
    files = _py_files(ckpt)
    reports: dict[str, ModuleReport] = {}
    data: dict[str, bytes] = {}
    for module, path in files.items():
        raw = _read(path)
        if raw is not None:
            data[module], reports[module] = raw, audit_python(raw)
    run = _reached(targets, reports)
    out = _unchecked(targets, files, reports)
    out += _sinks(files, reports, run)
    if targets:
        out.insert(0, _summary(targets, files, reports, run))
    return out


def _reached(targets: list[Target], reports: dict[str, ModuleReport]) -> list[str]:
    """The local modules loading imports: auto_map's, then what they import from the folder."""
    todo = [t.module for t in targets if t.repo is None]
    seen: list[str] = []
    while todo:
        m = todo.pop(0)
        if m in seen or m not in reports:
            continue
        seen.append(m)
        todo += reports[m].local_imports + [name for name, _ in reports[m].imports if name in reports]
    return seen


def _unchecked(targets: list[Target], files: dict, reports: dict[str, ModuleReport]) -> list[Finding]:
    out = []
    for t in dict((t.ref, t) for t in targets).values():
        if t.repo:
            why = (f"lives in another repository, {t.repo}: trust_remote_code=True downloads that repository's "
                   f"{t.module}.py and runs it, and it was not fetched or read here")
        elif t.module not in files:
            why = f"names {t.module}.py, which is not in the folder: it cannot be read here"
        elif reports.get(t.module) and reports[t.module].error:
            why = f"names {t.module}.py, which does not parse ({reports[t.module].error}): it was not read"
        else:
            continue
        out.append(model_finding("remote_code_unchecked", f"{t.side} auto_map {t.auto_class} = {t.ref} {why}.",
                                 target=t.ref, **t.loc))
    return out


def _sinks(files: dict, reports: dict[str, ModuleReport], run: list[str]) -> list[Finding]:
    out = []
    for module in run:
        for call in reports[module].calls:
            code = "remote_code_exec" if call.kind in SEVERE else "remote_code_native"
            via = f", through {call.via}" if call.via else ""
            out.append(model_finding(code, f"{module}.py line {call.line} {call.kind} as it is imported"
                                     f"{via}: {call.name} in “{call.text[:160]}”. trust_remote_code=True imports "
                                     "this file, so this runs when the model is loaded, before any weight is read.",
                                     file=files[module], offset=call.start, length=call.end - call.start,
                                     call=call.name, line=call.line))
            if len(out) >= MAX_CALL_FINDINGS:
                return out
    return out


def _summary(targets: list[Target], files: dict, reports: dict[str, ModuleReport], run: list[str]) -> Finding:
    imports = sorted({name for m in run for name, _ in reports[m].imports if name not in reports})
    others = sorted(set(files) - set(run))
    classes = ", ".join(f"{t.auto_class} = {t.ref}" for t in targets[:6])
    text = (f"{targets[0].side} auto_map names custom code ({classes}): transformers runs "
            + (", ".join(f"{m}.py" for m in run) or "no file found here")
            + " when the model is loaded with trust_remote_code=True (read here, never imported).")
    if imports:
        text += f" They import {', '.join(imports[:24])}."
    if others:
        text += f" Also in the folder, not run by loading: {', '.join(f'{m}.py' for m in others[:12])}."
    return model_finding("remote_code", text, files=[files[m] for m in run], **targets[0].loc)
