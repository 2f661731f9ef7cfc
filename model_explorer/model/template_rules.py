"""What template_audit looks for, as tables and small predicates over jinja2's parse tree.

The escape primitives follow jinja2's own sandbox: every attribute that starts with an
underscore is refused there, and so is the frame / generator / function internals list
(`jinja2.sandbox.UNSAFE_*`). Content gates compare message content with a plain word; format
markers ('</think>', '<tool_response>', 'image') are what real templates test for.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass

from jinja2 import nodes

from .template_fold import Symbols

# -- sandbox escapes -----------------------------------------------------------------------------

INTERNAL_NAMES = frozenset({
    "mro", "gi_frame", "gi_code", "gi_yieldfrom", "cr_frame", "cr_code", "cr_await", "ag_frame",
    "ag_code", "f_back", "f_globals", "f_locals", "f_builtins", "f_code", "func_globals", "func_code",
    "tb_frame", "tb_next", "co_code", "im_func", "im_self"})
# Dunders no string in a chat template has a reason to hold, even as plain text.
STRONG_DUNDERS = ("__globals__", "__builtins__", "__subclasses__", "__mro__", "__bases__", "__base__",
                  "__reduce__", "__reduce_ex__", "__getattribute__", "__import__", "__code__",
                  "__closure__", "__loader__", "__spec__")
STRONG_DUNDER_RE = "|".join(re.escape(d) for d in STRONG_DUNDERS)
# Names that only code execution needs: undefined in a chat template's context, so a template
# naming them expects a renderer that leaked them.
EXEC_NAMES = frozenset({"eval", "exec", "compile", "__import__", "getattr", "setattr", "delattr",
                        "globals", "locals", "vars", "breakpoint", "importlib", "builtins", "os",
                        "subprocess", "popen", "execfile", "pty"})
# Jinja's own globals (and the objects every render has): a chain from them into internals
# is the classic way out (cycler.__init__.__globals__.os).
GADGETS = frozenset({"cycler", "joiner", "lipsum", "namespace", "range", "dict", "self", "loop",
                     "caller", "raise_exception", "strftime_now", "varargs", "kwargs"})
RUNS = frozenset({"os", "popen", "system", "subprocess", "eval", "exec", "__import__", "__builtins__",
                  "builtins", "check_output", "getoutput", "spawn", "compile"})
def internal(name: str) -> bool:
    """A name jinja2's sandbox refuses as an attribute and only an escape needs."""
    return (len(name) > 4 and name.startswith("__") and name.endswith("__")) or name in INTERNAL_NAMES \
        or (name.startswith("_") and "__" in name)


def _spells_internal(text: str) -> str | None:
    """The internal or execution name a string spells, as a whole or as a dotted part."""
    if internal(text) or text in ("popen", "subprocess", "__import__"):
        return text
    m = re.search(STRONG_DUNDER_RE + r"|\bpopen\b|\bsubprocess\b", text)
    return m.group(0) if m else None


@dataclass(frozen=True)
class Primitive:
    name: str  # what is reached: "__globals__", "attr(...)", "os"
    needle: str | None = None  # the token that places it: a filter's name
    gadget: str | None = None  # the Jinja global the chain starts from


_ASSEMBLY = (nodes.Concat, nodes.Add, nodes.Mul, nodes.Mod)
_ASSEMBLING_FILTERS = frozenset({"join", "format", "replace", "reverse", "first", "last", "lower", "upper"})


def _root(node: nodes.Node) -> nodes.Node:
    while isinstance(node, (nodes.Getattr, nodes.Getitem, nodes.Call, nodes.Filter)) and node.node is not None:
        node = node.node
    return node


def primitive(node: nodes.Node, sym: Symbols) -> Primitive | None:
    """The escape primitive `node` itself is (its children are looked at on their own)."""
    gadget = _root(node).name if isinstance(_root(node), nodes.Name) and _root(node).name in GADGETS else None
    if isinstance(node, nodes.Getattr) and internal(node.attr):
        return Primitive(node.attr, gadget=gadget)
    if isinstance(node, nodes.Getitem) and not isinstance(node.arg, nodes.Slice):
        key = sym.text(node.arg)
        if key is not None and internal(key):
            return Primitive(key, gadget=gadget)
    if isinstance(node, (nodes.Filter, nodes.Test, nodes.Call)):
        for kw in node.kwargs:
            if internal(kw.key):
                return Primitive(kw.key)
        args = [sym.text(a) for a in [*node.args, *(kw.value for kw in node.kwargs)]]
        name = getattr(node, "name", None)
        spelled = next((a for a in args if a is not None and internal(a)), None)
        if spelled:
            return Primitive(spelled, needle=name, gadget=gadget)
        if name == "attr" and (not args or args[0] is None):
            return Primitive("attr(a computed name)", needle="attr", gadget=gadget)
    if isinstance(node, nodes.Name) and node.ctx == "load" and node.name in EXEC_NAMES:
        return Primitive(node.name)
    if isinstance(node, nodes.Const) and isinstance(node.value, str) and re.search(STRONG_DUNDER_RE, node.value):
        return Primitive(re.search(STRONG_DUNDER_RE, node.value).group(0))
    if isinstance(node, _ASSEMBLY) or (isinstance(node, nodes.Filter) and node.name in _ASSEMBLING_FILTERS) or (
            isinstance(node, nodes.Call) and isinstance(node.node, nodes.Getattr)
            and node.node.attr in ("format", "join", "replace")):
        text = sym.text(node)
        spelled = _spells_internal(text) if text else None
        if spelled and not any(isinstance(c, nodes.Const) and c.value == text for c in node.find_all(nodes.Const)):
            return Primitive(spelled)
    return None


