"""How sizes read, in one place: binary units (KiB, MiB, GiB) as the demo and the CLI print them.

The JavaScript views use the same convention (js/src/format.js `formatBytes`).
"""

from __future__ import annotations

UNITS = ("B", "KiB", "MiB", "GiB", "TiB", "PiB")


def format_bytes(n: float | None) -> str:
    """512 -> "512 B", 1536 -> "1.5 KiB", 98362432 -> "93.8 MiB"; "?" for None."""
    if n is None:
        return "?"
    value = float(n)
    for unit in UNITS:
        if abs(value) < 1024 or unit == UNITS[-1]:
            return f"{value:.0f} {unit}" if unit == "B" else f"{value:.1f} {unit}"
        value /= 1024
    raise AssertionError("unreachable")
