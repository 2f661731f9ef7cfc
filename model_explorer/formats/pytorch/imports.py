"""How the pickle interpreter records imports and calls: each import judged by its name
(policy.py) and kept with its detail up to a cap, each call credited to the imports it may run,
and calls of plain-data reconstructors handed to them (reducers.py) within a work budget.

`ImportTracking` is the part of `PickleMachine` (vm.py) that does this; the machine's
constructor sets the attributes it uses.
"""

from __future__ import annotations

from typing import Any

from ...spans import Report
from .policy import classify_normalized, normalize, tolerated_when_invoked
from .values import Call, EmuSet, Global, PickleRun, Unknown, render

MAX_CALLS_KEPT = 5  # calls remembered per import, for messages
# Imports kept with their detail (a `Global` each, in `PickleRun.imports`). Past this, every
# import is still judged by name, but only what changes the verdict is kept (see `_past_cap`):
# a file can name millions of distinct callables in 30 MB.
MAX_IMPORTS_KEPT = 100_000
MAX_PAST_CAP_KEPT = 1_000  # errors (and the first warning) past the cap still kept in full
MAX_SHARED = 4096  # allowed / tolerated names past the cap: one shared Global per name


class ImportTracking:
    """Imports and calls of one pickle: the half of `PickleMachine` that judges what it names."""

    # Set by PickleMachine's constructor and run (vm.py); declared here for the type checker.
    report: Report
    watch: frozenset[str]
    label: str
    reducers: dict[str, Any]
    base: int
    work_left: int
    run_info: PickleRun | None
    _kept_past_cap: int
    _shared: dict[str, Global]
    _flyweights: dict[str, Global]

    def once(self, code: str, message: str, offset: int, length: int = 1) -> None:
        raise NotImplementedError  # PickleMachine's: a finding reported once per machine

    @property
    def _run(self) -> PickleRun:
        """The run in progress: imports and calls happen only inside `PickleMachine.run`."""
        assert self.run_info is not None
        return self.run_info

    def make_global(self, module: Any, name: Any, pos: int, opcode: str) -> Global:
        if len(self._run.imports) >= MAX_IMPORTS_KEPT:
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
        self._run.imports.append(g)
        return g

    def _past_cap(self, module: Any, name: Any, pos: int, opcode: str) -> Global:
        """An import past MAX_IMPORTS_KEPT: judged by its name like any other, then kept only
        if it changes the verdict, so memory stays bounded by the cap, not by the file:
        - a denied name, and the first name outside the allow-list: kept in full, once per
          name (up to MAX_PAST_CAP_KEPT names; past that the verdict is already "dangerous");
        - any other name: one Global shared by every import of that name (up to MAX_SHARED
          names, then one stand-in), kept only once the pickle calls it (`invoke`), when an
          unknown name becomes an error with its name and arguments."""
        run = self._run
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
            shared = self._shared.get(dotted)
            if shared is None and len(self._shared) < MAX_SHARED:
                shared = self._shared[dotted] = Global(m, n, self.base + pos, opcode, sev, why,
                                                       dotted=dotted, label=self.label,
                                                       past_cap=sev != "ok")
            if shared is not None:
                return shared
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
            self._run.watched.append(call)
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
                self._run.imports.append(target)

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
