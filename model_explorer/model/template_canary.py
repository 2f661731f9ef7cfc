"""A chat template judged by what it renders: canary conversations (system, user, assistant, user;
with and without tools; short and long; several dates; each random pick; the words the template
compares with) rendered in the bounded sandbox (template_render.render_probe), and compared.

Every message's content must reach the output unchanged. What is left once the contents (and
the tool names and dates the conversation supplies) are masked is the template's own text: role
markup and special tokens, plus prose in the places a template has a reason for it (a default
system prompt when none is given, instructions for the tools it is given, a date it prints).
Reported, as `Observation`s for template_judge to place in the source:

- `gated`: own text that appears or changes only with a condition a template has no business
  reading (message count, the date, a random pick, a word in a message, a tool's name);
- `own_turn`: a whole turn of the template's own in a conversation that has a system prompt;
- `prefill`: prose the generation prompt writes into the assistant's turn;
- `dropped` / `rewritten`: a message whose content does not reach the output as it was given.
"""

from __future__ import annotations

import datetime
import re
import time
from dataclasses import dataclass, field

from .template_render import RENDER_SECONDS, render_probe
from .template_rules import TURN_RE

MASK = "\x00"
MAX_OUTPUT = 100_000  # characters of a render compared; a real prompt of four turns is a few thousand
MAX_GUESSES = 8  # words the template compares with, each tried as content and as a tool name
DATES = [datetime.datetime(2024, 7, 26, 9, 30), datetime.datetime(2025, 12, 25, 18, 0),
         datetime.datetime(2026, 4, 1, 0, 5), datetime.datetime(2031, 1, 1, 12, 0)]
SPECIALS = {"bos_token": "<s>", "eos_token": "</s>", "pad_token": "<pad>", "unk_token": "<unk>"}
TOOL = "kqtool_lookup"
# Words that are role markup when the template writes them ("Assistant:", "### Response:", "[INST]").
ROLE_WORDS = frozenset({
    "system", "user", "assistant", "model", "human", "bot", "gpt", "ai", "tool", "tools", "ipython",
    "developer", "response", "answer", "input", "instruction", "instructions", "inst", "sys", "function",
    "observation", "think", "thinking", "im", "start", "end", "eot", "id", "header", "of", "turn", "bos",
    "eos", "pad", "unk", "python", "tag"})
_MARKUP = re.compile(r"<\|[^|\n]{0,40}\|>|<｜[^｜\n]{0,40}｜>|</?[\w:.\-/|]{1,40}>|\[/?[A-Z_]{2,20}\]|<<\w{1,10}>>")
_WORD = re.compile(r"[^\W\d_]{2,}")
_CANARY = re.compile(r"kq\d+x\b[^<\n\x00]*")


@dataclass
class Render:
    text: str
    own: str  # the text with the conversation's pieces masked
    contents: list[str]


@dataclass
class Observation:
    kind: str  # "gated", "own_turn", "prefill", "dropped", "rewritten"
    text: str  # the template's own text (gated, own_turn, prefill), or the message's content
    condition: str  # what the probe varied, in words ("the conversation has 12 messages")
    gate: str = ""  # count / date / random / content / tool_name (gated only)
    role: str = ""  # the dropped or rewritten message's role
    found: str = ""  # what reached the output instead (rewritten)
    guess: str = ""  # the word the probe tried (content / tool_name)
    runs: list[str] = field(default_factory=list)  # the flagged pieces of prose, as rendered
    seen: Render | None = None  # the render that shows it


@dataclass
class Canary:
    """The conversation rendered for the Model tab: pieces of the output, each the conversation's
    (`content`), the template's markup (`markup`) or its own prose (`own`), and the prose the
    judge flags (`injected`)."""
    name: str
    text: str
    pieces: list[dict] = field(default_factory=list)


def message(n: int, role: str, extra: str = "") -> dict:
    return {"role": role, "content": f"kq{n}x {role} canary, do not alter this{extra}"}


def conversation(roles: str, extra: str = "") -> list[dict]:
    names = {"s": "system", "u": "user", "a": "assistant"}
    return [message(i, names[r], extra) for i, r in enumerate(roles)]


def long_roles(n: int) -> str:
    return "s" + ("ua" * n)[:max(1, n - 1)]


TOOLS = [{"type": "function", "function": {
    "name": TOOL, "description": "kqdesc looks a word up",
    "parameters": {"type": "object", "properties": {"q": {"type": "string", "description": "kqparam"}},
                   "required": ["q"]}}}]


def tool_turns() -> list[dict]:
    call = {"type": "function", "function": {"name": TOOL, "arguments": {"q": "kqarg"}}}
    return conversation("su") + [{"role": "assistant", "content": "", "tool_calls": [call]},
                                 {"role": "tool", "name": TOOL, "content": "kq9x tool canary, do not alter this"},
                                 message(10, "assistant"), message(11, "user")]


