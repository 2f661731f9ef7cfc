"""Chat templates rendered the way transformers' apply_chat_template renders them (jinja2's
ImmutableSandboxedEnvironment, trim_blocks and lstrip_blocks, the loopcontrols extension and
`{% generation %}`, the globals raise_exception and strftime_now, the tojson filter), with
bounds on what a hostile template can make this process do at open time:

- values stay under MAX_ITEMS characters or elements: `*`, `+`, `%` and `~` check what they make,
  filters and method calls refuse a number or a format width past it ('x' * 10**10, 'x'.center(10**9)
  and '%999999999s' would otherwise allocate gigabytes); `**` stays under MAX_POWER_BITS;
- the render stops after RENDER_SECONDS (nested loops over range(100000) never end): a trace
  function, set for the render only and only on the template's own frames, checks the clock.
A render past a bound fails with a TemplateError that says which.
"""

from __future__ import annotations

import functools
import json
import re
import sys
import time
from contextvars import ContextVar
from functools import lru_cache

MAX_ITEMS = 1_000_000  # characters or elements a `*` may make
MAX_POWER_BITS = 4096
RENDER_SECONDS = 2.0
# A probe render (template_canary) fixes what a template could read from the world: the clock
# strftime_now answers from, and the item the `random` filter picks. None: the real clock and chance.
_PROBE: ContextVar[tuple | None] = ContextVar("template_probe", default=None)


@lru_cache(maxsize=1)
def generation_block():
    from jinja2 import nodes
    from jinja2.ext import Extension

    class GenerationBlock(Extension):
        """transformers' `{% generation %}...{% endgeneration %}` (it marks the assistant's
        tokens for training masks); here the body renders as it stands."""

        tags = {"generation"}

        def parse(self, parser) -> list[nodes.Node]:
            next(parser.stream)
            return parser.parse_statements(("name:endgeneration",), drop_needle=True)

    return GenerationBlock


_WIDE_FORMAT = re.compile(r"[%:<>^=.0-9]\d{6,}")  # a width or precision of a million or more


def _refuse(what: str):
    from jinja2.exceptions import TemplateError

    raise TemplateError(f"the template {what}: refused (a bound of this renderer, not of jinja2)")


def _check_size(value, what: str):
    if hasattr(value, "__len__") and len(value) > MAX_ITEMS:
        _refuse(f"{what} {len(value):,} items (more than {MAX_ITEMS:,})")
    return value


SIZING = frozenset({"center", "ljust", "rjust", "zfill", "expandtabs", "indent", "truncate", "wordwrap",
                    "batch", "slice", "range"})  # filters and methods whose numbers size their output


def _check_args(args, sizing: bool) -> None:
    """Numbers and format widths that would make a filter or method allocate without end
    ('x'.center(10**9), '%999999999s', '{:>999999999}')."""
    for a in args:
        if sizing and isinstance(a, int) and not isinstance(a, bool) and abs(a) > MAX_ITEMS:
            _refuse(f"passes {a:,} to a filter or method that sizes its output")
        if isinstance(a, str) and ("%" in a or "{" in a) and _WIDE_FORMAT.search(a):
            _refuse("formats with a width of a million characters or more")


def _guarded(name: str, fn):
    def guarded(*args, **kwargs):
        _check_args([*args, *kwargs.values()], name in SIZING)
        return _check_size(fn(*args, **kwargs), "makes a value of")
    return functools.update_wrapper(guarded, fn)  # keeps jinja's pass_context marks


