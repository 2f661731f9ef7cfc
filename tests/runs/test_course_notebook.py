"""The course notebook "Debugging a conversion" (notebooks/course/08_debugging_a_conversion.ipynb):
committed clean, its solution folded, and it runs top to bottom in a fresh kernel, finding the
planted fault at layer 7's q projection, fixing it, and finding the exercise's merge fault."""

from __future__ import annotations

import nbformat
import pytest
from notebooks.test_notebooks import BUDGET_SECONDS, course

PATH = course.ROOT / "notebooks" / "course" / "08_debugging_a_conversion.ipynb"
EXPECTED = ["massive channels: [247, 507]", "doctor findings on the suspect file: none",
            "first divergence: layer 7, module q, tensor blk.7.attn_q.weight", "fixed: True",
            "first divergence: None", "merge fault: layer 12 ffn_out, blk.12.ffn_down.weight"]


def test_committed_clean_with_the_solution_folded():
    nb = nbformat.read(PATH, as_version=4)
    nbformat.validate(nb)
    assert course.stored_problems(nb) == [] and nb.metadata["kernelspec"]["name"] == "python3"
    heads = [(i, c.source.strip().splitlines()[0]) for i, c in enumerate(nb.cells)
             if c.cell_type == "markdown" and c.source.strip()]
    exercise = [i for i, h in heads if h.startswith("### Exercise")]
    solution = [i for i, h in heads if h.startswith("### Solution")]
    assert exercise and len(solution) == len(exercise) and exercise[0] < solution[0]
    hidden = [i for i, c in enumerate(nb.cells) if course.is_solution(c)]
    assert hidden == [s + 1 for s in solution]


@pytest.mark.notebooks
@pytest.mark.slow
def test_runs_top_to_bottom_and_finds_the_fault():
    pytest.importorskip("nbclient")
    run = course.execute(PATH)
    assert run.seconds < BUDGET_SECONDS, f"took {run.seconds:.0f} s"
    text = "".join(course.text_output(c) for c in run.notebook.cells if c.cell_type == "code")
    for expected in EXPECTED:
        assert expected in text, expected
