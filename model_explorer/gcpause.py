"""Pause Python's cyclic garbage collector while building many small objects.

Headers and header trees make hundreds of thousands of small objects and no reference cycles;
with a 90,000-tensor checkpoint in memory each full collection rescans them all and costs more
than the build itself (40% of opening such a model). When the pause ends, what it built is
moved to the oldest generation (see `_to_oldest_generation`).

The collector is one per process, and widget jobs build in threads of their own: the pause is
held, not toggled. The first holder to enter disables the collector (only if it was enabled),
the last one to leave enables it again, under a lock, so one thread's pause ending never turns
the collector back on under another's build, and a collector the user disabled stays off.
"""

from __future__ import annotations

import contextlib
import gc
import threading
from collections.abc import Iterator


class _Pause:
    """The process's one pause of the collector, counted by its holders."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._holders = 0
        self._disabled_here = False  # the first holder found the collector on and turned it off

    def enter(self) -> None:
        with self._lock:
            if self._holders == 0 and gc.isenabled():
                # The young generations hold little here, and what they hold is moved to the
                # oldest one when the pause ends: collect their garbage first (a user's dropped
                # model in a reference cycle must not wait for a rare full collection).
                gc.collect(1)
                gc.disable()
                self._disabled_here = True
            self._holders += 1

    def leave(self) -> None:
        with self._lock:
            self._holders -= 1
            if self._holders == 0 and self._disabled_here:
                self._disabled_here = False
                _to_oldest_generation()
                gc.enable()

    @property
    def holders(self) -> int:
        return self._holders


# Process-wide because the collector is: the only state here, and it follows `gc`'s own.
PAUSE = _Pause()


@contextlib.contextmanager
def no_gc() -> Iterator[None]:
    """Hold the pause for the block (see the module's docstring); re-entrant and thread-safe."""
    PAUSE.enter()
    try:
        yield
    finally:
        PAUSE.leave()


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
