"""A Python file from a model repository read as text and parsed with `ast`, never imported: what
it imports, and what it calls while it is being imported (module body, class bodies, decorators,
default arguments, and the bodies of module functions called from there), which is what
`trust_remote_code=True` runs before any model exists.

Calls are named through the file's own imports (`import subprocess as sp; sp.run(...)` is
subprocess.run, `__import__('os').system` is os.system) and sorted by what they can do: run
commands or code, reach the network, delete files (an error), load native code or import a
module by a computed name (a warning: custom kernels do it).
"""

from __future__ import annotations

import ast
import re
from dataclasses import dataclass, field

# qualified-name patterns -> kind; the first that matches wins
SINKS: tuple[tuple[re.Pattern, str], ...] = tuple((re.compile(rx), kind) for rx, kind in (
    (r"^(os\.(system|popen[234]?|exec\w*|spawn\w*|posix_spawnp?|fork\w*)|subprocess\.\w+|pty\.spawn|"
     r"commands\.\w+|platform\.popen|eval|exec|execfile|runpy\.run_\w+|code\.interact|"
     r"(c?pickle|dill|marshal|joblib|shelve)\.(loads?|open))$", "runs code"),
    (r"^(socket\.\w+|urllib\d?(\.request)?\.\w+|requests\.\w+|httpx\.\w+|http\.client\.\w+|aiohttp\.\w+|"
     r"ftplib\.\w+|smtplib\.\w+|telnetlib\.\w+|paramiko\.\w+|websockets?\.\w+|webbrowser\.\w+)$", "reaches the network"),
    (r"^(os\.(remove|unlink|rmdir|removedirs|truncate)|shutil\.(rmtree|move))$", "deletes files"),
    (r"^(ctypes\.(CDLL|PyDLL|WinDLL|OleDLL|cdll\.\w+|pydll\.\w+|windll\.\w+|util\.find_library)|"
     r"cffi\.FFI|torch\.ops\.load_library|torch\.classes\.load_library|torch\.utils\.cpp_extension\.\w+)$",
     "loads native code"),
))
DECODERS = re.compile(r"^(base64\.\w*decode\w*|codecs\.decode|zlib\.decompress|bz2\.decompress|lzma\.decompress|"
                      r"gzip\.decompress|binascii\.(unhexlify|a2b_\w+)|bytes\.fromhex|bytearray\.fromhex)$")
EXECUTORS = re.compile(r"^(eval|exec|compile|marshal\.loads|pickle\.loads|types\.FunctionType)$")
DYNAMIC_IMPORTS = frozenset({"__import__", "importlib.import_module"})
SEVERE = frozenset({"runs code", "reaches the network", "deletes files", "runs decoded code"})
MAX_CALL_DEPTH = 3


@dataclass
class SinkCall:
    name: str  # the callee, qualified through the imports: "os.system"
    kind: str  # "runs code", "reaches the network", "deletes files", "loads native code", ... (SINKS)
    line: int
    start: int  # byte range in the file
    end: int
    text: str  # the source of the call
    via: str = ""  # "function setup(), called at import"


@dataclass
class ModuleReport:
    imports: list[tuple[str, int]] = field(default_factory=list)  # top-level module name, line
    local_imports: list[str] = field(default_factory=list)  # modules of the same folder (relative imports)
    calls: list[SinkCall] = field(default_factory=list)
    error: str | None = None


def _line_starts(data: bytes) -> list[int]:
    starts = [0]
    for m in re.finditer(rb"\n", data):
        starts.append(m.end())
    return starts


class _Names:
    """The file's import aliases: local name -> qualified name."""

    def __init__(self) -> None:
        self.alias: dict[str, str] = {}

    def add_import(self, node: ast.Import | ast.ImportFrom) -> None:
        if isinstance(node, ast.Import):
            for a in node.names:
                self.alias[a.asname or a.name.split(".")[0]] = a.name if a.asname else a.name.split(".")[0]
        elif node.module and not node.level:
            for a in node.names:
                self.alias[a.asname or a.name] = f"{node.module}.{a.name}"

    def qualify(self, node: ast.AST) -> str | None:
        if isinstance(node, ast.Name):
            return self.alias.get(node.id, node.id)
        if isinstance(node, ast.Attribute):
            base = self.qualify(node.value)
            return f"{base}.{node.attr}" if base else None
        if isinstance(node, ast.Call):  # __import__('os').system, getattr(os, 'system')
            callee = self.qualify(node.func)
            arg = node.args[0] if node.args else None
            if callee in DYNAMIC_IMPORTS and isinstance(arg, ast.Constant) and isinstance(arg.value, str):
                return arg.value
            if callee == "getattr" and len(node.args) >= 2 and isinstance(node.args[1], ast.Constant):
                base = self.qualify(node.args[0])
                return f"{base}.{node.args[1].value}" if base else None
        return None