def shell_command(expr: nodes.Node, sym: Symbols) -> str | None:
    """The constant command a chain hands to popen / system / check_output, if it names one."""
    for call in [expr, *expr.find_all(nodes.Call)]:
        if isinstance(call, nodes.Call) and isinstance(call.node, nodes.Getattr) and \
                call.node.attr in ("popen", "system", "check_output", "getoutput", "run", "Popen") and call.args:
            text = sym.fold(call.args[0])
            if isinstance(text, tuple):
                text = " ".join(text)
            if text:
                return text
    return None


def escape_effect(names: list[str], command: str | None) -> str:
    reach = ("it reaches the os module and Python's builtins" if RUNS.intersection(names)
             else "it walks from a plain object to Python's class tree and module globals")
    run = f" and runs the shell command “{command}”" if command else ", from where a few more steps run any command"
    return (f"jinja2's sandbox refuses it (nothing here renders it outside the sandbox). A plain jinja2 "
            f"Environment does not: llama-cpp-python before 0.2.72 (CVE-2024-34359) and servers that "
            f"call jinja2.Template render templates that way, and there {reach}{run} on the machine "
            "that loads the model.")


# -- what a test reads ---------------------------------------------------------------------------

CONTENT_KEYS = frozenset({"content", "text"})
DATE_CALLS = frozenset({"strftime_now", "now", "today", "utcnow", "datetime", "date"})
VALUE_BLIND_TESTS = frozenset({"defined", "undefined", "none", "string", "mapping", "iterable",
                               "sequence", "number", "integer", "float", "boolean", "callable"})
STRING_METHODS = frozenset({"startswith", "endswith", "find", "rfind", "index", "rindex", "count",
                            "split", "rsplit", "partition", "rpartition", "__contains__", "search",
                            "match", "fullmatch"})
# Format words real templates compare content with (tool calls, reasoning, media parts).
FORMAT_WORDS = frozenset({
    "user", "assistant", "system", "tool", "tool_response", "tool_responses", "tool_call", "tool_calls",
    "function", "functions", "ipython", "model", "think", "no_think", "channel", "message",
    "observation", "developer", "human", "ai", "role", "name", "type", "image", "audio", "video",
    "image_url", "audio_url", "video_url", "input_audio", "text", "content", "reasoning",
    "reasoning_content", "thought", "thinking", "answer", "final"})


def names_in(node: nodes.Node, names) -> bool:
    return any(n.name in names for n in node.find_all(nodes.Name)) or \
        (isinstance(node, nodes.Name) and node.name in names)


def refs_content(node: nodes.Node, tainted: frozenset[str] = frozenset()) -> bool:
    for n in [node, *node.find_all(nodes.Node)]:
        if isinstance(n, nodes.Getitem) and isinstance(n.arg, nodes.Const) and n.arg.value in CONTENT_KEYS:
            return True
        if isinstance(n, nodes.Getattr) and n.attr in CONTENT_KEYS:
            return True
        if isinstance(n, nodes.Call) and isinstance(n.node, nodes.Getattr) and n.node.attr == "get" and \
                any(isinstance(a, nodes.Const) and a.value in CONTENT_KEYS for a in n.args):
            return True
        if isinstance(n, nodes.Filter) and n.name == "map" and any(
                isinstance(kw.value, nodes.Const) and kw.value.value in CONTENT_KEYS for kw in n.kwargs):
            return True
        if isinstance(n, nodes.Name) and n.name in tainted:
            return True
    return False


def refs_date(node: nodes.Node, tainted: frozenset[str] = frozenset()) -> bool:
    for n in [node, *node.find_all(nodes.Node)]:
        if isinstance(n, nodes.Call) and (
                (isinstance(n.node, nodes.Name) and n.node.name in DATE_CALLS)
                or (isinstance(n.node, nodes.Getattr) and n.node.attr in ("now", "today", "utcnow"))):
            return True
        if isinstance(n, nodes.Name) and n.name in tainted:
            return True
    return False


