"""An opcode-level pickle interpreter that rebuilds structure without running anything.

`pickletools.genops` decodes each opcode and its argument; this module emulates the
unpickler's stack, mark stack and memo with inert stand-ins: an import becomes a `Global`
(module and name, never imported), a call becomes a `Call` (callee and arguments, never
called) unless a reconstructor for plain data is registered for it (OrderedDict, set,
`_codecs.encode`, and the torch ones that `pytorch.py` adds). Every opcode becomes a span.

Work is bounded by the file: each opcode pushes at most one value, containers are never
hashed or compared (dict keys that are not scalars become their rendered text), and the
walks over the result elsewhere are iterative or depth-capped.

The interpreter is split by job: values.py holds the inert values and their rendering (what
the readers beside it walk), imports.py judges imports and calls, opcodes.py has one handler
per opcode, reducers.py the reconstructors of plain data, region.py reads the bytes.
"""

from __future__ import annotations

import pickletools
from collections.abc import Callable
from typing import Any

from ...spans import Report, Span, short_repr
from ..detect_pickle import PUT_OPS, STRING_OPS
from .frames import LoaderReading
from .imports import ImportTracking
from .opcodes import DISPATCH, NO_FRAME, Stop
from .reducers import BASE_REDUCERS
from .region import WHOLE_READ_MAX, open_region
from .values import Global, PickleRun, Unknown, op_value

# Beyond these, opcodes are no longer emulated / labelled (a finding says so).
MAX_OPCODES = 5_000_000
MAX_OPCODE_SPANS = 250_000  # about 270 bytes each with their paths: ~70 MB at most
MAX_OPCODES_SCANNED = 500_000_000  # past MAX_OPCODES, opcodes walked for their imports only
_MEMO_OPS = PUT_OPS | {"MEMOIZE", "FRAME"}  # what leaves the strings before STACK_GLOBAL in place

Reducer = Callable[["PickleMachine", tuple, int], Any]


class PickleMachine(ImportTracking):
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

    def run(self, source, start: int, length: int, loader_view: bool = False,
            open_ended: bool = False) -> PickleRun:
        """Walk the pickle starting at absolute `start`; never reads past start + length.
        With `loader_view`, read the bytes as the C unpickler does (see LoaderReading);
        `open_ended`: the pickle ends somewhere before start + length (read as it goes)."""
        self.base = start
        self.length = length
        self.work_left = 2 * length + (1 << 20)
        run = self.run_info = PickleRun(start, start)
        f = open_region(source, start, length, open_ended)
        loader = None
        if loader_view:
            f = loader = LoaderReading(f)
            self.loader_view = True
        self.tell = tell = f.tell
        rep, label, base = self.report, self.label, start
        add_span, file, dispatch = rep.spans.append, rep.file, DISPATCH
        span_limit = MAX_OPCODE_SPANS if self.spans else 0
        check_at = min(span_limit, MAX_OPCODES)  # the one comparison the hot loop makes
        count = end = 0
        ops = pickletools.genops(f)
        try:
            for op, arg, pos in ops:
                end = tell()
                if end > self.frame_end:
                    self._left_frame(pos, end, op.name)
                if count >= check_at:
                    if count >= MAX_OPCODES:  # the rest: its imports only, at genops' pace
                        count += self._imports_past_cap(op, arg, pos, ops)
                        end = tell()
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
                except Stop:
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
            self._compare_loader_view(source, start, length, run, open_ended)
        return run

    def _imports_past_cap(self, op, arg, pos: int, ops) -> int:
        """Past MAX_OPCODES the stack is no longer emulated, but every import is still judged
        (a payload placed after millions of filler opcodes is what the cap invites): GLOBAL and
        INST name theirs; a STACK_GLOBAL right after two strings takes them, any other one
        imports a name computed while loading (an error). Returns the opcodes walked; past
        MAX_OPCODES_SCANNED a warning says the rest was not read."""
        run = self.run_info
        assert run is not None
        self.report.info("pickle_imports_only", f"The pickle has more than {MAX_OPCODES:,} opcodes; "
                         "past that only its imports are read (a far faster walk), so what it "
                         "builds after this byte is not listed.", self.base + pos, 1)
        strings: list = []  # the strings pushed just before, for STACK_GLOBAL
        count = 0
        while True:
            name = op.name
            if name in ("GLOBAL", "INST"):
                module, _, attr = (arg or "").partition(" ")
                self.make_global(module, attr, pos, name)
            elif name == "STACK_GLOBAL":
                pair = strings if len(strings) == 2 else (Unknown("a value from the stack"),) * 2
                self.make_global(pair[0], pair[1], pos, name)
            elif name == "STOP":
                run.stopped = True
                return count + 1
            if name in STRING_OPS:
                strings = (strings + [arg])[-2:]
            elif name not in _MEMO_OPS:
                strings = []
            count += 1
            if count >= MAX_OPCODES_SCANNED:
                self.report.warning("pickle_too_long", f"The pickle has more than "
                                    f"{MAX_OPCODES + MAX_OPCODES_SCANNED:,} opcodes; the rest is "
                                    "not read, so it may hide imports.", self.base + pos, 1)
                run.failed = True
                return count
            try:
                op, arg, pos = next(ops)
            except StopIteration:
                return count

    def _compare_loader_view(self, source, start: int, length: int, run: PickleRun,
                             open_ended: bool = False) -> None:
        """Read the pickle again as torch.load's unpickler does; what only it sees is judged too."""
        if (run.end - start if open_ended else length) > WHOLE_READ_MAX:
            self.report.warning("pickle_frame_unchecked", "The frames of this pickle are "
                                "irregular, but it is too large to read a second time the way "
                                "the loader does; imports only the loader sees are not checked.",
                                start, 1)
            return
        other = PickleMachine(Report(self.report.file), self.label, self.reducers, spans=False)
        seen = other.run(source, start, length, loader_view=True, open_ended=open_ended)
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
