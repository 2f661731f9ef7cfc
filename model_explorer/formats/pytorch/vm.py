"""An opcode-level pickle interpreter that rebuilds structure without running anything.

`pickletools.genops` decodes each opcode and its argument; this module emulates the
unpickler's stack, mark stack and memo with inert stand-ins: an import becomes a `Global`
(module and name, never imported), a call becomes a `Call` (callee and arguments, never
called) unless a reconstructor for plain data is registered for it (OrderedDict, set,
`_codecs.encode`, and the torch ones that `pytorch.py` adds). Every opcode becomes a span.

Work is bounded by the file: each opcode pushes at most one value, containers are never
hashed or compared (dict keys that are not scalars become their rendered text), and the
walks over the result elsewhere are iterative or depth-capped.
"""

from __future__ import annotations

import io
import itertools
import pickletools
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from ...spans import Report, Span, short_repr
from .frames import LoaderReading
from .policy import classify_normalized, normalize, tolerated_when_invoked

# Beyond these, opcodes are no longer emulated / labelled (a finding says so).
MAX_OPCODES = 5_000_000
MAX_OPCODE_SPANS = 250_000  # about 270 bytes each with their paths: ~70 MB at most
# Bytes arguments at least this long are kept as a Blob (offset, length), not copied.
BLOB_MIN = 4096
# Pickles larger than this are decoded through a buffered window over the source.
WHOLE_READ_MAX = 64 * 1024 * 1024
MAX_LINE = 1 << 20  # a text opcode's line (protocol 0) without a newline stops here
MAX_CALLS_KEPT = 5  # calls remembered per import, for messages
# Imports kept with their detail (a `Global` each, in `PickleRun.imports`). Past this, every
# import is still judged by name, but only what changes the verdict is kept (see `_past_cap`):
# a file can name millions of distinct callables in 30 MB.
MAX_IMPORTS_KEPT = 100_000
MAX_PAST_CAP_KEPT = 1_000  # errors (and the first warning) past the cap still kept in full
MAX_SHARED = 4096  # allowed / tolerated names past the cap: one shared Global per name
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


Reducer = Callable[["PickleMachine", tuple, int], Any]


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


# -- reading through a source ---------------------------------------------------------------

class _Window:
    """A read-only file over `source.read` for pickles too large to read whole: a 1 MiB read
    buffer for opcodes, and large arguments as zero-copy views of a local file's map."""

    CHUNK = 1 << 20

    def __init__(self, source, start: int, end: int) -> None:
        self._source, self._start, self._end, self._pos = source, start, end, start
        self._buf, self._buf_at = b"", start
        self._map = getattr(source, "buffer", None)

    def tell(self) -> int:
        return self._pos - self._start

    def read(self, n: int = -1):
        if n is None or n < 0:
            n = self._end - self._pos
        n = max(0, min(n, self._end - self._pos))
        off = self._pos - self._buf_at
        if 0 <= off and off + n <= len(self._buf):
            data = self._buf[off:off + n]
        elif n > self.CHUNK:
            data = self._map[self._pos:self._pos + n] if self._map is not None else \
                bytes(self._source.read(self._pos, n))
        else:
            self._refill()
            data = self._buf[:n]
        self._pos += len(data)
        return data

    def _refill(self) -> None:
        self._buf_at = self._pos
        self._buf = bytes(self._source.read(self._pos, min(self.CHUNK, self._end - self._pos)))

    def readline(self, limit: int = -1) -> bytes:
        # Text opcodes end at a newline, nearly always inside the buffer (reading a fresh
        # MAX_LINE bytes for each one copied a megabyte per opcode); a line longer than the
        # buffer is read on its own, up to MAX_LINE bytes when it has no newline.
        off = self._pos - self._buf_at
        i = self._buf.find(b"\n", off) if off >= 0 else -1
        if i < 0:
            self._refill()
            off, i = 0, self._buf.find(b"\n")
        if i >= 0:
            line = self._buf[off:i + 1]
        else:
            chunk = bytes(self._source.read(self._pos, min(MAX_LINE, self._end - self._pos)))
            i = chunk.find(b"\n")
            line = chunk if i < 0 else chunk[:i + 1]
        self._pos += len(line)
        return line


def open_region(source, start: int, length: int):
    """A file-like object over bytes [start, start + length) of a source."""
    if length <= WHOLE_READ_MAX:
        return io.BytesIO(bytes(source.read(start, length)))
    return _Window(source, start, start + length)


# -- the machine ----------------------------------------------------------------------------

class _Stop(Exception):
    pass


NO_FRAME = 1 << 62


_MISSING = object()


