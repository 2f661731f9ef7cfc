"""Reconstructors of plain data: calls the pickle interpreter may carry out on its inert values
(OrderedDict, set, frozenset, `_codecs.encode`, bytearray) instead of keeping a `Call`; the torch
readers add their own (torch_refs.py)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from .values import EmuSet, dict_key


def _ordered_dict(m, args, pos):
    d = {}
    if args and isinstance(args[0], (list, tuple)):
        for pair in args[0]:
            if isinstance(pair, (list, tuple)) and len(pair) == 2:
                d[dict_key(pair[0])] = pair[1]
    elif args:
        return NotImplemented
    return d


def _set(frozen):
    def r(m, args, pos):
        items = args[0] if args and isinstance(args[0], (list, tuple)) else []
        return EmuSet(list(items), frozen)
    return r


def _codecs_encode(m, args, pos):
    if len(args) == 2 and isinstance(args[0], str) and args[1] in ("latin1", "latin-1"):
        return args[0].encode("latin-1", errors="replace")
    return NotImplemented


def _bytearray(m, args, pos):
    if not args:
        return bytearray()
    if isinstance(args[0], (bytes, str)) and len(args) <= 2:
        return bytearray(args[0] if isinstance(args[0], bytes) else args[0].encode("latin-1",
                                                                                   "replace"))
    return NotImplemented


# Each takes (machine, args, offset) and returns the value, or NotImplemented to keep the Call.
BASE_REDUCERS: dict[str, Callable[..., Any]] = {
    "collections.OrderedDict": _ordered_dict,
    "builtins.set": _set(False),
    "builtins.frozenset": _set(True),
    "_codecs.encode": _codecs_encode,
    "builtins.bytearray": _bytearray,
}
