"""Turn a pickle's imports into findings and the `details["pickle"]` summary the views show."""

from __future__ import annotations

from typing import Any

from ...spans import Report
from .holders import holders
from .policy import TYPE_MARKERS, author_class_candidate, tolerated_when_invoked
from .torchscript import is_class
from .values import Global, PickleRun, render

MAX_IMPORTS_LISTED = 10_000
# Findings that make a file "dangerous" (also when merged in from an embedded file) ...
DANGER_CODES = {"dangerous_import", "unlisted_call", "pickle_frame_differential",
                "torchscript_call"}
# ... and those that make it at least "suspicious".
SUSPICIOUS_CODES = {"several_pickles", "polyglot", "pickle_too_long", "pickle_emulation",
                    "zip_prefix_bytes", "pickle_trailing_bytes", "unknown_import",
                    "pickle_frame_overrun", "pickle_frame_nested", "pickle_frame_unchecked",
                    "zip_duplicate_entry", "internal_error", "embedded_too_deep",
                    "torchscript_archive", "torchscript_native_op", "torchscript_code_unread"}


AUTHOR_CLASSES_SHOWN = 10


def judge_calls(imports: list[Global]) -> None:
    """A name outside the allow-list that the pickle invokes is an error: unpickling runs it.
    A class it only builds as pickle saves any object (NEWOBJ, a reconstructor, then BUILD:
    how `torch.save(model)` stores the model's own classes) is not, when its name is an
    author's class (`author_class_candidate`): it needs the author's code, a warning of its own;
    nor is a tolerated class (torch's nn modules, the standard library's data classes), even
    called; nor a type annotation only referenced (`TYPE_MARKERS`: omegaconf stores typing.Any),
    which goes with those classes. A name is judged as a whole: an import of it that is neither
    decides."""
    plain: set[str] = set()
    for g in imports:
        if g.severity != "warning":
            continue
        if g.invoked is None and not g.computed and g.dotted in TYPE_MARKERS:
            g.author_class = True
            continue
        if g.invoked is not None and not g.computed and author_class_candidate(g.dotted) and \
                (not g.called or tolerated_when_invoked(g.dotted)):
            g.author_class = True
            continue
        plain.add(g.dotted)
        if g.invoked is not None and not tolerated_when_invoked(g.dotted):
            op, at = g.invoked
            g.severity = "error"
            how = "" if g.calls else f" ({op} at byte {at})"
            g.why = (f"it is outside the allow-list and the pickle calls it{how}, so unpickling "
                     "runs code this reader cannot vouch for")
            g.opcode_called = True
    for g in imports:  # also referenced, or called, elsewhere: not only built
        if g.author_class and g.dotted in plain:
            g.author_class = False


def call_text(func: Any, args: Any) -> str:
    """`os.system('touch /tmp/x')`: the callee and the constant arguments it gets."""
    if isinstance(args, tuple):
        inner = ", ".join(render(a, 2, 240) for a in args[:6]) + (", …" if len(args) > 6 else "")
    else:
        inner = "*" + render(args, 2, 240)
    return f"{render(func, 3, 120)}({inner})"


def import_findings(rep: Report, imports: list[Global], root: Any = None) -> None:
    """One finding per distinct callable outside the allow-list, at its first import (an
    error import first). Light on memory: a pickle can name a million distinct callables.
    `root`, the unpickled value, says where the author's objects sit beside the tensors."""
    first: dict[str, Global] = {}
    repeats: dict[str, int] = {}
    called: set[str] = set()
    with_calls: dict[str, list] = {}
    for g in imports:
        if g.severity == "ok":
            continue
        name = g.computed or g.dotted
        seen = first.get(name)
        if seen is None:
            first[name] = g
        else:
            repeats[name] = repeats.get(name, 1) + 1
            if g.severity == "error" and seen.severity != "error":
                first[name] = g
        if g.opcode_called:
            called.add(name)
        if g.calls:
            kept = with_calls.setdefault(name, [])
            kept.extend(g.calls[:2 - len(kept)])
    classes = [(n, g) for n, g in first.items() if g.severity == "warning" and g.author_class]
    if classes:
        _author_classes_finding(rep, classes, root, [g for g in imports if g.author_class])
    for name, g in first.items():
        if g.severity == "warning" and g.author_class:
            continue
        if g.severity == "error":
            code = "unlisted_call" if name in called else "dangerous_import"
        else:
            code = "unknown_import"
        if rep.capped(code):  # counted in the summary finding; no message to build
            rep.add(code, "", g.offset, 1)
            continue
        calls = with_calls.get(name, [])
        where = "this pickle" if g.label in ("", "pickle", "data.pkl") else g.label
        text = f"Loading {where} imports {name} with {g.opcode} at byte {g.offset}"
        if g.computed:
            text = (f"Loading {where} imports a name it computes while loading ({name}) with "
                    f"{g.opcode} at byte {g.offset}")
        if calls:
            text += " and calls " + "; ".join(f"{call_text(f, a)} ({op} at byte {off})"
                                               for f, a, off, op in calls)
        text += f": {g.why}."
        if name in repeats:
            text += f" It is imported {repeats[name]} times."
        if g.severity == "error":
            text += (" Opening this file with pickle.load or torch.load(weights_only=False) runs "
                     "it; do not.")
        f = rep.add(code, text, g.offset, 1)
        f.extra.update(callable=name, calls=[call_text(c[0], c[1]) for c in calls])


