"""llama.cpp's `tokenizer.ggml.pre` names <-> the pre-tokenizer a model's tokenizer.json carries.

A byte-level BPE GGUF (`tokenizer.ggml.model == "gpt2"`) stores no pre-tokenizer, only its name:
llama.cpp's converter recognises the model's tokenizer and writes `tokenizer.ggml.pre`, and
llama.cpp maps each name to a list of regexes (src/llama-vocab.cpp). The merges were learned on
text split that way, so splitting otherwise (GPT-2's rule) silently gives other ids.

Each entry here is the Hugging Face pre-tokenizer of the models that carry that name: the steps of
their tokenizer.json (Split regex, Digits, Punctuation, ByteLevel). llama.cpp's multi-regex lists
are those same sequential Split steps; where llama.cpp rewrote a regex for its own engine (the
`(?i:...)` contractions, tekken's lookaheads) the table keeps the tokenizer.json original.

`pre_tokenizer_for(name)` builds the `tokenizers` pre-tokenizer for a name (None: not known);
`pre_name_for(tokenizer_json)` is the reverse, for a converter writing `tokenizer.ggml.pre`.
"""

from __future__ import annotations

import json
from typing import Any

# -- the regexes, as the models' tokenizer.json carry them ---------------------------------------

GPT2_REGEX = r"'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+"
LLAMA3_REGEX = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}"
                r"| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")
QWEN2_REGEX = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}"
               r"| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")
QWEN35_REGEX = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?[\p{L}\p{M}]+|\p{N}"
                r"| ?[^\s\p{L}\p{M}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")
TEKKEN_REGEX = (r"[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+"
                r"|[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*"
                r"|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+")
_CONTRACTIONS = r"(?i:'s|'t|'re|'ve|'m|'ll|'d)?"
GPT4O_REGEX = (r"[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+" + _CONTRACTIONS
               + r"|[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*" + _CONTRACTIONS
               + r"|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+")
# Seed-Coder's tokenizer.json has CR and LF themselves (not escapes) in two classes.
SEED_CODER_REGEX = ("(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1}"
                    "| ?[^\\s\\p{L}\\p{N}\r\n]+|\\s*[\r\n]+|\\s+(?!\\S)|\\s+")
BAILINGMOE_REGEX = (r"'(?i:[sdmt]|ll|ve|re)|[^\r\n\p{L}\p{N}]?+\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]++[\r\n]*"
                    r"|\s*[\r\n]|\s+(?!\S)|\s+")
EXAONE_MOE_REGEX = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?(?:\p{L}\p{M}*(?: \p{L}\p{M}*)*)+"
                    r"|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n/]?|\s*[\r\n]|\s+(?!\S)|\s+")
JAIS2_REGEX = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*"
               r"|\s*[\r\n]+|\s{512}(?!\S)|\s{256}(?!\S)|\s{128}(?!\S)|\s{64}(?!\S)|\s{32}(?!\S)"
               r"|\s{16}(?!\S)|\s{8}(?!\S)|\s{4}(?!\S)|\s{1,2}(?!\S)|\s{1}")
# BLOOM's split (Poro, Viking, GPT3-Finnish): a nested class, which Oniguruma reads as the union.
BLOOM_REGEX = " ?[^(\\s|[.,!?…。，、।۔،])]+"
# Kimi K2's tiktoken pattern: Han runs apart from other letters (`&&` is class intersection).
_NOT_HAN_UPPER = r"[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}&&[^\p{Han}]]"
_NOT_HAN_LOWER = r"[\p{Ll}\p{Lm}\p{Lo}\p{M}&&[^\p{Han}]]"
KIMI_K2_REGEX = (r"[\p{Han}]+"
                 + r"|[^\r\n\p{L}\p{N}]?" + _NOT_HAN_UPPER + "*" + _NOT_HAN_LOWER + "+" + _CONTRACTIONS
                 + r"|[^\r\n\p{L}\p{N}]?" + _NOT_HAN_UPPER + "+" + _NOT_HAN_LOWER + "*" + _CONTRACTIONS
                 + r"|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")

