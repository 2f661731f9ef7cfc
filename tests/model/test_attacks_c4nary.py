"""Differential against c4nary 0.3.1, the static GGUF auditor on PyPI (skipped when it is not
installed): on the same planted GGUF and the files beside it (`canary scan --bundle`), every
rule of the issue-34 surfaces it raises (WARN or FAIL) is matched here by a finding of the mapped
code, at the bytes the case names.

Where the two differ, on purpose:
- severity: c4nary FAILs hidden and bidi code points and content-gated injection; here they
  are warnings (nothing runs; a reviewer decides), and the sandbox escape is the error.
- c4nary's structural and metadata-hygiene rules (STR*, MET001-MET016 but MET020/021, TPL011
  URLs, TPL012/013 size and depth, CFG005 repetition penalty) are outside this issue: the
  structural ones have this explorer's own format findings, the others are style.
- this explorer also names what c4nary leaves at INFO or does not look at: a cross-repository
  auto_map target (RMT001 is INFO there), special tokens of tokenizer.json with hidden or
  instruction text (c4nary reads special_tokens_map.json / added_tokens.json for those).
"""

from __future__ import annotations

import contextlib
import importlib.util
import io
import json

import pytest

import model_explorer as mx

from .planted_attacks import BESIDE, CASES
from .test_attacks_templates import covered

pytestmark = pytest.mark.skipif(importlib.util.find_spec("c4nary") is None, reason="c4nary is not installed")

# c4nary rule -> the codes of this explorer that cover it
MATCHES = {
    "TPL000": {"bad_chat_template"}, "TPL001": {"chat_template_escape"}, "TPL002": {"chat_template_escape"},
    "TPL003": {"chat_template_escape"}, "TPL004": {"chat_template_escape"}, "TPL005": {"chat_template_escape"},
    "TPL010": {"chat_template_content_gate"}, "TPL021": {"chat_template_content_gate"},
    "TPL022": {"chat_template_date_gate"}, "TPL023": {"chat_template_injected_text"},
    "TPL024": {"hidden_text"}, "TPL025": {"bidi_override"}, "TPL026": {"hidden_text"},
    "TPL027": {"chat_template_injected_text"}, "TPL030": {"chat_template_differs"},
    "TPL031": {"chat_template_include"}, "TPL032": {"chat_template_decode"},
    "MET020": {"hidden_text", "bidi_override"}, "MET021": {"injection_text"},
    "TOK001": {"special_token_out_of_vocab"}, "TOK002": {"tokens_beyond_embedding"},
    "CFG001": {"generation_stop_suppressed"}, "CFG002": {"generation_refusal_suppressed"},
    "CFG003": {"generation_forced_tokens"}, "CFG004": {"remote_code"},
    "DOC001": {"hidden_text", "bidi_override"}, "DOC002": {"injection_text"},
    "NRM001": {"normalizer_rewrites"}, "NRM002": {"hidden_text", "bidi_override"}, "NRM003": {"injection_text"},
    "RMT000": {"remote_code_unchecked"}, "RMT001": {"remote_code_unchecked"}, "RMT010": {"remote_code_exec"},
    "RMT011": {"remote_code_exec", "remote_code_native"}, "RMT020": {"remote_code_exec"},
}
OUTSIDE = ("STR", "MET0", "MET1", "INT", "TPL011", "TPL012", "TPL013", "CFG005", "TOK003", "TOK004", "TOK005")


def c4nary_rules(path: str) -> set[str]:
    """`canary scan PATH --json --bundle` (in this process: its CLI entry point, stdout captured)."""
    from c4nary.cli import main

    out = io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(io.StringIO()):
        main(["scan", path, "--json", "--bundle", "--fail-on", "none"])
    report = json.loads(out.getvalue())
    return {f["rule_id"] for f in report["findings"] if f["severity"] != "INFO" and not f["suppressed"]}


def in_scope(rule: str) -> bool:
    return rule in ("MET020", "MET021") or not rule.startswith(OUTSIDE)


@pytest.mark.parametrize("case", sorted(CASES) + sorted(BESIDE))
def test_every_rule_c4nary_raises_is_raised_here(tmp_path, case):
    planted = {**CASES, **BESIDE}[case](str(tmp_path))
    rules = {r for r in c4nary_rules(planted.gguf) if in_scope(r)}
    assert rules, f"c4nary flags nothing on {case}: the case no longer tests the difference"
    ckpt = mx.open(planted.open)
    ours = {f.code for f in ckpt.findings}
    for rule in rules:
        assert rule in MATCHES, f"c4nary raises {rule}, which this test does not map yet"
        assert MATCHES[rule] & ours, (case, rule, sorted(ours))
    for code, want in planted.expect.items():
        assert any(covered(f) == want for f in ckpt.findings if f.code == code and f.offset is not None), (case, code)


@pytest.mark.parametrize("which", ["smollm2", "clean planted"])
def test_clean_files_are_clean_in_both(tmp_path, which):
    from .planted_attacks import planted_gguf
    from .test_attacks_templates import ISSUE_34

    path = mx.sample_path() if which == "smollm2" else planted_gguf(str(tmp_path / "model.gguf"))
    assert {r for r in c4nary_rules(path) if in_scope(r)} == set()
    assert [f.code for f in mx.open(path).findings if f.code in ISSUE_34] == []
