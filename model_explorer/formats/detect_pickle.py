"""Whether bytes are a pickle, from its opcodes: what `detect` asks of a file that matches no
other format, and what the archive readers ask of each member (issue 43).

The unpickler reads from byte 0 whatever the first opcode is, in any protocol, and runs what a
prefix imports and calls before it meets garbage; so recognition walks the opcodes, not a list
of known first bytes.
"""

from __future__ import annotations

import io
import pickletools
import re
import warnings
from typing import NamedTuple

# Names that say pickle: when their bytes are no pickle, the finding says why (not_a_pickle).
PICKLE_NAMES = (".pkl", ".pickle", ".pt", ".pth", ".bin", ".ckpt", ".joblib", ".p", ".dill")
# A file that matches no other format is a pickle when its opcodes say so (pickle_prefix).
_PICKLE_OPS_WALKED = 256  # opcodes walked before a pickle is taken as one
_SCALAR_PICKLE_MAX = 32  # a file that is one pickled scalar ("N.", "I1\n."), not a text that ends in "."
# What builds containers, imports or calls: a run of scalars alone (text read as opcodes that
# push lines and bytes) is not taken for a pickle.
_STRUCTURE_OPS = frozenset({
    "EMPTY_DICT", "EMPTY_LIST", "EMPTY_TUPLE", "EMPTY_SET", "DICT", "LIST", "TUPLE", "TUPLE1",
    "TUPLE2", "TUPLE3", "FROZENSET", "APPEND", "APPENDS", "SETITEM", "SETITEMS", "ADDITEMS",
    "BUILD", "REDUCE", "NEWOBJ", "NEWOBJ_EX", "OBJ", "INST", "GLOBAL", "STACK_GLOBAL"})
# Opcodes that push a string / store the top of the stack in the memo (the VM reads these too).
STRING_OPS = frozenset({"UNICODE", "STRING", "SHORT_BINUNICODE", "BINUNICODE", "BINUNICODE8",
                         "SHORT_BINSTRING", "BINSTRING"})
PUT_OPS = frozenset({"PUT", "BINPUT", "LONG_BINPUT"})
_GET_OPS = frozenset({"GET", "BINGET", "LONG_BINGET"})
_NAME = re.compile(r"[A-Za-z_][\w.]*")
_GLOBAL_ARG = re.compile(r"[A-Za-z_][\w.]* [A-Za-z_][\w.]*")  # "module name", as genops gives it

class PicklePrefix(NamedTuple):
    """How far a pickle's opcodes parse from byte 0 of `head` (pickle_prefix)."""

    is_pickle: bool
    ops: int = 0  # opcodes that parsed with a consistent stack
    imports: int = 0  # GLOBAL / INST / STACK_GLOBAL among them, with names that can be imported
    stopped: bool = False  # a STOP ended them
    end: int = 0  # where the parsed opcodes end
    why: str = ""  # what stopped the walk, for a finding when the name says pickle


def pickle_prefix(head: bytes, size: int) -> PicklePrefix:
    """Whether the opcodes from byte 0 say pickle, whatever they start with and whatever
    protocol: the unpickler reads the same way, and what a prefix imports and calls it runs
    before it meets garbage or the end of the file (issue 43).

    The opcodes are walked with a model of the stack, the mark stack and the memo (pickletools
    decodes them). A pickle is: a clean STOP (after structure, or ending a tiny file: "N." is
    a pickle of None, "N.B." the start of a text); or a prefix of two or more opcodes that
    imports a dotted name (then garbage after it changes nothing: `pickle.load` has imported
    it); or a lone first GLOBAL the import policy calls dangerous; or a prefix that runs to the
    end of `head` with structure, in a file that goes on. Text that starts with an opcode letter
    ("In this repo", "Version 2", "NOTICE") fails within its first lines: a line is not an
    integer, a stack runs empty, a MARK is missing."""
    with warnings.catch_warnings():  # genops decodes STRING escapes with a DeprecationWarning
        warnings.simplefilter("ignore")
        return _walk(head, size)


