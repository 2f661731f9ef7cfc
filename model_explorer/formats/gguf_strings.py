"""Runs of short length-prefixed strings in a GGUF header, found with numpy.

A 128k-token vocabulary and its 280k merges are 409k strings, each a u64 length then its bytes:
walked one `struct` unpack at a time that was most of an open. Nearly all of them are shorter
than 256 bytes, and such a length is a u64 whose seven high bytes are zero, so one numpy pass
over a window of the header finds every candidate start; the chain from a known start holds
while each candidate's string ends exactly where the next candidate begins. What cannot be
vouched for that way (a longer string, zeros inside text) is left to the reader's own loop.
"""

from __future__ import annotations

import numpy as np

FAST_FIRST_WINDOW = 1 << 16  # bytes numpy looks at first; doubles while runs fill it
FAST_MAX_WINDOW = 1 << 20
FAST_MIN_RUN = 64  # a numpy pass that finds fewer strings than this hands over to the loop
_NO_RUN = np.zeros(0, np.int64)


def short_run(buf, pos: int, want: int, end: int, window: int, bo: str) -> tuple[np.ndarray, int]:
    """The offsets of up to `want` consecutive strings from `pos`, each under 256 bytes, found
    in bytes [pos, min(end, pos + window)) of `buf`, and where the string after them starts.

    A length under 256 is a u64 whose seven high bytes are zero: every such position is a
    candidate, and the chain from `pos` holds while each candidate's string ends exactly at the
    next candidate. The run stops at the first string that does not (a longer one, or a false
    candidate inside text), and never takes a string whose bytes pass `end`."""
    stop = min(end, pos + window)
    n = stop - pos - 7
    if n <= 0:
        return _NO_RUN, pos
    b = np.frombuffer(buf, np.uint8, count=stop - pos, offset=pos)
    zero = b == 0
    low = 0 if bo == "<" else 7  # where a length's one significant byte is; the other seven are 0
    short = np.ones(n, bool)
    for k in range(8):
        if k != low:
            short &= zero[k:n + k]
    cand = np.flatnonzero(short)
    if not len(cand) or cand[0] != 0:
        return _NO_RUN, pos
    nxt = cand + 8 + b[cand + low]
    breaks = np.flatnonzero(nxt[:-1] != cand[1:])
    k = min(int(breaks[0]) + 1 if len(breaks) else len(cand), want)
    while k and pos + int(nxt[k - 1]) > end:  # the last string's bytes must be there
        k -= 1
    if not k:
        return _NO_RUN, pos
    return cand[:k] + pos, pos + int(nxt[k - 1])
