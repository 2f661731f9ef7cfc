"""Free text that travels with the weights, read for what it hides: GGUF metadata strings
(general.description, general.name, tags...), a safetensors header's __metadata__ strings, and
the model card (README.md). Invisible and bidi code points, and prompt-injection idioms aimed
at a model that reads them (an assistant that summarises model cards, a loader that puts the
description in a prompt).
"""

from __future__ import annotations

import struct

from ..records import CheckpointRecord
from ..spans import Finding
from .findings import model_finding
from .json_literals import find_json_literal, read_range
from .sidefiles import side_text
from .text_audit import TextHit, hidden_runs, injection_phrases, utf8_offsets, visible

SKIPPED = ("tokenizer.",)  # templates and vocabularies (even a whole tokenizer.huggingface.json): audited elsewhere
MAX_ARRAY = 4096  # string arrays longer than this are data (a vocabulary), not text for people
MAX_HEADER_SCAN = 16 * 1024 * 1024


def check(ckpt: CheckpointRecord) -> list[Finding]:
    out = _gguf_strings(ckpt) if ckpt.format == "gguf" else _safetensors_strings(ckpt)
    return out + _model_card(ckpt)


def _findings(text: str, what: str, place) -> list[Finding]:
    """One finding per hidden run and one for the injection idioms of `text`; `place(start, end)`
    gives the {"file", "offset", "length"} of a character range."""
    out = []
    for h in hidden_runs(text):
        code = "bidi_override" if h.kind == "bidi" else "hidden_text"
        out.append(model_finding(code, f"{what} holds {h.what}, in “{_around(text, h)}”: a reader does not see "
                                 "what a model that reads it sees.", **place(h.start, h.end)))
    phrases = injection_phrases(text)
    if phrases:
        said = "; ".join(dict.fromkeys(p.what for p in phrases))
        out.append(model_finding("injection_text", f"{what} holds prompt-injection text ({said}): text that "
                                 "describes a model has no reason to address one. A model that reads it (a "
                                 "loader that puts the description in a prompt, an assistant that summarises "
                                 "model cards) is given orders.", phrases=[p.what for p in phrases],
                                 **place(phrases[0].start, phrases[0].end)))
    return out


def _around(text: str, h: TextHit) -> str:
    return visible(text[max(0, h.start - 30):h.end + 30], 120)


def _utf8_place(file: str, base: int, text: str):
    def place(start: int, end: int) -> dict:
        a, b = utf8_offsets(text, [start, end])
        return {"file": file, "offset": base + a, "length": max(1, b - a)}
    return place


def _gguf_strings(ckpt: CheckpointRecord) -> list[Finding]:
    out = []
    for key, kv in ckpt.metadata.items():
        if key.startswith(SKIPPED) or getattr(kv, "offset", None) is None:
            continue
        file = getattr(kv, "file", None) or ckpt.files[0]
        value = kv.value
        if isinstance(value, str):
            base = kv.offset + 8 + len(key.encode("utf-8")) + 4 + 8  # key length, key, type, string length
            out += _findings(value, f"The GGUF metadata {key}", _utf8_place(file, base, value))
        elif getattr(value, "type_name", None) == "STRING" and len(value) <= MAX_ARRAY:
            starts = getattr(value, "_string_offsets", None)  # where each element's length sits
            for i, item in enumerate(value.to_list()):
                base = int(starts[i]) + 8 if starts is not None else kv.offset
                out += _findings(item, f"The GGUF metadata {key}[{i}]", _utf8_place(file, base, item))
    return out


def _safetensors_strings(ckpt: CheckpointRecord) -> list[Finding]:
    """__metadata__ strings, each placed at its JSON literal in the header (looked up only for a
    string that has something to report)."""
    out = []
    for key, value in ckpt.metadata.items():
        if isinstance(value, str) and not key.endswith(".json"):
            found: dict = {}

            def place(start: int, end: int, value=value, found=found) -> dict:
                if not found:
                    found.update(_header_literal(ckpt, value))
                return found

            out += _findings(value, f"The safetensors __metadata__ entry {key}", place)
    return out


def _header_literal(ckpt: CheckpointRecord, value: str) -> dict:
    for file in ckpt.files:
        head = read_range(file, 0, 8)
        if not head or len(head) < 8:
            continue
        size = min(struct.unpack("<Q", head)[0], MAX_HEADER_SCAN)
        raw = read_range(file, 8, size) or b""
        literal, at = find_json_literal(raw, value)
        if literal is not None:
            return {"file": file, "offset": 8 + at, "length": len(literal)}
    return {"file": ckpt.files[0] if ckpt.files else None}


def _model_card(ckpt: CheckpointRecord) -> list[Finding]:
    text, path, _ = side_text(ckpt, "README.md")
    if not text:
        return []
    found = _findings(text, "The model card (README.md)", _utf8_place(path, 0, text))
    hidden = [f for f in found if f.code != "injection_text"]
    if len(hidden) > 3:  # one finding per kind, the first at its bytes, the count in words
        kept = []
        for code in dict.fromkeys(f.code for f in hidden):
            same = [f for f in hidden if f.code == code]
            first = same[0]
            if len(same) > 1:
                first.message += f" It is the first of {len(same)} such places in the card."
            kept.append(first)
        found = kept + [f for f in found if f.code == "injection_text"]
    return found
