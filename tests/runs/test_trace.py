"""mx.trace: statistics of every named activation, equal to those of transformers' hidden states
on the same ids; NaN located where it first appears; a planted massive activation found at its
token and channel; only statistics kept unless keep=True."""

from __future__ import annotations

import json
import sys

import numpy as np
import pytest

import model_explorer as mx
from model_explorer.model.decoder_points import LAYER_MODULES

from .conftest import LAYERS, TEXT

pytestmark = pytest.mark.reference
torch = pytest.importorskip("torch")
pytest.importorskip("transformers")


@pytest.fixture(scope="module")
def traced(base):
    return mx.trace(base.folder, prompt=TEXT, keep=True)


@pytest.fixture(scope="module")
def hidden(base, traced):
    """transformers' hidden states on the same ids: the embedding, then each layer's output."""
    with torch.no_grad():
        out = base.reference()(torch.tensor([traced.ids]), output_hidden_states=True)
    return [h[0].numpy() for h in out.hidden_states], out.logits[0].numpy()


def test_statistics_equal_those_of_transformers_hidden_states(traced, hidden):
    states, logits = hidden
    pairs = [((None, "embed"), states[0])] + [((i, "residual"), states[i + 1]) for i in range(LAYERS - 1)]
    pairs += [((None, "final_norm"), states[LAYERS]), ((None, "logits"), logits)]  # HF's last is normed
    for key, ref in pairs:
        s = traced[key]
        assert s.norm == pytest.approx(np.linalg.norm(ref.astype(np.float64)), rel=1e-4), key
        assert s.absmax == pytest.approx(np.abs(ref).max(), rel=1e-4), key
        assert s.mean == pytest.approx(ref.mean(dtype=np.float64), rel=1e-3, abs=1e-5), key
        assert s.std == pytest.approx(ref.std(dtype=np.float64), rel=1e-4), key
        assert (s.nan, s.inf) == (0, 0)
        v, pos, ch = s.top[0]
        assert abs(ref[pos, ch]) == pytest.approx(np.abs(ref).max(), rel=1e-6) and v == pytest.approx(ref[pos, ch], rel=1e-4)
        np.testing.assert_allclose(traced.activations[key], ref, atol=1e-4 * np.abs(ref).max())


def test_the_table_plot_and_json_cover_every_layer_and_module(traced):
    df = traced.table()
    assert len(df) == 3 + LAYERS * len(LAYER_MODULES)
    assert list(df["module"][:3]) == ["embed", "attn_norm", "q"] and df["layer"].isna().sum() == 3
    assert df.loc[df["module"] == "v", "tensor"].iloc[1] == "model.layers.1.self_attn.v_proj.weight"
    assert df.loc[df["module"] == "logits", "tensor"].iloc[0] == "lm_head.weight"
    assert traced.first_nonfinite is None
    j = traced.to_json()
    json.dumps(j, allow_nan=False)
    assert np.array(j["metrics"]["absmax"], dtype=float).shape == (LAYERS, len(LAYER_MODULES))
    assert j["tensors"][0][LAYER_MODULES.index("attn_out")] == "model.layers.0.self_attn.o_proj.weight"
    fig = traced.plot()
    assert fig.axes and "absmax" in fig.axes[0].get_title()


def test_a_plot_shows_itself_as_an_image_in_a_notebook(traced):
    """IPython without matplotlib's inline backend (nbclient before any plt.figure()) printed the
    bare Figure as '<Figure size ... with 2 Axes>'; the figure carries its own PNG."""
    from IPython.core.formatters import DisplayFormatter

    data, _ = DisplayFormatter().format(traced.plot())
    assert data["image/png"].startswith(b"\x89PNG")


def test_a_massive_activation_is_found_at_its_token_and_channel(base, traced):
    token = traced.ids[5]
    embed = base.state["model.embed_tokens.weight"].copy()
    embed[token, 9] = 500.0  # ~5,000x the median |x| of the embedding
    t = mx.trace(base.copy("massive", {"model.embed_tokens.weight": embed}), prompt=TEXT)
    first = t.massive[0]
    assert (first["layer"], first["module"], first["channel"]) == (None, "embed", 9)
    assert t.ids[first["position"]] == token and first["ratio"] >= t.massive_ratio
    assert not traced.massive  # none in the untouched model


def test_a_trace_keeps_statistics_not_activations(base, traced):
    t = mx.trace(base.folder, prompt=TEXT)
    assert t.activations == {} and len(traced.activations) == len(t.stats)
    kept = sum(sys.getsizeof(s.top) + 200 for s in t.stats)
    assert kept < sum(a.nbytes for a in traced.activations.values()) / 10
    assert t.logits.shape == (len(t.ids), base.cfg["vocab_size"])


def test_ids_and_loaded_models_are_traced_too(base, traced):
    model = mx.load_model(base.folder, device="cpu")
    t = mx.trace(model, ids=traced.ids)
    assert [s.norm for s in t.stats] == [s.norm for s in traced.stats]
    assert not hasattr(model.decoder, "recorder")  # handed to each pass, never left on the decoder
    with pytest.raises(ValueError, match="either prompt= or ids="):
        mx.trace(model, prompt="x", ids=[1, 2])
    with pytest.raises(ValueError, match="outside the vocabulary"):
        mx.trace(model, ids=[10**6])


@pytest.mark.parametrize("stream", [False, True])
def test_a_stored_nan_is_blamed_on_its_weight_streamed_or_not(base, stream):
    """A NaN stored in layer 2's up projection: the trace names that weight, not the module's
    main weight (down), whether its matrices are held or read block by block from the file."""
    w = base.weight(2, "mlp.up_proj").copy()
    w[5, 7] = np.nan
    folder = base.copy("nan_up", {"model.layers.2.mlp.up_proj.weight": w})
    t = mx.trace(folder, prompt=TEXT, stream=stream, progress=False)
    first = t.first_nonfinite
    assert (first["layer"], first["module"], first["tensor"]) == (2, "ffn_out", "model.layers.2.mlp.up_proj.weight")