class PickleMachine:
    """Emulates one pickle. `label` prefixes span paths ("data.pkl > op 12 > BINUNICODE")."""

    def __init__(self, report: Report, label: str, reducers: dict[str, Reducer] | None = None,
                 persistent_load: Callable[[PickleMachine, Any, int], Any] | None = None,
                 spans: bool = True, watch: frozenset[str] = frozenset()) -> None:
        self.report = report
        self.watch = watch  # dotted names whose calls the caller wants to inspect
        self.spans = spans
        self.label = label
        self.reducers = dict(BASE_REDUCERS)
        self.reducers.update(reducers or {})
        self.persistent_load = persistent_load
        self.stack: list = []
        self.marks: list[list] = []
        self.memo: dict[int, Any] = {}
        self.base = 0
        self.tell: Callable[[], int] = lambda: 0  # end of the current opcode, relative to base
        self.run_info: PickleRun | None = None
        self._warned: set[str] = set()
        self.work_left = 0  # elements and bytes reconstructors may still copy (set by run)
        self.frame_end = NO_FRAME  # end of the current FRAME, relative to base
        self.length = 0
        self.loader_view = False  # this machine reads through LoaderReading
        # The pickle's bytes run to the end of a file that may be cut short: running out of
        # bytes is then `PickleRun.cut_short`, which the caller reports once for the file.
        self.at_file_end = False
        self._kept_past_cap = 0  # imports past the cap kept in full (errors, first warning)
        self._shared: dict[str, Global] = {}  # allowed / tolerated names past the cap
        self._flyweights: dict[str, Global] = {}  # severity -> stand-in once nothing is kept

    # Findings that can repeat many times are reported once per machine.
    def once(self, code: str, message: str, offset: int, length: int = 1) -> None:
        if code not in self._warned:
            self._warned.add(code)
            self.report.add(code, message, offset, length)

    def run(self, source, start: int, length: int, loader_view: bool = False) -> PickleRun:
        """Walk the pickle starting at absolute `start`; never reads past start + length.
        With `loader_view`, read the bytes as the C unpickler does (see LoaderReading)."""
        self.base = start
        self.length = length
        self.work_left = 2 * length + (1 << 20)
        run = self.run_info = PickleRun(start, start)
        f = open_region(source, start, length)
        loader = None
        if loader_view:
            f = loader = LoaderReading(f)
            self.loader_view = True
        self.tell = tell = f.tell
        rep, label, base = self.report, self.label, start
        add_span, file, dispatch = rep.spans.append, rep.file, _DISPATCH
        span_limit = MAX_OPCODE_SPANS if self.spans else 0
        check_at = min(span_limit, MAX_OPCODES)  # the one comparison the hot loop makes
        count = end = 0
        try:
            for op, arg, pos in pickletools.genops(f):
                end = tell()
                if end > self.frame_end:
                    self._left_frame(pos, end, op.name)
                if count >= check_at:
                    if count >= MAX_OPCODES:
                        rep.warning("pickle_too_long", f"The pickle has more than {MAX_OPCODES} "
                                    "opcodes; the rest is not checked, so it may hide imports.",
                                    base + pos, 1)
                        run.failed = True
                        break
                    if count == span_limit and self.spans:
                        rep.info("opcode_spans_capped", f"Only the first {MAX_OPCODE_SPANS} opcodes "
                                 "are labelled in the hexdump.", base + pos, 1)
                    check_at = MAX_OPCODES
                handler, name, names_import = dispatch[op]
                if count < span_limit:
                    if arg is None:
                        value = None
                    elif names_import:
                        value = arg.replace(" ", ".", 1) if isinstance(arg, str) else None
                    elif type(arg) is int and -(1 << 64) < arg < (1 << 64):
                        value = str(arg)
                    else:
                        value = op_value(arg)
                    add_span(Span(base + pos, end - pos, "opcode", f"{label} > op {count} > {name}",
                                  file, value))
                count += 1
                try:
                    handler(self, arg, pos, op)
                except _Stop:
                    run.stopped = True
                    break
                except Exception as e:  # an emulation gap must never become a traceback
                    self.once("pickle_emulation", f"Could not follow {name} at byte {base + pos} "
                              f"({type(e).__name__}: {short_repr(str(e), 80)}); the structure "
                              "after it may be incomplete.", base + pos, 1)
                if loader is not None:
                    if name == "FRAME" and isinstance(arg, int):
                        loader.load_frame(arg)
                    loader.at_op = True
        except Exception as e:  # genops raises ValueError, struct.error, UnicodeDecodeError...
            self._decode_error(e, base, end, length, count)
            run.failed = True
        run.opcode_count = count
        run.end = base + end
        if run.past_cap:
            self._report_cap(run)
        if run.irregular_frames and not loader_view:
            self._compare_loader_view(source, start, length, run)
        return run

    def _compare_loader_view(self, source, start: int, length: int, run: PickleRun) -> None:
        """Read the pickle again as torch.load's unpickler does; what only it sees is judged too."""
        if length > WHOLE_READ_MAX:
            self.report.warning("pickle_frame_unchecked", "The frames of this pickle are "
                                "irregular, but it is too large to read a second time the way "
                                "the loader does; imports only the loader sees are not checked.",
                                start, 1)
            return
        other = PickleMachine(Report(self.report.file), self.label, self.reducers, spans=False)
        seen = other.run(source, start, length, loader_view=True)
        known = {(g.offset, g.dotted) for g in run.imports}
        hidden = [g for g in seen.imports if (g.offset, g.dotted) not in known]
        if not hidden:
            return
        run.imports.extend(hidden)
        names = ", ".join(f"{g.computed or g.dotted} at byte {g.offset}" for g in hidden[:5])
        self.report.error("pickle_frame_differential", f"Read the way torch.load and "
                          f"pickle.load(BytesIO) read it, this pickle imports {names}, which a "
                          "reader that walks the opcodes straight through (pickletools, most "
                          "scanners) never sees: the frames are built to hide them.",
                          hidden[0].offset, 1)

    def _left_frame(self, pos: int, end: int, name: str) -> None:
        """An opcode ends past the current frame: fine when it starts at the frame's end."""
        frame_end, self.frame_end = self.frame_end, NO_FRAME
        if pos < frame_end and not self.loader_view:
            self.run_info.irregular_frames = True
            self.once("pickle_frame_overrun", f"{name} at byte {self.base + pos} runs past the end "
                      f"of its FRAME (byte {self.base + frame_end}) to byte {self.base + end}. "
                      "pickle.py refuses this; CPython's unpickler, reading from a file without "
                      "peek() as torch.load does, drops the rest of the frame and reads on after "
                      "it, so a scanner that reads straight through sees other opcodes than the "
                      "loader runs.", self.base + pos, end - pos)

    def _decode_error(self, e: Exception, base: int, at: int, length: int, count: int) -> None:
        """Turn a genops failure into a finding; `at` is where the failing opcode starts."""
        text = str(e)
        if self.at_file_end and any(w in text for w in ("exhausted before seeing STOP", "remain",
                                                        "but only", "newline", "not enough data")):
            self.run_info.cut_short = True
        elif "exhausted before seeing STOP" in text:
            self.report.error("pickle_truncated", f"The pickle ends at byte {base + length} after "
                              f"{count} opcodes without a STOP opcode: it is truncated.",
                              base + length, 0)
        elif "unknown" in text and "opcode" in text:
            code = text.split("opcode ", 1)[-1].split(" unknown")[0]
            self.report.error("pickle_unknown_opcode", f"Byte {base + at} holds {code}, which is not "
                              "a pickle opcode; the unpickler stops here with an error.", base + at, 1)
        elif "remain" in text or "but only" in text or "newline" in text:
            self.report.error("pickle_truncated", f"The opcode at byte {base + at} needs more bytes "
                              f"than the pickle has ({short_repr(text, 100)}): it is truncated.",
                              base + at, max(0, length - at))
        else:
            self.report.error("pickle_bad_opcode", f"The argument of the opcode at byte {base + at} "
                              f"cannot be decoded: {short_repr(text, 120)}.", base + at,
                              max(1, min(16, length - at)))

    # -- stack helpers --

    def pop(self, pos: int) -> Any:
        if self.stack:
            return self.stack.pop()
        self.once("pickle_stack_underflow", f"An opcode at byte {self.base + pos} takes a value from "
                  "an empty stack; the unpickler fails here.", self.base + pos)
        return Unknown("empty stack")

    def pop_mark(self, pos: int) -> list:
        items = self.stack
        if self.marks:
            self.stack = self.marks.pop()
        else:
            self.once("pickle_no_mark", f"An opcode at byte {self.base + pos} needs a MARK but none "
                      "is open; the unpickler fails here.", self.base + pos)
            self.stack = []
        return items

    def top(self, pos: int) -> Any:
        if self.stack:
            return self.stack[-1]
        self.once("pickle_stack_underflow", f"An opcode at byte {self.base + pos} needs a value on "
                  "an empty stack; the unpickler fails here.", self.base + pos)
        return Unknown("empty stack")

    # -- imports and calls --

    def make_global(self, module: Any, name: Any, pos: int, opcode: str) -> Global:
        if len(self.run_info.imports) >= MAX_IMPORTS_KEPT:
            return self._past_cap(module, name, pos, opcode)
        if isinstance(module, str) and isinstance(name, str):
            m, n = normalize(module, name)
            sev, why = classify_normalized(m, n)
            g = Global(module, name, self.base + pos, opcode, sev, why, dotted=f"{m}.{n}")
        else:
            text = f"{render(module, 2)}.{render(name, 2)}"
            g = Global(render(module, 1, 80), render(name, 1, 80), self.base + pos, opcode, "error",
                       "imports a name computed while loading, to hide what it imports",
                       computed=text)
        g.label = self.label
        self.run_info.imports.append(g)
        return g

    def _past_cap(self, module: Any, name: Any, pos: int, opcode: str) -> Global:
        """An import past MAX_IMPORTS_KEPT: judged by its name like any other, then kept only
        if it changes the verdict, so memory stays bounded by the cap, not by the file:
        - a denied name, and the first name outside the allow-list: kept in full, once per
          name (up to MAX_PAST_CAP_KEPT names; past that the verdict is already "dangerous");
        - any other name: one Global shared by every import of that name (up to MAX_SHARED
          names, then one stand-in), kept only once the pickle calls it (`invoke`), when an
          unknown name becomes an error with its name and arguments."""
        run = self.run_info
        if isinstance(module, str) and isinstance(name, str):
            m, n = normalize(module, name)
            dotted = f"{m}.{n}"
            sev, why = classify_normalized(m, n)
        else:
            m, n = render(module, 1, 80), render(name, 1, 80)
            dotted, sev = f"{render(module, 2)}.{render(name, 2)}", "error"
            why = "imports a name computed while loading, to hide what it imports"
        run.past_cap[sev] = run.past_cap.get(sev, 0) + 1
        if sev == "error" and dotted in self._shared:  # a denied name kept already
            return self._shared[dotted]
        if (sev == "error" or (sev == "warning" and run.past_cap[sev] == 1)) and \
                self._kept_past_cap < MAX_PAST_CAP_KEPT:
            self._kept_past_cap += 1
            g = Global(m, n, self.base + pos, opcode, sev, why, dotted=dotted, label=self.label,
                       computed=None if sev != "error" or isinstance(module, str) and
                       isinstance(name, str) else dotted)
            run.imports.append(g)
            if sev == "error" and len(self._shared) < MAX_SHARED:
                self._shared[dotted] = g  # its repeats share it: the budget is for new names
            return g
        if sev != "error":
            g = self._shared.get(dotted)
            if g is None and len(self._shared) < MAX_SHARED:
                g = self._shared[dotted] = Global(m, n, self.base + pos, opcode, sev, why,
                                                  dotted=dotted, label=self.label,
                                                  past_cap=sev != "ok")
            if g is not None:
                return g
        fly = self._flyweights.get(sev)
        if fly is None:
            fly = self._flyweights[sev] = Global(
                "", "", self.base + pos, opcode, sev, why, label=self.label, past_cap=True,
                dotted=f"<one of the imports past the first {MAX_IMPORTS_KEPT:,}>")
        return fly

    def _report_cap(self, run: PickleRun) -> None:
        total = sum(run.past_cap.values())
        parts = ", ".join(f"{run.past_cap[s]:,} {w}" for s, w in
                          (("error", "denied"), ("warning", "outside the allow-list"),
                           ("ok", "allowed")) if run.past_cap.get(s))
        self.report.warning("pickle_imports_capped", f"The pickle makes {total:,} more imports "
                            f"than the {MAX_IMPORTS_KEPT:,} kept with their detail ({parts}). Each "
                            "was judged by its name and every one that is denied or called is "
                            f"reported (up to {MAX_PAST_CAP_KEPT:,}); the others are only counted "
                            "and are not listed among the imports.", run.start, 1)

    def apply(self, func: Any, args: Any, pos: int, opcode: str, kwargs: Any = None) -> Any:
        if isinstance(func, Global) and func.past_cap:  # a shared Global: record the first
            self.invoke(func, pos, opcode)  # calls, but hold no Call per import in memory
            if func.calls is None:
                func.calls = []
            if len(func.calls) < MAX_CALLS_KEPT:
                func.calls.append((func, args, self.base + pos, opcode))
            return _CALL_PAST_CAP
        root = maker(func)  # getattr(__import__('os'), 'system')(...): credit the import used
        if isinstance(root, Global):
            if root.calls is None:
                root.calls = []
            if len(root.calls) < MAX_CALLS_KEPT:
                root.calls.append((func, args, self.base + pos, opcode))
        if isinstance(func, Call):  # calling what a call returned or built
            self.invoke(func, pos, opcode)
        if isinstance(func, Global):
            self.invoke(func, pos, opcode, builds=opcode in ("NEWOBJ", "NEWOBJ_EX"))
            if isinstance(args, tuple):
                slot = CALLED_ARGUMENTS.get(func.dotted)
                if slot is not None and len(args) > slot:
                    self.invoke(args[slot], pos, opcode)
                slot = BUILT_ARGUMENTS.get(func.dotted)
                if slot is not None and len(args) > slot:
                    self.invoke(args[slot], pos, opcode, builds=_plain_build(func, args))
        if isinstance(func, Global) and isinstance(args, tuple) and kwargs is None:
            reducer = self.reducers.get(func.dotted)
            if reducer is not None and self._afford(args, pos):
                try:
                    out = reducer(self, args, pos)
                except Exception:
                    out = NotImplemented
                if out is not NotImplemented:
                    return out
        call = Call(func, args, self.base + pos, opcode, kwargs)
        if isinstance(func, Global) and func.dotted in self.watch:
            self.run_info.watched.append(call)
        return call

    def invoke(self, target: Any, pos: int, opcode: str, builds: bool = False) -> None:
        """Loading calls `target` (a function, a class's constructor or its __setstate__);
        `builds`: it only makes an object of the class as pickle saves any object (NEWOBJ,
        a reconstructor), which `report.judge_calls` may let pass as the author's class.
        A `Call` target is what a call returned: every import it may be is called (strictly:
        a checkpoint never calls, or builds from, a value a call returned)."""
        if isinstance(target, Call):
            for g in result_sources(target):
                self.invoke(g, pos, opcode)
            return
        if isinstance(target, Global) and not builds:
            target.called = True
        if isinstance(target, Global) and target.invoked is None:
            target.invoked = (opcode, self.base + pos)
            if target.past_cap and target.severity == "warning" and \
                    not tolerated_when_invoked(target.dotted):
                # an unknown name past the cap that the pickle calls: keep it, it is an error
                # (at most MAX_SHARED of them and the stand-in: no budget to share with the
                # denied names, so calling junk cannot push a denied one out)
                self.run_info.imports.append(target)

    def _afford(self, args: tuple, pos: int) -> bool:
        """Reconstructors copy their arguments. Through the memo a file can pass one big value
        a million times, so copies are charged to a budget of twice the pickle's bytes; past
        it, calls stay inert `Call`s."""
        self.work_left -= len(args)
        if self.work_left >= 0:
            self.work_left -= sum(len(a) for a in args[:8] if isinstance(a, _SIZED))
        if self.work_left >= 0:
            return True
        self.once("pickle_work_capped", f"The call at byte {self.base + pos} and those after it "
                  "are not reconstructed: the pickle passes the same large values to them over "
                  "and over, more work than its size accounts for.", self.base + pos, 1)
        return False


