"""Which imports a pickle may make, and what it means when the pickle calls them.

A pickle runs code only by importing a callable (opcodes GLOBAL, STACK_GLOBAL, INST, or an
EXT code) and then invoking it (REDUCE, NEWOBJ, NEWOBJ_EX, OBJ, INST) or handing state to
what it built (BUILD, which calls the class's `__setstate__`). This reader never imports
anything; it names what a real unpickler would import and judges each name here. Python 2
names are mapped as the unpickler maps them (`__builtin__` -> `builtins`, ...) first.

The verdict comes from what the pickle *does*, not from a list of bad names. From worst:

- "dangerous": a name on the deny-list, or a name outside the allow-list that the pickle
  *calls* (REDUCE, INST, OBJ, BUILD on a class itself, a call of an object it built): the
  file chooses the function and its arguments, and nothing about a name says it is harmless.
- "suspicious": a name outside the allow-list only *referenced* (stored, never called; it may
  still be called later by code that receives it), and odd structure.
- "needs_classes": objects of classes outside the allow-list built the way pickle saves any
  object, which is what `torch.save(model)` writes for the model's own classes (see
  `author_class_candidate`), and the tolerated classes below however they are made. Loading
  imports their modules and runs their `__new__` and `__setstate__`, so it needs the author's
  code, trusted, and `torch.load(weights_only=True)` refuses it; but no function of the
  file's choosing is called.
- "safe": only the allow-list: the data reconstructors a checkpoint legitimately needs
  (torch's rebuild functions, storages, dtypes, layouts and Size/device/Parameter;
  collections; numpy's array, dtype and scalar reconstruction; copyreg's `_reconstructor`;
  `_codecs.encode`), plain builtin types, and pure builtin functions.

Which builtins are pure: a pickle calls a name with positional arguments only (REDUCE, OBJ,
INST; NEWOBJ_EX passes keywords to a class's `__new__`, never to a function), and every
argument is data the pickle built or another import, which is judged on its own. So `len`,
`abs`, `min`, `max`, `sum`, `sorted`, `round`, `divmod`, `pow`, `hash`, `isinstance`, ...
cannot do more than compute on their arguments: `max`'s and `sorted`'s `key=` is keyword-only
and out of reach. They may call their arguments' own methods (`__len__`, `__lt__`, `__iter__`),
but an argument with methods is an object of a class the pickle imported and is judged as
such. `min`, `max` and `sum` may return an argument (`max([f])` is `f`): calling, or
building from, what any call returned makes every import among its arguments a call
(`imports.result_sources`), so they cannot hide one. Builtins that take a callable positionally
and call it (`map`, `filter`, `iter` with a sentinel, `apply`), that reach attributes, globals
or the import system (`getattr`, `vars`, `globals`, `__import__`, `super`, `type` with three
arguments makes a class), that evaluate (`eval`, `exec`, `compile`), do I/O (`open`, `input`,
`print`, `breakpoint`), or hand out memory (`memoryview`) stay outside the allow-list. Cost is
not judged: `pow(10, 10**9)` or `bytes(10**12)` only exhaust the loader.

A class told from a function without importing either: the opcodes say. NEWOBJ and NEWOBJ_EX
run `cls.__new__(cls, ...)`, which fails on anything but a class; protocols 0/1 save an object
as `copyreg._reconstructor(cls, object, None)` (`object.__new__(cls)`); torch rebuilds a tensor
subclass with `_rebuild_from_type_v2(func, cls, ...)` or `_rebuild_wrapper_subclass(cls, ...)`;
BUILD on the new object then hands it its state. That is how pickle saves every ordinary
object, and no argument of the file's reaches a function it chose. A bare REDUCE (or INST,
OBJ) of a name with arguments calls whatever the name is, a function the file chose; so does
a reconstructor on another base than object (its `__init__` runs on the file's state), BUILD
on a class itself, and calling an object the pickle built. So a class only built is
"needs_classes" (when `author_class_candidate` accepts its name), and any other invocation is
a call. `copyreg.__newobj__`, which pickle never writes (protocol 2 turns it into NEWOBJ),
stays denied. The deny-list below supplies the words of the message ("runs programs", "writes
files"); names on it are errors even when merely referenced, and however they are built.

Dotted names are judged by every segment: `builtins.eval.__call__` is `builtins.eval`,
`torch.hub.load` is in `torch.hub`; a module reached as an attribute of another
(`glob.os`, `torch.os.system`) is judged as the module it names; dunder traversal
(`__globals__`, `__subclasses__`, ...) is an error.
"""

from __future__ import annotations

