"""TorchScript archives (torch.jit.save): what torch.jit.load would run, read without running it.

A TorchScript archive is a torch zip that holds, beside data.pkl, the module's TorchScript
source (`code/__torch__/....py`, one file per class, deflated) and constants.pkl.
torch.jit.load (and torch.load, which hands such a file to it) unpickles data.pkl with its
C++ unpickler: `__torch__.*` names become classes compiled from that source, torch.jit._pickle's
helpers only tag lists with their types, and nothing else is imported. Then the methods run:
`__setstate__` while loading, `forward` each time the model runs.

TorchScript itself has no file, process or network access; its code reaches them only
through registered operators, which the serialized source names as `torch.<op>` (aten),
`ops.<namespace>.<op>` and `torch.classes.<namespace>.<Class>`. So the source is tokenized
(never executed, never compiled) and each dotted name checked: torch's own operators are
fine, except the few that touch files (aten::save, aten::from_file, ...) or other machines
(c10d collectives, RPC); an operator namespace torch does not ship belongs to a native
extension the loading process must have loaded itself.
"""

from __future__ import annotations

import io
import tokenize
import zlib
from dataclasses import dataclass

from ...spans import Report, short_repr

MAX_CODE_BYTES = 8 * 1024 * 1024  # one inflated source file; torch's are a few kilobytes
MAX_CODE_TOTAL = 64 * 1024 * 1024
DEFLATE_SLACK = 1 << 16
CLASSES_SHOWN = 5
CALLS_SHOWN = 3

# Operator namespaces torch registers itself (torch._C._jit_get_all_schemas() of a CPU build,
# plus its mobile, GPU and quantization back ends) and those of pytorch's domain libraries.
TORCH_NAMESPACES = frozenset({
    "aten", "prim", "prims", "quantized", "_quantized", "quantization", "static_runtime",
    "onednn", "mkldnn", "mkldnn_prepacked", "mkl", "profiler", "sparse", "inductor",
    "inductor_prims", "rngprims", "_test", "onnx", "_native", "export", "debug_mode_ops",
    "_nnapi", "xnnpack", "prepacked", "vulkan", "vulkan_prepack", "metal", "metal_prepack",
    "cuda", "cudnn", "miopen", "mps", "_caffe2", "fbgemm", "higher_order", "torchvision",
    "image", "torchaudio", "torchtext",
})
# Classes torch registers (torch.classes.<namespace>.<Class>): packed weights, profiling.
TORCH_CLASS_NAMESPACES = frozenset({
    "quantized", "rnn", "sparse", "mkldnn", "xnnpack", "_nnapi", "backendutils", "profiling",
    "profiler", "aten", "vulkan", "metal", "torchvision", "torchaudio", "torchtext",
})
_FILES_WRITE = "writes a file named by the code (any path the process may write)"
_FILES_READ = "reads any file the process may read into a tensor"
_NET = "sends tensors to, or receives them from, other processes over the network"
# Operators of torch's namespaces that reach outside the process's tensors.
SIDE_EFFECT_OPS = {
    ("aten", "save"): _FILES_WRITE,
    ("aten", "from_file"): _FILES_READ + " (shared=True maps it writable: writes go to the file)",
    ("debugprims", "load_tensor"): "reads tensors from files on disk",
    ("image", "read_file"): _FILES_READ,
    ("image", "write_file"): _FILES_WRITE,
    ("torchaudio", "sox_io_load_audio_file"): _FILES_READ,
    ("torchaudio", "sox_io_save_audio_file"): _FILES_WRITE,
    ("torchaudio", "sox_io_get_info"): "reads files",
    ("prim", "rpc_async"): "calls a function on another machine (torch.distributed.rpc)",
    ("prim", "rpc_sync"): "calls a function on another machine (torch.distributed.rpc)",
    ("prim", "rpc_remote"): "calls a function on another machine (torch.distributed.rpc)",
}
# aten operators print as torch.<name> in the serialized source.
ATEN_AS_TORCH = {name: why for (ns, name), why in SIDE_EFFECT_OPS.items() if ns == "aten"}
NETWORK_NAMESPACES = {"c10d": _NET, "_c10d_functional": _NET, "_c10d_functional_autograd": _NET,
                      "_dtensor": _NET, "symm_mem": _NET, "c10d_functional": _NET,
                      "dist_c10d": _NET, "dist_rpc": "calls functions on other machines (RPC)",
                      "dist_autograd": _NET}