@lru_cache(maxsize=1)
def _bounded_sandbox():
    from jinja2.compiler import CodeGenerator
    from jinja2.sandbox import ImmutableSandboxedEnvironment

    class BoundedCodeGenerator(CodeGenerator):
        def visit_Concat(self, node, frame) -> None:  # `a ~ b`: doubling in a loop would fill memory
            self.write("environment.bounded(")
            super().visit_Concat(node, frame)
            self.write(")")

    class BoundedSandbox(ImmutableSandboxedEnvironment):
        code_generator_class = BoundedCodeGenerator
        intercepted_binops = frozenset({"*", "**", "+", "%"})

        def __init__(self, *args, **kwargs) -> None:
            super().__init__(*args, **kwargs)
            self.filters = {name: _guarded(name, fn) for name, fn in self.filters.items()}

        def bounded(self, value):
            return _check_size(value, "joins a string of")

        def getattr(self, obj, attribute):
            if isinstance(obj, str) and attribute in ("format", "format_map"):
                _check_args([obj], False)  # '{:>999999999}'.format(x): the width is in the string
            return super().getattr(obj, attribute)

        def call(self, __context, __obj, *args, **kwargs):
            _check_args([*args, *kwargs.values()], getattr(__obj, "__name__", None) in SIZING)
            return _check_size(super().call(__context, __obj, *args, **kwargs), "makes a value of")

        def call_binop(self, context, operator, left, right):
            if operator == "**":
                if isinstance(left, int) and isinstance(right, int) and right > 0 and \
                        abs(left).bit_length() * right > MAX_POWER_BITS:
                    _refuse(f"raises {left} to the power {right}")
                return left ** right
            if operator == "*":
                size = next((len(a) * b for a, b in ((left, right), (right, left))
                             if hasattr(a, "__len__") and isinstance(b, int)), 0)
                if size > MAX_ITEMS:
                    _refuse(f"repeats a sequence to {size:,} items (more than {MAX_ITEMS:,})")
                return left * right
            if operator == "%":
                _check_args([left], False)
                return _check_size(left % right, "formats a string of")
            return _check_size(left + right, "adds up a value of")

    return BoundedSandbox


@lru_cache(maxsize=8)
def _compile_template(source: str):
    def raise_exception(message):
        from jinja2.exceptions import TemplateError

        raise TemplateError(message)

    def tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
        return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators,
                          sort_keys=sort_keys)

    def strftime_now(fmt):
        import datetime

        probe = _PROBE.get()
        if probe is None:
            return datetime.datetime.now().strftime(fmt)
        value = probe[0].strftime(str(fmt)[:100])
        probe[2].append(value)  # the probe masks what the clock wrote
        return value

    def pick(context, seq):
        probe = _PROBE.get()
        if probe is None:
            return random_filter(context, seq)
        seq = list(seq)[:MAX_ITEMS]
        return seq[probe[1] % len(seq)] if seq else context.environment.undefined("No random item.")

    env = _bounded_sandbox()(trim_blocks=True, lstrip_blocks=True,
                             extensions=["jinja2.ext.loopcontrols", generation_block()])
    random_filter = env.filters["random"]
    env.filters["random"] = functools.update_wrapper(pick, random_filter)  # keeps pass_context
    env.filters["tojson"] = tojson
    env.globals["raise_exception"] = raise_exception
    env.globals["strftime_now"] = strftime_now
    return env.from_string(source)


def render_chat_template(source: str, messages: list[dict[str, str]], add_generation_prompt: bool = True,
                         **special_tokens: str) -> str:
    template = _compile_template(source)
    return _within_deadline(lambda: template.render(messages=messages, add_generation_prompt=add_generation_prompt,
                                                    **special_tokens))


def render_probe(source: str, variables: dict, now, pick: int, deadline: float) -> tuple[str, list[str]]:
    """One render with the clock set to `now` and the `random` filter picking item `pick`, stopped
    at `deadline` (time.monotonic()): the text, and the strings strftime_now returned."""
    template = _compile_template(source)
    dates: list[str] = []
    token = _PROBE.set((now, pick, dates))
    try:
        return _within_deadline(lambda: template.render(**variables), deadline), dates
    finally:
        _PROBE.reset(token)


def _within_deadline(render, deadline: float | None = None):
    from jinja2.exceptions import TemplateError

    deadline = time.monotonic() + RENDER_SECONDS if deadline is None else deadline

    def on_line(frame, event, arg):
        if event == "line" and time.monotonic() > deadline:
            raise TemplateError(f"the template was still rendering after {RENDER_SECONDS:g} seconds: stopped")
        return on_line

    def on_call(frame, event, arg):  # only the template's own code is watched
        return on_line if frame.f_code.co_filename == "<template>" else None

    previous = sys.gettrace()
    sys.settrace(on_call)
    try:
        return render()
    finally:
        sys.settrace(previous)