_SIZED = (str, bytes, bytearray, list, tuple, dict)
_CALL_PAST_CAP = Unknown("a call of an import past the cap")
# Allowed reconstructors that call what they are given (dotted name -> argument index):
# copyreg._reconstructor(cls, base, state) runs base.__new__(cls, state) and, unless base is
# object, base.__init__(obj, state); torch's _rebuild_from_type_v2(func, new_type, args, state)
# runs func(*args).
CALLED_ARGUMENTS = {"copyreg._reconstructor": 1, "torch._tensor._rebuild_from_type_v2": 0}
# ... and those that make an object of a class they are given, as pickle saves any object
# (no __init__; the state goes to its __setstate__): the reconstructor's cls (protocols 0/1),
# the tensor subclass of _rebuild_from_type_v2 (as_subclass) and of _rebuild_wrapper_subclass.
BUILT_ARGUMENTS = {"copyreg._reconstructor": 0, "torch._tensor._rebuild_from_type_v2": 1,
                   "torch._utils._rebuild_wrapper_subclass": 0}


def _plain_build(func: Global, args: tuple) -> bool:
    """Whether a BUILT_ARGUMENTS class is only built. copyreg._reconstructor is so only on
    object (object.__new__(cls), then the state); on any other base, base.__new__(cls, state)
    and base.__init__(obj, state) run with the file's state: counted as a call, strictly."""
    if func.dotted != "copyreg._reconstructor":
        return True
    base = args[1] if len(args) > 1 else None
    return isinstance(base, Global) and base.dotted == "builtins.object"