# torch.ops.load_library(path) / torch.classes.load_library(path) load a shared library: its
# initialisers run native code. Not TorchScript (torch.jit.load cannot compile them), so an
# archive that names them was not written by torch.jit.save.
LOADERS = {"load_library": "loads a native shared library into the process (its code runs)",
           "import_module": "imports a Python module by name"}


@dataclass
class CodeCall:
    """A dotted name in the TorchScript source that reaches beyond TorchScript."""

    severity: str  # "error": files, processes, network; "warning": a native extension
    name: str  # as written: torch.save, ops.c10d.allreduce_
    operator: str  # as torch registers it: aten::save, c10d::allreduce_
    why: str
    member: str
    data_offset: int  # where the member's (possibly deflated) bytes start in the file
    member_length: int  # their length in the file
    position: int  # byte offset of the name inside the member's source
    name_length: int  # its bytes there (spaces between the dots included)
    line: int
    column: int
    method: str | None  # the def it is in
    stored: bool  # the member is stored: data_offset + position is the name's byte


def code_members(entries, prefix: str) -> list[str]:
    """The archive's TorchScript source files (code/**.py), in archive order."""
    return [n for n in entries if n.startswith(prefix + "code/") and n.endswith(".py")]


def is_archive(entries, prefix: str) -> bool:
    return bool(code_members(entries, prefix)) or prefix + "constants.pkl" in entries


def is_class(dotted: str) -> bool:
    """A TorchScript type name, which torch.jit.load resolves to a class compiled from code/."""
    return dotted.startswith("__torch__.")


def check_archive(source, rep: Report, entries, prefix: str, runs) -> None:
    """The `torchscript_archive` warning, and a finding for each call of the source that
    reaches files, processes or the network (error) or a native extension (warning)."""
    members = code_members(entries, prefix)
    classes = list(dict.fromkeys(g.dotted for r in runs for g in r.imports if is_class(g.dotted)))
    calls, checked, unread = _scan_members(source, entries, members)
    unread = [u for u in unread if u[1].data_end < source.size]  # cut by the end: `truncated`
    for dotted in classes:  # custom C++ classes data.pkl builds (packed weights...)
        hit = _judge(dotted.split(".")[1:])
        if hit is not None:
            g = next(g for r in runs for g in r.imports if g.dotted == dotted)
            calls.append(CodeCall(hit[0], dotted, hit[1], hit[2], "data.pkl", g.offset, 1, 0,
                                  1, 0, 0, None, True))
    first = entries[members[0]] if members else entries[prefix + "constants.pkl"]
    text = (f"This is a TorchScript archive ({_count(len(members), 'source file')} under "
            f"{short_repr(prefix + 'code/', 60)}): torch.jit.load compiles and runs the code it "
            "holds, and torch.load hands the file to torch.jit.load (with weights_only=True it "
            "refuses it).")
    if classes:
        shown = ", ".join(classes[:CLASSES_SHOWN]) + (f" and {len(classes) - CLASSES_SHOWN} more"
                                                      if len(classes) > CLASSES_SHOWN else "")
        text += (f" Its pickles build {_count(len(classes), 'TorchScript class', 'es')} compiled "
                 f"from that code ({shown}); no Python module is imported for them.")
    if not calls and not unread:
        text += (f" The source names {_count(checked, 'dotted name')}: all are TorchScript's or "
                 "torch's own, and none reaches files, processes or the network.")
    f = rep.warning("torchscript_archive", text, first.header_offset, 4)
    f.extra.update(classes=classes, code_files=len(members), names_checked=checked)
    for name, e, why in unread:
        rep.warning("torchscript_code_unread", f"The TorchScript source {short_repr(name, 80)} "
                    f"(its data at byte {e.data_offset}) {why}, so the operators it calls are not "
                    "checked; torch.jit.load reads it all.", e.data_offset,
                    max(0, min(e.compressed_size, source.size - e.data_offset)))
    _call_findings(rep, calls)


def _count(n: int, word: str, suffix: str = "s") -> str:
    return f"{n:,} {word}{'' if n == 1 else suffix}"


