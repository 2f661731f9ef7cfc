"""mx.compare_runs: each planted fault is pinpointed to its layer, module and weight (with its
bytes) as a jump; quantized copies drift (named from where their rounding starts), in the
expected order; KLD, perplexity and top-1 agreement equal the figures computed from
transformers' logits on the same ids."""

from __future__ import annotations

import json

import numpy as np
import pytest

import model_explorer as mx
from model_explorer.runs.verdict import NOISE_KLD, STEP_MIN

from .conftest import TEXT

pytestmark = pytest.mark.reference
torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

SWAPPED = {"model.layers.2.self_attn.v_proj.weight": "model.layers.0.self_attn.v_proj.weight"}


def _swapped(base) -> dict:
    return {k: base.state[v] for k, v in SWAPPED.items()}


def _permuted(base) -> dict:
    """Layer 1's q and k rows left in llama.cpp's interleaved order (a converter that forgot them)."""
    nh, nkv = base.cfg["num_attention_heads"], base.cfg["num_key_value_heads"]
    return {"model.layers.1.self_attn.q_proj.weight": base.h.llama_cpp_permute(base.weight(1, "self_attn.q_proj"), nh),
            "model.layers.1.self_attn.k_proj.weight": base.h.llama_cpp_permute(base.weight(1, "self_attn.k_proj"), nkv)}


def _nan(base) -> dict:
    w = base.weight(2, "mlp.up_proj").copy()
    w[5, 7] = np.nan
    return {"model.layers.2.mlp.up_proj.weight": w}


# fault -> (weights changed, config.json changed, where it must be found, the weight named)
FAULTS = {
    "swapped_layer": (_swapped, {}, (2, "v"), "model.layers.2.self_attn.v_proj.weight"),
    "qk_interleaved": (_permuted, {}, (1, "q"), "model.layers.1.self_attn.q_proj.weight"),
    "rope_theta": (None, {"rope_theta": 1e6}, (0, "attn_out"), "model.layers.0.self_attn.o_proj.weight"),
    "rms_norm_eps": (None, {"rms_norm_eps": 0.1}, (0, "attn_norm"), "model.layers.0.input_layernorm.weight"),
    "nan_weight": (_nan, {}, (2, "ffn_out"), "model.layers.2.mlp.up_proj.weight"),
}


@pytest.fixture(scope="module")
def identical(base):
    return mx.compare_runs(base.folder, base.folder, prompt=TEXT)


def test_identical_runs_have_no_divergence(identical):
    assert identical.first_divergence is None
    assert identical.kld == {"mean": 0.0, "median": 0.0, "p99": 0.0, "max": 0.0}
    assert identical.top1_agreement == 1.0 and identical.tokenizer_mismatch is None
    assert all(r["rel_l2"] == 0.0 and r["cosine"] == pytest.approx(1.0) for r in identical.rows)
    assert "no divergence" in identical.summary()


@pytest.mark.parametrize("fault", list(FAULTS))
def test_a_planted_fault_is_found_at_its_layer_and_module(base, fault):
    weights, config, (layer, module), tensor = FAULTS[fault]
    folder = base.copy(fault, weights(base) if weights else None, **config)
    d = mx.compare_runs(base.folder, folder, prompt=TEXT)
    first = d.first_divergence
    assert first is not None, d.summary()
    assert (first["layer"], first["module"]) == (layer, module), d.summary()
    assert first["tensor"] == tensor and tensor in first["tensors"]
    info = mx.open(folder).tensors[tensor]
    assert (first["offset"], first["length"]) == (info.offset, info.length)
    assert first["kind"] == "jump" and d.verdict["kind"] == "jump", d.summary()
    assert first["rel_l2"] >= STEP_MIN and first["explanation"] and first["previous_max"] == 0.0
    # a config.json fault is named as such; a weight fault has the same hyperparameters
    assert d.config_diff == {k: [base.cfg.get(k, 10000.0), v]
                             for k, v in config.items()}
    if config:
        assert first["explanation"].startswith("the two configurations differ") and next(iter(config)) in d.summary()
        assert [row[0] for row in d.to_json()["config_rows"]] == list(config)
    if fault == "nan_weight":  # the trace of the broken copy finds the NaN at the same place
        t = mx.trace(folder, prompt=TEXT)
        assert {k: t.first_nonfinite[k] for k in ("layer", "module", "tensor")} == \
            {"layer": layer, "module": module, "tensor": tensor}
        assert np.isnan(d.kld["mean"])
    else:
        assert d.kld["mean"] > 0.01
    json.dumps(d.to_json(), allow_nan=False)  # NaN/Inf became None