import _compat_pickle
import functools
import sys

ALLOWED_TORCH_REBUILD = {
    "_rebuild_tensor", "_rebuild_tensor_v2", "_rebuild_tensor_v3", "_rebuild_parameter",
    "_rebuild_parameter_with_state", "_rebuild_qtensor", "_rebuild_sparse_tensor",
    "_rebuild_nested_tensor", "_rebuild_meta_tensor_no_storage", "_rebuild_wrapper_subclass",
    "_rebuild_device_tensor_from_cpu_tensor", "_rebuild_device_tensor_from_numpy",
}
TORCH_STORAGES = {
    "FloatStorage", "DoubleStorage", "HalfStorage", "BFloat16Storage", "LongStorage",
    "IntStorage", "ShortStorage", "CharStorage", "ByteStorage", "BoolStorage",
    "ComplexFloatStorage", "ComplexDoubleStorage", "QInt8Storage", "QUInt8Storage",
    "QInt32Storage", "QUInt4x2Storage", "QUInt2x4Storage", "UntypedStorage", "TypedStorage",
}
TORCH_DTYPES = {
    "float32", "float", "float64", "double", "float16", "half", "bfloat16", "int64", "long",
    "int32", "int", "int16", "short", "int8", "uint8", "bool", "complex64", "cfloat",
    "complex128", "cdouble", "complex32", "chalf", "float8_e4m3fn", "float8_e5m2",
    "float8_e4m3fnuz", "float8_e5m2fnuz", "float8_e8m0fnu", "float4_e2m1fn_x2", "uint16",
    "uint32", "uint64", "qint8", "quint8", "qint32", "quint4x2", "quint2x4",
    *(f"uint{i}" for i in range(1, 8)), *(f"int{i}" for i in range(1, 8)),
}
TORCH_OTHER = {
    "Size", "device", "Tensor", "strided", "sparse_coo", "sparse_csr", "sparse_csc",
    "sparse_bsr", "sparse_bsc", "_mkldnn", "per_tensor_affine", "per_tensor_symmetric",
    "per_channel_affine", "per_channel_symmetric", "per_channel_affine_float_qparams",
    # legacy tensor types, named by the `tensors` record of torch's old tar format
    *(f"{t}Tensor" for t in ("Float", "Double", "Half", "BFloat16", "Long", "Int", "Short",
                             "Char", "Byte", "Bool")),
}
ALLOWED_EXACT = {
    "torch._tensor._rebuild_from_type_v2", "torch.nn.parameter.Parameter",
    "torch.serialization._get_layout", "torch.storage.UntypedStorage",
    "torch.storage.TypedStorage", "torch.storage._LegacyStorage",
    "collections.OrderedDict", "collections.Counter",
    "_codecs.encode", "copyreg._reconstructor",
    *(f"builtins.{n}" for n in ("set", "frozenset", "bytearray", "bytes", "complex", "slice",
                                "range", "list", "dict", "tuple", "int", "float", "str", "bool",
                                "object",
                                # pure functions of their arguments (see the module's docstring):
                                # map, filter, iter, next, getattr, type... stay out
                                "len", "abs", "min", "max", "sum", "round", "divmod", "pow", "ord",
                                "chr", "bin", "hex", "oct", "any", "all", "isinstance",
                                "issubclass", "sorted", "reversed", "enumerate", "zip", "hash")),
    *(f"{m}.{n}" for m in ("numpy.core.multiarray", "numpy._core.multiarray")
      for n in ("_reconstruct", "scalar")),
    "numpy.core.numeric._frombuffer", "numpy._core.numeric._frombuffer",
    "numpy.ndarray", "numpy.dtype",
    # TorchScript's own list and type-tag helpers (torch.jit.save writes them into data.pkl and
    # constants.pkl): torch.jit.load's C++ unpickler handles each in place (readGlobal), and
    # torch/jit/_pickle.py makes them return their argument. Data constructors: `jit_refs`.
    *(f"torch.jit._pickle.{n}" for n in ("build_intlist", "build_tensorlist", "build_doublelist",
                                         "build_boollist", "build_tensor_from_id",
                                         "restore_type_tag")),
}
# Classes whose construction runs no code a file can choose: a warning even when invoked.
TOLERATED_EXACT = {
    "argparse.Namespace", "collections.defaultdict", "collections.deque",
    "datetime.datetime", "datetime.date", "datetime.time", "datetime.timedelta",
    "datetime.timezone", "decimal.Decimal", "fractions.Fraction", "uuid.UUID",
    "pathlib.Path", "pathlib.PosixPath", "pathlib.WindowsPath", "pathlib.PurePath",
    "pathlib.PurePosixPath", "pathlib.PureWindowsPath", "torch.nn.parameter.Buffer",
    "torch.nn.parameter.UninitializedParameter", "torch.nn.parameter.UninitializedBuffer",
}
TORCH_MODULE_CLASSES = "torch.nn.modules."
# Type annotations a configuration object stores as values (omegaconf's `ref_type`, `key_type`
# and `element_type` are `typing.Any`): importing one runs no code of the file's choosing, and
# only a reference to it is no call. Judged with the author's classes (`needs_classes`) when
# only referenced; a call of one stays a call.
TYPE_MARKERS = {f"typing.{n}" for n in ("Any", "Optional", "Union", "List", "Dict", "Tuple", "Set",
                                        "FrozenSet", "Sequence", "Mapping", "Type", "Literal")}

