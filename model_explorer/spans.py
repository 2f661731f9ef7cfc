"""Labelled byte ranges and diagnostic findings.

Every value a parser reads is recorded as a `Span` with its absolute offset and length in
one file, so the hexdump, the header tree and the findings all point at the same bytes.
"""

from __future__ import annotations

import sys
from dataclasses import asdict, dataclass, field
from types import FrameType
from typing import Any

from .codes import CATALOG, fix_for

SEVERITIES = ("error", "warning", "info")


@dataclass(slots=True)
class Span:
    """A labelled byte range `[offset, offset + length)` of one file.

    `kind` is a short category used for colouring ("magic", "length", "json", "key",
    "value", "tensor_info", "padding", "tensor_data", "opcode", ...). `path` names the
    value the way a person would ("KV 3 > general.name > value"). `value` is a short,
    already-rendered text of the value, never a large object.
    """

    offset: int
    length: int
    kind: str
    path: str
    file: str = ""
    value: str | None = None
    tensor: str | None = None

    @property
    def end(self) -> int:
        return self.offset + self.length

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(slots=True)
class Finding:
    """A diagnosis: what was expected, what was found, and where.

    Made with `Finding.of(code, message, ...)`, which takes the severity and the fix from the
    catalog (codes.py); the fields stay plain so views and exports read them as before.
    """

    severity: str
    code: str
    message: str
    offset: int | None = None
    length: int | None = None
    tensor: str | None = None
    file: str | None = None
    extra: dict[str, Any] = field(default_factory=dict)
    # How to repair it, in plain words, where a fix is known ("" when none is).
    fix: str = ""

    def __post_init__(self) -> None:
        if self.severity not in SEVERITIES:
            raise ValueError(f"unknown severity {self.severity!r}")

    @classmethod
    def of(cls, code: str, message: str, /, offset: int | None = None, length: int | None = None,
           tensor: str | None = None, file: str | None = None, extra: dict[str, Any] | None = None,
           **fields: Any) -> Finding:
        """The one way a finding is made: `code`'s severity and fix come from the catalog, the
        caller gives the message (the detail) and where; `fields` (and `extra`) are kept in
        `extra` and fill the fix's $placeholders. A code the catalog lacks is refused."""
        entry = CATALOG.get(code)
        if entry is None:
            raise ValueError(f"unknown finding code {code!r}: add it to model_explorer/codes.py CATALOG")
        data = {**extra, **fields} if extra else fields
        f = cls(entry.severity, code, message, offset, length, tensor, file, data, fix_for(code, data))
        if _watched is not None:
            _watch(f, None)
        return f

    def to_dict(self) -> dict[str, Any]:
        return {
            "severity": self.severity,
            "code": self.code,
            "message": self.message,
            "offset": self.offset,
            "length": self.length,
            "tensor": self.tensor,
            "file": self.file,
            "fix": self.fix,
        }

    def __str__(self) -> str:
        where = ""
        if self.offset is not None:
            where = f" at byte {self.offset}"
            if self.length:
                where += f" (+{self.length})"
        if self.file:
            where += f" in {self.file}"
        return f"[{self.severity}] {self.code}: {self.message}{where}"


# Past this many findings of one code in one file, one summary finding counts the rest: a
# hostile file can otherwise produce a finding per byte (a million overlapping entries).
MAX_FINDINGS_PER_CODE = 1000