def _kind(name: str, call: ast.Call, names: _Names) -> str | None:
    if name in DYNAMIC_IMPORTS:
        arg = call.args[0] if call.args else None
        return None if isinstance(arg, ast.Constant) else "imports by a computed name"
    inner = [n for a in call.args for n in ast.walk(a) if isinstance(n, ast.Call)]
    if EXECUTORS.match(name) and any(DECODERS.match(names.qualify(n.func) or "") for n in inner):
        return "runs decoded code"
    return next((kind for rx, kind in SINKS if rx.match(name)), None)


class _ImportTime(ast.NodeVisitor):
    """Visits what runs when the module is imported."""

    def __init__(self, data: bytes, report: ModuleReport, names: _Names, functions: dict) -> None:
        self.data, self.report, self.names, self.functions = data, report, names, functions
        self.starts = _line_starts(data)
        self.via: list[str] = []
        self.entered: set[str] = set()

    def _offset(self, line: int, col: int) -> int:
        return self.starts[min(line - 1, len(self.starts) - 1)] + col

    def visit_FunctionDef(self, node) -> None:  # the body runs when called, the rest now
        for d in node.decorator_list:
            self.visit(d)
        for d in node.args.defaults + [d for d in node.args.kw_defaults if d is not None]:
            self.visit(d)

    visit_AsyncFunctionDef = visit_FunctionDef

    def visit_Lambda(self, node) -> None:
        self.visit(node.args)

    def visit_If(self, node: ast.If) -> None:
        test = node.test  # if __name__ == "__main__": does not run on import
        if isinstance(test, ast.Compare) and isinstance(test.left, ast.Name) and test.left.id == "__name__":
            self.visit(test)
            for n in node.orelse:
                self.visit(n)
            return
        self.generic_visit(node)

    def visit_Call(self, node: ast.Call) -> None:
        name = self.names.qualify(node.func)
        kind = _kind(name, node, self.names) if name else None
        if kind:
            start = self._offset(node.lineno, node.col_offset)
            end = self._offset(node.end_lineno or node.lineno, node.end_col_offset or node.col_offset)
            text = self.data[start:end].decode("utf-8", "replace")
            self.report.calls.append(SinkCall(name, kind, node.lineno, start, end, text, " > ".join(self.via)))
        fn = self.functions.get(name) if isinstance(node.func, ast.Name) else None
        if fn is not None and name not in self.entered and len(self.via) < MAX_CALL_DEPTH:
            self.entered.add(name)
            self.via.append(f"{name}() called at line {node.lineno}")
            for stmt in fn.body:
                self.visit(stmt)
            self.via.pop()
        self.generic_visit(node)


def audit_python(data: bytes) -> ModuleReport:
    report = ModuleReport()
    try:
        tree = ast.parse(data)
    except (SyntaxError, ValueError, RecursionError, MemoryError) as e:
        report.error = f"{type(e).__name__}: {getattr(e, 'msg', e)} (line {getattr(e, 'lineno', '?')})"
        return report
    names = _Names()
    for node in ast.walk(tree):
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            names.add_import(node)
            if isinstance(node, ast.ImportFrom) and node.level:
                report.local_imports += [node.module] if node.module else [a.name for a in node.names]
            else:
                mods = [a.name for a in node.names] if isinstance(node, ast.Import) else [node.module or ""]
                report.imports += [(m.split(".")[0], node.lineno) for m in mods if m]
    functions = {n.name: n for n in tree.body if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))}
    try:
        _ImportTime(data, report, names, functions).visit(tree)
    except RecursionError:
        report.error = "RecursionError: nested too deeply to read"
    return report
