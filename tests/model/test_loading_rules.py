"""The expected-tensor check held equal to transformers' own loading: for each case, the missing
and unexpected names the explorer derives (load_rules.py over transformers' meta-device build)
equal what `from_pretrained(path, output_loading_info=True)` reports, for config.json's class and
for AutoModel; and the findings people read say the same thing without a false error.

Cases: a BERT base checkpoint under BertForMaskedLM and BertForSequenceClassification configs, a
head checkpoint loaded as the base model, legacy LayerNorm gamma/beta names, position_ids stored
or not, a tied lm_head absent and an untied one absent, GPT-2 with its attn.bias/masked_bias
buffers, a Llama with per-layer rotary inv_freq saved, a Llama base checkpoint under the causal-LM
class, a doubled `model.` prefix, T5 and BART with their shared embeddings."""

from __future__ import annotations

import json

import pytest

import model_explorer as mx
from model_explorer.model import load_rules
from model_explorer.model.will_load import load_sets

transformers = pytest.importorskip("transformers")
torch = pytest.importorskip("torch")
from safetensors.torch import load_file, save_file  # noqa: E402

transformers.logging.set_verbosity_error()

BERT = dict(vocab_size=64, hidden_size=16, num_hidden_layers=2, num_attention_heads=2, intermediate_size=32,
            max_position_embeddings=32)
LLAMA = dict(vocab_size=64, hidden_size=16, intermediate_size=32, num_hidden_layers=2, num_attention_heads=2,
             num_key_value_heads=1, max_position_embeddings=64)


def _save(d, model, edit=None, architectures=None):
    torch.manual_seed(0)
    model.save_pretrained(d)
    state = load_file(str(d / "model.safetensors"))
    if edit is not None:
        state = edit(dict(state))
    save_file({k: v.contiguous() for k, v in state.items()}, str(d / "model.safetensors"), metadata={"format": "pt"})
    if architectures:
        cfg = json.loads((d / "config.json").read_text())
        cfg["architectures"] = architectures
        (d / "config.json").write_text(json.dumps(cfg))
    return d


def _bert(cls="BertModel", **kw):
    return getattr(transformers, cls)(transformers.BertConfig(**BERT, **kw))


def _llama(cls="LlamaForCausalLM", **kw):
    return getattr(transformers, cls)(transformers.LlamaConfig(**dict(LLAMA, **kw)))


def _with(extra):
    return lambda s: {**s, **extra}


def _gamma(state):
    return {k.replace("LayerNorm.weight", "LayerNorm.gamma").replace("LayerNorm.bias", "LayerNorm.beta"): v
            for k, v in state.items()}


def _without(*names):
    return lambda s: {k: v for k, v in s.items() if k not in names}


def _prefixed(p):
    return lambda s: {p + k: v for k, v in s.items()}


def _inv_freq(state):
    return {**state, **{f"model.layers.{i}.self_attn.rotary_emb.inv_freq": torch.ones(4) for i in range(2)}}


def _gpt2_buffers(state):
    n = 32
    return {**state, "transformer.h.0.attn.bias": torch.tril(torch.ones(n, n))[None, None],
            "transformer.h.0.attn.masked_bias": torch.tensor(-1e4)}


POSITION_IDS = {"embeddings.position_ids": torch.arange(32)[None]}
CASES = {
    "bert base under BertForMaskedLM": (lambda: _bert(), _with(POSITION_IDS), ["BertForMaskedLM"]),
    "bert base under BertForSequenceClassification": (lambda: _bert(), None, ["BertForSequenceClassification"]),
    "bert head checkpoint loaded as base": (lambda: _bert("BertForMaskedLM"), None, ["BertModel"]),
    "bert legacy gamma/beta": (lambda: _bert("BertForMaskedLM"), _gamma, None),
    "bert position_ids stored": (lambda: _bert(), _with(POSITION_IDS), None),
    "bert position_ids absent": (lambda: _bert(), None, None),
    "llama tied lm_head absent": (lambda: _llama(tie_word_embeddings=True), None, None),
    "llama untied lm_head absent": (lambda: _llama(tie_word_embeddings=False), _without("lm_head.weight"), None),
    "llama rotary inv_freq saved": (lambda: _llama(), _inv_freq, None),
    "llama base under LlamaForCausalLM": (lambda: _llama("LlamaModel", tie_word_embeddings=False), None,
                                          ["LlamaForCausalLM"]),
    "llama doubled model. prefix": (lambda: _llama(tie_word_embeddings=False), _prefixed("model."), None),
    "gpt2 attn.bias and masked_bias": (lambda: transformers.GPT2LMHeadModel(transformers.GPT2Config(
        vocab_size=64, n_embd=16, n_layer=2, n_head=2, n_positions=32)), _gpt2_buffers, None),
    "t5 shared embeddings": (lambda: transformers.T5ForConditionalGeneration(transformers.T5Config(
        vocab_size=32, d_model=16, d_kv=4, d_ff=32, num_layers=1, num_heads=2)), None, None),
    "bart shared embeddings": (lambda: transformers.BartForConditionalGeneration(transformers.BartConfig(
        vocab_size=32, d_model=16, encoder_layers=1, decoder_layers=1, encoder_attention_heads=2,
        decoder_attention_heads=2, encoder_ffn_dim=32, decoder_ffn_dim=32, max_position_embeddings=32)),
        None, None),
}