class Report:
    """Collects spans and findings for one file while a parser walks it."""

    def __init__(self, file: str) -> None:
        self.file = file
        self.spans: list[Span] = []
        self.findings: list[Finding] = []
        self._counts: dict[str, int] = {}
        self._summaries: dict[str, Finding] = {}

    def span(self, offset: int, length: int, kind: str, path: str, value: str | None = None,
             tensor: str | None = None) -> Span:
        s = Span(offset, length, kind, path, self.file, value, tensor)
        self.spans.append(s)
        return s

    def add(self, code: str, message: str, offset: int | None = None, length: int | None = None,
            tensor: str | None = None) -> Finding:
        """A finding of `code` at these bytes, its severity and fix from the catalog."""
        return self._add(None, code, message, offset, length, tensor)

    # report.error(code, ...) reads as what the catalog says of `code`; the catalog decides, and
    # the suite's finding check reports a call whose word disagrees with it.
    def error(self, code: str, message: str, offset: int | None = None, length: int | None = None,
              tensor: str | None = None) -> Finding:
        return self._add("error", code, message, offset, length, tensor)

    def warning(self, code: str, message: str, offset: int | None = None,
                length: int | None = None, tensor: str | None = None) -> Finding:
        return self._add("warning", code, message, offset, length, tensor)

    def info(self, code: str, message: str, offset: int | None = None, length: int | None = None,
             tensor: str | None = None) -> Finding:
        return self._add("info", code, message, offset, length, tensor)

    def capped(self, code: str) -> bool:
        """True once findings of `code` are only counted: a hot loop can skip its message."""
        return self._counts.get(code, 0) >= MAX_FINDINGS_PER_CODE

    def mark(self) -> tuple:
        return len(self.spans), len(self.findings), dict(self._counts), dict(self._summaries)

    def rollback(self, mark: tuple) -> None:
        """Forget what was added since `mark` (a parse that turned out invalid)."""
        spans, findings, counts, summaries = mark
        del self.spans[spans:]
        del self.findings[findings:]
        self._counts, self._summaries = counts, summaries

    def _add(self, said, code, message, offset, length, tensor) -> Finding:
        n = self._counts.get(code, 0) + 1
        self._counts[code] = n
        if n <= MAX_FINDINGS_PER_CODE:
            f = Finding.of(code, message, offset, length, tensor, self.file)
            if _watched is not None and said is not None and said != f.severity:
                _watch(f, said)
            self.findings.append(f)
            return f
        summary = self._summaries.get(code)
        if summary is None:
            summary = Finding.of(code, "", offset, length, tensor, self.file, capped=True)
            self._summaries[code] = summary
            self.findings.append(summary)
            self._discard = Finding.of(code, "", None, None, None, self.file)
        summary.extra["total"] = n
        summary.message = (f"{n - MAX_FINDINGS_PER_CODE} more {code!r} findings like the ones "
                           f"above are not listed ({n} in all; the first at byte {summary.offset}).")
        return self._discard  # a caller may still annotate it; it is not kept


# -- the suite's check that every finding agrees with the catalog ---------------------------------
# Off unless a test run turns it on (tests/conftest.py): then each finding made is kept, with the
# place that made it, until `watched_problems` checks them against the catalog.
_watched: list[tuple[Finding, str | None, str]] | None = None
_HERE = __file__
# The helpers that only pass a finding on: the place that called them made it.
_PASSERS = {"model_finding", "finding", "_finding", "_err", "add", "once", "_flag"}


def watch_findings(on: bool = True) -> None:
    """Keep every finding made from now on (on=False: stop and forget them)."""
    global _watched
    _watched = [] if on else None


def _watch(f: Finding, said: str | None) -> None:
    frame: FrameType | None = sys._getframe(1)
    while frame is not None and (frame.f_code.co_filename == _HERE or frame.f_code.co_name in _PASSERS):
        frame = frame.f_back
    where = f"{frame.f_code.co_filename}:{frame.f_lineno}" if frame is not None else "?"
    if _watched is not None:
        _watched.append((f, said, where))


def watched_problems() -> list[str]:
    """What disagrees with the catalog among the findings kept since the last call, one line each
    (a severity or fix changed after the finding was made, a report method that names another
    severity, a fix placeholder no field fills); the kept findings are then let go."""
    if _watched is None:
        return []
    n = len(_watched)  # findings a thread adds meanwhile stay for the next call
    kept = _watched[:n]
    del _watched[:n]
    problems = []
    for f, said, where in kept:
        entry = CATALOG.get(f.code)
        if entry is None:
            problems.append(f"{where}: code {f.code!r} is not in the catalog")
            continue
        if said is not None and said != entry.severity:
            problems.append(f"{where}: report.{said}({f.code!r}, ...) but the catalog says {entry.severity}")
        if f.severity != entry.severity:
            problems.append(f"{where}: {f.code} has severity {f.severity}, the catalog says {entry.severity}")
        if f.fix != fix_for(f.code, f.extra):
            problems.append(f"{where}: {f.code} has the fix {f.fix!r}, not the catalog's")
        elif "$" in f.fix:
            problems.append(f"{where}: {f.code}'s fix has a placeholder no field fills: {f.fix!r}")
    return problems


def short_repr(value: Any, limit: int = 80) -> str:
    """A one-line rendering of a value for span labels, cut at `limit` characters; a boolean reads
    as the file formats spell it (true, false), not as Python's True and False."""
    text = value if isinstance(value, str) else ("true" if value else "false") if isinstance(value, bool) \
        else repr(value)
    text = text.replace("\n", "\\n")
    return text if len(text) <= limit else text[: limit - 1] + "…"
