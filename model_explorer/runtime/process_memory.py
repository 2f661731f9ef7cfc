"""Process memory figures for the timing report: resident set size now and at its peak.

On Linux the peak (VmHWM) can be reset, so a figure covers one phase (load, or one generation);
elsewhere the peak is the process's whole-life maximum.
"""

from __future__ import annotations

import sys

from ..units import format_bytes


def _status_kib(field: str) -> int | None:
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith(field + ":"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    return None


def current_rss() -> int | None:
    """Resident bytes now (None where the OS does not say)."""
    return _status_kib("VmRSS")


def resident_split() -> tuple[int | None, int | None]:
    """(anonymous, file-backed) resident bytes now: RssAnon is the process's own memory, RssFile
    the pages of files it maps (a mapped GGUF's weights: shared with the page cache, reclaimable).
    (None, None) where the OS does not say."""
    return _status_kib("RssAnon"), _status_kib("RssFile")


def reset_peak() -> bool:
    """Start a new peak from the current RSS; False where the OS cannot (then peaks are lifetime)."""
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
        return True
    except OSError:
        return False


def peak_rss() -> int | None:
    """Peak resident bytes since the last `reset_peak` (or since the process started)."""
    peak = _status_kib("VmHWM")
    if peak is not None:
        return peak
    try:
        import resource

        maxrss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    except (ImportError, OSError):
        return None
    return maxrss if sys.platform == "darwin" else maxrss * 1024  # macOS: bytes; Linux: KiB


def describe(n: int | None) -> str:
    return "n/a" if n is None else format_bytes(n)