def _reference_figures(logits_a: np.ndarray, logits_b: np.ndarray, ids: list[int]) -> dict:
    """KLD, top-1 and perplexity from transformers' logits, with torch in float64."""
    la = torch.log_softmax(torch.from_numpy(logits_a).double(), -1)
    lb = torch.log_softmax(torch.from_numpy(logits_b).double(), -1)
    kl = (la.exp() * (la - lb)).sum(-1).numpy()
    nxt = torch.tensor(ids[1:])
    ppl = [float(torch.exp(-lp[:-1].gather(1, nxt[:, None]).mean())) for lp in (la, lb)]
    return {"mean": kl.mean(), "median": np.median(kl), "p99": np.percentile(kl, 99), "max": kl.max(),
            "top1": float((la.argmax(-1) == lb.argmax(-1)).double().mean()), "ppl": ppl}


def test_kld_perplexity_and_agreement_equal_transformers(base):
    folder = base.copy("swapped_for_kld", _swapped(base))
    d = mx.compare_runs(base.folder, folder, text=TEXT)
    ids = d.ids
    ref = _reference_figures(base.h.reference_logits(base.reference(), ids),
                             base.h.reference_logits(base.reference(_swapped(base)), ids), ids)
    for k in ("mean", "median", "p99", "max"):
        assert d.kld[k] == pytest.approx(ref[k], rel=1e-3, abs=1e-7), k
    assert d.top1_agreement == pytest.approx(ref["top1"])
    assert 0.0 < d.top1_agreement < 1.0
    assert d.perplexity["a"] == pytest.approx(ref["ppl"][0], rel=1e-4)
    assert d.perplexity["b"] == pytest.approx(ref["ppl"][1], rel=1e-4)
    assert d.perplexity["a"] != pytest.approx(d.perplexity["b"], rel=1e-2)


def test_a_tokenizer_that_splits_differently_is_reported(base, tmp_path):
    vocab = base.h.tiny_vocab(base.cfg["vocab_size"])
    folder = base.copy("fewer_merges")
    other = type(vocab)(vocab.tokens, vocab.types, [m for m in vocab.merges if m != "Ġt he"])
    base.h.write_tokenizer_files(folder, other)
    d = mx.compare_runs(base.folder, folder, prompt=TEXT)
    m = d.tokenizer_mismatch
    assert m is not None and m["a_ids"] == d.ids and len(m["b_ids"]) > len(d.ids)
    assert m["a_tokens"][0] == "Ġthe" and m["b_tokens"][:2] == ["Ġt", "he"]
    assert d.first_divergence is None  # both ran on a's ids, and the weights are the same
    assert "tokenizers disagree" in d.summary()
    assert mx.compare_runs(base.folder, folder, ids=d.ids).tokenizer_mismatch is None  # no text given


@pytest.fixture(scope="module")
def quantized(base):
    """KLD of Q8_0 and Q4_0 GGUF copies (mx.convert) and a GPTQ 4-bit folder against the base."""
    out = {}
    for dtype in ("Q8_0", "Q4_0"):
        gguf = mx.convert(base.folder, str(base.root / f"model-{dtype}.gguf"), format="gguf", dtype=dtype)
        out[dtype] = mx.compare_runs(base.folder, gguf, prompt=TEXT)
    out["GPTQ"] = mx.compare_runs(base.folder, _gptq_folder(base), prompt=TEXT)
    return out


def _gptq_folder(base) -> str:
    """The base's seven projections per layer packed as GPTQ 4-bit, group 32 (AutoGPTQ's layout)."""
    from quant_codec import layouts as L

    tensors = {}
    for name, w in base.state.items():
        if name.endswith("_proj.weight"):
            tensors.update(L.gptq_layer(name[:-len(".weight")], w, 4, 32, sym=False, desc_act=True)[0])
        else:
            tensors[name] = w
    folder = L.write_folder(base.root / "gptq", tensors, L.gptq_config(4, 32, False, True),
                            {**base.cfg, "torch_dtype": "float32"})
    base.h.write_tokenizer_files(str(folder), base.h.tiny_vocab(base.cfg["vocab_size"]))
    return str(folder)


