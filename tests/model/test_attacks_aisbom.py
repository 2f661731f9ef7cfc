"""Differential against aisbom-cli 1.7.0's chat-template scan (`aisbom.safety.scan_jinja_template`,
a regex scan of the text; skipped when aisbom-cli is not installed): every template it flags is
flagged here with the mapped code, and the real templates it passes pass here.

Where the two differ: aisbom reads the text, so it misses a dunder assembled from pieces
('__glo' ~ 'bals__' is reported only for the __init__ next to it) and anything that is not an
escape (gated injection, hidden code points, dates); this explorer parses the template, so a
dunder inside a comment or a plain string is not an escape here unless it is one of the names
that only an escape needs (__globals__, __subclasses__...).
"""

from __future__ import annotations

import importlib.util

import pytest

from model_explorer.model.template_audit import audit_template

from .planted_attacks import BIDI, DATE_GATED, ESCAPE_CYCLER, ESCAPE_LLAMA_CPP, GATED, HIDDEN
from .test_attacks_real import real_templates

pytestmark = pytest.mark.skipif(importlib.util.find_spec("aisbom") is None, reason="aisbom-cli is not installed")

MATCHES = {"JINJA_SANDBOX_ESCAPE": "chat_template_escape", "JINJA_ATTR_FILTER": "chat_template_escape",
           "JINJA_DANGEROUS_CALL": "chat_template_escape", "JINJA_CONTEXT_LEAK": "chat_template_escape",
           "JINJA_TEMPLATE_INCLUSION": "chat_template_include"}
TEMPLATES = {
    "llama-cpp-python escape": ESCAPE_LLAMA_CPP, "cycler concatenation": ESCAPE_CYCLER,
    "attr filter": "{{ ''|attr('__class__') }}", "lipsum globals": "{{ lipsum.__globals__['os'].popen('id') }}",
    "include": "{% include 'x.jinja' %}", "gated": GATED, "hidden": HIDDEN, "bidi": BIDI, "date": DATE_GATED,
}


@pytest.mark.parametrize("name", sorted(TEMPLATES))
def test_every_threat_aisbom_names_is_named_here(name):
    from aisbom.safety import scan_jinja_template

    theirs = {MATCHES[t.split(":")[0]] for t in scan_jinja_template(TEMPLATES[name])}
    ours = {h.code for h in audit_template(TEMPLATES[name])}
    assert theirs <= ours, (name, theirs, ours)


def test_real_templates_pass_both():
    from aisbom.safety import scan_jinja_template

    for name, text in real_templates().items():
        assert scan_jinja_template(text) == [] and audit_template(text) == [], name
