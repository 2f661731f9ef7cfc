"""GGUF `tokenizer.ggml.pre` names: a byte-level GGUF tokenizes as the model's tokenizer.json does.

Three checks per family: (1) the GGUF-side tokenizer (from_gguf on vocabulary + merges + the pre
name) encodes tricky texts exactly as a tokenizer.json carrying that family's pre_tokenizer;
(2) that pre_tokenizer splits them as llama.cpp's regex list for the name does (src/llama-vocab.cpp,
its adapted forms, written out here independently of the table); (3) pre_name_for recognises it.
"""

from __future__ import annotations

import json
from functools import lru_cache

import pytest

from model_explorer.model.pretokenizers import (
    DEEPSEEK_LETTERS,
    PRE_TOKENIZER_SPLITS,
    PRE_TOKENIZERS,
    pre_name_for,
    pre_tokenizer_for,
    pre_tokenizer_json,
    unknown_pre_problem,
)
from model_explorer.model.tokenizer import from_gguf

TEXTS = [
    "1234567 and 3.14159, 2024-01-01", "don't I'll we'd THEY'RE you've", "你好世界，こんにちは、안녕하세요",
    "emoji 🤗🚀 ok", "a  b   c\n\n\nd \n e\t\tf", "punctuation!!! ...?? (x) [y] {z} <a> $5 ^ ~ | `",
    "MixedCase camelCase HTTPServer iPhone", "Ünïcödé naïve café Ώμέγα Привет", "   leading and trailing   ",
    "tabs\tand\r\nwindows\rline", "x=1;y+=2//3 #comment", "١٢٣ Arabic ٤٥ digits",
]

# llama.cpp's regex_exprs per pre type, as src/llama-vocab.cpp writes them (its own adapted forms:
# contractions spelled out for its engine, tekken's letter classes as lookaheads).
_GPT2 = r"'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)"
_C = r"(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])"
LLAMA_CPP = {
    "gpt-2": [_GPT2],
    "llama-bpe": [_C + r"|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"],
    "qwen2": [_C + r"|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"],
    "deepseek-llm": ["[\r\n]", DEEPSEEK_LETTERS, "\\s?[!-/:-~！-／：-～‘-‟　-。]+", r"\s+$", "[一-龥ࠀ-一가-퟿]+", r"\p{N}+"],
    "deepseek-coder": ["[\r\n]", r"\s?\p{L}+", r"\s?\p{P}+", "[一-龥ࠀ-一가-퟿]+", r"\p{N}"],
    "deepseek-v3": [r"\p{N}{1,3}", "[一-龥぀-ゟ゠-ヿ]+",
                    "[!\"#$%&'()*+,\\-./:;<=>?@\\[\\\\\\]^_`{|}~][A-Za-z]+|[^\r\n\\p{L}\\p{P}\\p{S}]?[\\p{L}\\p{M}]+"
                    "| ?[\\p{P}\\p{S}]+[\r\n]*|\\s*[\r\n]+|\\s+(?!\\S)|\\s+"],
    "falcon": [r"[\p{P}\$\+<=>\^~\|`]+", _GPT2, "[0-9][0-9][0-9]"],
    "smollm": [r"\p{N}", _GPT2],
    "tekken": [r"[^\r\n\p{L}\p{N}]?((?=[\p{L}])([^a-z]))*((?=[\p{L}])([^A-Z]))+"
               r"|[^\r\n\p{L}\p{N}]?((?=[\p{L}])([^a-z]))+((?=[\p{L}])([^A-Z]))*"
               r"|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+"],
    "gpt-4o": [r"[^\r\n\p{L}\p{N}]?((?=[\p{L}])([^a-z]))*((?=[\p{L}])([^A-Z]))+" + _C + "?"
               r"|[^\r\n\p{L}\p{N}]?((?=[\p{L}])([^a-z]))+((?=[\p{L}])([^A-Z]))*" + _C + "?"
               r"|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+"],
    "poro-chat": [r" ?[^(\s|.,!?…。，、।۔،)]+"],
    "viking": [r" ?[^(\s|.,!?…。，、।۔،)]+", r"\p{N}"],
    "seed-coder": [_C + r"|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1}| ?[^\s\p{L}\p{N}\r\n]+|\s*[\r\n]+|\s+(?!\S)|\s+"],
    "default": [r"[\p{P}\$\+<=>\^~\|]+", _GPT2, r"\p{N}+", "[0-9][0-9][0-9]"],
    "spark2_5": [r"\p{N}{1,3}", "[一-龥぀-ゟ゠-ヿ]+",
                 "[!\"#$%&'()*+,\\-./:;<=>?@\\[\\\\\\]^_`{|}~][A-Za-z]+|[^\r\n\\p{L}\\p{P}\\p{S}]?[\\p{L}\\p{M}]+"
                 "| ?[\\p{P}\\p{S}]+|[\r\n]|\\s+(?!\\S)|\\s+", r"\p{N}"],
    "tiny_aya": [r"\d{1,3}(?=(?:\d{3})*\b)",
                 r"[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+" + _C + "?"
                 r"|[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*" + _C + "?"
                 r"|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+"],
}
# Where HF's pipeline and llama.cpp's list part ways on these texts (the table follows HF):
# falcon's Digits step runs after the byte mapping in tokenizer.json (so byte characters such as
# '½' that are numbers split too), llama.cpp has no \p{N}+ step; DeepSeek LLM's tokenizer.json
# splits single digits where llama.cpp keeps runs (same ids: its vocabulary has no digit pairs).
LLAMA_CPP_DIFFERS = {"falcon", "deepseek-llm"}

