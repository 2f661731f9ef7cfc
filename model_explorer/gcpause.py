"""Pause Python's cyclic garbage collector while building many small objects.

Headers and header trees make hundreds of thousands of small objects and no reference cycles;
with a 90,000-tensor checkpoint in memory each full collection rescans them all and costs more
than the build itself (40% of opening such a model). The pause is process-wide for its moment;
when it ends, what it built is moved to the oldest generation (see `_to_oldest_generation`).
"""

from __future__ import annotations

import contextlib
import gc
from collections.abc import Iterator


@contextlib.contextmanager
def no_gc() -> Iterator[None]:
    was_enabled = gc.isenabled()
    if was_enabled:
        # The young generations hold little here, and what they hold is moved to the oldest
        # one when the pause ends: collect their garbage first (a user's dropped model in a
        # reference cycle must not wait for a rare full collection).
        gc.collect(1)
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            _to_oldest_generation()
            gc.enable()


def _to_oldest_generation() -> None:
    """Move every tracked object into the oldest generation, without scanning any.

    What the pause built (hundreds of thousands of records) still sits in the youngest
    generation; left there, the next young collections each rescan all of it (0.2 s at a
    time, landing in whatever runs next, such as an Explorer's first paint). freeze() moves
    every generation to the permanent one and unfreeze() moves that back as the oldest: two
    list splices. What they move is what the pause built (the young generations were collected
    when it began); it is only collected later, by the (rare) full collections."""
    if gc.get_freeze_count():  # someone froze objects on purpose (before a fork): leave them be
        return
    gc.freeze()
    gc.unfreeze()
