"""A finding on a reader's report with the severity and the fix the catalog (codes.py) gives its
code, so a code says the same thing wherever a reader raises it."""

from __future__ import annotations

from ..codes import CATALOG
from ..spans import Finding, Report


def note(rep: Report, code: str, message: str, offset: int | None = None, length: int | None = None,
         tensor: str | None = None) -> Finding:
    entry = CATALOG[code]
    found = getattr(rep, entry.severity)(code, message, offset, length, tensor)
    if entry.fix and not found.fix:
        found.fix = entry.fix
    return found
