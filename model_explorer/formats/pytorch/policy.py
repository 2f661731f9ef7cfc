"""Which imports a pickle may make: the allow-list, the danger list and everything else.

A pickle runs code only by importing a callable (opcodes GLOBAL, STACK_GLOBAL, INST, or an
EXT code) and then calling it (REDUCE, NEWOBJ, OBJ, INST) or setting state on what it built
(BUILD). This reader never imports anything; it names what a real unpickler would import
and judges each name here. Python 2 names are mapped as the unpickler maps them
(`__builtin__` -> `builtins`, `copy_reg` -> `copyreg`, ...) before judging.

Allowed (data reconstructors; no finding):
  torch        torch._utils._rebuild_tensor, _rebuild_tensor_v2, _rebuild_tensor_v3,
               _rebuild_parameter, _rebuild_parameter_with_state, _rebuild_qtensor,
               _rebuild_sparse_tensor, _rebuild_nested_tensor, _rebuild_meta_tensor_no_storage,
               _rebuild_wrapper_subclass, _rebuild_device_tensor_from_cpu_tensor,
               _rebuild_device_tensor_from_numpy; torch._tensor._rebuild_from_type_v2;
               storage classes (torch.FloatStorage ... torch.storage.UntypedStorage);
               dtypes (torch.float32 ...); torch.Size, torch.device, torch.Tensor,
               torch.nn.parameter.Parameter, torch.serialization._get_layout, layouts
               (torch.strided, torch.sparse_coo, ...) and qschemes (torch.per_tensor_affine, ...)
  collections  OrderedDict, Counter
  numpy        numpy.core.multiarray._reconstruct and .scalar, numpy.ndarray, numpy.dtype,
               numpy.core.numeric._frombuffer (and the numpy._core.* spellings of numpy 2),
               numpy.dtypes.*DType
  builtins     set, frozenset, bytearray, complex, slice, range, list, dict, tuple, int, float,
               str, bool, object; _codecs.encode; copyreg._reconstructor

Dangerous (error): any name in the modules os, posix, nt, subprocess, runpy, importlib,
marshal, pty, socket, shutil, webbrowser, sys, and also ctypes, types, code, codeop,
commands, popen2, multiprocessing, _posixsubprocess, pickle, _pickle, cPickle, dill,
cloudpickle, timeit, pdb, bdb, profile, cProfile, trace, asyncio, signal, platform, pip,
setuptools, distutils, _winapi, winreg, msvcrt, urllib, urllib2, http, httplib, ftplib,
smtplib, telnetlib, requests, pathlib, io, _io, tempfile, torch.hub, torch.jit,
torch.package; the builtins exec, eval, compile, open, __import__, getattr, setattr,
delattr, globals, locals, vars, breakpoint, input, exit, quit, help, execfile, file,
reload; and torch.load / torch.serialization.load (they unpickle nested bytes).

Warning with a reason: torch.storage._load_from_bytes, which plain `pickle.dump` of a tensor
uses; it runs torch.load(weights_only=False) on a torch file embedded in the pickle, and
this reader reads that embedded file too (its imports are judged like any other).

Everything else: warning. Unknown code runs when the pickle loads; it may be a harmless
class of the author's project, or not.
"""

from __future__ import annotations

import _compat_pickle

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
}
ALLOWED_EXACT = {
    "torch._tensor._rebuild_from_type_v2", "torch.nn.parameter.Parameter",
    "torch.serialization._get_layout", "torch.storage.UntypedStorage",
    "torch.storage.TypedStorage", "torch.storage._LegacyStorage",
    "collections.OrderedDict", "collections.Counter",
    "_codecs.encode", "copyreg._reconstructor",
    *(f"builtins.{n}" for n in ("set", "frozenset", "bytearray", "complex", "slice", "range",
                                "list", "dict", "tuple", "int", "float", "str", "bool", "object")),
    *(f"{m}.{n}" for m in ("numpy.core.multiarray", "numpy._core.multiarray")
      for n in ("_reconstruct", "scalar")),
    "numpy.core.numeric._frombuffer", "numpy._core.numeric._frombuffer",
    "numpy.ndarray", "numpy.dtype",
}

