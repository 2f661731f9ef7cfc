"""The inert values the pickle interpreter (vm.py) makes in place of real objects, and their
short rendering for messages.

An import becomes a `Global` (module and name, never imported), a call a `Call` (callee and
arguments, never called), a long bytes argument a `Blob` (where its bytes are), a set an
`EmuSet` (never hashed); `PickleRun` is what one pickle held. The readers beside vm.py walk
these values; none of them runs anything.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass, field
from typing import Any

from ...spans import short_repr
from .policy import normalize

SCALARS = (str, int, float, bool, type(None), bytes)


# -- inert stand-ins for what a real unpickler would create ---------------------------------

@dataclass(eq=False, slots=True)
class Global:
    """An import the pickle asks for: never performed."""

    module: str
    name: str
    offset: int
    opcode: str
    severity: str = "ok"
    why: str = ""
    calls: list | None = None  # (callee, args, offset, opcode), first few
    computed: str | None = None  # STACK_GLOBAL whose names were not constants
    dotted: str = ""  # "module.name" after Python 2 name mapping
    invoked: tuple[str, int] | None = None  # (opcode, offset) of the first call of it
    called: bool = False  # invoked as a function (REDUCE, INST, OBJ...), not only built (`builds`)
    author_class: bool = False  # only built, and an author's class by name (report.judge_calls)
    opcode_called: bool = False  # an error only because the pickle calls it (report.judge_calls)
    label: str = ""  # which pickle of the file ("data.pkl", "legacy data", ...)
    past_cap: bool = False  # shared by imports past MAX_IMPORTS_KEPT (in `imports` once called)

    def __post_init__(self) -> None:
        if not self.dotted:
            m, n = normalize(self.module, self.name)
            self.dotted = f"{m}.{n}"


@dataclass(eq=False, slots=True)
class Call:
    """`func(*args)` as the pickle would run it, with what BUILD/APPEND/SETITEM add later."""

    func: Any
    args: Any
    offset: int
    opcode: str
    kwargs: Any = None
    state: Any = None
    items: list | None = None
    setitems: list | None = None


@dataclass(eq=False, slots=True)
class Blob:
    """A long bytes argument: where its bytes are in the file, not the bytes."""

    offset: int
    length: int


@dataclass(eq=False, slots=True)
class EmuSet:
    items: list
    frozen: bool = False


@dataclass(eq=False, slots=True)
class PersistentRef:
    """A persistent id no loader resolved (plain pickles)."""

    pid: Any
    offset: int


@dataclass(eq=False, slots=True)
class Unknown:
    why: str


@dataclass
class PickleRun:
    """What one pickle held."""

    start: int
    end: int  # absolute offset just past STOP (or where reading stopped)
    value: Any = None
    protocol: int | None = None
    stopped: bool = False  # reached STOP
    opcode_count: int = 0
    imports: list[Global] = field(default_factory=list)
    failed: bool = False
    # id(bytes argument) -> (the bytes, absolute offset of its payload), for numpy arrays
    byte_offsets: dict[int, tuple[Any, int]] = field(default_factory=dict)
    watched: list[Call] = field(default_factory=list)  # calls of PickleMachine.watch names
    irregular_frames: bool = False  # genops and the C unpickler may read these bytes differently
    # imports past MAX_IMPORTS_KEPT, judged by name but not all kept: severity -> count
    past_cap: dict[str, int] = field(default_factory=dict)
    cut_short: bool = False  # ran out of bytes where its caller knows the file may be cut short



# -- rendering values for messages ---------------------------------------------------------

def render(value: Any, depth: int = 3, limit: int = 160) -> str:
    """A short, bounded, one-line rendering of an emulated value (never recursing deeply)."""
    text = _render(value, depth)
    return text if len(text) <= limit else text[:limit - 1] + "…"


def _render(v: Any, depth: int) -> str:
    if isinstance(v, bool) or v is None or isinstance(v, float):
        return repr(v)
    if isinstance(v, int):
        return repr(v) if v.bit_length() <= 128 else f"<int of {v.bit_length()} bits>"
    if isinstance(v, str):
        return short_repr(repr(v[:200]), 200)  # slice first: the string may be huge
    if isinstance(v, (bytes, bytearray)):
        return short_repr(repr(bytes(v)), 60) if len(v) <= 64 else f"<{len(v)} bytes>"
    if isinstance(v, Blob):
        return f"<{v.length} bytes at {v.offset}>"
    if isinstance(v, Global):
        return v.computed or v.dotted
    if depth <= 0:
        return "…"
    if isinstance(v, Call):
        args = v.args
        inner = ", ".join(_render(a, depth - 1) for a in args[:6]) if isinstance(args, tuple) \
            else "*" + _render(args, depth - 1)
        if isinstance(args, tuple) and len(args) > 6:
            inner += ", …"
        return f"{_render(v.func, depth - 1)}({inner})"
    if isinstance(v, (tuple, list)):
        inner = ", ".join(_render(a, depth - 1) for a in v[:6]) + (", …" if len(v) > 6 else "")
        return f"({inner}{',' if len(v) == 1 and isinstance(v, tuple) else ''})" \
            if isinstance(v, tuple) else f"[{inner}]"
    if isinstance(v, dict):
        items = list(itertools.islice(v.items(), 4))  # not the whole dict: it may be huge
        inner = ", ".join(f"{_render(k, depth - 1)}: {_render(x, depth - 1)}" for k, x in items)
        return "{" + inner + (", …" if len(v) > 4 else "") + "}"
    if isinstance(v, EmuSet):
        return "{" + ", ".join(_render(a, depth - 1) for a in v.items[:6]) + "}"
    if hasattr(v, "render"):
        return v.render()
    return f"<{type(v).__name__}>"


def dict_key(k: Any) -> Any:
    """Scalars stay themselves; anything else becomes its rendering (never hashed)."""
    return k if type(k) in SCALARS else render(k)


def op_value(arg: Any) -> str | None:
    """The short text a span shows for an opcode argument (hot: one call per opcode)."""
    if arg is None:
        return None
    t = type(arg)
    if t is int:
        return str(arg) if -(1 << 64) < arg < (1 << 64) else f"<int of {arg.bit_length()} bits>"
    if t is str:
        return repr(arg) if len(arg) <= 58 else repr(arg[:57]) + "…"
    if t is bytes or t is bytearray:
        return f"{len(arg)} bytes"
    return _render(arg, 1)[:60]