def _reference(d, cls):
    _, info = cls.from_pretrained(d, output_loading_info=True)
    return set(info["missing_keys"]), set(info["unexpected_keys"])


@pytest.fixture(scope="module")
def folders(tmp_path_factory):
    out = {}
    for name, (make, edit, arch) in CASES.items():
        out[name] = _save(tmp_path_factory.mktemp("case"), make(), edit, arch)
    return out


@pytest.mark.parametrize("loader", [None, "auto"], ids=["config class", "AutoModel"])
@pytest.mark.parametrize("case", list(CASES))
def test_missing_and_unexpected_equal_transformers(folders, case, loader):
    d = folders[case]
    ckpt = mx.open(d)
    if loader is None:
        arch = json.loads((d / "config.json").read_text())["architectures"][0]
        cls = getattr(transformers, arch)
    else:
        cls = transformers.AutoModel
    assert load_sets(ckpt, loader) == _reference(d, cls)


def test_legacy_renames_equal_transformers():
    from transformers.conversion_mapping import get_checkpoint_conversion_mapping

    theirs = [(r.source_patterns, r.target_patterns) for r in get_checkpoint_conversion_mapping("legacy")]
    ours = [([s], [t]) for s, t in load_rules.LEGACY_RENAMES]
    flat = []
    for sources, targets in theirs:
        flat += [([s], targets) for s in sources]
    assert ours == flat


# -- the findings people read --------------------------------------------------------------------

# the expected-tensor check's codes (the tokenizer's are tested elsewhere)
LOAD_CODES = {"key_prefix", "key_prefix_doubled", "lm_head_missing", "transposed_weight", "config_mismatch", "missing_tensors",
              "unexpected_tensors", "shape_mismatch", "head_initialised", "head_dropped", "stale_buffers",
              "library_layout", "unknown_architecture", "model_check_failed"}


def _model(ckpt):
    return {f.code: f for f in ckpt.findings if f.code in LOAD_CODES}


def test_base_checkpoint_under_a_head_class_names_the_head(folders):
    d = folders["bert base under BertForMaskedLM"]
    found = _model(mx.open(d, cross_check=True))
    assert set(found) == {"head_initialised"}, [str(f) for f in found.values()]
    f = found["head_initialised"]
    assert f.severity == "warning"
    missing, unexpected = _reference(d, transformers.BertForMaskedLM)
    assert set(f.extra["head"]) == missing and set(f.extra["ignored"]) == unexpected
    assert f.fix is not None and "rename" not in f.fix.lower() and f.offset is not None


def test_head_checkpoint_as_base_says_the_head_is_dropped(folders):
    found = _model(mx.open(folders["bert head checkpoint loaded as base"], cross_check=True))
    assert set(found) == {"head_dropped", "head_initialised"} and found["head_dropped"].severity == "info"
    assert found["head_initialised"].extra["head"] == ["pooler.dense.bias", "pooler.dense.weight"]
    assert all(n.startswith("cls.") for n in found["head_dropped"].extra["dropped"])


@pytest.mark.parametrize("case", ["bert legacy gamma/beta", "bert position_ids stored", "bert position_ids absent",
                                  "llama tied lm_head absent", "llama rotary inv_freq saved",
                                  "t5 shared embeddings", "bart shared embeddings"])
def test_clean_by_transformers_rules_is_clean(folders, case):
    for cross in (False, True):
        assert _model(mx.open(folders[case], cross_check=cross)) == {}, case


def test_untied_lm_head_absent_is_still_an_error(folders):
    for cross in (False, True):
        assert set(_model(mx.open(folders["llama untied lm_head absent"], cross_check=cross))) == {"lm_head_missing"}


def test_gpt2_buffers_are_stale_not_unexpected(folders):
    for cross in (False, True):  # the built-in table and transformers say the same
        found = _model(mx.open(folders["gpt2 attn.bias and masked_bias"], cross_check=cross))
        assert set(found) == {"stale_buffers"} and found["stale_buffers"].severity == "info"
        assert found["stale_buffers"].extra["buffers"] == ["transformer.h.0.attn.masked_bias"]


def test_llama_base_under_the_causal_lm_class(folders):
    d = folders["llama base under LlamaForCausalLM"]
    for cross in (False, True):
        found = _model(mx.open(d, cross_check=cross))
        assert set(found) == {"head_initialised"}, [str(f) for f in found.values()]
        assert found["head_initialised"].extra["head"] == ["lm_head.weight"]


def test_doubled_prefix_is_a_warning_when_the_head_class_loads_it(folders):
    found = _model(mx.open(folders["llama doubled model. prefix"], cross_check=True))
    assert set(found) == {"key_prefix_doubled"} and found["key_prefix_doubled"].severity == "warning"
    assert "LlamaForCausalLM" in found["key_prefix_doubled"].message


@pytest.mark.parametrize("case", [c for c in CASES if c.startswith(("llama", "gpt2"))])
def test_open_and_doctor_agree_where_the_tables_know_the_family(folders, case):
    # the Overview paints the open-time findings (built-in tables); doctor's come from transformers
    at_open = {(f.code, f.severity) for f in mx.open(folders[case]).findings}
    doctor = {(f.code, f.severity) for f in mx.open(folders[case], cross_check=True).findings}
    assert at_open == doctor