def test_quantized_copies_drift_in_the_expected_order(quantized):
    q8, q4, gptq = quantized["Q8_0"], quantized["Q4_0"], quantized["GPTQ"]
    # quantization noise is a drift, not a jump: named from the first weight it rounds
    for d, (module, kind) in ((q8, ("embed", "Q8_0")), (q4, ("embed", "Q4_0")), (gptq, ("q", None))):
        first = d.first_divergence
        assert d.verdict["kind"] == "drift" and first["kind"] == "drift", d.summary()
        assert first["module"] == module and "rounding" in first["explanation"], d.summary()
        assert kind is None or d.rows[0]["kind"] == kind
        assert "drift from" in d.summary() and "no divergence" not in d.summary()
    assert gptq.first_divergence["layer"] == 0  # the embedding stays F32: layer 0 q rounds first
    assert gptq.rows[0]["rel_l2"] == 0.0
    assert q8.config_diff == {} and gptq.config_diff == {}  # GGUF metadata reads as config.json did
    assert q8.kld["mean"] < q4.kld["mean"] and q8.kld["mean"] < gptq.kld["mean"]
    assert q8.top1_agreement >= max(q4.top1_agreement, gptq.top1_agreement)
    assert max(r["rel_l2"] for r in q8.rows) < 0.1
    # every point of the GGUF run lined up with the folder's, q/k rows included
    assert q8.rows[2]["module"] == "q" and q8.rows[2]["tensor"] == "blk.0.attn_q.weight"
    assert q8.rows[2]["tensor_a"] == "model.layers.0.self_attn.q_proj.weight"
    assert all(r["rel_l2"] < 0.05 for r in q8.rows if r["layer"] == 0)


def test_to_json_is_plain_and_shaped_for_the_widget(quantized):
    j = quantized["Q8_0"].to_json()
    json.dumps(j, allow_nan=False)
    assert j["config_diff"] == {}
    layers, modules = len(j["layers"]), len(j["modules"])
    for metric in ("cosine", "rel_l2", "max_abs"):
        assert np.array(j["metrics"][metric], dtype=float).shape == (layers, modules)
    assert np.array(j["tensors"]).shape == (layers, modules)
    assert j["tensors"][1][j["modules"].index("k")] == "blk.1.attn_k.weight"
    assert [o["module"] for o in j["outer"]] == ["embed", "final_norm", "logits"]
    assert set(j["places"]["blk.1.attn_k.weight"]) == {"file", "offset", "length"}
    assert j["first_divergence"]["kind"] == "drift" and set(j["kld"]) == {"mean", "median", "p99", "max"}
    assert j["verdict"]["kind"] == "drift" and j["verdict"]["sentence"].startswith("The runs drift apart from embed on")
    assert j["config_rows"] == []
    assert quantized["Q8_0"].table().shape[0] == 2 + 1 + layers * modules


def test_runs_that_cannot_be_compared_say_why(base):
    other = base.copy("three_layers")
    cfg = dict(base.cfg, num_hidden_layers=3)
    base.h.write_hf_dir(other, cfg, base.h.random_state(cfg))
    with pytest.raises(ValueError, match="num_layers"):
        mx.compare_runs(base.folder, other, prompt=TEXT)
    with pytest.raises(ValueError, match="text="):
        mx.compare_runs(base.folder, base.folder, prompt="a", text="b")
    with pytest.raises(FileNotFoundError):
        mx.compare_runs(base.folder, base.root / "absent", prompt=TEXT)


def test_the_numpy_and_torch_backends_run_alike(base):
    torch_model = mx.load_model(base.folder, device="cpu", backend="torch")
    d = mx.compare_runs(base.folder, torch_model, prompt=TEXT)
    assert d.first_divergence is None and max(r["rel_l2"] for r in d.rows) < 1e-5
    assert d.agree and d.kld["max"] < NOISE_KLD / 100 and d.verdict["kind"] == "agree"
    assert mx.trace(torch_model, prompt=TEXT).first_nonfinite is None


