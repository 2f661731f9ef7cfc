"""The course notebooks: complete, committed clean, solutions folded, and each one runs top to
bottom in a fresh kernel (nbclient) showing what it promises."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import nbformat
import pytest

ROOT = Path(__file__).resolve().parents[2]
_spec = importlib.util.spec_from_file_location("course_lessons", ROOT / "course" / "lessons.py")
course = importlib.util.module_from_spec(_spec)
sys.modules[_spec.name] = course  # dataclasses look their module up there
_spec.loader.exec_module(course)

NAMES = list(course.COURSE)
BUDGET_SECONDS = 180  # per notebook, on 2 cores (the issue's limit); most take well under 40 s
WIDGET_VIEW = "application/vnd.jupyter.widget-view+json"

# Text each notebook must print when it runs: the results the lesson is built on.
EXPECTED = {
    "00_tour": ["format: gguf", "the data section starts at byte 1,785,664", "tokens/s"],
    "01_safetensors": ["absolute offsets and values agree", "mmap was", "data_overlap"],
    "02_gguf": ["magic b'GGUF', version 3", "tokenizer model: gpt2", "ggml dims (8, 4) -> numpy shape (4, 8)"],
    "03_pickle_danger": ["verdict: suspicious", "verdict: dangerous", "the marker file does not exist",
                         "verdict: safe", "same names, dtypes and values"],
    "04_sharding": ["missing_tensor", "closest orphan: ['layers.1.mlp.up_proj.weight']", "missing_shard"],
    "05_quantization_lab": ["bit-identical to gguf.quants.dequantize", "scale * q + bias", "tokens agree",
                            "requantized to int4 (groups of 32)"],
    "06_broken_checkpoint_clinic": ["truncated", "size_mismatch", "header_too_large", "bad_magic",
                                    "dangerous_import", "exit code: 1", "missing_shard", "unknown_tensor_type",
                                    "drop_truncated", "fix_entry", "pickle_to_safetensors", "cannot fix  missing_shard",
                                    "case 2: ok=True, 2 of 3 tensor(s) byte-identical"],
    "07_hub_quantization": ["scale * (q - zero)", "FP8 value * block scale", "GPTQ_Q4"],
    "08_debugging_a_conversion": ["massive channels: [247, 507]", "doctor findings on the suspect file: none",
                                  "first divergence: layer 7, module q, tensor blk.7.attn_q.weight",
                                  "fixed: True", "verdict: drift: The runs drift apart from layer 0 q on",
                                  "merge fault: layer 12 ffn_out, blk.12.ffn_down.weight",
                                  "llama.rope.freq_base: FLOAT32 100,000", "doctor findings on it: none"],
    "09_model_families": ["llama: ['(a plain Llama decoder)']", "final logit softcap 3",
                          "pre_feedforward_layernorm.weight", "largest |logit| with a final softcap of 3.0: 2.9",
                          "attention softcap off: first divergence: layer 0 attn_out",
                          "final softcap off: first divergence: logits", "top-1 agreement 100%",
                          "no sliding window: first divergence: layer 0 attn_out",
                          "gemma read as llama: first divergence at embed"],
    "10_real_sizes": ["this lesson: 33M parameters", "findings on open: none",
                      "first divergence: layer 5 ffn_out, tensor blk.5.ffn_down.weight",
                      "streamed (holding it whole would take", "refused before loading: a run over 64 tokens",
                      "random weights: 0", "all at the first token: True",
                      "first divergence: 2 v blk.2.attn_v.weight"],
    "11_safe_to_chat": ["chat_template_content_gate   tokenizer_config.json", "bidi_override: '⟨U+202E⟩admin",
                        "generation_stop_suppressed   generation_config.json", "remote_code_exec: \"os.system(",
                        "remote_code_exec: Do not load this repository with trust_remote_code=True."],
    "12_one_model_every_format": ["Llama block graph", "yes, transposed", "{'same': 21}",
                                  "/model/model/layers.0/self_attn/q_proj/MatMul"],
    "13_an_export_that_loses_accuracy": ["transformers (a) against onnxruntime (b)", "jump at layer 0 attn_residual",
                                         "The norm's epsilon differs", "-> 0.1", "drift - The runs drift apart",
                                         "scaled: jump at layer 1 ffn_out"],
}


# What a lesson prints where llama.cpp's eval callback is there (llama-cpp-python, which `make dev`
# builds); without it the lesson says so ("tracing llama.cpp: ...") and these are not looked for
WITH_LLAMACPP = {
    "08_debugging_a_conversion": ["tracing llama.cpp: available", "decoder (a) against llama.cpp (b)",
                                  "llama.cpp (a) against llama.cpp (b)", "first divergence: layer 0 kqv_out",
                                  "b's llama.rope.freq_base at bytes", "drift: The runs drift apart",
                                  "fixed on llama.cpp: True"],
}


def load(name: str):
    return nbformat.read(course.NOTEBOOK_DIR / f"{name}.ipynb", as_version=4)


def test_the_course_has_every_notebook_of_the_issue():
    on_disk = sorted(p.stem for p in course.NOTEBOOK_DIR.glob("*.ipynb"))
    assert on_disk == sorted(NAMES)
    assert set(EXPECTED) == set(NAMES)


@pytest.mark.parametrize("name", NAMES)
def test_notebook_is_committed_without_outputs(name):
    nb = load(name)
    nbformat.validate(nb)
    assert course.stored_problems(nb) == []
    assert nb.metadata["kernelspec"]["name"] == "python3"


@pytest.mark.parametrize("name", NAMES)
def test_exercises_have_folded_solutions(name):
    cells = load(name).cells
    headings = [(i, c.source.strip().splitlines()[0]) for i, c in enumerate(cells)
                if c.cell_type == "markdown" and c.source.strip()]
    exercises = [i for i, h in headings if h.startswith("### Exercise")]
    solutions = [i for i, h in headings if h.startswith("### Solution")]
    assert exercises, "every notebook ends with an exercise"
    assert len(solutions) == len(exercises)
    for ex, sol in zip(exercises, solutions):
        assert ex < sol
        hidden = cells[sol + 1]
        assert hidden.cell_type == "code" and course.is_solution(hidden), \
            f"the cell after the Solution heading (cell {sol + 1}) must have jupyter.source_hidden"
    # and nothing else is hidden: a folded cell is always a solution
    for i, c in enumerate(cells):
        if course.is_solution(c):
            assert i - 1 in solutions


@pytest.mark.notebooks
@pytest.mark.slow
@pytest.mark.parametrize("name", NAMES)
def test_notebook_runs_top_to_bottom(name):
    run = course.execute(course.NOTEBOOK_DIR / f"{name}.ipynb")  # raises on the first failing cell
    assert run.seconds < BUDGET_SECONDS, f"{name} took {run.seconds:.0f} s"
    code = [c for c in run.notebook.cells if c.cell_type == "code"]
    text = "".join(course.text_output(c) for c in code)
    for expected in EXPECTED[name]:
        assert expected in text, f"{name} did not print {expected!r}"
    if name in WITH_LLAMACPP and "tracing llama.cpp: available" in text:
        for expected in WITH_LLAMACPP[name]:
            assert expected in text, f"{name} did not print {expected!r}"
    # Every cell that ends in a view shows a widget, not a traceback or a bare repr.
    for cell in code:
        last = cell.source.strip().splitlines()[-1]
        if last.startswith("mx.") and last.split("(")[0] in {"mx.HexDump", "mx.HeaderTree", "mx.ShardMap",
                                                             "mx.TensorHistogram", "mx.Findings", "mx.explore",
                                                             "mx.RunDemo"} or last.endswith(".show()") and not last.startswith("plt."):
            kinds = {k for out in cell.outputs for k in out.get("data", {})}
            assert WIDGET_VIEW in kinds, f"{last} showed no widget"
    assert figures_as_text(code) == [], "a figure printed as text, not drawn as an image"
    # Each solution runs its exercise's check (notebooks/course_checks.py) on what it computed.
    for cell in code:
        if course.is_solution(cell):
            assert "all right, well done" in course.text_output(cell), \
                f"a solution's check did not pass:\n{course.text_output(cell)[-800:]}"


def figures_as_text(cells) -> list[str]:
    """Outputs that show a matplotlib figure as its repr ('<Figure size 750x960 with 2 Axes>'),
    with no image beside it."""
    bad = []
    for cell in cells:
        for out in cell.get("outputs", []):
            data = out.get("data", {})
            if data.get("text/plain", "").lstrip().startswith("<Figure") and "image/png" not in data \
                    and "image/svg+xml" not in data:
                bad.append(f"{cell.source.strip().splitlines()[-1]}: {data['text/plain']}")
    return bad