MAX_SOURCES_WALKED = 64
# Allowed builtins whose result may be one of their arguments: min([f]), max([f]), sum([], f).
# TorchScript's list and type-tag helpers return their first argument, too.
RETURNS_AN_ARGUMENT = frozenset({"builtins.min", "builtins.max", "builtins.sum",
                                 *(f"torch.jit._pickle.{n}" for n in (
                                     "build_intlist", "build_tensorlist", "build_doublelist",
                                     "build_boollist", "build_tensor_from_id",
                                     "restore_type_tag"))})


def result_sources(call: Call) -> list[Global]:
    """The imports a pickle may be calling when it calls the result of `call`: the class the
    result is an object of, or the function that returned it (its `maker`), and every import
    among the call's arguments, which the result may be (max([f]) is f, partial(f) calls f).
    A checkpoint never calls a result; a pickle that does is judged by all of them."""
    found, todo, seen = [], [(call, 0)], 0
    while todo and seen < MAX_SOURCES_WALKED:
        value, depth = todo.pop()
        seen += 1
        if isinstance(value, Global):
            found.append(value)
        elif isinstance(value, Call):
            todo.append((value.func, depth))
            if depth < 3 and isinstance(value.args, tuple):
                todo.extend((a, depth + 1) for a in value.args[:16])
        elif depth < 3 and isinstance(value, (list, tuple)):
            todo.extend((a, depth + 1) for a in value[:16])
        elif depth < 3 and isinstance(value, EmuSet):
            todo.extend((a, depth + 1) for a in value.items[:16])
    root = maker(call)
    if isinstance(root, Global) and root not in found:
        found.append(root)
    return found


