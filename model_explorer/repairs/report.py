"""The report of a repair: what changed, per-tensor hashes of source and output, and the
findings of the output reopened, with the fixed ones that would still be there."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from ..spans import Finding
from .fix import Fix, Unfixable


@dataclass
class TensorHashes:
    name: str  # in the output ("" when dropped)
    source_name: str
    source_sha256: str | None
    output_sha256: str | None
    file: str = ""
    changes: list[str] = field(default_factory=list)

    @property
    def identical(self) -> bool:
        return self.source_sha256 is not None and self.source_sha256 == self.output_sha256

    def to_dict(self) -> dict[str, Any]:
        return {"name": self.name, "source_name": self.source_name, "file": self.file,
                "source_sha256": self.source_sha256, "output_sha256": self.output_sha256,
                "identical": self.identical, "changes": self.changes}


@dataclass
class RepairReport:
    source: str
    dest: str
    applied: list[Fix] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)  # asked for, but nothing to fix
    unfixable: list[Unfixable] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)  # losses: tensors dropped, never silently
    files: list[str] = field(default_factory=list)  # the paths written
    tensors: list[TensorHashes] = field(default_factory=list)
    findings: list[Finding] = field(default_factory=list)  # of the output, reopened
    remaining: list[str] = field(default_factory=list)  # fixed faults still found in the output
    dry_run: bool = False

    @property
    def ok(self) -> bool:
        """Every selected fix applied and the output reopens without the fixed findings."""
        return not self.remaining and not self.dry_run

    def to_dict(self) -> dict[str, Any]:
        return {"source": self.source, "dest": self.dest, "ok": self.ok, "dry_run": self.dry_run,
                "applied": [f.to_dict() for f in self.applied], "skipped": self.skipped,
                "unfixable": [u.to_dict() for u in self.unfixable], "notes": self.notes,
                "errors": self.errors, "files": self.files,
                "tensors": [t.to_dict() for t in self.tensors],
                "findings": [f.to_dict() for f in self.findings], "remaining": self.remaining}

    def to_json(self, **kw) -> str:
        return json.dumps(self.to_dict(), **kw)

    def __str__(self) -> str:
        changed = [t for t in self.tensors if not t.identical]
        lines = [f"repair {self.source} -> {self.dest}: {'OK' if self.ok else 'NOT OK'}",
                 f"  {len(self.applied)} fix(es) applied, {len(self.tensors)} tensors "
                 f"({len(self.tensors) - len(changed)} byte-identical, {len(changed)} changed or dropped)"]
        lines += [f"  fixed  {f}" for f in self.applied]
        lines += [f"  ERROR  {e}" for e in self.errors]
        lines += [f"  skipped  {s}" for s in self.skipped]
        lines += [f"  cannot fix  {u}" for u in self.unfixable]
        lines += [f"  note  {n}" for n in self.notes]
        lines += [f"  STILL THERE  {r}" for r in self.remaining]
        lines += [f"  output finding  {f}" for f in self.findings]
        return "\n".join(lines)

    def _repr_pretty_(self, p, cycle) -> None:
        p.text(str(self))