FAMILIES = ["gpt-2", "phi-2", "olmo", "jais", "llama-bpe", "dbrx", "smaug-bpe", "chatglm-bpe", "qwen2",
            "stablelm2", "deepseek-r1-qwen", "deepseek-llm", "deepseek-coder", "deepseek-v3", "gpt-4o",
            "falcon", "starcoder", "refact", "smollm", "command-r", "tekken", "poro-chat", "viking",
            "seed-coder", "granite-docling", "qwen35", "bailingmoe", "exaone-moe", "minicpm5", "kimi-k2",
            "jais-2", "tiny_aya", "spark2_5", "default"]


@lru_cache(maxsize=1)
def _vocab() -> tuple[dict[str, int], list[tuple[str, str]]]:
    """A byte-level BPE trained with no word split, so its merges cross every boundary a
    pre-tokenizer may draw: a wrong split shows up as other ids."""
    from tokenizers import Tokenizer, decoders, pre_tokenizers, trainers
    from tokenizers.models import BPE

    tok = Tokenizer(BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=700, show_progress=False,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tok.train_from_iterator(TEXTS * 3, trainer)
    model = json.loads(tok.to_str())["model"]
    return model["vocab"], [tuple(m.split(" ")) if isinstance(m, str) else tuple(m) for m in model["merges"]]


def _tokenizer_json(name: str) -> dict:
    vocab, merges = _vocab()
    return {"version": "1.0", "added_tokens": [], "normalizer": None, "pre_tokenizer": pre_tokenizer_json(name),
            "post_processor": None, "decoder": {"type": "ByteLevel", "add_prefix_space": True,
                                                "trim_offsets": True, "use_regex": True},
            "model": {"type": "BPE", "dropout": None, "unk_token": None, "continuing_subword_prefix": None,
                      "end_of_word_suffix": None, "fuse_unk": False, "byte_fallback": False,
                      "ignore_merges": name in ("llama-bpe", "tekken", "minicpm5"),
                      "vocab": vocab, "merges": [list(m) for m in merges]}}


def _gguf_metadata(name: str | None) -> dict:
    vocab, merges = _vocab()
    tokens = [t for t, _ in sorted(vocab.items(), key=lambda kv: kv[1])]
    meta = {"tokenizer.ggml.model": "gpt2", "tokenizer.ggml.tokens": tokens,
            "tokenizer.ggml.token_type": [1] * len(tokens), "tokenizer.ggml.merges": [" ".join(m) for m in merges]}
    if name is not None:
        meta["tokenizer.ggml.pre"] = name
    return meta


@pytest.mark.parametrize("name", FAMILIES)
def test_gguf_tokenizer_encodes_as_the_tokenizer_json(name):
    from tokenizers import Tokenizer

    hf = Tokenizer.from_str(json.dumps(_tokenizer_json(name)))
    gguf = from_gguf(_gguf_metadata(name))
    assert gguf.problem is None
    for text in TEXTS:
        ids = gguf.encode(text)
        assert ids == hf.encode(text).ids, (name, text)
        assert gguf.decode(ids) == text


def test_the_families_split_differently():
    """The texts tell the splits apart: GPT-2's rule would give other ids for each family but its group."""
    gpt2 = from_gguf(_gguf_metadata("gpt-2"))
    same = [n for n in FAMILIES if all(from_gguf(_gguf_metadata(n)).encode(t) == gpt2.encode(t) for t in TEXTS)]
    assert same == ["gpt-2", "phi-2", "olmo", "jais", "granite-docling"]


@pytest.mark.parametrize("name", sorted(LLAMA_CPP))
def test_the_split_is_llama_cpps(name):
    from tokenizers import Regex, pre_tokenizers

    theirs = pre_tokenizers.Sequence([pre_tokenizers.Split(Regex(r), "isolated") for r in LLAMA_CPP[name]]
                                     + [pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)])
    ours = pre_tokenizer_for(name)
    differ = [t for t in TEXTS if [p for p, _ in ours.pre_tokenize_str(t)] != [p for p, _ in theirs.pre_tokenize_str(t)]]
    assert bool(differ) == (name in LLAMA_CPP_DIFFERS), differ


