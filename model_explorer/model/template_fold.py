"""The strings a Jinja expression spells without running it: constant folding over the parsed
template, so a name assembled from pieces ('__glo' ~ 'bals__', ['__', 'class', '__']|join,
'{}{}'.format(...), a variable set to one of those) reads as what it is.

Only constants, the string operators and the string filters/methods are evaluated, by hand: no
template code runs, nothing is rendered.
"""

from __future__ import annotations

import re

from jinja2 import nodes

MAX_LENGTH = 4096  # a folded string longer than this is not a name anyone hides
MAX_DEPTH = 64

Folded = str | tuple  # a string, or a sequence of strings (a list literal, dict() keys)

# str methods and filters that keep a constant a constant
_METHODS = {"upper": str.upper, "lower": str.lower, "strip": str.strip, "title": str.title,
            "capitalize": str.capitalize, "lstrip": str.lstrip, "rstrip": str.rstrip}
_FILTERS = {"upper": str.upper, "lower": str.lower, "trim": str.strip, "title": str.title,
            "capitalize": str.capitalize, "string": str, "e": str, "safe": str}


_FIELD = re.compile(r"\{(\w*)\}|\{\{|\}\}")
_PERCENT = re.compile(r"%[sdi%]")


def _format(fmt: str, args: list, kwargs: dict) -> str | None:
    """str.format for plain fields only: attribute access ({0.__class__}) and widths ({:>999999999})
    would run or allocate in this process, so any other field leaves the value unknown."""
    if re.sub(_FIELD, "", fmt).count("{") or re.sub(_FIELD, "", fmt).count("}"):
        return None
    auto = iter(args)

    def field(m: re.Match) -> str:
        if m.group(0) in ("{{", "}}"):
            return m.group(0)[0]
        key = m.group(1)
        if key == "":
            return str(next(auto))
        return str(args[int(key)] if key.isdigit() else kwargs[key])

    return _FIELD.sub(field, fmt)


def _percent(fmt: str, args: tuple) -> str | None:
    """'%s' % x for %s, %d and %% only (a width like %999999999s would allocate it)."""
    if fmt.count("%") != 2 * fmt.count("%%") + len(_PERCENT.findall(fmt.replace("%%", ""))):
        return None
    parts = iter(args)
    return _PERCENT.sub(lambda m: "%" if m.group(0) == "%%" else str(next(parts)), fmt)


def _replace(value: str, old: str, new: str) -> str | None:
    if not old or len(value) * max(1, len(new)) > 16 * MAX_LENGTH:
        return None
    return value.replace(old, new)