def maker(value: Any) -> Any:
    """The import a value comes from: the function that returned it or the class it is an object
    of (through a reconstructor), following calls of calls a few levels deep."""
    for _ in range(8):
        if not isinstance(value, Call):
            return value
        func, args = value.func, value.args
        slot = BUILT_ARGUMENTS.get(func.dotted) if isinstance(func, Global) else None
        if slot is not None and isinstance(args, tuple) and len(args) > slot:
            return args[slot]
        value = func
    return value


# -- opcode handlers ------------------------------------------------------------------------

def _push_arg(m: PickleMachine, arg, pos, op):
    if isinstance(arg, (bytes, bytearray, memoryview)):
        # The payload ends where the opcode ends; its start is the end minus its length.
        at = m.base + m.tell() - len(arg)
        if len(arg) >= BLOB_MIN:
            m.stack.append(Blob(at, len(arg)))
            return
        if len(arg) >= 2:  # shorter ones may be shared singletons
            m.run_info.byte_offsets[id(arg)] = (arg, at)
    m.stack.append(arg)


def _push_const(value):
    def h(m, arg, pos, op):
        m.stack.append(value() if callable(value) else value)
    return h


def _mark(m, arg, pos, op):
    m.marks.append(m.stack)
    m.stack = []


# Pop the mark before touching m.stack: popping it swaps m.stack for the outer list.
def _list(m, arg, pos, op):
    items = list(m.pop_mark(pos))
    m.stack.append(items)