# DeepSeek LLM's letter class. Three Greek Extended range ends are written as escapes: NFC turns
# U+1F7D, U+1FD3 and U+1FDB into lookalikes below the range start, and a descending range fails.
DEEPSEEK_LETTERS = ("\\s?[A-Za-zµÀ-ÖØ-öø-ƺƼ-ƿǄ-ʓʕ-ʯͰ-ͳͶͷͻ-ͽͿΆΈ-ΊΌΎ-ΡΣ-ϵϷ-ҁҊ-ԯԱ-ՖႠ-ჅᎠ-Ᏽᏸ-ᏽᲐ-ᲺᲽ-Ჿᴀ-ᴫ"
                     "ᵫ-ᵷᵹ-ᶚḀ-ἕἘ-Ἕἠ-ὅὈ-Ὅὐ-ὗὙὛὝὟ-\u1f7dᾀ-ᾴᾶ-ᾼιῂ-ῄῆ-ῌῐ-\u1fd3ῖ-\u1fdbῠ-Ῥῲ-ῴῶ-ῼℂℇℊ-ℓℕℙ-ℝℤΩℨ"
                     "K-ℭℯ-ℴℹℼ-ℿⅅ-ⅉⅎↃↄⰀ-ⱻⱾ-ⳤⳫ-ⳮⳲⳳꙀ-ꙭꚀ-ꚛꜢ-ꝯꝱ-ꞇꞋ-ꞎꭰ-ꮿﬀ-ﬆﬓ-ﬗＡ-Ｚａ-ｚ𐐀-𐑏𐒰-𐓓𐓘-𐓻"
                     "𐲀-𐲲𐳀-𐳲𑢠-𑣟𞤀-𞥃]+")
_DEEPSEEK_CJK = "[一-龥ࠀ-一가-퟿]+"
DEEPSEEK3_REGEX = ("[!\"#$%&'()*+,\\-./:;<=>?@\\[\\\\\\]^_`{|}~][A-Za-z]+|[^\r\n\\p{L}\\p{P}\\p{S}]?[\\p{L}\\p{M}]+"
                   "| ?[\\p{P}\\p{S}]+[\r\n]*|\\s*[\r\n]+|\\s+(?!\\S)|\\s+")

# -- steps, in tokenizer.json's own form ----------------------------------------------------------


def _split(regex: str) -> dict:
    return {"type": "Split", "pattern": {"Regex": regex}, "behavior": "Isolated", "invert": False}


def _digits(individual: bool) -> dict:
    return {"type": "Digits", "individual_digits": individual}


def _byte_level(use_regex: bool) -> dict:
    return {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True, "use_regex": use_regex}


_PUNCTUATION = {"type": "Punctuation", "behavior": "Contiguous"}
_BYTES = _byte_level(False)  # bytes only: a Split before it did the splitting


def _one_split(regex: str) -> tuple[dict, ...]:
    return (_split(regex), _BYTES)


GPT2 = (_byte_level(True),)
LLAMA3 = _one_split(LLAMA3_REGEX)
QWEN2 = _one_split(QWEN2_REGEX)
DIGITS_GPT2 = (_digits(True), _byte_level(True))  # StarCoder, Refact, SmolLM, Command-R...
# DeepSeek LLM / V2 split numbers into single digits (llama.cpp's `\p{N}+` gives the same ids: the
# vocabulary has no multi-digit token).
DEEPSEEK_LLM = (_split("[\r\n]"), _split(DEEPSEEK_LETTERS), _split("\\s?[!-/:-~！-／：-～‘-‟　-。]+"),
                _split("\\s+$"), _split(_DEEPSEEK_CJK), _digits(True), _BYTES)
DEEPSEEK_CODER = (_split("[\r\n]"), _split("\\s?\\p{L}+"), _split("\\s?\\p{P}+"), _split(_DEEPSEEK_CJK),
                  _digits(True), _BYTES)
DEEPSEEK3 = (_split("\\p{N}{1,3}"), _split("[一-龥぀-ゟ゠-ヿ]+"), _split(DEEPSEEK3_REGEX), _BYTES)
FALCON = (_PUNCTUATION, _byte_level(True), _digits(False), _split("[0-9][0-9][0-9]"))
# llama.cpp's own fallback list (no tokenizer.json carries it): Falcon's without the backtick.
DEFAULT = (_split("[\\p{P}\\$\\+<=>\\^~\\|]+"), _split(GPT2_REGEX), _split("\\p{N}+"),
           _split("[0-9][0-9][0-9]"), _BYTES)
