"""Every chat template a checkpoint carries, with the map from a character of the template to
the byte of the file that holds it.

A GGUF keeps its templates as string values (`tokenizer.chat_template`, and named ones such as
`tokenizer.chat_template.tool_use`): the text starts after the key, the type and the 8-byte
length. chat_template.jinja is the text itself. In tokenizer_config.json (and chat_template.json)
the template is a JSON string whose escapes (\\n, \\", \\uXXXX) take more bytes than the
characters they stand for, so the literal is walked once to place each character.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..ggml import Keys
from ..records import CheckpointRecord
from .json_literals import find_json_literal, json_char_starts, read_range
from .sidefiles import side_json, side_text
from .text_audit import utf8_offsets


@dataclass
class TemplateSource:
    text: str
    label: str  # "tokenizer.chat_template", "chat_template.jinja", "tokenizer_config.json chat_template"
    file: str | None
    offset: int | None  # the byte where the text (or its JSON literal) starts
    literal: bytes | None = None  # the JSON string literal, quotes included, when it is one
    _starts: list[int] | None = None

    @property
    def in_gguf(self) -> bool:
        return self.label.startswith("tokenizer.chat_template")

    def span(self, start: int, end: int) -> tuple[int | None, int | None]:
        """(offset, length) in the file of the template's characters start..end."""
        if self.offset is None:
            return None, None
        if self.literal is None:
            a, b = utf8_offsets(self.text, [start, end])
            return self.offset + a, max(1, b - a)
        if self._starts is None:
            self._starts = json_char_starts(self.literal)
        starts = self._starts
        a = starts[min(start, len(starts) - 1)]
        b = starts[min(end, len(starts) - 1)]
        return self.offset + a, max(1, b - a)


def _gguf_sources(ckpt: CheckpointRecord) -> list[TemplateSource]:
    out = []
    for key, kv in ckpt.metadata.items():
        if not (key == Keys.CHAT_TEMPLATE or key.startswith(Keys.CHAT_TEMPLATE + ".")):
            continue
        text = ckpt.meta(key)
        if not isinstance(text, str) or getattr(kv, "offset", None) is None:
            continue
        start = kv.offset + 8 + len(key.encode("utf-8")) + 4 + 8  # key length, key, type, string length
        out.append(TemplateSource(text, key, getattr(kv, "file", None) or ckpt.files[0], start))
    return out


def _json_template(ckpt: CheckpointRecord, name: str, key: str) -> list[TemplateSource]:
    side = side_json(ckpt, name)
    if side is None or not isinstance(side.value, dict):
        return []
    value = side.value.get(key)
    offset, length = side.where(key)
    named = [("", value)] if isinstance(value, str) else [
        (x.get("name"), x.get("template")) for x in value if isinstance(x, dict)] if isinstance(value, list) else []
    named = [(n, t) for n, t in named if isinstance(t, str) and t]
    if not named:
        return []
    raw = read_range(side.path, offset, length)
    out = []
    for template_name, text in named:
        label = f"{name} {key}" + (f" {template_name}" if template_name else "")
        literal, at = find_json_literal(raw, text) if raw is not None else (None, None)
        out.append(TemplateSource(text, label, side.path, None if at is None else offset + at, literal))
    return out


def folder_sources(ckpt: CheckpointRecord) -> list[TemplateSource]:
    """The templates in the side files, the one transformers uses first."""
    out = []
    text, path, _ = side_text(ckpt, "chat_template.jinja")
    if text:
        out.append(TemplateSource(text, "chat_template.jinja", path, 0))
    out += _json_template(ckpt, "tokenizer_config.json", "chat_template")
    out += _json_template(ckpt, "chat_template.json", "chat_template")
    return out


def template_sources(ckpt: CheckpointRecord) -> list[TemplateSource]:
    """Every chat template of the checkpoint: the GGUF's own first, then the side files'."""
    return (_gguf_sources(ckpt) if ckpt.format == "gguf" else []) + folder_sources(ckpt)