def _tuple(m, arg, pos, op):
    items = tuple(m.pop_mark(pos))
    m.stack.append(items)


def _tuple_n(n):
    def h(m, arg, pos, op):
        stack = m.stack
        if len(stack) >= n:
            items = tuple(stack[-n:])
            del stack[-n:]
        else:
            items = tuple(reversed([m.pop(pos) for _ in range(n)]))
        m.stack.append(items)
    return h


def _dict(m, arg, pos, op):
    items = m.pop_mark(pos)
    d = {}
    for i in range(0, len(items) - 1, 2):
        d[dict_key(items[i])] = items[i + 1]
    m.stack.append(d)


def _set_items(target, pairs, m, pos):
    if isinstance(target, dict):
        for k, v in pairs:
            target[dict_key(k)] = v
    elif isinstance(target, Call):
        if target.setitems is None:
            target.setitems = []
        target.setitems.extend(pairs)
    elif not isinstance(target, Unknown):
        m.once("pickle_setitem_target", f"SETITEM at byte {m.base + pos} targets "
               f"{type(target).__name__}, not a dict; the unpickler fails here.", m.base + pos)


def _setitem(m, arg, pos, op):
    v = m.pop(pos)
    k = m.pop(pos)
    _set_items(m.top(pos), [(k, v)], m, pos)


def _setitems(m, arg, pos, op):
    items = m.pop_mark(pos)
    _set_items(m.top(pos), list(zip(items[::2], items[1::2])), m, pos)


def _append_items(target, items, m, pos):
    if isinstance(target, list):
        target.extend(items)
    elif isinstance(target, Call):
        if target.items is None:
            target.items = []
        target.items.extend(items)
    elif not isinstance(target, Unknown):
        m.once("pickle_append_target", f"APPEND at byte {m.base + pos} targets "
               f"{type(target).__name__}, not a list; the unpickler fails here.", m.base + pos)