def _call_findings(rep: Report, calls: list[CodeCall]) -> None:
    """One finding per operator, at its first call, naming the other places it is called."""
    by_op: dict[str, list[CodeCall]] = {}
    for c in calls:
        by_op.setdefault(c.operator, []).append(c)
    for op, group in by_op.items():
        c = group[0]
        where = [_where(x) for x in group[:CALLS_SHOWN]]
        more = f" and {len(group) - CALLS_SHOWN} more places" if len(group) > CALLS_SHOWN else ""
        if c.member == "data.pkl":
            text = (f"The archive's pickle builds an object of {c.name} ({op}): it {c.why}.")
        else:
            text = (f"The archive's TorchScript source calls {c.name} ({op}) at "
                    f"{'; '.join(where)}{more}: it {c.why}.")
        if c.severity == "error":
            text += (" torch.jit.load compiles it, and " +
                     ("loading the file runs it (torch.jit.load calls __setstate__)."
                      if any(x.method == "__setstate__" for x in group)
                      else "running the model runs it.") +
                     " Pickle scanners do not read this code; torch.load(weights_only=True) "
                     "refuses TorchScript archives, torch.load(weights_only=False) runs it.")
            f = rep.error("torchscript_call", text, *_bytes(c))
        else:
            f = rep.warning("torchscript_native_op", text + " torch.jit.load fails unless the "
                            "library that registers it is loaded, and what it does is up to "
                            "that library.", *_bytes(c))
        f.extra.update(callable=op, calls=[_where(x) for x in group[:CALLS_SHOWN]],
                       member=c.member, member_offset=c.data_offset, position=c.position,
                       line=c.line, column=c.column)


def _where(c: CodeCall) -> str:
    if c.member == "data.pkl":
        return f"byte {c.data_offset}"
    inside = f" in {c.method}" if c.method else ""
    return (f"{short_repr(c.member, 100)} line {c.line} column {c.column + 1}{inside} (byte "
            f"{c.position} of the source, whose {'' if c.stored else 'deflated '}data starts at "
            f"byte {c.data_offset})")


def _bytes(c: CodeCall) -> tuple[int, int]:
    """The name's own bytes when the member is stored; else the member's deflated bytes."""
    if c.stored:
        return c.data_offset + c.position, c.name_length
    return c.data_offset, c.member_length


def _scan_members(source, entries, members: list[str]):
    calls: list[CodeCall] = []
    unread: list[tuple] = []
    checked = 0
    budget = MAX_CODE_TOTAL
    read = _region_reader(source, [entries[n] for n in members])
    for name in members:
        e = entries[name]
        raw, why = _member_bytes(read, e, min(MAX_CODE_BYTES, budget))
        if raw is None:
            unread.append((name, e, why))
            continue
        budget -= len(raw)
        found, n, why = scan_source(raw)
        checked += n
        length = max(0, min(e.compressed_size, source.size - e.data_offset))
        for sev, dotted, op, text, pos, span, line, col, method in found:
            calls.append(CodeCall(sev, dotted, op, text, name, e.data_offset, length, pos, span,
                                  line, col, method, e.method == 0))
        if why:
            unread.append((name, e, why))
    return calls, checked, unread


def _region_reader(source, members: list):
    """read(offset, n) for the members' bytes: torch.jit.save writes the source files next to
    each other, so a remote file is asked once for all of them, not once per file."""
    if not members or hasattr(source, "buffer"):
        return source.read
    lo = min(e.data_offset for e in members)
    hi = min(source.size, max(e.data_end for e in members))
    if not 0 < hi - lo <= MAX_CODE_TOTAL:
        return source.read
    blob = bytes(source.read(lo, hi - lo))

    def read(offset: int, n: int) -> bytes:
        if lo <= offset and offset + n <= hi:
            return blob[offset - lo:offset - lo + n]
        return bytes(source.read(offset, n))
    return read


def _member_bytes(read, e, cap: int) -> tuple[bytes | None, str]:
    """A member's source text, inflated, at most `cap` bytes (else None and why)."""
    if e.compressed_size > cap + DEFLATE_SLACK:  # deflate never grows text by more than that
        return None, f"is larger than {cap:,} bytes"
    raw = bytes(read(e.data_offset, e.compressed_size))
    if e.method == 0:
        return (raw, "") if len(raw) <= cap else (None, f"is larger than {cap:,} bytes")
    if e.method != 8:
        return None, f"is compressed with method {e.method}, which this reader does not inflate"
    try:
        d = zlib.decompressobj(-15)
        data = d.decompress(raw, cap)
    except zlib.error as err:
        return None, f"does not inflate ({err})"
    if d.unconsumed_tail:
        return None, f"inflates to more than {cap:,} bytes"
    return data, ""


