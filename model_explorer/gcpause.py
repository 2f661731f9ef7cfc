"""Pause Python's cyclic garbage collector while building many small objects.

Headers and header trees make hundreds of thousands of small objects and no reference cycles;
with a 90,000-tensor checkpoint in memory each full collection rescans them all and costs more
than the build itself (40% of opening such a model). The pause is process-wide for its moment.
"""

from __future__ import annotations

import contextlib
import gc
from collections.abc import Iterator


@contextlib.contextmanager
def no_gc() -> Iterator[None]:
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()
