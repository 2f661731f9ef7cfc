"""The chat-template audit turned into findings at the file's bytes: every template a checkpoint
carries (template_sources), audited (template_audit) and rendered with canary conversations
(template_judge) unless it is a known family's (template_known), and a GGUF's template compared
with the one beside it in the folder.
"""

from __future__ import annotations

import re

from ..records import CheckpointRecord
from ..spans import Finding
from .findings import model_finding
from .sidefiles import line_col
from .template_known import known_template
from .template_sources import folder_sources, template_sources


def audit_sources(ckpt: CheckpointRecord) -> tuple[list[Finding], dict[str, str]]:
    """Findings for every template, and the known family of each template recognised (by label)."""
    out: list[Finding] = []
    known: dict[str, str] = {}
    for src in template_sources(ckpt):
        family = known_template(src.text)
        if family:
            known[src.label] = family
            continue
        for hit in template_hits(src.text)[0]:
            offset, length = src.span(hit.start, hit.end)
            where = f"{src.label}, {line_col(src.text, hit.start)} of the template"
            out.append(model_finding(hit.code, f"{hit.message} ({where}.)", offset=offset, length=length,
                                     file=src.file, template=src.label, **hit.extra))
    out += _differs(ckpt)
    return out, known


def sandbox_refusal(error: str | None) -> str | None:
    """The internal attribute a render's SecurityError names ("access to attribute '__class__'
    of 'str' object is unsafe"), or None when the refusal is something else (a list's append
    in the immutable sandbox is a bug, not an attack)."""
    m = re.search(r"SecurityError: .*?attribute '([^']+)'", error or "")
    if not m:
        return None
    from .template_rules import internal  # jinja2 comes with it: only where a template rendered

    return m.group(1) if internal(m.group(1)) else None


def refusal_finding(loc: dict, error: str, name: str) -> Finding:
    return model_finding("chat_template_escape", f"Rendering the chat template in jinja2's sandbox stopped at "
                         f"{name} ({error}): the template reaches for Python internals, which is an attack, "
                         "not a formatting bug. Outside a sandbox (llama-cpp-python before 0.2.72, servers "
                         "that call jinja2.Template) that access leads to running commands on the machine.",
                         reaches=[name], **loc)


def _first_difference(a: str, b: str) -> int:
    n = min(len(a), len(b))
    return next((i for i in range(n) if a[i] != b[i]), n)


def _differs(ckpt: CheckpointRecord) -> list[Finding]:
    """A GGUF whose template is not the one its folder ships (transformers reads the folder's,
    llama.cpp and Ollama the GGUF's)."""
    if ckpt.format != "gguf":
        return []
    own = next((s for s in template_sources(ckpt) if s.label == "tokenizer.chat_template"), None)
    beside = folder_sources(ckpt)
    if own is None or not beside or beside[0].text.strip() == own.text.strip():
        return []
    other = beside[0]
    i = _first_difference(own.text, other.text)
    offset, length = own.span(0, len(own.text))
    at, _ = own.span(i, len(own.text))
    return [model_finding(
        "chat_template_differs", f"The GGUF's tokenizer.chat_template differs from {other.label} in the same "
        f"folder from {line_col(own.text, i)} on: llama.cpp, Ollama and LM Studio read the GGUF's, "
        "transformers reads the folder's, so the model is prompted differently depending on the loader. "
        "A template that misbehaves in only one of them escapes an audit of the other.",
        offset=offset, length=length, file=own.file, first_difference=at, other_file=other.file,
        other_offset=other.span(min(i, len(other.text)), len(other.text))[0])]


def template_view(ckpt: CheckpointRecord) -> dict | None:
    """The template a loader uses (the GGUF's own, else chat_template.jinja, else
    tokenizer_config.json's) with what the audit flags in it, for the Model tab: the text, and
    each flagged range as characters of the text and as bytes of the file."""
    from ..codes import CATALOG

    sources = template_sources(ckpt)
    if not sources:
        return None
    src = sources[0]
    family = known_template(src.text)
    marks = []
    hits, canary = template_hits(src.text) if not family else ([], None)
    for hit in hits:
        offset, length = src.span(hit.start, hit.end)
        marks.append({"start": hit.start, "end": hit.end, "code": hit.code, "severity": CATALOG[hit.code].severity,
                      "message": hit.message, "file": src.file, "offset": offset, "length": length})
    return {"label": src.label, "text": src.text, "file": src.file, "family": family, "marks": marks,
            "others": [s.label for s in sources[1:]],
            "canary": None if canary is None else {"condition": canary.name, "pieces": canary.pieces}}


def template_hits(text: str):
    """What the template is (template_audit, its parse tree) and what it does (template_judge,
    canary conversations rendered in the sandbox), one hit per code and place; and the canary
    conversation to show. Imported when a model has a template: parsing one needs jinja2, which
    a model without a chat template does not pay for at open (50-90 ms)."""
    from .template_audit import audit_template
    from .template_judge import judge_template

    hits = audit_template(text)
    judged, canary = judge_template(text)
    seen = {(h.code, h.start) for h in hits}
    hits += [h for h in judged if (h.code, h.start) not in seen]
    return sorted(hits, key=lambda h: (h.start, h.code)), canary