def test_config_differences_compare_what_the_forward_pass_uses():
    """None that means 'every layer' or 'the default scale' equals it spelled out (a GGUF reader
    may spell it out); storage-only fields and, across formats, Gemma's folded 1 + w are not
    differences; a real change is."""
    import dataclasses

    from model_explorer.model.config import from_hf
    from model_explorer.runs.config_diff import config_differences

    base = from_hf({"model_type": "qwen3_moe", "vocab_size": 64, "hidden_size": 64, "intermediate_size": 96,
                    "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 16,
                    "num_experts": 4, "num_experts_per_tok": 2, "moe_intermediate_size": 32})
    spelled = dataclasses.replace(base, moe_layers=[True, True], rope_layers=[True, True], attention_scale=0.25,
                                  gguf_qk_permuted=True, extra={"x": 1})
    assert config_differences(base, spelled) == {}
    assert config_differences(base, dataclasses.replace(base, norm_offset=1.0), same_format=False) == {}
    assert config_differences(base, dataclasses.replace(base, moe_layers=[True, False])) == \
        {"moe_layers": [[True, True], [True, False]]}
    assert config_differences(base, dataclasses.replace(base, rms_norm_eps=0.1)) == {"rms_norm_eps": [1e-6, 0.1]}


def test_configuration_values_read_as_words_not_reprs():
    from model_explorer.runs.config_diff import config_rows

    rows = config_rows({"rope_theta": [10000.0, 1e6], "moe_layers": [[True, True], [True, False]],
                        "sliding_window": [None, 4096], "qk_norm": [False, True], "rms_norm_eps": [1e-6, 1e-5],
                        "rope_scaling": [None, {"type": "linear", "factor": 2.0}]})
    assert rows == [["rope_theta", "10,000", "1,000,000"], ["moe_layers", "every layer", "layers 0"],
                    ["sliding_window", "not set", "4096"], ["qk_norm", "no", "yes"],
                    ["rms_norm_eps", "1e-06", "1e-05"], ["rope_scaling", "not set", "type linear, factor 2"]]


def _held_points(monkeypatch) -> list[int]:
    """How many of a's activations are held each time b compares one."""
    from model_explorer.runs import pairing

    held: list[int] = []
    original = pairing.Pairing.__call__

    def counting(self, layer, module, x):
        held.append(len(self.ref))
        return original(self, layer, module, x)

    monkeypatch.setattr(pairing.Pairing, "__call__", counting)
    return held


def test_two_runs_go_in_lock_step_holding_one_layer_of_a(base, monkeypatch):
    """a runs a layer, b runs it and compares: a's kept activations never exceed one layer's
    points, and the figures are those of the runs done one after the other."""
    from model_explorer.model.decoder_points import LAYER_MODULES
    from model_explorer.runtime.memory_budget import RunPlan, WontFit

    folder = base.copy("lockstep_swapped", _swapped(base))
    held = _held_points(monkeypatch)
    seen = []
    d = mx.compare_runs(base.folder, folder, prompt=TEXT, progress=lambda *a: seen.append(a))
    assert max(held) <= len(LAYER_MODULES) + 1
    assert seen[-1] == ("running a and b", base.cfg["num_hidden_layers"], base.cfg["num_hidden_layers"])

    # b refused beside a (as when a holds the memory b needs): a runs first and goes, then b
    loads = []
    import model_explorer.runs.engines as engines

    real_load = engines.load  # the decoder engine's loader (runs/engines.py)

    def refusing(source, *args):
        loads.append(source)
        if len(loads) == 2:
            raise WontFit(RunPlan("refused", 1, 1, 0, "refused before loading (test)"))
        return real_load(source, *args)

    monkeypatch.setattr(engines, "load", refusing)
    held.clear()
    one_after_other = mx.compare_runs(base.folder, folder, prompt=TEXT)
    assert len(loads) == 3 and max(held) > len(LAYER_MODULES) + 1
    assert one_after_other.first_divergence["tensor"] == d.first_divergence["tensor"]
    assert np.array_equal(one_after_other.logits_b, d.logits_b)
    assert one_after_other.rows == d.rows


def test_a_lock_step_run_stops_when_asked(base):
    from model_explorer.runs.trace import RunStopped

    with pytest.raises(RunStopped):
        mx.compare_runs(base.folder, base.folder, prompt=TEXT, progress=lambda label, done, total: done < 2)


