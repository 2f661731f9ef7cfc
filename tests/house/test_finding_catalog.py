"""codes.py is the only source of a finding's severity and fix.

Every finding is made by `Finding.of(code, message, ...)`, which looks the code up in the catalog;
tests/conftest.py keeps every finding the suite makes and fails the test that made one whose code,
severity or fix disagrees with the catalog. These tests hold the constructor, that check, and the
source (no finding made another way, no report method that names another severity).
"""

from __future__ import annotations

import ast
import pathlib

import pytest

from model_explorer import spans
from model_explorer.codes import CATALOG, fix_for, template_fields
from model_explorer.model.findings import model_finding
from model_explorer.spans import Finding, Report

ROOT = pathlib.Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "model_explorer"
SEVERITY_METHODS = {"error", "warning", "info"}


@pytest.fixture
def drained():
    """The watched findings made before the test are checked by the suite; start from none."""
    assert not spans.watched_problems()
    yield
    spans.watched_problems()  # the disagreements a test makes on purpose are not the suite's


def test_the_suite_checks_every_finding():
    assert spans._watched is not None, "tests/conftest.py should turn on spans.watch_findings"


def test_the_constructor_refuses_unknown_codes():
    with pytest.raises(ValueError, match="no_such_code"):
        Finding.of("no_such_code", "a message")
    with pytest.raises(ValueError, match="no_such_code"):
        Report("f.bin").error("no_such_code", "a message", 0, 1)
    with pytest.raises(ValueError, match="not a model-layer code"):
        model_finding("bad_magic", "a message")


def test_severity_and_fix_come_from_the_catalog():
    f = Finding.of("nan_inf", "Tensor 'w' holds 3 NaN.", 10, 4, "w", "m.safetensors", nan=3)
    assert (f.severity, f.fix) == (CATALOG["nan_inf"].severity, CATALOG["nan_inf"].fix)
    assert (f.offset, f.length, f.tensor, f.file, f.extra) == (10, 4, "w", "m.safetensors", {"nan": 3})
    r = Report("m.gguf")
    g = r.add("bad_magic", "The file starts with 'GGUX'.", 0, 4)
    assert (g.severity, g.file, r.findings) == ("error", "m.gguf", [g])


def test_a_fix_template_is_filled_from_the_findings_fields():
    assert template_fields("key_prefix") == {"prefix"}
    f = Finding.of("key_prefix", "Every name starts with 'module.'.", prefix="module.", count=3)
    assert "k.removeprefix('module.')" in f.fix and "$" not in f.fix
    assert f.fix == fix_for("key_prefix", {"prefix": "module."})


def test_findings_from_open_carry_the_catalogs_fix(tmp_path):
    """mx.open's findings have their fix when made, not only once an audit exports them."""
    import json
    import struct

    import model_explorer as mx

    header = json.dumps({"w": {"dtype": "F32", "shape": [4], "data_offsets": [0, 16]}}).encode()
    p = tmp_path / "cut.safetensors"
    p.write_bytes(struct.pack("<Q", len(header)) + header + bytes(8))  # 8 of the 16 data bytes
    found = mx.open(str(p)).findings
    assert found and all(f.fix == fix_for(f.code, f.extra) for f in found)
    assert any(f.fix and f.fix == CATALOG[f.code].fix for f in found), [str(f) for f in found]


def test_every_fix_template_names_plain_fields():
    for code in CATALOG:
        assert all(name.isidentifier() for name in template_fields(code)), code


def test_capped_findings_keep_the_catalogs_severity():
    r = Report("f")
    for i in range(spans.MAX_FINDINGS_PER_CODE + 5):
        r.add("duplicate_key", f"key {i}", i, 1)
    summary = r.findings[-1]
    assert summary.extra["capped"] and summary.severity == "error" and summary.fix == CATALOG["duplicate_key"].fix


def test_the_check_reports_what_disagrees(drained):
    Report("f").warning("nan_inf", "said as a warning", 0, 1)  # the catalog says error
    changed = Finding.of("all_zero", "zeros")
    changed.severity, changed.fix = "error", "some other advice"
    Finding.of("key_prefix", "no prefix field given")
    problems = "\n".join(spans.watched_problems())
    assert "report.warning('nan_inf', ...) but the catalog says error" in problems
    assert "all_zero has severity error, the catalog says warning" in problems
    assert "all_zero has the fix 'some other advice'" in problems
    assert "placeholder no field fills" in problems
    assert "test_finding_catalog.py" in problems  # each names the line that made the finding
    assert not spans.watched_problems()  # checked once, then let go


# -- the source: findings are made only through the catalog -------------------------------------

def _calls():
    for path in sorted(PACKAGE.rglob("*.py")):
        rel = str(path.relative_to(ROOT))
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Call):
                func = node.func
                name = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", None)
                yield rel, node, name


def _literal(node) -> str | None:
    return node.value if isinstance(node, ast.Constant) and isinstance(node.value, str) else None


def test_no_finding_is_made_around_the_constructor():
    direct = [f"{rel}:{node.lineno}" for rel, node, name in _calls()
              if name == "Finding" and rel != "model_explorer/spans.py"]
    assert not direct, f"make findings with Finding.of(code, message, ...): {direct}"


def test_no_caller_passes_a_severity_or_a_fix():
    makers = {"of", "model_finding", "finding", "_finding", "_err", "add", "once", "error", "warning", "info"}
    bad = [f"{rel}:{node.lineno}" for rel, node, name in _calls() if name in makers
           and any(k.arg in ("severity", "fix") for k in node.keywords)
           and node.args and _literal(node.args[0]) in CATALOG]
    assert not bad, f"the catalog gives the severity and the fix: {bad}"


def test_report_methods_name_the_catalogs_severity():
    """report.error("code", ...) reads as the catalog's severity of "code"; the catalog decides."""
    bad = [f"{rel}:{node.lineno}: {name}({_literal(node.args[0])!r})" for rel, node, name in _calls()
           if name in SEVERITY_METHODS and node.args and _literal(node.args[0]) in CATALOG
           and CATALOG[_literal(node.args[0])].severity != name]
    assert not bad, f"use report.add(code, ...) or the method of the catalog's severity: {bad}"


def test_what_no_repair_fixes_is_said_in_the_catalog():
    """repairs/plan.py lists a finding as unfixable from the catalog's `unfixable`, with the fix."""
    unfixable = {code for code, c in CATALOG.items() if c.unfixable}
    assert {"nan_inf", "fp16_overflow", "missing_shard", "missing_storage", "tied_weights_differ"} <= unfixable
    assert all(CATALOG[code].fix and CATALOG[code].unfixable.endswith(".") for code in unfixable)
    source = (PACKAGE / "repairs" / "plan.py").read_text()
    assert "_UNFIXABLE" not in source and ".unfixable" in source
