"""What a chat template does to canary conversations (template_canary), as hits at its source:
text it writes under a condition, shown with the branch that writes it and the condition that
gates it; an assistant turn the generation prompt prefills; a message it drops or rewrites.

The probes are steered by the template's own constants: the plain words its tests compare with
are tried as message content and as tool names, and the numbers it compares with as
conversation lengths, so a branch keyed to a trigger is rendered, not only suspected.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from jinja2 import nodes

from . import template_rules as rules
from .template_audit import TemplateHit, parse_env
from .template_canary import Canary, Observation, probe
from .template_fold import Symbols
from .template_locate import Locator
from .text_audit import visible

MAX_COUNT = 200  # message counts tried: a gate past this many turns is left to the static audit
GATE_CODES = {"content": "chat_template_content_gate", "date": "chat_template_date_gate"}
GATE_WORDS = {"count": "the number of messages", "date": "the date", "random": "chance (the random filter)",
              "content": "what a message says", "tool_name": "a tool's name"}


@dataclass
class Emitter:
    """Constant text the template writes at one place, and the branches around that place."""
    text: str
    node: nodes.Node  # the literal that holds it (placed in the source)
    gates: tuple[tuple[str, nodes.Node], ...]  # (keyword, the tag's node), outermost first


def judge_template(source: str) -> tuple[list[TemplateHit], Canary | None]:
    """Hits for what the template renders, and the canary conversation to show; ([], None) when
    it does not parse (the static audit says so)."""
    env = parse_env()
    try:
        tree = env.parse(source)
    except Exception:  # noqa: BLE001 - a template that does not parse is reported by the audit
        return [], None
    sym = Symbols(tree)
    obs, canary = probe(source, _guesses(tree, sym), _counts(tree), _uses_random(tree))
    if not obs:
        return [], canary
    return Judge(tree, Locator(env, source), sym).hits(obs), canary


# -- steering the probes -----------------------------------------------------------------------

def _tests(tree: nodes.Template) -> list[nodes.Node]:
    out = [n.test for n in tree.find_all(nodes.If)] + [n.test for n in tree.find_all(nodes.CondExpr) if n.test]
    return out + [n.test for n in tree.find_all(nodes.For) if n.test is not None]


def _guesses(tree: nodes.Template, sym: Symbols) -> list[str]:
    """Plain words the template's tests compare anything with (a trigger, a tool name)."""
    found = []
    for test in _tests(tree):
        for const in [test, *test.find_all(nodes.Node)]:
            value = sym.text(const) if isinstance(const, (nodes.Const, nodes.Name)) else None
            if value and len(value) <= 80 and rules.trigger_word(value):
                found.append(value)
    return list(dict.fromkeys(found))


def _counts(tree: nodes.Template) -> list[int]:
    """Message counts around the numbers the template's tests compare with (length > 6: 7 and 8)."""
    out = set()
    for test in _tests(tree):
        for c in test.find_all(nodes.Const):
            if isinstance(c.value, int) and not isinstance(c.value, bool) and 2 <= c.value < MAX_COUNT:
                out |= {c.value + 1, c.value + 2}
    return sorted(out)[:6]


def _uses_random(tree: nodes.Template) -> bool:
    return any(f.name == "random" for f in tree.find_all(nodes.Filter))


# -- placing what was seen ---------------------------------------------------------------------