_FILES = "writes files"
_NET = "opens network connections"
_RUNS = "runs Python code"
_PROGRAMS = "runs programs (a shell command)"
_IMPORTS = "imports any module by name"
DANGEROUS_MODULES = {
    "os": "runs programs and changes files", "posix": "runs programs and changes files",
    "nt": "runs programs and changes files", "subprocess": _PROGRAMS,
    "_posixsubprocess": _PROGRAMS, "pty": "runs programs in a terminal",
    "popen2": _PROGRAMS, "commands": _PROGRAMS, "platform": _PROGRAMS,
    "runpy": "runs Python modules", "importlib": _IMPORTS,
    "marshal": "loads code objects", "types": "builds functions from code objects",
    "code": _RUNS, "codeop": "compiles Python code", "timeit": _RUNS,
    "pdb": _RUNS, "bdb": _RUNS, "profile": _RUNS,
    "cProfile": _RUNS, "trace": _RUNS, "ctypes": "calls native code",
    "_ctypes": "calls native code", "sys": "changes the interpreter",
    "signal": "changes the interpreter", "multiprocessing": "starts processes",
    "asyncio": "starts processes and connections", "pickle": "unpickles nested, unchecked bytes",
    "_pickle": "unpickles nested, unchecked bytes", "cPickle": "unpickles nested, unchecked bytes",
    "dill": "unpickles nested, unchecked bytes", "cloudpickle": "unpickles nested, unchecked bytes",
    "shelve": "unpickles nested, unchecked bytes", "joblib": "unpickles nested, unchecked bytes",
    "socket": _NET, "webbrowser": "opens web pages",
    "urllib": _NET, "urllib2": _NET, "http": _NET,
    "httplib": _NET, "ftplib": _NET, "smtplib": "sends mail",
    "telnetlib": _NET, "requests": _NET, "imaplib": _NET, "poplib": _NET, "nntplib": _NET,
    "xmlrpc": _NET, "socketserver": _NET, "ssl": _NET,
    "shutil": "copies and deletes files", "pathlib": "reads and writes files",
    "io": "reads and writes files", "_io": "reads and writes files",
    "tempfile": "creates files", "pip": "installs packages", "setuptools": "runs build code",
    "distutils": "runs build code", "_winapi": "runs programs", "winreg": "changes the registry",
    "msvcrt": "calls the C runtime", "logging": _FILES + " (FileHandler) and changes logging",
    "zipfile": _FILES, "gzip": _FILES, "bz2": _FILES, "lzma": _FILES, "tarfile": _FILES,
    "fileinput": _FILES, "dbm": _FILES, "sqlite3": _FILES, "mmap": _FILES,
    "pydoc": _IMPORTS + " (pydoc.locate) and starts a web server",
    "pkgutil": _IMPORTS + " (pkgutil.resolve_name)", "inspect": "reaches any object's internals",
    "operator": "reaches any attribute or method (attrgetter, methodcaller), the usual way to "
                "hide a call", "builtins": _RUNS,
    # published gadget modules of the standard library
    "idlelib": _RUNS, "lib2to3": _RUNS, "doctest": _RUNS, "ensurepip": "installs packages",
    "venv": "creates environments and runs programs", "uuid": _PROGRAMS,
    "_osx_support": _PROGRAMS, "_aix_support": _PROGRAMS, "_pyrepl": _RUNS,
    "test": _RUNS + " (test.support)", "cgitb": _FILES, "site": _RUNS, "sysconfig": _RUNS,
    "numpy.testing": _RUNS + " (runstring)", "numpy.f2py": _PROGRAMS,
    "numpy.distutils": "runs build code", "numpy.lib.npyio": "unpickles nested, unchecked bytes",
    # torch's own
    "torch.hub": "downloads and runs code", "torch.jit": "compiles and runs TorchScript",
    "torch.package": "imports packaged code", "torch.utils.bottleneck": _PROGRAMS,
    "torch.utils.collect_env": _PROGRAMS, "torch.utils._config_module": _RUNS,
    "torch._config_module": _RUNS, "torch.utils.data.datapipes": _RUNS,
    "torch.utils.cpp_extension": "compiles and loads native code",
    "torch._dynamo": _RUNS, "torch._inductor": "compiles and runs generated code",
    "torch.fx.experimental": _RUNS, "torch.compile": "compiles and runs generated code",
    "torch.distributed": _NET, "torch.multiprocessing": "starts processes",
    "torch._C._jit_tree_views": _RUNS, "torch.utils.checkpoint": _RUNS,
}
DANGEROUS_BUILTINS = {
    "exec": _RUNS, "eval": _RUNS, "compile": "compiles Python code",
    "execfile": "runs a Python file", "open": "reads or writes files", "file": "opens files",
    "__import__": _IMPORTS, "reload": "re-imports modules",
    "getattr": "reaches any attribute, the usual way to hide a call",
    "setattr": "changes any attribute", "delattr": "deletes any attribute",
    "globals": "reaches the interpreter's globals", "locals": "reaches the interpreter's locals",
    "vars": "reaches any object's attributes", "breakpoint": "starts a debugger",
    "input": "waits for console input", "exit": "exits the interpreter",
    "quit": "exits the interpreter", "help": "starts the interactive help",
    "apply": "calls a function it is given",
}
DANGEROUS_EXACT = {
    "torch.load": "unpickles nested, unchecked bytes",
    "torch.serialization.load": "unpickles nested, unchecked bytes",
    "torch.serialization._load": "unpickles nested, unchecked bytes",
    "torch.serialization._legacy_load": "unpickles nested, unchecked bytes",
    "torch.save": _FILES, "torch.serialization.save": _FILES,
    "torch.compile": "compiles and runs generated code",
    "numpy.load": "unpickles nested, unchecked bytes (allow_pickle)",
    "numpy.save": _FILES, "numpy.savez": _FILES, "numpy.savetxt": _FILES,
    "numpy.fromfile": "reads files", "numpy.loadtxt": "reads files", "numpy.tofile": _FILES,
    "numpy.memmap": "maps files into memory",
    "copyreg.__newobj__": "calls a class it is given",
    "copyreg.__newobj_ex__": "calls a class it is given",
}
WARNING_EXACT = {
    # pickle.dump(tensor) stores each storage as a legacy torch file inside the pickle; loading
    # runs torch.load(weights_only=False) on it. This reader checks those embedded files too.
    "torch.storage._load_from_bytes": "unpickles an embedded torch file with "
                                      "torch.load(weights_only=False); the embedded file is "
                                      "checked as well",
}
# Attribute segments that reach interpreter internals (the classic sandbox escapes).
SAFE_DUNDERS = {"__call__", "__new__", "__init__", "__setstate__", "__reduce__", "__reduce_ex__"}
# A module name reached as an attribute: `glob.os`, `torch.os.system`.
MODULE_HEADS = {k for k in DANGEROUS_MODULES if "." not in k} | {"__builtins__"}