BLOOM = _one_split(BLOOM_REGEX)
VIKING = (_split(BLOOM_REGEX), _digits(True), _BYTES)
# Tiny Aya: digits in threes from the right, then GPT-4o's split.
TINY_AYA = (_split(r"\d{1,3}(?=(?:\d{3})*\b)"), _split(GPT4O_REGEX), _BYTES)
SPARK2_5 = (_split("\\p{N}{1,3}"), _split("[一-龥぀-ゟ゠-ヿ]+"),
            _split("[!\"#$%&'()*+,\\-./:;<=>?@\\[\\\\\\]^_`{|}~][A-Za-z]+|[^\r\n\\p{L}\\p{P}\\p{S}]?[\\p{L}\\p{M}]+"
                   "| ?[\\p{P}\\p{S}]+|[\r\n]|\\s+(?!\\S)|\\s+"), _digits(True), _BYTES)
MINICPM5 = (_split("\\p{N}{1,3}"), _split(r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}+"
                                          r"| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"), _BYTES)

# name -> steps, grouped as llama.cpp groups them (LLAMA_VOCAB_PRE_TYPE_*). The first name of a
# group is the one pre_name_for answers with.
_GROUPS: list[tuple[tuple[str, ...], tuple[dict, ...]]] = [
    (("gpt-2", "phi-2", "olmo", "mpt", "jais", "trillion", "granite-docling", "exaone4", "jina-es",
      "jina-de", "gigachat", "jina-v1-en", "jina-v2-es", "jina-v2-de", "jina-v2-code", "roberta-bpe",
      "a.x-4.0", "mellum", "modern-bert"), GPT2),
    (("llama-bpe", "llama3", "llama-v3", "falcon3", "falcon-h1", "pixtral", "midm-2.0", "lfm2",
      "jina-v5-nano", "dbrx", "smaug-bpe", "chatglm-bpe", "glm4"), LLAMA3),
    (("qwen2", "deepseek-r1-qwen", "kormo", "f2llmv2", "megrez", "stablelm2", "hunyuan", "solar-open",
      "grok-2"), QWEN2),
    (("qwen35",), _one_split(QWEN35_REGEX)),
    (("smollm", "starcoder", "refact", "command-r", "codeshell", "exaone", "minerva-7b", "mellum2"),
     DIGITS_GPT2),
    (("deepseek-llm",), DEEPSEEK_LLM),
    (("deepseek-coder",), DEEPSEEK_CODER),
    (("deepseek-v3", "hunyuan-dense", "joyai-llm", "hy_v4"), DEEPSEEK3),
    (("gpt-4o", "llama4", "kanana2", "talkie", "minimax-m2"), _one_split(GPT4O_REGEX)),
    (("tekken",), _one_split(TEKKEN_REGEX)),
    (("falcon",), FALCON),
    (("default",), DEFAULT),
    (("poro-chat", "bloom", "gpt3-finnish"), BLOOM),
    (("viking",), VIKING),
    (("seed-coder",), _one_split(SEED_CODER_REGEX)),
    (("bailingmoe", "bailingmoe2", "llada-moe"), _one_split(BAILINGMOE_REGEX)),
    (("exaone-moe",), _one_split(EXAONE_MOE_REGEX)),
    (("minicpm5",), MINICPM5),
    (("jais-2",), _one_split(JAIS2_REGEX)),
    (("tiny_aya", "cohere2moe"), TINY_AYA),
    (("spark2_5",), SPARK2_5),
    (("kimi-k2",), _one_split(KIMI_K2_REGEX)),
]
PRE_TOKENIZERS: dict[str, tuple[dict, ...]] = {name: steps for names, steps in _GROUPS for name in names}

# llama.cpp keeps a piece whole when the vocabulary has it, before any merge (HF: ignore_merges).
IGNORE_MERGES = frozenset(("llama-bpe", "llama3", "llama-v3", "falcon3", "falcon-h1", "pixtral", "midm-2.0",
                           "lfm2", "jina-v5-nano", "tekken", "minicpm5"))

# name -> regex, for the names whose whole pre-tokenizer is one Split before the byte mapping.
PRE_TOKENIZER_SPLITS: dict[str, str] = {name: steps[0]["pattern"]["Regex"] for name, steps in PRE_TOKENIZERS.items()
                                        if len(steps) == 2 and steps[0]["type"] == "Split" and steps[1] == _BYTES}


def pre_tokenizer_json(name: str | None) -> dict | None:
    """The tokenizer.json `pre_tokenizer` for a `tokenizer.ggml.pre` name, or None if not known."""
    steps = PRE_TOKENIZERS.get(name) if isinstance(name, str) else None
    if steps is None:
        return None
    return dict(steps[0]) if len(steps) == 1 else {"type": "Sequence", "pretokenizers": [dict(s) for s in steps]}


