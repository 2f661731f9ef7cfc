"""How sizes and values read, in one place: binary units (KiB, MiB, GiB) as the demo and the CLI
print them, and any metadata or config value as words for people (`plain_text`): never a Python
repr (no brackets, braces, quotes around a lone string, None or True/False).

The JavaScript views use the same convention (js/src/format.js `formatBytes`).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

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


ITEMS_SHOWN = 3  # the first elements of an array that `plain_text` writes out


def plain_text(value: Any, limit: int = 160, items: int = ITEMS_SHOWN) -> str:
    """A value as a person reads it: a string as it is (newlines as \\n), yes/no, "not set",
    numbers as numbers, bytes as their count, an array as '3 items: "en", "fr", "de"' (strings
    quoted there, so their edges show), a mapping as '2 keys: a = 1, b = yes'; cut at `limit`."""
    text = _plain(getattr(value, "value", value), items)  # a GGUF key/value holds its value
    return text if len(text) <= limit else text[:limit - 1] + "…"


def _plain(value: Any, items: int) -> str:
    if value is None:
        return "not set"
    if isinstance(value, bool) or type(value).__name__ == "bool_":
        return "yes" if value else "no"
    if isinstance(value, str):
        return value.replace("\n", "\\n")
    if isinstance(value, (bytes, bytearray, memoryview)):
        return f"{len(value):,} bytes"
    if isinstance(value, Mapping):
        shown = ", ".join(f"{k} = {_item(v, items)}" for k, v in list(value.items())[:items])
        more = ", …" if len(value) > items else ""
        return f"{len(value):,} key{'' if len(value) == 1 else 's'}: {shown}{more}" if value else "no keys"
    if hasattr(value, "__len__") and hasattr(value, "__getitem__"):  # list, tuple, numpy or GGUF array
        try:
            n = len(value)
            shown = ", ".join(_item(value[i], items) for i in range(min(n, items)))
        except Exception:  # noqa: BLE001 - an odd container: say what it is
            return type(value).__name__
        more = ", …" if n > items else ""
        return f"{n:,} item{'' if n == 1 else 's'}: {shown}{more}" if n else "no items"
    if hasattr(value, "item") and callable(value.item):  # a numpy scalar
        return _plain(value.item(), items)
    return str(value)


def _item(value: Any, items: int) -> str:
    """One element inside an array or mapping: strings quoted (JSON escapes), the rest plain."""
    if isinstance(value, str):
        return json.dumps(value if len(value) <= 40 else value[:39] + "…", ensure_ascii=False)
    if isinstance(value, Mapping) or (hasattr(value, "__len__") and hasattr(value, "__getitem__")
                                      and not isinstance(value, (bytes, bytearray, memoryview))):
        n = len(value)
        return f"({n:,} {'key' if isinstance(value, Mapping) else 'item'}{'' if n == 1 else 's'})"
    return _plain(value, items)


def names_text(names: list[str], shown: int = 5) -> str:
    """Names for a sentence: "a, b and c", or the first `shown` and how many more; never a list."""
    names = [str(n) for n in names]
    if len(names) > shown:
        return ", ".join(names[:shown]) + f" and {len(names) - shown:,} more"
    return " and ".join([", ".join(names[:-1]), names[-1]]) if len(names) > 1 else "".join(names)
