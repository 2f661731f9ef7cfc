"""Every exercise of the course has a check cell a student can run (notebooks/course_checks.py):
it accepts the answer the lesson's solution prints, rejects a wrong one part by part, and never
prints the answer. The solution cells call the same checks on what they computed, and
tests/notebooks/test_notebooks.py sees them print "all right" when the notebooks run."""

from __future__ import annotations

import contextlib
import io
import sys
from pathlib import Path

import nbformat
import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "notebooks"))
import course_checks  # noqa: E402

NAMES = sorted(p.stem for p in (ROOT / "notebooks").glob("*.ipynb"))

# The answers as each solution prints them when its notebook runs (the runs' output, recorded).
SOLUTIONS = {
    "check_00": dict(tensor="token_embd.weight", nbytes="30,081,024", data_start="1,785,664"),
    "check_01": dict(tensor="bias", data_offsets=[24, 30]),
    "check_02": dict(block_count_at=144, block_count_bytes="01 00 00 00", first_type="Q8_0", scale_at=1785664),
    "check_03_sneaky": dict(function="posix.system", argument="echo this never runs", byte=28),
    "check_03_chained": dict(verdict="dangerous", callables=["operator.attrgetter", "glob.os"]),
    "check_04": dict(shard="model-00003-of-00003.safetensors", tensors=course_checks.LOST_TENSORS, first_at=857),
    "check_05": dict(block=83),
    "check_06": dict(start=169, end=173, field="type", was="F32", now=200),
    "check_07": dict(same=True, scale_row=1),
    "check_08": dict(layer=12, module="ffn_out", tensor="blk.12.ffn_down.weight"),
    "check_09": dict(module="embed"),
    "check_10": dict(module="v", tensor="blk.2.attn_v.weight", kind="jump"),
    "check_11": dict(code="chat_template_gate", offset=131),
    "check_12": dict(op="MatMul", orientation="transposed"),
    "check_13": dict(layer=1, module="ffn_out", kind="jump"),
}
# A plausible wrong answer to every part.
WRONG = {
    "check_00": dict(tensor="output.weight", nbytes=1000, data_start=0),
    "check_01": dict(tensor="weight", data_offsets=[20, 26]),
    "check_02": dict(block_count_at=120, block_count_bytes="00 00 00 01", first_type="Q4_1", scale_at=1785666),
    "check_03_sneaky": dict(function="builtins.eval", argument="rm -rf", byte=2),
    "check_03_chained": dict(verdict="suspicious", callables=["operator.attrgetter"]),
    "check_04": dict(shard="model-00001-of-00003.safetensors", tensors=["model.norm.weight"], first_at=0),
    "check_05": dict(block=0),
    "check_06": dict(start=148, end=152, field="offset", was=1, now=1),
    "check_07": dict(same=False, scale_row=130),
    "check_08": dict(layer=11, module="q", tensor="blk.11.ffn_down.weight"),
    "check_09": dict(module="attn_out"),
    "check_10": dict(module="attn_out", tensor="blk.2.attn_k.weight", kind="drift"),
    "check_11": dict(code="chat_template_injected_text", offset=154),
    "check_12": dict(op="Gemm", orientation="as stored"),
    "check_13": dict(layer=0, module="attn_out", kind="drift"),
}
CHECKS = {fn.__name__: fn for fns in course_checks.EXERCISES.values() for fn in fns}


def run(check, answers) -> tuple[bool, str]:
    """Whether the check said every part is right, and all it printed."""
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        assert check(**answers) is None  # a check cell shows its verdict only, no Out[] value
    text = out.getvalue()
    return "all right, well done" in text, text


def test_every_notebook_is_listed():
    assert sorted(course_checks.EXERCISES) == NAMES
    assert set(SOLUTIONS) == set(WRONG) == set(CHECKS)


@pytest.mark.parametrize("name", NAMES)
def test_every_exercise_has_a_check_cell_and_its_solution_runs_the_check(name):
    cells = nbformat.read(ROOT / "notebooks" / f"{name}.ipynb", as_version=4).cells
    heads = [(i, c.source.strip().splitlines()[0]) for i, c in enumerate(cells)
             if c.cell_type == "markdown" and c.source.strip()]
    exercises = [i for i, h in heads if h.startswith("### Exercise")]
    solutions = [i for i, h in heads if h.startswith("### Solution")]
    expected = [fn.__name__ for fn in course_checks.EXERCISES[name]]
    assert len(exercises) == len(solutions) == len(expected)
    for check, ex, sol in zip(expected, exercises, solutions):
        between = [c.source for c in cells[ex + 1:sol] if c.cell_type == "code"]
        assert any(f"{check}(" in src and "=None" in src for src in between), \
            f"exercise at cell {ex}: no unanswered {check}(...) cell before its solution"
        assert f"{check}(" in cells[sol + 1].source, f"the solution at cell {sol + 1} does not run {check}"


@pytest.mark.parametrize("check", sorted(SOLUTIONS))
def test_the_check_accepts_the_solution_and_rejects_a_wrong_answer_without_telling(check):
    fn = CHECKS[check]
    ok, text = run(fn, SOLUTIONS[check])
    assert ok and "all right" in text, text
    ok, text = run(fn, WRONG[check])
    assert not ok
    parts = SOLUTIONS[check]
    assert text.count("✗") == len(parts) and text.count("Hint:") == len(parts), text
    # never the answer: no expected name or number long enough to tell appears in the reply
    for value in parts.values():
        for item in value if isinstance(value, list) else [value]:
            if isinstance(item, str) and len(item) > 3 or isinstance(item, int) and item >= 10:
                assert str(item) not in text, f"{check} tells {item!r}"
    ok, text = run(fn, {})
    assert not ok and text.count("not answered yet") == len(parts)