DANGEROUS_MODULES = {
    "os": "runs programs and changes files", "posix": "runs programs and changes files",
    "nt": "runs programs and changes files", "subprocess": "runs programs",
    "_posixsubprocess": "runs programs", "pty": "runs programs in a terminal",
    "popen2": "runs programs", "commands": "runs programs", "platform": "runs programs",
    "runpy": "runs Python modules", "importlib": "imports arbitrary modules",
    "marshal": "loads code objects", "types": "builds functions from code objects",
    "code": "runs Python code", "codeop": "compiles Python code", "timeit": "runs Python code",
    "pdb": "runs Python code", "bdb": "runs Python code", "profile": "runs Python code",
    "cProfile": "runs Python code", "trace": "runs Python code", "ctypes": "calls native code",
    "_ctypes": "calls native code", "sys": "changes the interpreter",
    "signal": "changes the interpreter", "multiprocessing": "starts processes",
    "asyncio": "starts processes and connections", "pickle": "unpickles nested, unchecked bytes",
    "_pickle": "unpickles nested, unchecked bytes", "cPickle": "unpickles nested, unchecked bytes",
    "dill": "unpickles nested, unchecked bytes", "cloudpickle": "unpickles nested, unchecked bytes",
    "socket": "opens network connections", "webbrowser": "opens web pages",
    "urllib": "uses the network", "urllib2": "uses the network", "http": "uses the network",
    "httplib": "uses the network", "ftplib": "uses the network", "smtplib": "sends mail",
    "telnetlib": "uses the network", "requests": "uses the network",
    "shutil": "copies and deletes files", "pathlib": "reads and writes files",
    "io": "reads and writes files", "_io": "reads and writes files",
    "tempfile": "creates files", "pip": "installs packages", "setuptools": "runs build code",
    "distutils": "runs build code", "_winapi": "runs programs", "winreg": "changes the registry",
    "msvcrt": "calls the C runtime", "torch.hub": "downloads and runs code",
    "torch.jit": "compiles and runs TorchScript", "torch.package": "imports packaged code",
}
DANGEROUS_BUILTINS = {
    "exec": "runs Python code", "eval": "runs Python code", "compile": "compiles Python code",
    "execfile": "runs a Python file", "open": "reads or writes files", "file": "opens files",
    "__import__": "imports any module", "reload": "re-imports modules",
    "getattr": "reaches any attribute, the usual way to hide a call",
    "setattr": "changes any attribute", "delattr": "deletes any attribute",
    "globals": "reaches the interpreter's globals", "locals": "reaches the interpreter's locals",
    "vars": "reaches any object's attributes", "breakpoint": "starts a debugger",
    "input": "waits for console input", "exit": "exits the interpreter",
    "quit": "exits the interpreter", "help": "starts the interactive help",
}
DANGEROUS_EXACT = {
    "torch.load": "unpickles nested, unchecked bytes",
    "torch.serialization.load": "unpickles nested, unchecked bytes",
}
WARNING_EXACT = {
    # pickle.dump(tensor) stores each storage as a legacy torch file inside the pickle; loading
    # runs torch.load(weights_only=False) on it. This reader checks those embedded files too.
    "torch.storage._load_from_bytes": "unpickles an embedded torch file with "
                                      "torch.load(weights_only=False); the embedded file is "
                                      "checked as well",
}


def normalize(module: str, name: str) -> tuple[str, str]:
    """The (module, name) an unpickler imports, after Python 2 -> 3 name mapping."""
    if (module, name) in _compat_pickle.NAME_MAPPING:
        return _compat_pickle.NAME_MAPPING[(module, name)]
    return _compat_pickle.IMPORT_MAPPING.get(module, module), name


def classify(module: str, name: str) -> tuple[str, str]:
    """("ok" | "warning" | "error", why) for importing `module.name`."""
    module, name = normalize(module, name)
    dotted = f"{module}.{name}"
    if dotted in ALLOWED_EXACT or _allowed_torch(module, name) or _allowed_numpy(module, name):
        return "ok", "a data reconstructor"
    if dotted in DANGEROUS_EXACT:
        return "error", DANGEROUS_EXACT[dotted]
    if dotted in WARNING_EXACT:
        return "warning", WARNING_EXACT[dotted]
    if module == "builtins":
        if name in DANGEROUS_BUILTINS:
            return "error", DANGEROUS_BUILTINS[name]
        return "warning", "a builtin outside the allow-list"
    parts = module.split(".")
    for i in range(len(parts), 0, -1):
        reason = DANGEROUS_MODULES.get(".".join(parts[:i]))
        if reason:
            return "error", reason
    return "warning", "code outside the allow-list runs when the pickle loads"


def _allowed_torch(module: str, name: str) -> bool:
    if module == "torch._utils":
        return name in ALLOWED_TORCH_REBUILD
    if module == "torch":
        return name in TORCH_STORAGES or name in TORCH_DTYPES or name in TORCH_OTHER
    return False


def _allowed_numpy(module: str, name: str) -> bool:
    return module == "numpy.dtypes" and name.endswith("DType") and name.isidentifier()