def normalize(module: str, name: str) -> tuple[str, str]:
    """The (module, name) an unpickler imports, after Python 2 -> 3 name mapping."""
    if (module, name) in _compat_pickle.NAME_MAPPING:
        return _compat_pickle.NAME_MAPPING[(module, name)]
    return _compat_pickle.IMPORT_MAPPING.get(module, module), name


def classify(module: str, name: str) -> tuple[str, str]:
    """("ok" | "warning" | "error", why) for importing `module.name`. A warning becomes an
    error when the pickle invokes the name, unless `tolerated_when_invoked` says otherwise."""
    return classify_normalized(*normalize(module, name))


@functools.lru_cache(maxsize=65536)
def classify_normalized(module: str, name: str) -> tuple[str, str]:
    """`classify` of a name already mapped from Python 2 (cached: a checkpoint names
    `_rebuild_tensor_v2` once per tensor)."""
    dotted = f"{module}.{name}"
    if dotted in ALLOWED_EXACT or _allowed_torch(module, name) or _allowed_numpy(module, name):
        return "ok", "a data reconstructor"
    if dotted in WARNING_EXACT:
        return "warning", WARNING_EXACT[dotted]
    if tolerated_when_invoked(dotted):
        if dotted.startswith("__torch__."):
            return "warning", ("a TorchScript class: torch.jit.load compiles it from the code the "
                               "archive holds; a Python unpickler cannot import it")
        return "warning", ("a torch module class: rebuilding it runs no code from the file, but "
                           "torch.load(weights_only=True) refuses it"
                           if dotted.startswith(TORCH_MODULE_CLASSES)
                           else "a plain data class of the standard library")
    denied = _denied(module, name)
    if denied:
        return "error", denied
    if module == "builtins":
        return "warning", "a builtin outside the allow-list: it runs if the pickle calls it"
    return "warning", "code outside the allow-list: it runs if the pickle calls it"


