"""Tokenizer and chat template: read from the files (cross-checked with `tokenizers` and gguf-py),
and one folder per fault, diagnosed with cause and fix; the same folder without it is clean."""

from __future__ import annotations

import json

import numpy as np
import pytest

import model_explorer as mx
from model_explorer.model.tokenizer_info import read_tokenizer

from .conftest import model_findings, only, tiny_cfg, tiny_state, write_folder, write_gguf


def test_summary_matches_the_tokenizers_library(tmp_path):
    from tokenizers import Tokenizer

    d = write_folder(tmp_path / "m")
    t, problems = read_tokenizer(mx.open(d))
    ref = Tokenizer.from_file(str(tmp_path / "m" / "tokenizer.json"))
    assert not problems
    assert t.count == ref.get_vocab_size(with_added_tokens=True)
    assert t.vocab_size == ref.get_vocab_size(with_added_tokens=False)
    assert t.model == type(ref.model).__name__
    assert {a["id"]: a["content"] for a in t.added_tokens} == {
        i: a.content for i, a in ref.get_added_tokens_decoder().items()}
    eos = t.special["eos"]
    assert (eos["id"], eos["token"], eos["from"]) == (ref.token_to_id("<|im_end|>"), "<|im_end|>",
                                                      "tokenizer_config.json eos_token")
    assert eos["config_ids"] == [{"id": 2, "from": "config.json eos_token_id"}]
    assert t.pre_tokenizer == "ByteLevel"
    assert t.rendered.count("<|im_start|>user") == 2 and t.rendered.endswith("<|im_start|>assistant\n")


@pytest.mark.slow
def test_sample_gguf_matches_gguf_py():
    import gguf

    path = mx.sample_path()
    t, _ = read_tokenizer(mx.open(path))
    r = gguf.GGUFReader(path)

    def scalar(key):
        f = r.fields[key]
        return int(f.parts[f.data[0]][0])

    types = [int(r.fields["tokenizer.ggml.token_type"].parts[i][0]) for i in r.fields["tokenizer.ggml.token_type"].data]
    assert t.count == len(r.fields["tokenizer.ggml.tokens"].data)
    assert t.special["bos"]["id"] == scalar("tokenizer.ggml.bos_token_id")
    assert t.special["eos"]["id"] == scalar("tokenizer.ggml.eos_token_id")
    assert t.added_total == sum(1 for x in types if x in (3, 4))
    f = r.fields["tokenizer.ggml.pre"]
    assert t.pre_tokenizer == bytes(f.parts[f.data[0]]).decode()
    assert "<|im_start|>assistant" in t.rendered



def test_tokens_beyond_the_embedding(tmp_path):
    cfg = tiny_cfg(vocab_size=512)
    ckpt = mx.open(write_folder(tmp_path / "m", cfg, tiny_state(cfg), tokenizer=600))
    f = only(ckpt, "tokens_beyond_embedding")
    assert f.severity == "error" and "512 to 599" in f.message and f.tensor == "model.embed_tokens.weight"
    assert "resize_token_embeddings" in f.fix
    clean = mx.open(write_folder(tmp_path / "ok", cfg, tiny_state(cfg), tokenizer=512))
    assert model_findings(clean) == [], [str(x) for x in clean.findings]


def test_padding_rows_are_info(tmp_path):
    cfg = tiny_cfg(vocab_size=320)
    f = only(mx.open(write_folder(tmp_path / "m", cfg, tiny_state(cfg), tokenizer=300)), "unused_embedding_rows")
    assert f.severity == "info" and "20 rows" in f.message


def test_special_id_outside_the_vocabulary(tmp_path):
    cfg = tiny_cfg(eos_token_id=999)
    f = only(mx.open(write_folder(tmp_path / "m", cfg, tiny_state(tiny_cfg()))), "special_token_out_of_vocab")
    assert "999" in f.message and "config.json eos_token_id" in f.message and f.fix
    raw = (tmp_path / "m" / "config.json").read_bytes()
    assert raw[f.offset:f.offset + f.length] == b"999"


def test_bpe_gguf_without_pre_tokenizer(tmp_path):
    f = only(mx.open(write_gguf(tmp_path / "m.gguf", pre=None)), "missing_pre_tokenizer")
    assert f.severity == "warning" and "tokenizer.ggml.pre" in f.message and f.offset is not None
    assert model_findings(mx.open(write_gguf(tmp_path / "ok.gguf"))) == []


def test_bpe_gguf_with_an_unknown_pre_tokenizer(tmp_path):
    f = only(mx.open(write_gguf(tmp_path / "m.gguf", pre="brand-new-lm")), "unknown_pre_tokenizer")
    assert f.severity == "warning" and "'brand-new-lm'" in f.message and "GPT-2" in f.message
    assert f.offset is not None  # the tokenizer.ggml.pre value's bytes