def _append(m, arg, pos, op):
    v = m.pop(pos)
    _append_items(m.top(pos), [v], m, pos)


def _appends(m, arg, pos, op):
    items = m.pop_mark(pos)
    _append_items(m.top(pos), items, m, pos)


def _additems(m, arg, pos, op):
    items = m.pop_mark(pos)
    target = m.top(pos)
    if isinstance(target, EmuSet):
        target.items.extend(items)


def _frozenset(m, arg, pos, op):
    items = list(m.pop_mark(pos))
    m.stack.append(EmuSet(items, True))


def _pop(m, arg, pos, op):
    if m.stack or not m.marks:
        m.pop(pos)
    else:
        m.pop_mark(pos)


def _dup(m, arg, pos, op):
    m.stack.append(m.top(pos))


def _pop_mark(m, arg, pos, op):
    m.pop_mark(pos)


def _get(m, arg, pos, op):
    value = m.memo.get(arg, _MISSING)
    if value is not _MISSING:
        m.stack.append(value)
    else:
        m.report.error("pickle_memo_missing", f"{op.name} at byte {m.base + pos} reads memo slot "
                       f"{arg}, which was never set; the unpickler fails here.", m.base + pos, 1)
        m.stack.append(Unknown(f"memo {arg}"))


def _put(m, arg, pos, op):
    m.memo[arg] = m.stack[-1] if m.stack else m.top(pos)


def _memoize(m, arg, pos, op):
    m.memo[len(m.memo)] = m.stack[-1] if m.stack else m.top(pos)


def _global(m, arg, pos, op):
    module, _, name = (arg or "").partition(" ")
    m.stack.append(m.make_global(module, name, pos, "GLOBAL"))


def _stack_global(m, arg, pos, op):
    name = m.pop(pos)
    module = m.pop(pos)
    m.stack.append(m.make_global(module, name, pos, "STACK_GLOBAL"))


def _inst(m, arg, pos, op):
    module, _, name = (arg or "").partition(" ")
    args = tuple(m.pop_mark(pos))
    g = m.make_global(module, name, pos, "INST")
    m.stack.append(m.apply(g, args, pos, "INST"))


def _obj(m, arg, pos, op):
    items = m.pop_mark(pos)
    if not items:
        m.stack.append(Unknown("OBJ without a class"))
        return
    m.stack.append(m.apply(items[0], tuple(items[1:]), pos, "OBJ"))


def _ext(m, arg, pos, op):
    g = Global("copyreg extension", str(arg), m.base + pos, op.name, "warning",
               "an extension code that copyreg's registry maps to an import at load time")
    g.computed = f"<extension code {arg}>"
    m.run_info.imports.append(g)
    m.stack.append(g)


def _reduce(m, arg, pos, op):
    args = m.pop(pos)
    func = m.pop(pos)
    m.stack.append(m.apply(func, args, pos, "REDUCE"))


def _newobj(m, arg, pos, op):
    args = m.pop(pos)
    cls = m.pop(pos)
    m.stack.append(m.apply(cls, args, pos, "NEWOBJ"))


def _newobj_ex(m, arg, pos, op):
    kwargs = m.pop(pos)
    args = m.pop(pos)
    cls = m.pop(pos)
    m.stack.append(m.apply(cls, args, pos, "NEWOBJ_EX", kwargs if kwargs else None))


def _build(m, arg, pos, op):
    state = m.pop(pos)
    target = m.top(pos)
    if isinstance(target, Call):
        # BUILD hands the object its state (its class's __setstate__): part of building it, and
        # its class was judged when it was made (REDUCE, NEWOBJ, a reconstructor's cls). Unless
        # the call returns one of its arguments (max([cls])): then BUILD may target a class.
        if isinstance(target.func, Global) and target.func.dotted in RETURNS_AN_ARGUMENT:
            m.invoke(target, pos, "BUILD")
        target.state = state
    elif isinstance(target, Global):  # BUILD on a class itself calls its __setstate__
        m.invoke(target, pos, "BUILD")  # pickle never saves an object so: a call
    elif hasattr(target, "build"):
        target.build(state)


def _persid(m, arg, pos, op):
    pid = m.pop(pos) if op.name == "BINPERSID" else arg
    if m.persistent_load is None:
        m.once("pickle_persistent_id", f"The pickle refers to outside objects by persistent id "
               f"(first: {render(pid)} at byte {m.base + pos}); only a loader that knows them, "
               "such as torch.load, can resolve them.", m.base + pos, 1)
        m.stack.append(PersistentRef(pid, m.base + pos))
    else:
        m.stack.append(m.persistent_load(m, pid, m.base + pos))


