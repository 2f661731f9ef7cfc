"""Notebook views of a checkpoint (anywidget). `explore(source)` shows them all, linked."""

from .explorer import Explorer, explore
from .findings import Findings
from .header_tree import HeaderTree
from .hexdump import HexDump
from .histogram import TensorHistogram
from .shard_map import ShardMap

__all__ = ["explore", "Explorer", "HexDump", "HeaderTree", "ShardMap", "TensorHistogram", "Findings"]
