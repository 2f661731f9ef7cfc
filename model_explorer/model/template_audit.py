"""A chat template read as code from a stranger: parsed with jinja2 (never rendered here), and
every construct that has no business formatting a conversation named at its place in the text.

- reaching Python internals (dunder attributes or keys, the `attr` filter, names assembled from
  string pieces, Jinja's globals chained into them): the sandbox escapes that ran shell commands
  in llama-cpp-python (CVE-2024-34359). An error: this is an attack.
- text the template writes on its own: an instruction idiom, or a turn header (system, user)
  written inside a branch that tests what a message says or what day it is;
- branches on message content (compared with a plain word) or on the date;
- include / import / extends, decode filters;
- invisible and bidi-override code points (text_audit).

`audit_template(source)` returns hits as character ranges of the source; the caller places them
in the file. The sanctioned idioms stay clean: `raise_exception`, a "Today Date" header from
`strftime_now`, a default system prompt when none is given, tests for format markers such as
'</think>' or '<tool_response>'.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from jinja2 import nodes
from jinja2.exceptions import TemplateSyntaxError

from . import template_rules as rules
from .template_fold import Symbols
from .template_locate import Locator
from .text_audit import hidden_runs, injection_phrases, visible


@dataclass
class TemplateHit:
    code: str
    start: int  # character range in the template source
    end: int
    message: str
    extra: dict = field(default_factory=dict)


def parse_env():
    """The environment templates are parsed with: transformers' extensions, nothing to render."""
    from jinja2.sandbox import ImmutableSandboxedEnvironment

    from .template_render import generation_block

    return ImmutableSandboxedEnvironment(extensions=["jinja2.ext.loopcontrols", generation_block()])


MAX_PARSED = 200_000  # characters; real templates are under 40,000
MAX_PER_CODE = 20  # findings of one code in one template; the last says how many more there are


def audit_template(source: str) -> list[TemplateHit]:
    hits = _text_hits(source)
    if len(source) > MAX_PARSED:
        return hits + _unparsed_escape(source, f"{len(source):,} characters, too long to parse here")
    env = parse_env()
    try:
        tree = env.parse(source)
    except (TemplateSyntaxError, RecursionError, MemoryError):
        return hits + _unparsed_escape(source, "does not parse")
    try:
        Audit(tree, Locator(env, source), hits).run()
    except (RecursionError, MemoryError):  # parsed, but nested past what the walk can follow
        if not any(h.code == "chat_template_escape" for h in hits):
            hits += _unparsed_escape(source, "nested too deep to audit whole")
    hits.sort(key=lambda h: (h.start, h.code))
    return hits


def _text_hits(source: str) -> list[TemplateHit]:
    out = []
    for h in hidden_runs(source):
        code = "bidi_override" if h.kind == "bidi" else "hidden_text"
        it = "it" if h.end - h.start == 1 else "them"
        effect = ("it reorders what is shown against what the model reads" if h.kind == "bidi"
                  else f"a reader does not see {it}, the model reads {it}")
        out.append(TemplateHit(code, h.start, h.end, f"The chat template holds {h.what}: {effect}. "
                               f"In place: “{visible(source[max(0, h.start - 30):h.end + 30])}”.",
                               {"where": "chat template"}))
    return out


def _unparsed_escape(source: str, why: str) -> list[TemplateHit]:
    """A template that is not parsed still says what it is by the names only an escape needs."""
    out = []
    for m in re.finditer(rules.STRONG_DUNDER_RE, source):
        out.append(TemplateHit("chat_template_escape", m.start(), m.end(),
                               f"The chat template ({why}) names {m.group(0)}: this is an "
                               "attack. " + rules.escape_effect([m.group(0)], None), {"reaches": [m.group(0)]}))
        break
    return out


GATE_WORDS = {"content": "what a message says", "date": "the date"}


