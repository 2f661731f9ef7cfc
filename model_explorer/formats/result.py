"""`FileResult`: what one format reader found in one file, before it joins a checkpoint."""

from __future__ import annotations

from collections.abc import Callable, MutableMapping
from dataclasses import dataclass, field
from typing import Any

from ..records import TensorInfo
from ..spans import Report
from .structure import GraphStructure


@dataclass
class FileResult:
    """What one file held: its tensors, metadata, spans and findings."""

    file: str
    size: int
    report: Report
    tensors: MutableMapping[str, TensorInfo] = field(default_factory=dict)  # a dict or a TensorMap
    metadata: dict[str, Any] = field(default_factory=dict)
    data_start: int = 0
    details: dict[str, Any] = field(default_factory=dict)
    # Byte sources the reader opened beside the file and its tensors point into (OpenVINO's .bin):
    # the checkpoint lists them as its files and reads tensor bytes through them.
    companions: list = field(default_factory=list)
    # Set when the spans were left for later: lazy_spans(source) -> (spans, findings), run
    # the first time a view asks for this file's spans.
    lazy_spans: Callable[[Any], tuple[list, list]] | None = None
    lazy_span_kinds: tuple[str, ...] = ()  # the kinds of span lazy_spans can make (the legend)
    # A graph format's operators, inputs and outputs (ONNX, OpenVINO, TFLite): structure.py.
    structure: GraphStructure | None = None