def with_tool_name(tools: list[dict], name: str) -> list[dict]:
    return [{**t, "function": {**t["function"], "name": name}} for t in tools]


# -- what is left of a render once the conversation is masked ---------------------------------

def masked(text: str, masks: list[str]) -> str:
    for m in sorted({m for m in masks if m}, key=len, reverse=True):
        text = text.replace(m, MASK)
    return text


def prose_runs(own: str) -> list[str]:
    """The runs of the template's own text that are words, not markup."""
    out = []
    for piece in re.split(r"[\n\x00]+", _MARKUP.sub("\n", own)):
        piece = piece.strip()
        if any(w.lower() not in ROLE_WORDS for w in _WORD.findall(piece)):
            out.append(piece)
    return out


def fragments(own: str) -> set[str]:
    """The template's own text between two pieces of the conversation, each as it stands."""
    return {f for f in own.split(MASK) if f.strip()}


# -- the probes --------------------------------------------------------------------------------

class Renderer:
    """Renders of one template under one shared deadline; a render that fails is None."""

    def __init__(self, source: str) -> None:
        self.source = source
        self.deadline = time.monotonic() + RENDER_SECONDS
        self.out_of_time = False
        self.renders = 0

    def __call__(self, messages: list[dict], gp: bool = False, tools=None, now=DATES[0], pick: int = 0,
                 masks: tuple[str, ...] = ()) -> Render | None:
        if self.out_of_time:
            return None
        variables = {"messages": messages, "add_generation_prompt": gp, **SPECIALS}
        if tools is not None:
            variables["tools"] = tools
        self.renders += 1
        try:
            text, dates = render_probe(self.source, variables, now, pick, self.deadline)
        except Exception as e:  # noqa: BLE001 - a template is code from a file: any failure is its own
            self.out_of_time = "still rendering" in str(e) or time.monotonic() > self.deadline
            return None
        text = text[:MAX_OUTPUT]
        contents = [m["content"] for m in messages if isinstance(m.get("content"), str)]
        names = [t["function"]["name"] for t in tools or []]
        own = masked(text, [*contents, *names, *dates, *masks, "kqdesc", "kqparam", "kqarg"])
        return Render(text, _CANARY.sub(MASK, own), contents)  # what is left of a content it rewrote


def probe(source: str, guesses: list[str], counts: list[int], uses_random: bool) -> tuple[list[Observation], Canary | None]:
    """What the template does to canary conversations, and the conversation to show."""
    r = Renderer(source)
    obs: list[Observation] = []
    plain = {"short": conversation("su"), "base": conversation("suau"), "no system": conversation("uau")}
    base = {(name, gp): r(msgs, gp) for name, msgs in plain.items() for gp in (False, True)}
    tooled = [r(conversation("suau"), gp, TOOLS) for gp in (False, True)] + [r(tool_turns(), False, TOOLS)]
    # every fragment the template writes around the sanctioned kinds of conversation
    allowed = set().union(*(fragments(got.own) for got in [*base.values(), *tooled] if got is not None))
    for (name, gp), got in base.items():
        if got is None:
            continue
        obs += _contents(got, plain[name], "")
        if name != "no system" and not gp:
            obs += _own_turns(got)
        if gp and base[name, False] is not None:
            obs += _prefill(base[name, False], got)
    if tooled[2] is not None and "tool" in source:
        obs += _contents(tooled[2], tool_turns(), "")
    for n in sorted({12, *counts}):
        msgs = conversation(long_roles(n))
        got = r(msgs, False)
        if got is not None:
            when = f"the conversation has {n} messages (the short ones have 2 to 4)"
            obs += _contents(got, msgs, when) + _new(got, allowed, "count", when)
    roles = "suau" if base["base", False] is not None else "uau"  # some templates refuse a system turn
    reference = base["base", False] or base["no system", False]
    if reference is not None:
        for when in DATES[1:]:
            obs += _differs(reference.own, r(conversation(roles), False, now=when), "date",
                            f"the date is {when:%Y-%m-%d %H:%M} instead of {DATES[0]:%Y-%m-%d}")
        for pick in (1, 2, 3, 7, -1) if uses_random else ():
            obs += _differs(reference.own, r(conversation(roles), False, pick=pick), "random",
                            f"the random filter picks item {pick} instead of item 0")
        for word in guesses[:MAX_GUESSES]:
            msgs = conversation(roles, f" {word}")
            got = r(msgs, False, masks=(word,))
            when = f"a message holds “{word}”"
            obs += ([] if got is None else _contents(got, msgs, when)) + \
                _differs(masked(reference.own, [word]), got, "content", when, word)
    if tooled[0] is not None:
        for word in guesses[:MAX_GUESSES]:
            got = r(conversation("suau"), False, with_tool_name(TOOLS, word), masks=(word,))
            obs += _differs(masked(tooled[0].own, [word]), got, "tool_name", f"a tool is named “{word}”", word)
    obs = _unique(obs)
    return obs, _canary(obs, base["base", True] or base["no system", True])


