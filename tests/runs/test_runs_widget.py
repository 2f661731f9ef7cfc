"""The "Compare runs" view's state (runs/state.py): a planted fault marks its cell and names
its weight and bytes, a NaN and the massive activations are marked in a trace, the state is
plain JSON of bounded size, a click names side a's weight for the Explorer, and the run cell's
"Compare with…" / "Trace" jobs fill it (errors as a sentence, never a traceback)."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest

import model_explorer as mx
from model_explorer.runs.state import cell_tensor, runs_state
from model_explorer.widgets.run_cell import RunDemo
from model_explorer.widgets.runs_view import RunsView

from .conftest import LAYERS, TEXT

V2 = "model.layers.2.self_attn.v_proj.weight"


@pytest.fixture(scope="module")
def swapped(base):
    """Layer 2's v holds layer 0's: compare_runs finds it at layer 2 v."""
    return base.copy("swapped_v", {V2: base.state["model.layers.0.self_attn.v_proj.weight"]})


@pytest.fixture(scope="module")
def diff(base, swapped):
    return mx.compare_runs(base.folder, swapped, prompt=TEXT)


def test_a_planted_fault_marks_its_cell_and_names_its_weight(diff, swapped):
    s = runs_state(diff)
    text = json.dumps(s, allow_nan=False)  # plain JSON: NaN/Inf as null
    assert len(text) < 30_000
    assert s["kind"] == "diff" and s["layers"] == list(range(LAYERS))
    assert s["marks"] == [{"layer": 2, "module": "v", "kind": "divergence", "text": "first divergence"}]
    first = s["first"]
    info = mx.open(swapped).tensors[V2]
    assert (first["layer"], first["module"], first["tensor"], first["offset"]) == (2, "v", V2, info.offset)
    assert 0 <= first["previous_max"] < first["rel_l2"] / 4
    for part in ("layer 2 v", "relative L2", "earlier point agreed exactly", V2, f"byte {info.offset:,}",
                 "Layer 2 v differs while everything before it agrees"):
        assert part in first["sentence"], (part, first["sentence"])
    # Colours: log10 relative L2, the faulty cell the hottest of the layers before it.
    v = s["color"]["values"]
    j = s["modules"].index("v")
    assert v[2][j] > max(x for row in v[:2] for x in row if x is not None)
    assert s["color"]["min"] <= v[2][j] <= s["color"]["max"]
    f = s["figures"]
    assert f["tokens"] == len(diff.ids) and 0 <= f["top1_agreement"] <= 1 and f["kld"]["mean"] > 0
    # A click names side a's weight (the Explorer's checkpoint).
    assert cell_tensor(s, 2, "v") == V2 and cell_tensor(s, 9, "v") is None and cell_tensor(s, 0, "x") is None


def test_identical_runs_have_no_mark_and_say_so(base):
    s = runs_state(mx.compare_runs(base.folder, base.folder, prompt=TEXT))
    assert s["first"] is None and s["marks"] == []
    assert s["figures"]["note"].startswith("No divergence")


def test_a_trace_marks_the_first_nan_and_massive_activations(base):
    w = base.weight(2, "mlp.up_proj").copy()
    w[5, 7] = np.nan
    broken = base.copy("nan_up", {"model.layers.2.mlp.up_proj.weight": w})
    s = runs_state(mx.trace(broken, prompt=TEXT))
    json.dumps(s, allow_nan=False)
    assert s["kind"] == "trace" and s["color"]["label"] == "absmax / median |x| (log scale)"
    nonfinite = [m for m in s["marks"] if m["kind"] == "nonfinite"]
    assert [(m["layer"], m["module"]) for m in nonfinite] == [(2, "ffn_out")]
    assert s["first"]["tensor"] == "model.layers.2.mlp.up_proj.weight"
    assert "layer 2 ffn_out" in s["first"]["sentence"]
    # Massive activations planted by a huge embedding value are marked where they sit.
    emb = base.state["model.embed_tokens.weight"].copy()
    ids = mx.load_model(base.folder).encode_prompt(TEXT)
    emb[ids[0], 3] = 5e4
    loud = base.copy("loud", {"model.embed_tokens.weight": emb})
    s = runs_state(mx.trace(loud, prompt=TEXT))
    massive = [m for m in s["marks"] if m["kind"] == "massive"]
    assert massive and all("channel 3" in m["text"] for m in massive if m["module"] in ("attn_residual", "residual"))
    assert s["figures"]["massive"] >= len(massive)


def test_the_widget_sends_the_clicked_cells_weight_to_on_select(diff):
    got, sent = [], []
    view = diff.show(on_select=got.append)
    assert isinstance(view, RunsView) and view.runs["marks"][0]["module"] == "v"
    assert "me-runs" in str(view._esm)  # the built bundle
    view.send = lambda content, buffers=None: sent.append(content)
    view._on_msg(view, {"type": "runs_select", "layer": 2, "module": "v"}, [])
    assert got == [V2] and sent[-1]["tensor"] == V2 and sent[-1]["note"] == ""
    view.on_select = lambda name: (_ for _ in ()).throw(KeyError(name))
    view._on_msg(view, {"type": "runs_select", "layer": 1, "module": "q"}, [])
    assert "cannot be selected" in sent[-1]["note"]
    with pytest.raises(TypeError, match="RunDiff"):
        runs_state(42)


def test_the_run_cell_compares_with_another_checkpoint_and_traces(base, swapped):
    w = RunDemo(base.folder, device="cpu", prompt=TEXT)
    w.send = lambda content, buffers=None: None
    w._on_msg(w, {"type": "compare_runs", "source": swapped}, [])
    assert w.wait(120) and w.error == "", w.error
    assert w.other_source == swapped and w.runs["kind"] == "diff"
    assert w.runs["first"]["tensor"] == V2
    picked = []
    w.on_select = picked.append
    w._on_msg(w, {"type": "runs_select", "layer": 2, "module": "v"}, [])
    assert picked == [V2]
    w._on_msg(w, {"type": "trace"}, [])
    assert w.wait(120) and w.error == "" and w.runs["kind"] == "trace"
    # A path that is not there is a sentence in the widget, not a traceback.
    w._on_msg(w, {"type": "compare_runs", "source": str(base.root / "nowhere")}, [])
    assert w.wait(60) and w.status == "error" and "Traceback" not in w.error and w.error
    w.other_source = ""
    w.compare_runs()
    assert w.wait(60) and "type the path" in w.error


def test_the_sentence_compares_the_jump_with_the_largest_error_before_it():
    from model_explorer.runs.verdict import divergence_sentence

    first = {"kind": "jump", "layer": 7, "module": "q", "rel_l2": 0.9, "previous_max": 0.03,
             "tensor": "blk.7.attn_q.weight", "offset": 1234567, "file": "/m/model.gguf",
             "explanation": "layer 7 q differs while its input agrees."}
    s = divergence_sentence(first)
    assert s.startswith("The runs part at layer 7 q (relative L2 0.9, 30x the largest before it (0.03))")
    assert "blk.7.attn_q.weight at byte 1,234,567 of model.gguf. Layer 7 q differs" in s
    assert "NaN/Inf in one run only" in divergence_sentence({**first, "rel_l2": math.inf})
    assert "every earlier point agreed exactly" in divergence_sentence({**first, "previous_max": 0.0})
    assert "agreed within float32 rounding (3e-06 at most)" in divergence_sentence({**first, "previous_max": 3e-6})
    after = divergence_sentence({**first, "drift_from": {"layer": None, "module": "embed", "rel_l2": 0.004}})
    assert after.endswith("Before the jump the runs already differ a little, from embed on (relative L2 0.004 "
                          "there), as rounding or quantization makes them.")


def test_a_jump_after_a_drift_never_says_everything_before_it_agrees():
    """Issue 39 item 12: one sentence said "everything before it agrees" and "already drift apart"."""
    from model_explorer.runs.verdict import explain

    rows = [{"layer": None, "module": "embed", "rel_l2": 0.004, "tensor": "e"},
            {"layer": 0, "module": "ffn_out", "rel_l2": 0.9, "tensor": "w", "tensors": ["w"]}]
    text = explain(rows[1], rows)
    assert "everything before it agrees" not in text and "far more than the small difference before it" in text
    assert "everything before it agrees" in explain(rows[1], [{**rows[0], "rel_l2": 0.0}, rows[1]])


def test_a_low_top1_beside_a_small_kld_is_a_flat_distribution():
    import numpy as np

    from model_explorer.runs.metrics import flatness
    from model_explorer.runs.verdict import top1_note

    rng = np.random.default_rng(0)
    flat = rng.standard_normal((8, 1000)) * 0.01  # random weights: every token nearly as likely
    assert flatness(flat) > 0.99 and flatness(np.eye(8, 1000) * 50) < 0.1
    note = top1_note(0.25, 3e-4, flatness(flat), 1000)
    assert note.startswith("Top-1 agreement is 25% although the KLD is at most 0.0003 nats: the next-token "
                           "distribution is nearly flat") and "random weights" in note
    assert top1_note(0.25, 0.8, 0.99, 1000) == "" and top1_note(1.0, 0.0, 0.99, 1000) == ""
    assert top1_note(0.25, 3e-4, 0.3, 1000) == ""  # a confident model: not this explanation


def test_a_cell_clicked_in_the_explorers_run_tab_selects_the_tensor_there(base, swapped):
    ex = mx.explore(base.folder, run=True)
    demo = ex.run_demo()
    demo.send = lambda content, buffers=None: None
    demo.runs = runs_state(mx.compare_runs(base.folder, swapped, prompt=TEXT))
    demo._on_msg(demo, {"type": "runs_select", "layer": 2, "module": "v"}, [])
    info = mx.open(base.folder).tensors[V2]
    assert (ex.selection["tensor"], ex.selection["offset"], ex.selection["length"]) == (V2, info.offset, info.length)
