"""The tokenizer rebuilt from GGUF metadata against transformers' GGUF tokenizer (SmolLM2,
gpt2 type), plus chat templates, streaming decode and the tokenizer.json path."""

from __future__ import annotations

import os

import pytest
from conftest import CHATML, random_state, tiny_config, write_gguf, write_hf_dir

import model_explorer as mx
from model_explorer.model.tokenizer import StreamDecoder, from_directory, from_gguf, merges_from_scores

STRINGS = [
    "Hello world", " leading space", "trailing space ", "  two  spaces\n\nnew lines\t tab\r\n",
    "日本語のテキスト", "😀 emoji, émojis, café, naïve, Ελληνικά, русский", "\u200b zero width", "ǅ",
    "12345 3.14159 1,000,000 2026-11-21 0x1F", "don't I'll we've THEY'RE", "",
    "<|im_start|>user\nhi<|im_end|>", "a<|im_end|>b", "def f(x):\n    return x ** 2  # comment",
    "   \n\n   ",
]
CONVERSATIONS = [
    [{"role": "user", "content": "What is the capital of France?"}],
    [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "2+2?"},
     {"role": "assistant", "content": "4"}, {"role": "user", "content": "Und 3+3 auf Deutsch? ü"}],
]


@pytest.fixture(scope="module")
def ours(sample_gguf):
    return gguf_tokenizer(sample_gguf)


def gguf_tokenizer(path: str):
    with mx.open(path) as ckpt:
        return from_gguf(ckpt.metadata)


@pytest.fixture(scope="module")
def theirs(sample_gguf):
    transformers = pytest.importorskip("transformers")
    return transformers.AutoTokenizer.from_pretrained(os.path.dirname(sample_gguf),
                                                      gguf_file=os.path.basename(sample_gguf))


@pytest.mark.reference
@pytest.mark.parametrize("text", STRINGS)
def test_encode_and_decode_match_transformers_gguf_tokenizer(ours, theirs, text):
    ids = ours.encode(text)
    assert ids == theirs.encode(text)
    assert ours.decode(ids) == theirs.decode(ids)
    assert ours.decode(ids, skip_special_tokens=True) == theirs.decode(ids, skip_special_tokens=True)


@pytest.mark.reference
@pytest.mark.parametrize("messages", CONVERSATIONS)
def test_chat_template_matches_transformers(ours, theirs, messages):
    text = ours.apply_chat_template(messages)
    assert text == theirs.apply_chat_template(messages, add_generation_prompt=True, tokenize=False)
    expected = theirs.apply_chat_template(messages, add_generation_prompt=True, tokenize=True)
    expected = expected["input_ids"] if hasattr(expected, "keys") else expected
    assert ours.encode_chat(messages) == list(expected)


def test_smollm2_special_tokens(ours):
    assert ours.eos_ids[0] == ours.encode("<|im_end|>")[0] == 2
    assert ours.bos_id == 1 and not ours.add_bos
    assert ours.vocab_size == 49152
    prompt = ours.apply_chat_template([{"role": "user", "content": "hi"}])
    assert prompt.endswith("<|im_start|>assistant\n")


@pytest.mark.parametrize("text", STRINGS + ["naïve 日本 😀 done " * 20])
def test_stream_decoder_pieces_add_up_to_the_text(ours, text):
    ids = ours.encode(text)
    stream = StreamDecoder(ours)
    pieces = [stream.push(i) for i in ids] + [stream.flush()]
    assert "".join(pieces) == ours.decode(ids, skip_special_tokens=True)
    assert all("\ufffd" not in p for p in pieces)


def test_gguf_and_tokenizer_json_of_the_same_vocabulary_agree(tmp_path):
    """The tiny test vocabulary written both ways encodes and decodes the same."""
    cfg = tiny_config()
    state = random_state(cfg)
    folder = write_hf_dir(str(tmp_path / "hf"), cfg, state)
    gguf_tok = gguf_tokenizer(write_gguf(cfg, state, str(tmp_path / "m.gguf")))
    json_tok = from_directory(folder, cfg)
    for text in STRINGS:
        assert gguf_tok.encode(text) == json_tok.encode(text)
        assert gguf_tok.decode(gguf_tok.encode(text)) == text
    assert json_tok.chat_template == gguf_tok.chat_template == CHATML
    assert 2 in json_tok.eos_ids and 2 in gguf_tok.eos_ids


def test_merges_from_scores_prefers_high_scores():
    vocab = {"a": 0, "b": 1, "c": 2, "ab": 3, "bc": 4, "abc": 5}
    scores = {"a": 0.0, "b": 0.0, "c": 0.0, "ab": -1.0, "bc": -2.0, "abc": -3.0}
    merges = merges_from_scores(vocab, scores)
    assert merges[:2] == [("a", "b"), ("b", "c")]
    assert set(merges[2:]) == {("a", "bc"), ("ab", "c")}