def scan_source(raw: bytes) -> tuple[list[tuple], int, str]:
    """(calls, dotted names checked, why the scan stopped early or ""): each call is (severity,
    name, operator, why, byte position, byte length, line, column, enclosing def). The tokenizer skips
    strings and comments, so a message that mentions torch.save is not a call."""
    text = raw.decode("utf-8", errors="surrogateescape")
    line_starts = [0]
    while (i := raw.find(b"\n", line_starts[-1])) >= 0:
        line_starts.append(i + 1)
    lines = text.split("\n")

    def byte_at(row: int, col: int) -> int:  # tokenize counts characters; findings count bytes
        return line_starts[row - 1] + len(lines[row - 1][:col].encode("utf-8", "surrogateescape"))
    found: list[tuple] = []
    checked = 0
    chain: list[str] = []
    rooted = False  # the chain starts at a name, not at an attribute of some value
    start = end = (1, 0)
    after_dot = False
    method: str | None = None
    want_def = False

    def flush() -> None:
        nonlocal checked
        if len(chain) < 2 or not rooted:
            return
        checked += 1
        hit = _judge(chain)
        if hit is not None:
            pos = byte_at(*start)
            found.append((hit[0], ".".join(chain), hit[1], hit[2], pos, byte_at(*end) - pos,
                          start[0], start[1], method))

    try:
        for tok in tokenize.generate_tokens(io.StringIO(text).readline):
            kind, s = tok.type, tok.string
            if kind in (tokenize.NL, tokenize.COMMENT):
                continue  # a name may continue on the next line inside brackets
            if kind == tokenize.NAME and after_dot and chain:
                chain.append(s)
                end = tok.end
            elif kind == tokenize.NAME:
                flush()
                chain, rooted, start, end = [s], not after_dot, tok.start, tok.end
                if want_def:
                    method, want_def, chain = s, False, []
                elif s == "def":
                    want_def, chain = True, []
            elif not (kind == tokenize.OP and s == "."):
                flush()
                chain = []
            after_dot = kind == tokenize.OP and s == "."
        flush()
    except (tokenize.TokenError, SyntaxError, ValueError) as e:  # IndentationError is one
        flush()
        return found, checked, f"does not tokenize as Python ({short_repr(str(e), 80)})"
    return found, checked, ""


def _judge(chain: list[str]) -> tuple[str, str, str] | None:
    """(severity, operator, why) for a dotted name that reaches beyond TorchScript, or None."""
    parts = chain[1:] if chain[0] == "torch" else chain
    rooted = chain[0] == "torch"
    if chain[:3] == ["__torch__", "torch", "classes"]:
        parts, rooted = chain[2:], True
    if parts and parts[0] == "ops" and len(parts) >= 2:
        ns, op = parts[1], parts[2] if len(parts) > 2 else ""
        if ns in LOADERS:
            return "error", f"torch.ops.{ns}", LOADERS[ns]
        return _judge_op(ns, op)
    if rooted and parts and parts[0] == "classes" and len(parts) >= 2:
        ns, cls = parts[1], parts[2] if len(parts) > 2 else ""
        if ns in LOADERS:
            return "error", f"torch.classes.{ns}", LOADERS[ns]
        if ns in NETWORK_NAMESPACES:
            return "error", f"{ns}::{cls}", NETWORK_NAMESPACES[ns]
        if ns not in TORCH_CLASS_NAMESPACES:
            return "warning", f"{ns}::{cls}", ("is a class of a native extension torch does not "
                                               "ship")
        return None
    if rooted and len(parts) == 1 and parts[0] in ATEN_AS_TORCH:
        return "error", f"aten::{parts[0]}", ATEN_AS_TORCH[parts[0]]
    if rooted and parts[:2] == ["distributed", "rpc"]:
        return "error", ".".join(chain), "calls functions on other machines (RPC)"
    return None


def _judge_op(ns: str, op: str) -> tuple[str, str, str] | None:
    name = f"{ns}::{op}"
    if (ns, op) in SIDE_EFFECT_OPS:
        return "error", name, SIDE_EFFECT_OPS[(ns, op)]
    if ns in NETWORK_NAMESPACES:
        return "error", name, NETWORK_NAMESPACES[ns]
    if ns not in TORCH_NAMESPACES:
        return "warning", name, "is an operator of a native extension torch does not ship"
    return None
