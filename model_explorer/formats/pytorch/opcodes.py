"""The opcode handlers of the pickle interpreter: each emulates one opcode on the machine's
stack, mark stack and memo (vm.py runs them), with inert values (values.py) in place of
objects; `DISPATCH` maps each opcode to its handler."""

from __future__ import annotations

import pickletools
from collections.abc import Callable

from .imports import RETURNS_AN_ARGUMENT
from .values import Blob, Call, EmuSet, Global, PersistentRef, Unknown, dict_key, render

# Bytes arguments at least this long are kept as a Blob (offset, length), not copied.
BLOB_MIN = 4096


class Stop(Exception):
    """STOP was reached: the run ends here."""


NO_FRAME = 1 << 62


_MISSING = object()


def _push_arg(m, arg, pos, op):
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
    raise Stop


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


HANDLERS = _handlers_table()
# OpcodeInfo -> (handler, name, whether its argument names an import): one lookup per opcode.
DISPATCH = {op: (HANDLERS[op.name], op.name, op.name in ("GLOBAL", "INST"))
            for op in pickletools.opcodes}
