"""One fix: the findings it resolves, what it will change, and how it edits the build."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from ..spans import Finding
from .build import Build


@dataclass
class Fix:
    """A repair that applies to this checkpoint.

    name: what the fix does ("rebuild_index", "strip_prefix", ...); `--only` takes it or any
        of the finding codes it resolves.
    resolves: the findings it resolves (may be empty for a fix asked for by a choice).
    changes: what it will change: {"files": [...], "keys": [...], "tensors": [...], "bytes": n}.
    renames: source tensor name -> new name, checked against the other fixes' before writing.
    """

    name: str
    summary: str
    resolves: list[Finding] = field(default_factory=list)
    changes: dict[str, Any] = field(default_factory=dict)
    apply: Callable[[Build], None] | None = field(default=None, repr=False)
    renames: dict[str, str] = field(default_factory=dict)
    # finding codes this fix removes from the output even when no finding was raised for them
    # (the model-level faults are not findings until the model layer reports them)
    codes: tuple[str, ...] = ()

    @property
    def finding_codes(self) -> list[str]:
        return sorted({f.code for f in self.resolves} | set(self.codes))

    def matches(self, wanted: set[str]) -> bool:
        return self.name in wanted or bool(wanted & set(self.finding_codes))

    def to_dict(self) -> dict[str, Any]:
        return {"fix": self.name, "summary": self.summary, "resolves": self.finding_codes,
                "findings": [f.to_dict() for f in self.resolves], "changes": self.changes}

    def __str__(self) -> str:
        codes = ", ".join(self.finding_codes) or "asked for"
        return f"{self.name} ({codes}): {self.summary}"


@dataclass
class Unfixable:
    """A fault no repair can fix from this checkpoint's bytes, and what to do instead."""

    code: str
    message: str
    advice: str
    finding: Finding | None = None

    def to_dict(self) -> dict[str, Any]:
        return {"code": self.code, "message": self.message, "advice": self.advice,
                "finding": self.finding.to_dict() if self.finding else None}

    def __str__(self) -> str:
        return f"{self.code}: {self.message} {self.advice}"
