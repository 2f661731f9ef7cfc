"""Notebook views of a checkpoint (anywidget). `explore(source)` shows them all, linked."""

from . import fix_dialog as _fix_dialog
from .explorer import Explorer, explore
from .findings import Findings
from .header_tree import HeaderTree
from .hexdump import HexDump
from .histogram import TensorHistogram
from .shard_map import ShardMap

_fix_dialog.EXPLORE = explore  # the Fix… dialog's "Open in Explorer" (fix_dialog.py may not import it)

__all__ = ["explore", "Explorer", "HexDump", "HeaderTree", "ShardMap", "TensorHistogram", "Findings"]