def pre_tokenizer_for(name: str | None):
    """The `tokenizers` pre-tokenizer for a `tokenizer.ggml.pre` name, or None if not known."""
    steps = PRE_TOKENIZERS.get(name) if isinstance(name, str) else None
    if steps is None:
        return None
    from tokenizers import pre_tokenizers

    built = [_build(s) for s in steps]
    return built[0] if len(built) == 1 else pre_tokenizers.Sequence(built)


def _build(step: dict):
    from tokenizers import Regex, pre_tokenizers

    kind = step["type"]
    if kind == "Split":
        return pre_tokenizers.Split(Regex(step["pattern"]["Regex"]), behavior=step["behavior"].lower(),
                                    invert=step["invert"])
    if kind == "Digits":
        return pre_tokenizers.Digits(individual_digits=step["individual_digits"])
    if kind == "Punctuation":
        return pre_tokenizers.Punctuation(behavior=step["behavior"].lower())
    return pre_tokenizers.ByteLevel(add_prefix_space=step["add_prefix_space"], trim_offsets=step["trim_offsets"],
                                    use_regex=step["use_regex"])


def unknown_pre_problem(name: Any) -> str | None:
    """What to tell the user when a byte-level GGUF's pre name is not one this table knows."""
    if name is None or (isinstance(name, str) and name in PRE_TOKENIZERS):
        return None
    shown = name[:80] if isinstance(name, str) else type(name).__name__
    return (f"tokenizer.ggml.pre {shown!r} is not known: text is split with GPT-2's rule, which may "
            "differ from the model's own (other ids for digits, contractions, CJK or spaces).")


# -- reverse: which name a tokenizer.json's pre-tokenizer is --------------------------------------

def _norm_regex(regex: str) -> str:
    # tokenizer.json files write CR, LF and tab both as escapes and as the characters themselves
    return regex.replace("\r", "\\r").replace("\n", "\\n").replace("\t", "\\t")


def _canonical(pre: Any) -> tuple | None:
    """The steps of a pre_tokenizer as comparable tuples (Digits as the Split it amounts to), or
    None for anything with a step this comparison does not model."""
    if not isinstance(pre, dict):
        return None
    if pre.get("type") == "Sequence":
        inner = pre.get("pretokenizers")
        if not isinstance(inner, list):
            return None
        out: tuple = ()
        for p in inner:
            c = _canonical(p)
            if c is None:
                return None
            out += c
        return out
    kind = pre.get("type")
    if kind == "Split":
        pattern = pre.get("pattern")
        regex = pattern.get("Regex") if isinstance(pattern, dict) else None
        if not isinstance(regex, str):
            return None
        return (("split", _norm_regex(regex), str(pre.get("behavior", "")).lower(), bool(pre.get("invert"))),)
    if kind == "Digits":
        return (("split", "\\p{N}" if pre.get("individual_digits") else "\\p{N}+", "isolated", False),)
    if kind == "Punctuation":
        return (("punctuation", str(pre.get("behavior", "isolated")).lower()),)
    if kind == "ByteLevel":
        return (("bytelevel", bool(pre.get("add_prefix_space", True)), bool(pre.get("use_regex", True))),)
    return None


_CANONICAL: dict[str, tuple | None] = {name: _canonical(pre_tokenizer_json(name)) for name in PRE_TOKENIZERS}


def pre_name_for(tokenizer_json: dict) -> str | None:
    """The `tokenizer.ggml.pre` name whose split is this byte-level tokenizer.json's pre_tokenizer
    (the first of its llama.cpp group, preferring a name whose ignore_merges matches), or None."""
    if not isinstance(tokenizer_json, dict):
        return None
    if isinstance(tokenizer_json.get("pre_tokenizer"), str):  # a pre_tokenizer given as JSON text
        try:
            tokenizer_json = {**tokenizer_json, "pre_tokenizer": json.loads(tokenizer_json["pre_tokenizer"])}
        except json.JSONDecodeError:
            return None
    key = _canonical(tokenizer_json.get("pre_tokenizer"))
    if key is None:
        return None
    model = tokenizer_json.get("model")
    ignore = bool(model.get("ignore_merges")) if isinstance(model, dict) else False
    names = [name for name, c in _CANONICAL.items() if c == key]
    for name in names:
        if (name in IGNORE_MERGES) == ignore:
            return name
    return names[0] if names else None