def test_instruct_model_without_chat_template(tmp_path):
    f = only(mx.open(write_folder(tmp_path / "tiny-instruct", template=None)), "no_chat_template")
    assert f.severity == "warning" and "chat_template" in f.fix
    assert model_findings(mx.open(write_folder(tmp_path / "tiny-base", template=None))) == []
    g = only(mx.open(write_gguf(tmp_path / "g.gguf", template=None)), "no_chat_template")  # general.name
    assert g.severity == "warning"


def test_chat_template_that_does_not_parse(tmp_path):
    d = write_folder(tmp_path / "m", template="{% for m in messages %}{{ m.content }")
    f = only(mx.open(d), "bad_chat_template")
    raw = (tmp_path / "m" / "tokenizer_config.json").read_bytes()
    assert f.file.endswith("tokenizer_config.json") and raw[f.offset:f.offset + 1] == b'"'
    assert "line 1" in f.message
    (tmp_path / "m" / "chat_template.jinja").write_text("{{ bos_token }}\n{% for m in messages %}\n{{ m.content }\n")
    f = only(mx.open(d), "bad_chat_template")
    assert f.file.endswith("chat_template.jinja") and "line 3" in f.message and f.offset == len("{{ bos_token }}\n{% for m in messages %}\n")


def test_truncated_tokenizer_json(tmp_path):
    d = write_folder(tmp_path / "m")
    p = tmp_path / "m" / "tokenizer.json"
    p.write_bytes(p.read_bytes()[:700])
    ckpt = mx.open(d)
    f = only(ckpt, "bad_side_file")
    assert f.file.endswith("tokenizer.json") and f.offset is not None and f.offset <= 700
    assert "line" in f.message
    c = mx.card(d)
    assert c.value("layers") == 2 and c.tokenizer["special"]["eos"]["token"] == "<|im_end|>"


def test_folder_without_tokenizer_loads_and_runs_forward(tmp_path):
    from model_explorer.model.config import UnsupportedModel

    d = write_folder(tmp_path / "m", tokenizer=None)
    ckpt = mx.open(d)
    assert only(ckpt, "no_tokenizer").severity == "info"
    model = mx.load_model(d, device="cpu")
    logits = model.forward([1, 2, 3])
    assert logits.shape == (3, 288) and np.isfinite(logits).all()
    with pytest.raises(UnsupportedModel) as e:
        model.generate("hello", max_new_tokens=2)
    assert "tokenizer.json" in str(e.value) and "forward" in str(e.value)


def test_adapter_config_missing_r_is_reported_with_the_file(tmp_path):
    from safetensors.numpy import save_file

    save_file({"base_model.model.model.layers.0.self_attn.q_proj.lora_A.weight": np.zeros((4, 64), np.float32),
               "base_model.model.model.layers.0.self_attn.q_proj.lora_B.weight": np.ones((64, 4), np.float32)},
              str(tmp_path / "adapter_model.safetensors"))
    (tmp_path / "adapter_config.json").write_text(json.dumps({"peft_type": "LORA", "lora_alpha": 8}))
    f = only(mx.open(str(tmp_path)), "adapter_config_invalid")
    assert "'r'" in f.message and f.file.endswith("adapter_config.json")


def test_inspector_matches_the_tokenizers_library(tmp_path):
    from tokenizers import Tokenizer

    from model_explorer.model import inspector

    d = write_folder(tmp_path / "m")
    ckpt = mx.open(d)
    text = "héllo <|im_end|> wörld"
    got = inspector.tokenize(ckpt, text)
    ref = Tokenizer.from_file(str(tmp_path / "m" / "tokenizer.json")).encode(text, add_special_tokens=False)
    assert [t["id"] for t in got] == ref.ids
    raw = text.encode("utf-8")
    spans = list(dict.fromkeys((t["start"], t["end"]) for t in got))  # é's two byte tokens share é
    assert b"".join(raw[a:b] for a, b in spans) == raw  # byte boundaries tile the text
    assert ("é".encode() in [raw[a:b] for a, b in spans]) and spans[1] == (1, 3)
    assert inspector.find(ckpt, "<|im_end|>")[0]["id"] == ref.ids[[t["token"] for t in got].index("<|im_end|>")]
    assert inspector.find(ckpt, 5) == [{"id": 5, "token": inspector.token(ckpt, 5)}]
    assert [t["id"] for t in inspector.page(ckpt, 280, 20)] == list(range(280, 288))


def test_inspector_on_a_gguf(tmp_path):
    from model_explorer.model import inspector

    ckpt = mx.open(write_gguf(tmp_path / "m.gguf"))
    got = inspector.tokenize(ckpt, "ab<|im_start|>")
    assert got[-1]["token"] == "<|im_start|>" and got[-1]["id"] == 1