def _author_classes_finding(rep: Report, classes: list[tuple[str, Global]], root: Any,
                            every: list[Global]) -> None:
    """One finding for the classes a pickle builds as it saves any object, and the type
    annotations it references: what loading would import, and whether the weights need them
    (a whole model, as torch.save(model) writes it) or only other entries do (a Lightning
    checkpoint's hyperparameters, as omegaconf objects)."""
    names = [n for n, _ in classes]
    built = [n for n, g in classes if g.invoked is not None]
    marks = [n for n, g in classes if g.invoked is None]
    first = min((g for _, g in classes), key=lambda g: g.offset)
    op, at = first.invoked or (first.opcode, first.offset)
    found = []
    if built:
        found.append(f"objects of {len(built)} class{'es' if len(built) > 1 else ''} outside the "
                     f"allow-list ({_listed(built)}), made the way pickle saves objects, by creating "
                     "each one and handing it its state")
    if marks:
        found.append(f"references to {_listed(marks)} (type annotations, stored and never called)")
    where = holders(root, every) if root is not None else None
    text = ("Expected plain data (tensors in dicts, a state_dict), which torch.load(weights_only="
            f"True) loads; found {'; and '.join(found)} (the first imported at byte {first.offset}"
            + (f", made by {op} at byte {at}" if first.invoked else "") + ")")
    if where is not None and where.weights_plain:
        tensors = where.tensors_plain
        text += (f". The {tensors} tensor{'s' if tensors > 1 else ''} sit{'' if tensors > 1 else 's'} in "
                 f"plain containers ({_keys(where.tensor_keys)}); only {_keys(where.object_keys)} "
                 "need" + ("" if len(where.object_keys) > 1 else "s") + " those classes (a "
                 "configuration or training state, as a PyTorch Lightning checkpoint keeps its "
                 "hyperparameters in omegaconf objects), not the weights. torch.load(weights_only="
                 "True) refuses the file as a whole; torch.load(weights_only=False) imports those "
                 "modules, running their import-time code and each class's __new__ and "
                 "__setstate__. The weights need none of it: mx.repair copies the tensors to "
                 "safetensors without loading the file, and the state dict saved alone "
                 f"(torch.save(checkpoint[{where.tensor_keys[0]!r}], path), in a process that "
                 "trusts those classes) loads with torch.load(weights_only=True).")
    else:
        if where is None or where.tensors_in_objects or not where.complete:
            text += ": a whole model, as torch.save(model) writes it: the tensors sit inside those objects."
        else:
            text += ". It holds no tensors in plain containers."
        text += (" torch.load(weights_only=True) refuses it; torch.load(weights_only=False) "
                 "imports those modules, running their import-time code and each class's __new__ "
                 "and __setstate__, so it needs that code installed and trusted.")
    text += " No function of the file's choosing is called."
    f = rep.warning("needs_author_classes", text, first.offset, 1)
    f.extra.update(classes=names, weights_plain=bool(where and where.weights_plain),
                   object_keys=where.object_keys if where else [])


def _listed(names: list[str]) -> str:
    more = len(names) - AUTHOR_CLASSES_SHOWN
    return ", ".join(names[:AUTHOR_CLASSES_SHOWN]) + (f" and {more} more" if more > 0 else "")


def _keys(keys: list[str]) -> str:
    shown = ", ".join(repr(k) for k in keys[:6]) + (f" and {len(keys) - 6} more" if len(keys) > 6 else "")
    return shown if len(keys) > 1 else f"key {shown}" if keys and keys[0] != "(root)" else "the root"


def verdict(imports: list[Global], rep: Report) -> str:
    """From the imports, and from findings merged in from embedded torch files: "dangerous" (runs
    code an attacker could choose), "suspicious" (odd structure or names), "needs_classes" (the
    author's classes, built as pickle saves objects: weights_only=True refuses it), "safe"."""
    codes = {f.code for f in rep.findings}
    if any(g.severity == "error" for g in imports) or codes & DANGER_CODES:
        return "dangerous"
    plain = [g for g in imports if g.severity == "warning" and not g.author_class]
    if plain or codes & SUSPICIOUS_CODES:
        return "suspicious"
    if any(g.author_class for g in imports) or "needs_author_classes" in codes:
        return "needs_classes"
    return "safe"


def import_rows(imports: list[Global]) -> list[dict[str, Any]]:
    rows = []
    for g in imports[:MAX_IMPORTS_LISTED]:
        first = g.calls[0] if g.calls else None
        rows.append({
            "module": g.module, "name": g.name, "offset": g.offset, "opcode": g.opcode,
            "severity": g.severity, "called": g.invoked is not None,
            "args": call_text(first[0], first[1]) if first else None,
        })
    return rows


def pickle_details(runs: list[PickleRun], main: PickleRun | None, structure: Any,
                   rep: Report, torchscript: bool = False) -> dict[str, Any]:
    """With `torchscript`, the `__torch__` classes are the `torchscript_archive` finding's: the
    classes torch.jit.load compiles from the archive's code, not imports of their own."""
    imports = [g for r in runs for g in r.imports]
    judge_calls(imports)
    judged = [g for g in imports if not is_class(g.dotted)] if torchscript else imports
    main = main or (runs[0] if runs else None)
    import_findings(rep, judged, main.value if main else None)
    return {
        "imports": import_rows(imports),
        "imports_total": len(imports),
        "structure": structure,
        "opcode_count": sum(r.opcode_count for r in runs),
        "pickle_offset": main.start if main else 0,
        "pickle_length": (main.end - main.start) if main else 0,
        "protocol": main.protocol if main else None,
        "pickles": [{"offset": r.start, "length": r.end - r.start, "opcodes": r.opcode_count,
                     "protocol": r.protocol} for r in runs],
        "verdict": verdict(judged, rep),
    }