def _proto(m, arg, pos, op):
    if m.run_info.protocol is None:
        m.run_info.protocol = arg


def _stop(m, arg, pos, op):
    m.run_info.value = m.pop(pos)
    raise _Stop


def _buffer(m, arg, pos, op):
    if op.name == "NEXT_BUFFER":
        m.once("pickle_out_of_band", f"NEXT_BUFFER at byte {m.base + pos} takes a buffer passed "
               "beside the pickle (protocol 5 out-of-band data), which this file does not hold.",
               m.base + pos, 1)
        m.stack.append(Unknown("out-of-band buffer"))


def _frame(m, arg, pos, op):
    end = m.tell()
    if m.frame_end != NO_FRAME and pos < m.frame_end and not m.loader_view:
        m.run_info.irregular_frames = True
        m.once("pickle_frame_nested", f"A FRAME starts at byte {m.base + pos}, inside the frame "
               f"that ends at byte {m.base + m.frame_end}. pickle.py refuses this; CPython's "
               "unpickler may drop the rest of the outer frame, so scanners and loaders read "
               "different opcodes.", m.base + pos, end - pos)
    if isinstance(arg, int) and end + arg > m.length and not m.loader_view and \
            not m.at_file_end:
        m.once("pickle_frame_past_end", f"The FRAME at byte {m.base + pos} claims {arg} bytes, "
               f"but only {m.length - end} follow it; every unpickler stops here with an error.",
               m.base + pos, end - pos)
    m.frame_end = end + arg if isinstance(arg, int) and arg >= 0 else NO_FRAME


def _nothing(m, arg, pos, op):
    pass


def _handlers_table() -> dict[str, Callable]:
    table: dict[str, Callable] = {}
    for name in ("INT", "BININT", "BININT1", "BININT2", "LONG", "LONG1", "LONG4", "STRING",
                 "BINSTRING", "SHORT_BINSTRING", "UNICODE", "SHORT_BINUNICODE", "BINUNICODE",
                 "BINUNICODE8", "FLOAT", "BINFLOAT", "BINBYTES", "SHORT_BINBYTES", "BINBYTES8",
                 "BYTEARRAY8"):
        table[name] = _push_arg
    table.update({
        "NONE": _push_const(None), "NEWTRUE": _push_const(True), "NEWFALSE": _push_const(False),
        "EMPTY_LIST": _push_const(list), "EMPTY_TUPLE": _push_const(()),
        "EMPTY_DICT": _push_const(dict), "EMPTY_SET": _push_const(lambda: EmuSet([])),
        "MARK": _mark, "LIST": _list, "TUPLE": _tuple, "TUPLE1": _tuple_n(1),
        "TUPLE2": _tuple_n(2), "TUPLE3": _tuple_n(3), "DICT": _dict, "SETITEM": _setitem,
        "SETITEMS": _setitems, "APPEND": _append, "APPENDS": _appends, "ADDITEMS": _additems,
        "FROZENSET": _frozenset, "POP": _pop, "DUP": _dup, "POP_MARK": _pop_mark,
        "GET": _get, "BINGET": _get, "LONG_BINGET": _get, "PUT": _put, "BINPUT": _put,
        "LONG_BINPUT": _put, "MEMOIZE": _memoize, "GLOBAL": _global, "STACK_GLOBAL": _stack_global,
        "INST": _inst, "OBJ": _obj, "EXT1": _ext, "EXT2": _ext, "EXT4": _ext, "REDUCE": _reduce,
        "NEWOBJ": _newobj, "NEWOBJ_EX": _newobj_ex, "BUILD": _build, "PERSID": _persid,
        "BINPERSID": _persid, "PROTO": _proto, "STOP": _stop, "FRAME": _frame,
        "NEXT_BUFFER": _buffer, "READONLY_BUFFER": _buffer,
    })
    return table


PickleMachine._handlers = _handlers_table()
# OpcodeInfo -> (handler, name, whether its argument names an import): one lookup per opcode.
_DISPATCH = {op: (PickleMachine._handlers[op.name], op.name, op.name in ("GLOBAL", "INST"))
             for op in pickletools.opcodes}


# -- reconstructors of plain data -----------------------------------------------------------

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


BASE_REDUCERS: dict[str, Reducer] = {
    "collections.OrderedDict": _ordered_dict,
    "builtins.set": _set(False),
    "builtins.frozenset": _set(True),
    "_codecs.encode": _codecs_encode,
    "builtins.bytearray": _bytearray,
}