def _walk(head: bytes, size: int) -> PicklePrefix:
    stream = io.BytesIO(head)
    stack: list[bool] = []  # True: a value that can name a module or attribute
    marks: list[list[bool]] = []
    memo: dict[object, bool] = {}
    ops = imports = structure = 0
    why, pos, first_import = "", 0, ""
    try:
        for op, arg, at in pickletools.genops(stream):
            name, pos = op.name, at or 0
            if name == "STOP":
                clean = len(stack) == 1 and not marks
                ok = clean and (structure > 0 or pos >= size - 2 and size <= _SCALAR_PICKLE_MAX)
                return PicklePrefix(ok, ops, imports, True, pos + 1,
                                    "" if clean else f"STOP at byte {pos} with the stack unbalanced")
            if name in ("GLOBAL", "INST") and not _GLOBAL_ARG.fullmatch(str(arg)):
                why = f"{name} at byte {pos} names {str(arg)[:40]!r}, not a module and a name"
                break
            step = _stack_step(op, arg, stack, marks, memo)
            if step:
                why = f"{name} at byte {pos} {step}"
                break
            ops += 1
            imports += name in ("GLOBAL", "INST", "STACK_GLOBAL")
            if name == "GLOBAL" and not first_import:
                first_import = str(arg)
            structure += name in _STRUCTURE_OPS
            if ops >= _PICKLE_OPS_WALKED:
                break
        else:
            why = "the bytes end without a STOP"
    except Exception as e:  # noqa: BLE001 - a malformed opcode or argument: the prefix ends here
        why = f"{str(e)[:100]} (after {ops} opcodes that parse)"
        if ops and stream.tell() >= len(head) and size > len(head):
            why = ""  # cut by the end of `head`, not by garbage
    ok = imports > 0 and ops >= 2 or structure > 0 and ops >= 2 and not why \
        or ops >= _PICKLE_OPS_WALKED and structure > 0 or _dangerous(first_import)
    return PicklePrefix(ok, ops, imports, False, pos, why)


def _dangerous(dotted: str) -> bool:
    """A GLOBAL whose name the import policy calls dangerous ("builtins eval"): alone before
    garbage it is still what pickle.load imports first, and no text starts that way by chance
    (one import is too little to tell a pickle from "cat\ndog\n" otherwise)."""
    if not dotted:
        return False
    from .pytorch.policy import classify  # (the policy, only when a lone import asks)

    return classify(*dotted.split(" ", 1))[0] == "error"


def _stack_step(op, arg, stack: list[bool], marks: list[list[bool]], memo: dict) -> str:
    """Apply one opcode to the model, in place; what is wrong with it, or ""."""
    name = op.name
    if name in PUT_OPS or name == "MEMOIZE":
        if not stack:
            return "stores an empty stack in the memo"
        memo[len(memo) if name == "MEMOIZE" else arg] = stack[-1]
        return ""
    if name in _GET_OPS:
        if arg not in memo:
            return f"reads memo {arg!r}, never stored"
        stack.append(memo[arg])
        return ""
    if name == "STACK_GLOBAL":
        if len(stack) < 2 or not (stack[-1] and stack[-2]):
            return "needs a module and a name on the stack"
        del stack[-2:]
        stack.append(False)
        return ""
    if name == "POP" and not stack and marks:  # the unpickler's POP drops an open mark
        stack[:] = marks.pop()
        return ""
    before = op.stack_before
    if pickletools.markobject in before:
        at = before.index(pickletools.markobject)
        after_mark = sum(1 for s in before[at + 1:] if s is not pickletools.stackslice)
        if not marks:
            return "needs a MARK, and none is open"
        if len(stack) < after_mark:
            return "takes more values than its MARK holds"
        stack[:] = marks.pop()
        take = at
    else:
        take = len(before)
    if len(stack) < take:
        return "takes a value from an empty stack"
    if take:
        del stack[-take:]
    for s in op.stack_after:
        if s is pickletools.markobject:
            marks.append(stack[:])
            stack.clear()
        else:
            stack.append(name in STRING_OPS and _NAME.fullmatch(str(arg)) is not None)
    return ""
