"""A file cut short: one finding that says how much is there, instead of one error per tensor.

A download that stopped leaves a header that describes every tensor and data that ends early.
It is told apart from a damaged header by the layout: the tensors' byte ranges, in offset order,
follow each other from the start of the data section (with at most the alignment's padding
between them) and the file simply stops inside that run. A header with one wrong offset leaves a
hole where the tensor should be, so its tensor past the end stays a `data_past_end` error.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from operator import attrgetter
from typing import Any

from ..hexview import END_KIND
from ..records import CheckpointRecord, TensorInfo
from ..spans import Report
from ..units import format_bytes


@dataclass
class Truncation:
    """Where one file stops and what its header says should follow."""

    file: str
    size: int  # bytes the file has
    expected: int  # where the last tensor's data ends
    first_cut: str  # the first tensor (in offset order) not wholly present
    present: int  # tensors wholly present
    total: int
    cut: list[str] = field(default_factory=list)  # every tensor not wholly present, in offset order

    def to_dict(self) -> dict[str, Any]:
        return {"size": self.size, "expected": self.expected, "first_cut": self.first_cut,
                "present_tensors": self.present, "tensors": self.total, "cut_tensors": list(self.cut)}


def percent(part: int, whole: int) -> str:
    """`part` of `whole` in percent with one decimal, rounded down: a file one byte short
    reads 99.9 %, never 100.0 %."""
    tenths = part * 1000 // whole if whole > 0 else 0  # integers: exact for any file size
    return f"{tenths // 10}.{tenths % 10}"


def truncation_message(name: str, size: int, expected: int, first_cut: str, present: int,
                       total: int) -> str:
    """The one sentence a cut file gets (the PyTorch archive reader words it the same way)."""
    return (f"{name} ends at byte {size:,} of {expected:,} expected ({percent(size, expected)} %): "
            f"tensor {first_cut} is the first cut; {present:,} of {total:,} tensors are wholly "
            "present")


def find_truncation(tensors: list[TensorInfo], data_start: int, size: int, file: str,
                    alignment: int = 1) -> Truncation | None:
    """The truncation of a file holding `tensors`; None when no tensor runs past the end, or
    when the layout is not an unbroken run of tensors (a hole or an overlap: the header is
    wrong, not the file short)."""
    if not tensors or max(t.end for t in tensors) <= size:
        return None
    ordered = sorted(tensors, key=attrgetter("offset", "length"))
    reach = data_start
    for t in ordered:
        if t.offset < reach or t.offset > -(-reach // alignment) * alignment:
            return None
        reach = t.end
    cut = [t.name for t in ordered if t.end > size]
    return Truncation(file, size, reach, cut[0], len(ordered) - len(cut), len(ordered), cut)


def report_truncation(rep: Report, tr: Truncation, name: str) -> None:
    """The finding (pointing at the end of the file) and the zero-length span that marks it."""
    f = rep.error("truncated", truncation_message(name, tr.size, tr.expected, tr.first_cut,
                                                  tr.present, tr.total), tr.size, 0, tr.first_cut)
    f.extra.update(tr.to_dict())
    rep.span(tr.size, 0, END_KIND, "end of file", _end_value(tr.size, tr.expected))


def _end_value(size: int, expected: int) -> str:
    return f"{size:,} bytes of {expected:,} expected ({percent(size, expected)} %)"


def end_note(details: dict[str, Any] | None) -> str | None:
    """"end of file: 95,000,000 bytes of 4,683,000,000 expected (2.0 %)" for a file cut short
    (its reader's `details`), None for a whole one: the hexdump shows it after the last byte."""
    cut = (details or {}).get("truncated")
    return f"end of file: {_end_value(cut['size'], cut['expected'])}" if cut else None


def stored_bytes(ckpt: CheckpointRecord) -> tuple[int, int]:
    """(bytes present, bytes the files should have): the second is larger when a file is cut
    short (its header says where its last tensor ends)."""
    files = ckpt.details.get("files") or {}
    present = expected = 0
    for file, size in ckpt.sizes.items():
        cut = (files.get(file) or {}).get("truncated")
        present += size
        expected += max(size, cut["expected"]) if cut else size
    return present, expected


def present_note(present: int | None, expected: int, size=format_bytes) -> str:
    """", 95.0 MiB present (2.1 %)" after the bytes a model should have, or "" when every byte
    is there (`present` None or not less); `size` formats a byte count."""
    if present is None or present >= expected:
        return ""
    return f", {size(present)} present ({percent(present, expected)} %)"


def size_words(present: int, expected: int, size=format_bytes) -> str:
    """The size a view shows for the whole model: "95.0 MiB of 4.4 GiB (2.1 %), cut short" when a
    file is cut short, else "95.0 MiB"; `size` formats a byte count."""
    if present >= expected:
        return size(present)
    return f"{size(present)} of {size(expected)} ({percent(present, expected)} %), cut short"