def tainted_names(tree: nodes.Template, refs: Callable[..., bool]) -> frozenset[str]:
    """Names set (one or more hops) from an expression `refs` accepts: the ones set from it
    directly, then every name set from an expression that reads a tainted one."""
    assigns = [(a.target.name, a.node) for a in tree.find_all(nodes.Assign) if isinstance(a.target, nodes.Name)]
    tainted = {name for name, value in assigns if refs(value)}
    readers: dict[str, set[str]] = {}  # name -> the names set from expressions that read it
    for name, value in assigns:
        for n in [value, *value.find_all(nodes.Name)]:
            if isinstance(n, nodes.Name):
                readers.setdefault(n.name, set()).add(name)
    work = list(tainted)
    while work:
        for reader in readers.get(work.pop(), ()):
            if reader not in tainted:
                tainted.add(reader)
                work.append(reader)
    return frozenset(tainted)


def trigger_word(text: str) -> bool:
    """A plain word or phrase (a trigger), as opposed to a format marker or punctuation."""
    s = text.strip()
    if not re.search(r"[^\W\d_]", s) or any(c in "<>|[]{}" for c in s):
        return False
    return s.lower().lstrip("/").rstrip(":") not in FORMAT_WORDS


def content_keywords(test: nodes.Node, sym: Symbols, tainted: frozenset[str]) -> list[str]:
    """The plain words `test` compares message content with."""
    found: list[str] = []

    def take(node: nodes.Node) -> None:
        value = sym.fold(node)
        for v in (value if isinstance(value, tuple) else (value,)):
            if isinstance(v, str) and trigger_word(v):
                found.append(v)

    for n in [test, *test.find_all(nodes.Node)]:
        if isinstance(n, nodes.Compare):
            operands = [n.expr, *(op.expr for op in n.ops)]
            if any(refs_content(o, tainted) for o in operands):
                for o in operands:
                    if not refs_content(o, tainted):
                        take(o)
        elif isinstance(n, nodes.Call) and isinstance(n.node, nodes.Getattr) and \
                n.node.attr in STRING_METHODS and refs_content(n.node.node, tainted):
            for a in n.args:
                take(a)
        elif isinstance(n, (nodes.Filter, nodes.Test)) and n.node is not None and \
                n.name not in VALUE_BLIND_TESTS and refs_content(n.node, tainted):
            for a in n.args:
                take(a)
    return list(dict.fromkeys(found))


def compares_date(test: nodes.Node, tainted: frozenset[str]) -> bool:
    """Whether the value of a date reaches a comparison, a value test or arithmetic in `test`
    (a test for whether a date is defined does not look at it)."""
    for n in [test, *test.find_all(nodes.Node)]:
        if isinstance(n, nodes.Test) and n.name in VALUE_BLIND_TESTS:
            continue
        if isinstance(n, (nodes.Compare, nodes.Test, nodes.BinExpr)) or (
                isinstance(n, nodes.Call) and isinstance(n.node, nodes.Getattr) and n.node.attr in STRING_METHODS):
            children = list(n.iter_child_nodes())
            if any(refs_date(c, tainted) for c in children):
                return True
    return False


# -- what a template writes ----------------------------------------------------------------------

TURN_RE = re.compile(
    r"<\|im_start\|>\s*(?P<a>\w+)|<\|start_header_id\|>\s*(?P<b>\w+)\s*<\|end_header_id\|>"
    r"|<start_of_turn>\s*(?P<c>\w+)|<\|(?P<d>system|user|assistant)\|>|(?P<e>\[INST\]|<<SYS>>)"
    r"|<｜(?P<f>User|Assistant|System)｜>|<\|turn>\s*(?P<g>\w+)"
    r"|(?:^|\n)\s*(?:###\s*)?(?P<h>System|User|Human|Assistant)\s*:", re.I)
REPLY_ROLES = frozenset({"assistant", "model", "bot", "gpt"})


def turn_header(text: str) -> str | None:
    """The role of the first turn header `text` writes, if it writes one."""
    m = TURN_RE.search(text)
    if not m:
        return None
    role = next(g for g in m.groups() if g)
    return {"[inst]": "user", "<<sys>>": "system"}.get(role.lower(), role.lower())


DECODE_FILTERS = frozenset({"b64decode", "b32decode", "b16decode", "a85decode", "b85decode", "base64_decode",
                            "b64_decode", "frombase64", "from_base64", "decodebytes", "urldecode", "unquote",
                            "unquote_plus", "unhexlify", "fromhex", "from_hex", "rot13", "decompress",
                            "decode", "unescape_unicode"})


def decoder_name(node: nodes.Node, sym: Symbols) -> str | None:
    """A decode step: a decode filter or method, or a string stored reversed."""
    if isinstance(node, (nodes.Filter, nodes.Test)):
        if node.name in DECODE_FILTERS:
            return f"{node.name} filter"
        if node.name == "reverse" and node.node is not None:
            text = sym.text(node.node)
            if text and re.search(r"[^\W\d_]{3}", text):
                return "reverse filter on a constant string"
    if isinstance(node, nodes.Call):
        callee = node.node
        name = getattr(callee, "attr", None) or getattr(callee, "name", None)
        if name in DECODE_FILTERS:
            return f"{name} call"
    return None