def tolerated_when_invoked(dotted: str) -> bool:
    """Known classes whose construction runs no code a file can choose."""
    if dotted in TOLERATED_EXACT or dotted in WARNING_EXACT:
        return True
    if dotted.startswith("__torch__."):  # TorchScript types: no Python module of that name
        return True
    if dotted.startswith(TORCH_MODULE_CLASSES):  # torch.nn.modules.<file>.<Class>
        return dotted.count(".") == 4 and dotted.rsplit(".", 1)[-1][:1].isupper()
    return False


def author_class_candidate(dotted: str) -> bool:
    """A name outside the allow-list whose objects, built as pickle saves any object, make the
    verdict "needs_classes" rather than "dangerous" (the caller checks how it was built):
    the tolerated classes and torch's nn modules, and classes of `__main__` or of any module
    outside the standard library, where a model's own classes live. The standard library's
    other classes stay errors: its callable wrappers and lazy iterators (functools.partial,
    builtins.map, itertools.starmap) and resource handles are the attacker's parts, not a
    model's. TorchScript types are not: torch.jit.load compiles them from code in the file;
    nor names that are no import path (an EXT code, a computed name). Denied names never
    reach here: they are errors already."""
    if dotted in WARNING_EXACT or dotted.startswith("__torch__."):
        return False
    if tolerated_when_invoked(dotted):
        return True
    parts = dotted.split(".")
    return len(parts) >= 2 and all(p.isidentifier() for p in parts) and \
        parts[0] not in sys.stdlib_module_names


def _denied(module: str, name: str) -> str | None:
    """Why `module.name` is on the deny-list, judging every segment, or None."""
    attrs = name.split(".") if name else []
    if module in ("builtins", "__builtins__"):
        if not attrs:
            return "the builtins module itself: any builtin can be reached from it"
        if attrs[0] in DANGEROUS_BUILTINS:  # builtins.eval.__call__ is builtins.eval
            return DANGEROUS_BUILTINS[attrs[0]]
        return _attribute_path(module, attrs, 1)
    why = _module_denied(module)
    if why:
        return why
    path = module
    for attr in attrs:  # torch + hub.load is torch.hub; numpy + testing.x is numpy.testing
        path = f"{path}.{attr}"
        why = DANGEROUS_EXACT.get(path) or DANGEROUS_MODULES.get(path)
        if why:
            return why
    return _attribute_path(module, attrs, 0)


@functools.lru_cache(maxsize=4096)
def _module_denied(module: str) -> str | None:
    """The deny-list's words for a module path or any of its parents (cached: a pickle names
    few modules, however many times)."""
    parts = module.split(".")
    for i in range(1, len(parts) + 1):
        prefix = ".".join(parts[:i])
        why = DANGEROUS_EXACT.get(prefix) or DANGEROUS_MODULES.get(prefix)
        if why:
            return why
    return None


def _attribute_path(module: str, attrs: list[str], start: int) -> str | None:
    """A module reached as an attribute (`glob.os`), or interpreter internals (`__globals__`)."""
    for j in range(start, len(attrs)):
        seg = attrs[j]
        if seg in MODULE_HEADS:
            rest = ".".join(attrs[j + 1:])
            head = "builtins" if seg == "__builtins__" else seg
            inner = _denied(head, rest) if rest else None
            where = ".".join([module, *attrs[:j]])
            return (f"reaches the module {head} as an attribute of {where} "
                    f"({inner or DANGEROUS_MODULES.get(head, _RUNS)})")
        if seg.startswith("__") and seg.endswith("__") and seg not in SAFE_DUNDERS:
            return f"reaches interpreter internals through {seg}"
    return None


def _allowed_torch(module: str, name: str) -> bool:
    if module == "torch._utils":
        return name in ALLOWED_TORCH_REBUILD
    if module == "torch":
        return name in TORCH_STORAGES or name in TORCH_DTYPES or name in TORCH_OTHER
    return False


def _allowed_numpy(module: str, name: str) -> bool:
    return module == "numpy.dtypes" and name.endswith("DType") and name.isidentifier()