class Judge:
    def __init__(self, tree: nodes.Template, loc: Locator, sym: Symbols) -> None:
        self.tree, self.loc, self.sym = tree, loc, sym
        self.emitters: list[Emitter] = []
        self._walk(tree.body, ())

    def _walk(self, body: list[nodes.Node], gates: tuple) -> None:
        for node in body:
            if isinstance(node, nodes.If):
                for keyword, branch in [("if", node), *(("elif", e) for e in node.elif_)]:
                    self._walk(branch.body, gates + ((keyword, branch),))
                self._walk(node.else_, gates + (("else", node),))
            elif isinstance(node, nodes.For):
                self._walk(node.body, gates + (("for", node),))
                self._walk(node.else_, gates + (("else", node),))
            elif isinstance(node, nodes.Output):
                for child in node.nodes:
                    self._emitted(child, gates)
            elif isinstance(node, (nodes.Macro, nodes.CallBlock, nodes.FilterBlock, nodes.Scope, nodes.With,
                                   nodes.ScopedEvalContextModifier, nodes.AssignBlock)):
                self._walk(node.body, gates)

    def _emitted(self, expr: nodes.Node, gates: tuple) -> None:
        if isinstance(expr, nodes.TemplateData):
            self.emitters.append(Emitter(expr.data, expr, gates))
            return
        for n in [expr, *expr.find_all(nodes.Node)]:
            g = gates
            if isinstance(n, nodes.CondExpr):
                continue
            text = self.sym.text(n) if isinstance(n, (nodes.Const, nodes.Name, nodes.Concat, nodes.Add)) else None
            if not text:
                continue
            cond = next((c for c in expr.find_all(nodes.CondExpr)
                         if any(x is n for x in [c.expr1, *c.expr1.find_all(nodes.Node)])), None)
            if cond is not None and cond.test is not None:
                g = gates + (("if", cond),)
            self.emitters.append(Emitter(text, n, g))

    def hits(self, obs: list[Observation]) -> list[TemplateHit]:
        out: dict[tuple[str, int], TemplateHit] = {}
        for o in obs:
            for hit in self._hits(o):
                same = out.setdefault((hit.code, hit.start), hit)
                if same is not hit and "role" in hit.extra and hit.extra["role"] not in same.extra["roles"]:
                    same.extra["roles"].append(hit.extra["role"])  # one finding names every role it drops
        return sorted(out.values(), key=lambda h: (h.start, h.code))

    def _hits(self, o: Observation) -> list[TemplateHit]:
        if o.kind in ("dropped", "rewritten"):
            return [self._content(o)]
        emitter = self._emitter(o.runs)
        span = self._literal_span(emitter)
        shown = visible(o.text, 240)
        if o.kind == "prefill":
            return [TemplateHit("chat_template_prefill", *span, (
                f"The chat template's generation prompt writes “{shown}” into the assistant's turn: expected only "
                "the role markup that opens the turn, found an answer begun for the model, which it continues "
                f"as if it had chosen those words{self._where(emitter)}."), {"text": o.text})]
        if o.kind == "own_turn":
            return [TemplateHit("chat_template_injected_text", *span, (
                f"The chat template writes a turn of its own, “{shown}”, into a conversation that has its own "
                "system prompt: expected every turn to carry a message of the conversation, found one that "
                f"carries none{self._where(emitter)}. The model reads it as if the system or the user had said "
                "it."), {"text": o.text, "condition": o.condition})]
        gate = self._gate(emitter)
        why = GATE_WORDS[o.gate]
        hits = [TemplateHit("chat_template_injected_text", *span, (
            f"The chat template writes “{shown}” only when {o.condition}: expected text that does not depend "
            f"on {why}, found this{self._where(emitter)}."),
            {"text": o.text, "condition": o.condition, "gate": o.gate})] if o.runs else []
        gate_span = self._tag(gate[1], gate[0]) if gate else span
        tag = visible(self.loc.source[gate_span[0]:gate_span[1]], 200)
        hits.append(TemplateHit(GATE_CODES.get(o.gate, "chat_template_gate"), *gate_span, (
            f"The chat template's output changes with {why}: rendered when {o.condition}, it writes “{shown}”, "
            f"which the same conversation otherwise does not have. The condition is “{tag}”. A template "
            "formats turns by role and position; a switch on this is the shape of a planted trigger."),
            {"condition": o.condition, "gate": o.gate, "text": o.text, **({"keywords": [o.guess]} if o.guess else {})}))
        return hits

    def _content(self, o: Observation) -> TemplateHit:
        span = self._role_span(o.role)
        when = f" when {o.condition}" if o.condition else ""
        found = (f"found it rewritten as “{visible(o.found, 120)}”" if o.kind == "rewritten" and o.found
                 else "found it changed" if o.kind == "rewritten" else "found none of it")
        return TemplateHit("chat_template_drops_content", *span, (
            f"The chat template {'drops' if o.kind == 'dropped' else 'rewrites'} the {o.role} message's "
            f"content{when}: expected “{visible(o.text, 80)}” in the prompt as it was given, {found}. "
            + ("The operator's instructions never reach the model." if o.role == "system" else
               "The model answers a conversation other than the one it was given.")),
            {"role": o.role, "roles": [o.role], "kind": o.kind, "condition": o.condition})

    # -- where -------------------------------------------------------------------------------

    def _emitter(self, runs: list[str]) -> Emitter | None:
        for run in runs:  # the shortest text that holds it: the literal itself, not an expression around it
            holding = [e for e in self.emitters if run in e.text]
            if holding:
                return min(holding, key=lambda e: len(e.text))
        for run in runs:  # assembled from pieces: the first piece of real words that is part of it
            for e in self.emitters:
                if len(e.text.strip()) >= 6 and re.search(r"[^\W\d_]{3}", e.text) and e.text.strip() in run:
                    return e
        return None

    def _literal_span(self, e: Emitter | None) -> tuple[int, int]:
        if e is None:
            return 0, len(self.loc.source)
        n = e.node
        if isinstance(n, nodes.TemplateData):
            i = self.loc.data(n.lineno, n.data.strip() or n.data)
        elif isinstance(n, nodes.Name):  # a variable: the literal it was set to, else the name
            n = self.sym.values.get(n.name, n)
            first = next((c for c in n.find_all(nodes.Const) if isinstance(c.value, str) and c.value), None)
            i = self.loc.string(first.lineno, first.value) if first is not None else self.loc.name(n.lineno, e.node.name)
        else:
            first = n if isinstance(n, nodes.Const) else next(
                (c for c in n.find_all(nodes.Const) if isinstance(c.value, str) and c.value), None)
            i = self.loc.string(first.lineno, first.value) if first is not None else None
        return self.loc.tag(i) if i is not None else self.loc.line(n.lineno)

    def _gate(self, e: Emitter | None) -> tuple[str, nodes.Node] | None:
        """The innermost branch around the text that is not the generation prompt's."""
        for keyword, node in reversed(e.gates if e else ()):
            test = getattr(node, "test", None)
            if test is None or not rules.names_in(test, {"add_generation_prompt"}):
                return keyword, node
        return None

    def _tag(self, node: nodes.Node, keyword: str) -> tuple[int, int]:
        """The `{% if %}` / `{% elif %}` / `{% for %}` tag of a statement: the k-th such tag of the
        source is the k-th such node of the tree (both in source order); an inline `x if c else y`
        by its line."""
        kinds = {nodes.If: ("if", "elif"), nodes.For: ("for",)}
        for kind, words in kinds.items():
            if isinstance(node, kind):
                k = next(i for i, n in enumerate(self.tree.find_all(kind)) if n is node)
                starts = [i for i, t in enumerate(self.loc.tokens) if t.type == "name" and t.value in words
                          and i > 0 and self.loc.tokens[i - 1].type in ("block_begin", "linestatement_begin")]
                if k < len(starts):
                    return self.loc.tag(starts[k])
        i = self.loc.name(node.lineno, "if")
        return self.loc.tag(i) if i is not None else self.loc.line(node.lineno)

    def _where(self, e: Emitter | None) -> str:
        if e is None:
            return " (the text is assembled at render time; no literal of the template holds it whole)"
        gates = [g for g in e.gates if g[0] != "for"]
        if not gates:
            return ", written by a part of the template no condition gates"
        keyword, node = gates[-1]
        a, b = self._tag(node, keyword)
        return f", written in the {keyword} branch of “{visible(self.loc.source[a:b], 160)}”"

    def _role_span(self, role: str) -> tuple[int, int]:
        """The test that leaves the role out (one that names it), else the loop over the messages."""
        for branch in [*self.tree.find_all(nodes.If), *self.tree.find_all(nodes.For)]:
            test = getattr(branch, "test", None)
            if test is not None and any(c.value == role for c in test.find_all(nodes.Const)):
                return self._tag(branch, "if")
        loop = next(iter(self.tree.find_all(nodes.For)), None)
        if loop is not None:
            return self._tag(loop, "for")
        return 0, len(self.loc.source)