class Audit:
    def __init__(self, tree: nodes.Template, loc: Locator, hits: list[TemplateHit]) -> None:
        self.tree, self.loc, self.hits = tree, loc, hits
        self.sym = Symbols(tree)
        self.content_names = rules.tainted_names(tree, rules.refs_content)
        self.date_names = rules.tainted_names(tree, rules.refs_date)
        self.seen: set[tuple[str, int]] = set()
        # text the template writes of its own: span -> (the text, why it is reported)
        self.written: dict[tuple[int, int], tuple[str, list[str], list[str]]] = {}

    def run(self) -> None:
        self._escapes()
        self._statements(self.tree.body, gates=(), generation=False)
        self._literals()
        self._transports()
        for span, (text, reasons, idioms) in self.written.items():
            self.add("chat_template_injected_text", span,
                     f"The chat template writes text of its own: {'; '.join(reasons)}. In place: "
                     f"“{visible(text, 240)}”. It is not taken from the conversation: the model reads it "
                     "in every chat where it is written, as if the system or the user had said it.",
                     text=text, idioms=idioms)

    def _written(self, span: tuple[int, int], text: str, reason: str, idioms: list[str] = ()) -> None:
        entry = self.written.setdefault(span, (text, [], []))
        if reason not in entry[1]:
            entry[1].append(reason)
        entry[2].extend(i for i in idioms if i not in entry[2])

    def add(self, code: str, span: tuple[int, int], message: str, **extra) -> None:
        if (code, span[0]) in self.seen:
            return
        self.seen.add((code, span[0]))
        same = [h for h in self.hits if h.code == code]
        if len(same) < MAX_PER_CODE:
            self.hits.append(TemplateHit(code, span[0], span[1], message, extra))
            return
        last = same[-1]
        last.extra["more"] = last.extra.get("more", 0) + 1
        last.message = re.sub(r" \(and [\d,]+ more places like it\)$", "", last.message) + \
            f" (and {last.extra['more']:,} more places like it)"

    def _span(self, i: int | None, lineno: int | None) -> tuple[int, int]:
        return self.loc.tag(i) if i is not None else self.loc.line(lineno)

    # -- sandbox escapes ---------------------------------------------------------------------

    def _escapes(self) -> None:
        """One finding per outermost expression that reaches Python internals."""
        stack = [(self.tree, False)]
        while stack:
            node, in_expr = stack.pop()
            if isinstance(node, nodes.Expr) and not in_expr:
                found = [(n, p) for n in [node, *node.find_all(nodes.Node)] if (p := rules.primitive(n, self.sym))]
                if found:
                    self._escape(node, found)
                    continue
            stack.extend((c, isinstance(node, nodes.Expr) or in_expr) for c in reversed(list(node.iter_child_nodes())))

    def _escape(self, expr: nodes.Expr, found: list[tuple[nodes.Node, rules.Primitive]]) -> None:
        first = None
        for n, p in found:
            first = self._locate_primitive(n, p)
            if first is not None:
                break
        span = self._span(first, expr.lineno)
        names = list(dict.fromkeys(p.name for _, p in found))
        gadget = next((p.gadget for _, p in found if p.gadget), None)
        command = rules.shell_command(expr, self.sym)
        text = self.loc.source[span[0]:span[1]]
        self.add("chat_template_escape", span,
                 f"The chat template reaches Python internals ({', '.join(names[:8])}"
                 + (f", starting from Jinja's {gadget} global" if gadget else "")
                 + f") in “{visible(text, 200)}”: this is an attack, not a formatting bug. "
                 + rules.escape_effect(names, command), reaches=names, command=command)

    def _locate_primitive(self, n: nodes.Node, p: rules.Primitive) -> int | None:
        if isinstance(n, nodes.Getattr) or isinstance(n, nodes.Name):
            return self.loc.name(n.lineno, p.name if isinstance(n, nodes.Getattr) else n.name)
        if isinstance(n, (nodes.Filter, nodes.Test)) and p.needle:
            return self.loc.name(n.lineno, p.needle)
        const = next(iter(n.find_all(nodes.Const)), None) if not isinstance(n, nodes.Const) else n
        if const is not None and isinstance(const.value, str) and const.value:
            return self.loc.string(const.lineno, const.value)
        return None

    # -- branches and what they write --------------------------------------------------------

    def _statements(self, body: list[nodes.Node], gates: tuple[str, ...], generation: bool) -> None:
        for node in body:
            if isinstance(node, nodes.If):
                self._if(node, gates, generation)
            elif isinstance(node, nodes.Output):
                self._output(node, gates, generation)
            elif isinstance(node, nodes.For):
                g = gates + self._gate(node.test, "for") if node.test is not None else gates
                self._statements(node.body, g, generation)
                self._statements(node.else_, gates, generation)
            elif isinstance(node, (nodes.Macro, nodes.CallBlock, nodes.FilterBlock, nodes.Scope,
                                   nodes.ScopedEvalContextModifier, nodes.With, nodes.AssignBlock)):
                self._statements(node.body, gates, generation)

    def _if(self, node: nodes.If, gates: tuple[str, ...], generation: bool) -> None:
        for keyword, branch in [("if", node), *(("elif", e) for e in node.elif_)]:
            inner = gates + self._gate(branch.test, keyword)
            gen = generation or rules.names_in(branch.test, {"add_generation_prompt"})
            self._statements(branch.body, inner, gen)
            gates = inner  # an elif or else runs when the tests before it were false: still gated
        self._statements(node.else_, gates, generation)

    def _gate(self, test: nodes.Node, keyword: str) -> tuple[str, ...]:
        """The gates `test` adds ("content" / "date"), each reported once at its tag."""
        out = []
        words = rules.content_keywords(test, self.sym, self.content_names)
        if words:
            span = self._span(self.loc.name(test.lineno, keyword), test.lineno)
            quoted = ", ".join(f"“{visible(w, 60)}”" for w in words[:4])
            self.add("chat_template_content_gate", span,
                     f"The chat template branches on what a message says: it compares the content with "
                     f"{quoted} in “{visible(self.loc.source[span[0]:span[1]], 200)}”. A template formats "
                     "turns by role and position; behaviour that switches on a word is the shape of a "
                     "planted trigger.", keywords=words)
            out.append("content")
        if rules.compares_date(test, self.date_names):
            span = self._span(self.loc.name(test.lineno, keyword), test.lineno)
            self.add("chat_template_date_gate", span,
                     "The chat template changes what it writes depending on the date (“"
                     f"{visible(self.loc.source[span[0]:span[1]], 200)}”): the model behaves one way "
                     "in tests and another after a day chosen by the template's author. Printing the "
                     "date (a “Today Date” line) is normal; branching on it is not.")
            out.append("date")
        return tuple(out)

    def _output(self, node: nodes.Output, gates: tuple[str, ...], generation: bool) -> None:
        for child in node.nodes:
            for text, lineno, piece in self._emitted(child):
                role = rules.turn_header(text)
                if role is None:
                    continue
                if gates:
                    why = " and ".join(dict.fromkeys(GATE_WORDS[g] for g in gates))
                    self._injected(piece, lineno, text, f"it opens a {role} turn inside a branch that "
                                   f"depends on {why}")
                elif generation and role not in rules.REPLY_ROLES:
                    self._injected(piece, lineno, text, f"it opens a {role} turn after the conversation, "
                                   "where only the assistant's turn belongs")

    def _emitted(self, child: nodes.Node):
        """(text, lineno, node) for the constant text an output expression writes."""
        if isinstance(child, nodes.TemplateData):
            yield child.data, child.lineno, child
            return
        for const in [child, *child.find_all(nodes.Node)]:
            if isinstance(const, nodes.Const) and isinstance(const.value, str):
                yield const.value, const.lineno, const
            elif isinstance(const, nodes.Name):
                value = self.sym.text(const)
                if value:
                    yield value, const.lineno, const

    def _injected(self, piece: nodes.Node, lineno: int, text: str, why: str) -> None:
        self._written(self._span(self._literal_token(piece, lineno, text), lineno), text, why)

    def _literal_token(self, piece: nodes.Node, lineno: int, text: str) -> int | None:
        if isinstance(piece, nodes.TemplateData):
            return self.loc.data(lineno, text.strip() or text)
        if isinstance(piece, nodes.Name):
            return self.loc.name(lineno, piece.name)
        return self.loc.string(lineno, text)

    def _literals(self) -> None:
        """Instruction idioms in any constant text, and in text assembled from pieces."""
        for node in self.tree.find_all((nodes.TemplateData, nodes.Const)):
            text = node.data if isinstance(node, nodes.TemplateData) else node.value
            if not isinstance(text, str) or not (phrases := injection_phrases(text)):
                continue
            span = self._span(self._literal_token(node, node.lineno, text), node.lineno)
            self._idioms(span, text, phrases, "")
        for node in self.tree.find_all((nodes.Concat, nodes.Add, nodes.Filter, nodes.Call, nodes.Mod)):
            text = self.sym.text(node)
            if text and (phrases := injection_phrases(text)) and not any(
                    injection_phrases(c.value) for c in node.find_all(nodes.Const) if isinstance(c.value, str)):
                first = next((c for c in node.find_all(nodes.Const) if isinstance(c.value, str) and c.value), None)
                i = self.loc.string(first.lineno, first.value) if first is not None else None
                self._idioms(self._span(i, node.lineno), text, phrases, " assembled from string pieces")

    def _idioms(self, span: tuple[int, int], text: str, phrases, how: str) -> None:
        said = [p.what for p in phrases]
        self._written(span, text, f"instructions{how} ({'; '.join(dict.fromkeys(said))})", said)

    # -- include / import / extends, decode filters ------------------------------------------

    def _transports(self) -> None:
        keywords = {nodes.Include: "include", nodes.Import: "import", nodes.FromImport: "from",
                    nodes.Extends: "extends"}
        for node in self.tree.find_all(tuple(keywords)):
            span = self._span(self.loc.name(node.lineno, keywords[type(node)]), node.lineno)
            self.add("chat_template_include", span,
                     f"The chat template pulls in another template ({keywords[type(node)]}, “"
                     f"{visible(self.loc.source[span[0]:span[1]], 160)}”): what it runs is not in the "
                     "file that was checked. A chat template is self-contained; loaders that resolve the "
                     "name read it from wherever they are configured to.")
        for node in self.tree.find_all((nodes.Filter, nodes.Test, nodes.Call)):
            name = rules.decoder_name(node, self.sym)
            if name is None:
                continue
            needle = name.split(" ")[0]
            span = self._span(self.loc.name(node.lineno, needle), node.lineno)
            self.add("chat_template_decode", span,
                     f"The chat template decodes text at render time ({name}, in “"
                     f"{visible(self.loc.source[span[0]:span[1]], 160)}”): what it writes cannot be read in "
                     "the file, which is how a payload is hidden from a reviewer.", decoder=name)