class Symbols:
    """Every `{% set name = ... %}` of a template, folded on demand (the last one wins)."""

    def __init__(self, template: nodes.Template) -> None:
        self.values: dict[str, nodes.Node] = {}
        for node in template.find_all((nodes.Assign, nodes.AssignBlock)):
            if isinstance(node.target, nodes.Name):
                self.values[node.target.name] = node.node if isinstance(node, nodes.Assign) else node
        self._busy: set[str] = set()
        self._folded: dict[str, Folded | None] = {}  # a chain of sets folds once per name, not 2**n times

    def fold(self, node: nodes.Node | None, depth: int = 0) -> Folded | None:
        """The constant string (or strings) `node` evaluates to, or None when it depends on input."""
        if node is None or depth > MAX_DEPTH:
            return None
        try:
            out = self._fold(node, depth + 1)
        except (TypeError, ValueError, IndexError, KeyError, OverflowError, StopIteration):
            return None
        if isinstance(out, str) and len(out) > MAX_LENGTH:
            return out[:MAX_LENGTH]
        return out

    def text(self, node: nodes.Node | None) -> str | None:
        out = self.fold(node)
        return out if isinstance(out, str) else None

    def _fold(self, node: nodes.Node, depth: int) -> Folded | None:
        f = self.fold
        if isinstance(node, nodes.Const):
            v = node.value
            if isinstance(v, bool) or not isinstance(v, (str, int, float)):
                return None
            return v if isinstance(v, str) else str(v)
        if isinstance(node, nodes.TemplateData):
            return node.data
        if isinstance(node, (nodes.List, nodes.Tuple)):
            items = [f(x, depth) for x in node.items]
            return tuple(items) if all(isinstance(x, str) for x in items) else None
        if isinstance(node, nodes.Name):
            return self._name(node.name, depth)
        if isinstance(node, nodes.AssignBlock):
            parts = [f(x, depth) for x in node.body]
            return "".join(parts) if all(isinstance(x, str) for x in parts) else None
        if isinstance(node, nodes.Output):
            parts = [f(x, depth) for x in node.nodes]
            return "".join(parts) if all(isinstance(x, str) for x in parts) else None
        if isinstance(node, nodes.Concat):
            parts = [f(x, depth) for x in node.nodes]
            return "".join(parts) if all(isinstance(x, str) for x in parts) else None
        if isinstance(node, nodes.Add):
            a, b = f(node.left, depth), f(node.right, depth)
            return a + b if isinstance(a, str) and isinstance(b, str) else None
        if isinstance(node, nodes.Mul):
            a, b = f(node.left, depth), node.right
            if isinstance(a, str) and isinstance(b, nodes.Const) and isinstance(b.value, int):
                return a * max(0, min(b.value, MAX_LENGTH // max(1, len(a))))
            return None
        if isinstance(node, nodes.Mod):
            fmt, arg = f(node.left, depth), f(node.right, depth)
            if isinstance(fmt, str) and arg is not None:
                return _percent(fmt, arg if isinstance(arg, tuple) else (arg,))
            return None
        if isinstance(node, nodes.Getitem):
            return self._getitem(node, depth)
        if isinstance(node, nodes.Filter):
            return self._filter(node, depth)
        if isinstance(node, nodes.Call):
            return self._call(node, depth)
        if isinstance(node, nodes.CondExpr):
            return f(node.expr1, depth)
        return None

    def _name(self, name: str, depth: int) -> Folded | None:
        if name in self._folded:
            return self._folded[name]
        if name not in self.values or name in self._busy:
            return None
        self._busy.add(name)
        try:
            out = self.fold(self.values[name], depth)
        finally:
            self._busy.discard(name)
        self._folded[name] = out
        return out

    def _getitem(self, node: nodes.Getitem, depth: int) -> Folded | None:
        base = self.fold(node.node, depth)
        if base is None:
            return None
        arg = node.arg
        if isinstance(arg, nodes.Const) and isinstance(arg.value, int):
            return base[arg.value]
        if isinstance(arg, nodes.Slice):
            bounds = [x.value if isinstance(x, nodes.Const) and isinstance(x.value, int) else None
                      for x in (arg.start, arg.stop, arg.step)]
            if any(x is None and y is not None for x, y in zip(bounds, (arg.start, arg.stop, arg.step))):
                return None
            return base[slice(*bounds)]
        return None

    def _filter(self, node: nodes.Filter, depth: int) -> Folded | None:
        value = self.fold(node.node, depth) if node.node is not None else None
        args = [self.fold(a, depth) for a in node.args]
        name = node.name
        if value is None or any(a is None for a in args):
            return None
        if name == "join":
            sep = args[0] if args else ""
            return sep.join(value) if isinstance(value, tuple) and isinstance(sep, str) else None
        if name == "reverse":
            return value[::-1]
        if name in ("first", "last") and value:
            return value[0] if name == "first" else value[-1]
        if name == "list":
            return tuple(value)
        if name == "replace" and isinstance(value, str) and len(args) >= 2:
            return _replace(value, args[0], args[1])
        if name == "format" and isinstance(value, str):
            return _percent(value, tuple(args))
        if name in _FILTERS and isinstance(value, str):
            return _FILTERS[name](value)
        return None

    def _call(self, node: nodes.Call, depth: int) -> Folded | None:
        if isinstance(node.node, nodes.Name) and node.node.name == "dict":  # dict(__class__=1)|first
            return tuple(kw.key for kw in node.kwargs)
        if not isinstance(node.node, nodes.Getattr):
            return None
        obj = self.fold(node.node.node, depth)
        args = [self.fold(a, depth) for a in node.args]
        method = node.node.attr
        if obj is None or any(a is None for a in args):
            return None
        if method == "join" and isinstance(obj, str) and len(args) == 1 and isinstance(args[0], tuple):
            return obj.join(args[0])
        if method == "format" and isinstance(obj, str):
            return _format(obj, args, {kw.key: self.fold(kw.value, depth) or "" for kw in node.kwargs})
        if method == "replace" and isinstance(obj, str) and len(args) >= 2:
            return _replace(obj, args[0], args[1])
        if method in _METHODS and isinstance(obj, str) and not args:
            return _METHODS[method](obj)
        return None
