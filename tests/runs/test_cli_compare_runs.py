"""`model-explorer compare-runs A B [--prompt TEXT | --text FILE] [--json]`: the summary and the
grid, the JSON summary, exit 0 alike / 1 diverged / 2 unreadable, never a traceback."""

from __future__ import annotations

import json

import pytest

from model_explorer.cli import main

from .conftest import TEXT

pytestmark = pytest.mark.reference
pytest.importorskip("transformers")


@pytest.fixture(scope="module")
def swapped(base):
    w = {"model.layers.3.mlp.down_proj.weight": base.weight(1, "mlp.down_proj")}
    return base.copy("cli_swapped", w)


def test_text_output_points_at_the_layer_and_the_bytes(base, swapped, capsys):
    assert main(["compare-runs", base.folder, swapped, "--prompt", TEXT]) == 1
    out = capsys.readouterr().out
    assert "first divergence: layer 3 ffn_out" in out and "model.layers.3.mlp.down_proj.weight at byte" in out
    assert "KLD mean" in out and "top-1 agreement" in out
    assert "  <- ffn_out" in out.splitlines()[-2]  # the grid marks the layer


def test_json_with_a_text_file(base, swapped, tmp_path, capsys):
    text = tmp_path / "eval.txt"
    text.write_text(TEXT)
    assert main(["compare-runs", base.folder, swapped, "--text", str(text), "--json"]) == 1
    j = json.loads(capsys.readouterr().out)
    assert j["first_divergence"]["layer"] == 3 and j["first_divergence"]["module"] == "ffn_out"
    assert set(j["perplexity"]) == {"a", "b"} and j["kld"]["mean"] > 0
    assert main(["compare-runs", base.folder, base.folder, "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["first_divergence"] is None


def test_what_cannot_run_exits_2_with_a_message(base, tmp_path, capsys):
    assert main(["compare-runs", base.folder, str(tmp_path / "absent")]) == 2
    assert main(["compare-runs", base.folder, base.folder, "--text", str(tmp_path / "none.txt")]) == 2
    err = capsys.readouterr().err
    assert "cannot compare the runs" in err and "cannot read the text file" in err
    assert "Traceback" not in err
    with pytest.raises(SystemExit):
        main(["compare-runs", base.folder, base.folder, "--prompt", "x", "--text", "y"])