@pytest.mark.parametrize("name", sorted(PRE_TOKENIZERS))
def test_pre_name_for_recognises_each(name):
    """From the table's JSON, and from what the tokenizers library saves for the built pre-tokenizer
    (as mx.convert's tokenizer.json from a GGUF: 'default' comes back as itself)."""
    from tokenizers import Tokenizer
    from tokenizers.models import BPE

    found = pre_name_for(_tokenizer_json(name))
    assert PRE_TOKENIZERS[found] == PRE_TOKENIZERS[name]
    saved = Tokenizer(BPE())
    saved.pre_tokenizer = pre_tokenizer_for(name)
    assert PRE_TOKENIZERS[pre_name_for(json.loads(saved.to_str()))] == PRE_TOKENIZERS[name]


def test_pre_name_for_answers_the_name_llama_cpps_converter_writes():
    expect = {"gpt-2": "gpt-2", "llama-bpe": "llama-bpe", "qwen2": "qwen2", "smollm": "smollm",
              "deepseek-v3": "deepseek-v3", "gpt-4o": "gpt-4o", "tekken": "tekken", "falcon": "falcon"}
    assert {n: pre_name_for(_tokenizer_json(n)) for n in expect} == expect
    # without ignore_merges, the llama3 split is DBRX's / Smaug's (llama-bpe keeps whole words)
    tj = _tokenizer_json("llama-bpe")
    tj["model"]["ignore_merges"] = False
    assert pre_name_for(tj) == "dbrx"
    # literal CR/LF in a regex (as some tokenizer.json files write them) are the escapes
    tj = _tokenizer_json("qwen2")
    tj["pre_tokenizer"]["pretokenizers"][0]["pattern"]["Regex"] = PRE_TOKENIZER_SPLITS["qwen2"].replace(r"\r\n", "\r\n")
    assert pre_name_for(tj) == "qwen2"


@pytest.mark.parametrize("pre", [
    None, {"type": "Whitespace"}, {"type": "ByteLevel", "add_prefix_space": True, "use_regex": True},
    {"type": "Sequence", "pretokenizers": "x"}, {"type": "Split", "pattern": {"String": " "}}, [1], "{",
])
def test_pre_name_for_unknown_is_none(pre):
    assert pre_name_for({"pre_tokenizer": pre, "model": {"type": "BPE"}}) is None


def test_unknown_pre_name_is_said_not_silent():
    tok = from_gguf(_gguf_metadata("brand-new-lm"))
    assert tok.problem == unknown_pre_problem("brand-new-lm")
    assert "tokenizer.ggml.pre 'brand-new-lm' is not known: text is split with GPT-2's rule" in tok.problem
    assert tok.encode(TEXTS[0]) == from_gguf(_gguf_metadata("gpt-2")).encode(TEXTS[0])
    assert from_gguf(_gguf_metadata(None)).problem is None  # missing: tokenizer_info's missing_pre_tokenizer
    hostile = _gguf_metadata(None)
    hostile["tokenizer.ggml.pre"] = ["not", "a", "name"]
    assert "'list'" in from_gguf(hostile).problem
    hostile["tokenizer.ggml.pre"] = "x" * 10_000
    assert len(from_gguf(hostile).problem) < 300