def _contents(got: Render, messages: list[dict], when: str) -> list[Observation]:
    out = []
    for m in messages:
        content = m.get("content")
        if not isinstance(content, str) or not content or content in got.text:
            continue
        tag = content.split(" ")[0]  # its first word survived: the rest was changed
        near = next((x.group(0) for x in _CANARY.finditer(got.text) if x.group(0).startswith(tag)), "")
        if near or content.lower() in re.sub(r"\s+", " ", got.text).lower():
            out.append(Observation("rewritten", content, when, role=m["role"], found=near, seen=got))
        else:
            out.append(Observation("dropped", content, when, role=m["role"], seen=got))
    return out


def _own_turns(got: Render) -> list[Observation]:
    """Turns the template writes with none of the conversation in them, prose inside."""
    heads = [m.start() for m in TURN_RE.finditer(got.own)]
    out = []
    for a, b in zip(heads, heads[1:] + [len(got.own)]):
        turn = got.own[a:b]
        if MASK not in turn and (runs := prose_runs(turn)):
            out.append(Observation("own_turn", turn.strip(), "a system prompt is given", runs=runs, seen=got))
    return out


def _prefill(without: Render, with_gp: Render) -> list[Observation]:
    a, b = without.own, with_gp.own
    i = len(a) if b.startswith(a) else next((k for k, (x, y) in enumerate(zip(a, b)) if x != y), min(len(a), len(b)))
    runs = prose_runs(b[i:])
    if not runs:
        return []
    return [Observation("prefill", " ".join(runs), "add_generation_prompt is true", runs=runs, seen=with_gp)]


def _new(got: Render, allowed: set[str], gate: str, condition: str) -> list[Observation]:
    out = []
    for f in sorted(fragments(got.own) - allowed):
        runs = list(dict.fromkeys(prose_runs(f)))
        out.append(Observation("gated", " ".join(runs) or f.strip(), condition, gate, runs=runs, seen=got))
    return out


def _differs(reference: str, got: Render | None, gate: str, condition: str, guess: str = "") -> list[Observation]:
    if got is None or re.sub(r"\d", "#", got.own) == re.sub(r"\d", "#", reference):
        return []
    before = set(prose_runs(reference))
    new = sorted(fragments(got.own) - fragments(reference))
    runs = list(dict.fromkeys(p for f in new for p in prose_runs(f) if p not in before))
    text = " ".join(runs) or " ".join(f.strip() for f in new) or "(it leaves out text the other render has)"
    return [Observation("gated", text, condition, gate, guess=guess, runs=runs, seen=got)]


def _unique(obs: list[Observation]) -> list[Observation]:
    seen, out = set(), []
    for o in obs:
        key = (o.kind, o.text, o.role, o.gate)
        if key not in seen:
            seen.add(key)
            out.append(o)
    return out


def _canary(obs: list[Observation], fallback: Render | None) -> Canary | None:
    """The render that shows the first thing flagged (else the base conversation), in pieces."""
    shown = next((o for o in obs if o.seen is not None and o.kind in ("gated", "own_turn", "prefill")), None)
    shown = shown or next((o for o in obs if o.seen is not None), None)
    got = shown.seen if shown else fallback
    if got is None:
        return None
    flagged = [run for o in obs if o.seen is got for run in o.runs]
    pieces: list[dict] = []
    pattern = "(" + "|".join(re.escape(c) for c in sorted(got.contents, key=len, reverse=True)) + ")"
    for part in re.split(pattern, got.text) if got.contents else [got.text]:
        if part:
            pieces += [{"text": part, "kind": "content"}] if part in got.contents else _marked(part, flagged)
    return Canary(shown.condition if shown and shown.condition else "a system prompt, a user turn, an answer and a user turn",
                  got.text, pieces)


def _marked(own: str, flagged: list[str]) -> list[dict]:
    spans: list[list[int]] = []
    for a, b in sorted((m.start(), m.end()) for f in flagged if f for m in re.finditer(re.escape(f), own)):
        gap = own[spans[-1][1]:a] if spans else "\n"
        if spans and a >= spans[-1][1] and len(gap) <= 12 and "\n" not in gap:
            spans[-1][1] = b  # runs cut apart by inline markup (<b>) are one flagged piece
        else:
            spans.append([a, b])
    out, at = [], 0

    def plain(text: str) -> None:
        if text:
            out.append({"text": text, "kind": "own" if prose_runs(text) else "markup"})

    for a, b in spans:
        if a >= at:
            plain(own[at:a])
            out.append({"text": own[a:b], "kind": "injected"})
            at = b
    plain(own[at:])
    return out