def test_chat_template_runs_sandboxed():
    from jinja2.exceptions import SecurityError

    from model_explorer.model.tokenizer import render_chat_template

    evil = "{{ messages.__class__.__mro__[1].__subclasses__() }}"
    with pytest.raises(SecurityError):
        render_chat_template(evil, [{"role": "user", "content": "x"}])
    from model_explorer.model.tokenizer import Tokenizer

    with pytest.raises(ValueError, match="chat template failed: SecurityError"):
        Tokenizer(None, chat_template=evil).apply_chat_template([{"role": "user", "content": "x"}])
    with pytest.raises(ValueError, match="chat template failed: TemplateSyntaxError"):
        Tokenizer(None, chat_template="{% for %}").apply_chat_template([])


def test_unknown_tokenizer_model_is_refused():
    from model_explorer.runtime import UnsupportedModel

    with pytest.raises(UnsupportedModel, match="'bert'"):
        from_gguf({"tokenizer.ggml.model": "bert", "tokenizer.ggml.tokens": ["a"]})
    with pytest.raises(UnsupportedModel, match="no tokenizer"):
        from_gguf({})
    vocab = {"tokenizer.ggml.model": "gpt2", "tokenizer.ggml.tokens": ["a", "b", "ab"]}
    for key in ("tokenizer.ggml.token_type", "tokenizer.ggml.merges"):
        with pytest.raises(UnsupportedModel, match=f"{key} should be an array, found a int"):
            from_gguf({**vocab, key: 5})



SPM_STRINGS = ["the cat", "hello world", "  the  cat sat\n", "ÿ unicode 😀 x", "", "<s>the</s>", " leading",
               "thecat", "\t\ttabs and ünïcödé"]


@pytest.mark.reference
def test_sentencepiece_gguf_tokenizer_matches_transformers(tmp_path):
    """tokenizer.ggml.model == "llama": scores, byte tokens, no merges, BOS added."""
    transformers = pytest.importorskip("transformers")
    cfg = tiny_config(vocab_size=320)
    path = write_gguf(cfg, random_state(cfg), str(tmp_path / "spm.gguf"), spm=True)
    ours = gguf_tokenizer(path)
    theirs = transformers.AutoTokenizer.from_pretrained(str(tmp_path), gguf_file="spm.gguf")
    assert ours.add_bos
    for text in SPM_STRINGS:
        ids = ours.encode(text)
        assert ids == theirs.encode(text)
        assert ours.decode(ids) == theirs.decode(ids)
        assert ours.decode(ids, skip_special_tokens=True) == theirs.decode(ids, skip_special_tokens=True)
        stream = StreamDecoder(ours)
        streamed = "".join([stream.push(i) for i in ids] + [stream.flush()])
        assert streamed == ours.decode(ids, skip_special_tokens=True)


@pytest.mark.reference
@pytest.mark.parametrize("pre", ["qwen2", "llama-bpe", "smollm"])
def test_byte_level_split_rules_match_transformers(tmp_path, pre):
    """tokenizer.ggml.pre picks the split regex (digits one by one for qwen2, up to three for
    llama 3, GPT-2's rule otherwise)."""
    transformers = pytest.importorskip("transformers")
    cfg = tiny_config()
    path = write_gguf(cfg, random_state(cfg), str(tmp_path / "bpe.gguf"), pre=pre)
    ours = gguf_tokenizer(path)
    theirs = transformers.AutoTokenizer.from_pretrained(str(tmp_path), gguf_file="bpe.gguf")
    for text in STRINGS + ["1234567 don'T we'LL\r\n\r\n  x", "a\u00a0b\u3000c 🙂🙂"]:
        assert ours.encode(text) == theirs.encode(text), text
        assert ours.decode(ours.encode(text)) == theirs.decode(theirs.encode(text))


def test_merges_skip_pieces_too_long_to_be_merged():
    # Splitting costs a piece's length squared (a hostile megabyte token would stall loading);
    # sentencepiece never merges pieces that long, so they are not split.
    from model_explorer.model.tokenizer import MAX_MERGED_PIECE

    mid = "ab" * (MAX_MERGED_PIECE // 2 - 1)
    at_cap, over = mid + "ab", mid + "abab"
    vocab = {"a": 0, "b": 1, "ab": 2, mid: 3, at_cap: 4, over: 5}
    merges = merges_from_scores(vocab, dict.fromkeys(vocab, 0.0))
    assert len(at_cap) == MAX_MERGED_PIECE and len(over) > MAX_MERGED_PIECE
    assert ("a", "b") in merges and (mid, "ab") in merges  # a piece at the cap is still split
    assert (at_cap, "ab") not in merges
