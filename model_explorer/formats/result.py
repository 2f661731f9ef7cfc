"""`FileResult`: what one format reader found in one file, before it joins a checkpoint."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from ..records import TensorInfo
from ..spans import Report


@dataclass
class FileResult:
    """What one file held: its tensors, metadata, spans and findings."""

    file: str
    size: int
    report: Report
    tensors: dict[str, TensorInfo] = field(default_factory=dict)
    metadata: dict[str, Any] = field(default_factory=dict)
    data_start: int = 0
    details: dict[str, Any] = field(default_factory=dict)