def test_points_without_a_partner_are_reported_not_dropped():
    """A point only one run records, or whose shapes differ, is listed as unpaired, not a NaN
    row the verdict skips."""
    from model_explorer.runs.pairing import Pairing

    p = Pairing()
    p.keep(None, "embed", np.ones((2, 4), np.float32))
    p.keep(0, "k", np.ones((2, 4), np.float32))
    p.keep(0, "only_a", np.ones(3, np.float32))
    p(None, "embed", np.ones((2, 4), np.float32))
    p(0, "q", np.ones((2, 4), np.float32))
    p(0, "k", np.ones((2, 5), np.float32))
    p.finish()
    assert [(r["layer"], r["module"]) for r in p.rows] == [(None, "embed")]
    assert {(u["layer"], u["module"]): u["why"] for u in p.unpaired} == {
        (0, "q"): "only b records it", (0, "k"): "shapes differ: a [2, 4], b [2, 5]",
        (0, "only_a"): "only a records it"}


class _OneCall:
    """A side that runs its whole pass inside its first step, as llama.cpp's eval callback
    fires inside one decode call."""

    per_layer = False

    def __init__(self, side) -> None:
        self.side = side

    def __getattr__(self, name):
        return getattr(self.side, name)

    def steps(self, ids, recorder, progress=None, label=""):
        from model_explorer.runtime.decoder import drain

        logits = drain(self.side.steps(ids, recorder, progress, label))
        yield self.side.num_layers - 1
        return logits


@pytest.mark.parametrize("which", ["a", "b"])
def test_a_side_that_cannot_yield_per_layer_leads_holding_one_layer_of_the_other(base, monkeypatch, which):
    from model_explorer.model.decoder_points import LAYER_MODULES
    from model_explorer.runs.engines import open_side
    from model_explorer.runs.pairing import together

    folder = base.copy("one_call_swapped", _swapped(base))
    d = mx.compare_runs(base.folder, folder, prompt=TEXT)
    a, b = open_side(base.folder), open_side(folder)
    a, b = (_OneCall(a), b) if which == "a" else (a, _OneCall(b))
    held = _held_points(monkeypatch)
    try:
        cmp, logits_a, logits_b = together(a, b, d.ids, progress=False)
    finally:
        a.close()
        b.close()
    assert max(held) <= len(LAYER_MODULES) + 1
    assert not cmp.unpaired
    keys = ("layer", "module", "cosine", "rel_l2", "max_abs")
    assert [{k: r[k] for k in keys} for r in cmp.rows] == [{k: r[k] for k in keys} for r in d.rows]
    assert np.array_equal(logits_a, d.logits_a) and np.array_equal(logits_b, d.logits_b)
    assert d.unpaired == [] and "not compared" not in d.summary()


def test_a_changed_gguf_key_is_named_with_its_bytes(base, tmp_path):
    """A GGUF whose rope.freq_base was rewritten: the difference names the metadata entry of
    each file at the bytes gguf-py's reader gives it, in the summary, the explanation and the
    widget's rows."""
    gguf = pytest.importorskip("gguf")
    import shutil
    import struct

    good = base.h.write_gguf(base.cfg, base.state, str(tmp_path / "good.gguf"))
    bad = str(tmp_path / "bad.gguf")
    shutil.copy(good, bad)
    field = gguf.GGUFReader(bad).fields["llama.rope.freq_base"]
    start, length = int(field.offset), sum(int(p.nbytes) for p in field.parts)
    with open(bad, "r+b") as f:  # the value is the entry's last 4 bytes (a float32)
        f.seek(start + length - 4)
        f.write(struct.pack("<f", 500000.0))
    d = mx.compare_runs(good, bad, prompt=TEXT)
    assert d.config_diff == {"rope_theta": [base.cfg.get("rope_theta", 10000.0), 500000.0]}
    place = {"key": "llama.rope.freq_base", "offset": start, "length": length}
    assert {k: d.config_places["rope_theta"]["b"][k] for k in place} == place
    assert d.config_places["rope_theta"]["b"]["file"] == bad
    stated = f"b's llama.rope.freq_base at bytes {start:,}..{start + length:,}"
    assert stated in d.summary() and stated in d.first_divergence["explanation"]
    j = d.to_json()
    assert j["config_rows"][0][0] == "rope_theta" and stated in j["config_where"][0]
    json.dumps(j, allow_nan=False)
