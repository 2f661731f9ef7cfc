"""Tokenizers for the demo: rebuilt from GGUF metadata, or read from a `tokenizer.json`.

GGUF files carry no `tokenizer.json`; they store the vocabulary, merges, token types and special
ids under llama.cpp's keys. We rebuild the same Hugging Face `tokenizers` pipeline that
transformers builds for a GGUF file, so both encode and decode text identically:
- `tokenizer.ggml.model == "gpt2"`: byte-level BPE, split as `tokenizer.ggml.pre` names
  (pretokenizers.py: the model family's tokenizer.json pre-tokenizer; GPT-2's rule when the name
  is missing, and when it is unknown, which `Tokenizer.problem` then says);
- `tokenizer.ggml.model == "llama"`: sentencepiece-style BPE with byte fallback and "▁" spaces.

Chat templates are Jinja, rendered in jinja2's sandbox: a template comes from the file and is
not trusted.
"""

from __future__ import annotations

import json
from functools import lru_cache
from typing import Any

from ..ggml import Keys
from .config import UnsupportedModel

# `tokenizer.ggml.pre` -> the split a byte-level vocabulary's merges were learned on
from .pretokenizers import (
    IGNORE_MERGES,
    PRE_TOKENIZER_SPLITS,  # noqa: F401 (the converter reads it from here)
    pre_tokenizer_for,
    unknown_pre_problem,
)
from .template_render import render_chat_template  # noqa: F401 (chat templates render there, in a bounded sandbox)

MAX_TOKENIZER_FILE = 64 * 1024 * 1024
CONTROL, USER_DEFINED = 3, 4  # llama.cpp token types

@lru_cache(maxsize=1)
def byte_alphabet() -> dict[int, str]:
    """GPT-2's byte -> printable character table (bytes that print stand for themselves)."""
    printable = (list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1))
                 + list(range(ord("®"), ord("ÿ") + 1)))
    table, extra = {}, 0
    for b in range(256):
        if b in printable:
            table[b] = chr(b)
        else:
            table[b] = chr(256 + extra)
            extra += 1
    return table


class Tokenizer:
    """Text <-> token ids, special tokens, and the model's chat template.

    Attributes:
        bos_id / eos_ids: the begin-of-sequence id (or None) and every id that ends generation.
        add_bos: whether `encode` puts `bos_id` first (GGUF `tokenizer.ggml.add_bos_token`;
            a `tokenizer.json` does this through its own post-processor instead).
        chat_template: Jinja source, or None.
        problem: what may make this tokenizer differ from the model's own (an unknown GGUF
            `tokenizer.ggml.pre` split with GPT-2's rule), or None.
    """

    def __init__(self, backend, *, bos_id: int | None = None, eos_ids: tuple[int, ...] = (),
                 add_bos: bool = False, chat_template: str | None = None,
                 special_tokens: dict[str, str | None] | None = None, problem: str | None = None) -> None:
        self.backend = backend
        self.bos_id = bos_id
        self.eos_ids = tuple(dict.fromkeys(i for i in eos_ids if i is not None))
        self.add_bos = add_bos
        self.chat_template = chat_template
        self.special_tokens = special_tokens or {}
        self.problem = problem

    @property
    def vocab_size(self) -> int:
        return self.backend.get_vocab_size(with_added_tokens=True)

    def encode(self, text: str, add_special_tokens: bool = True) -> list[int]:
        ids = self.backend.encode(text, add_special_tokens=add_special_tokens).ids
        if add_special_tokens and self.add_bos and self.bos_id is not None:
            ids = [self.bos_id] + ids
        return ids

    def decode(self, ids, skip_special_tokens: bool = False) -> str:
        return self.backend.decode([int(i) for i in ids], skip_special_tokens=skip_special_tokens)

    def token_text(self, token_id: int) -> str:
        return self.backend.id_to_token(int(token_id)) or ""

    # -- chat ----------------------------------------------------------------------------------

    def apply_chat_template(self, messages: list[dict[str, str]], add_generation_prompt: bool = True) -> str:
        """The prompt text for a conversation, as the model was fine-tuned to read it."""
        if not self.chat_template:
            raise ValueError("This model has no chat template (tokenizer.chat_template / "
                             "tokenizer_config.json); use chat=False.")
        from jinja2.exceptions import TemplateError

        try:
            return render_chat_template(self.chat_template, messages, add_generation_prompt,
                                        **{k: v for k, v in self.special_tokens.items() if v is not None})
        except TemplateError as e:  # includes the sandbox's SecurityError
            raise ValueError(f"The model's chat template failed: {type(e).__name__}: {e}") from None

    def encode_chat(self, messages: list[dict[str, str]], add_generation_prompt: bool = True) -> list[int]:
        # The template writes any BOS itself, as transformers' apply_chat_template assumes.
        return self.encode(self.apply_chat_template(messages, add_generation_prompt), add_special_tokens=False)


class StreamDecoder:
    """Turns generated ids into text pieces as they arrive.

    Each step decodes only the tokens since the last piece (plus the piece before, so decoders
    that treat the first token specially, like sentencepiece's leading-space strip, see the
    same context twice and cancel out), and holds back text ending in a split UTF-8 character.
    """

    def __init__(self, tokenizer: Tokenizer, skip_special_tokens: bool = True) -> None:
        self.tokenizer, self.skip = tokenizer, skip_special_tokens
        self.ids: list[int] = []
        self.prefix = self.read = 0  # ids[prefix:read] were emitted last; ids[read:] not yet
        self.emitted: list[str] = []

    def _decode(self, ids: list[int]) -> str:
        return self.tokenizer.decode(ids, skip_special_tokens=self.skip)

    def push(self, token_id: int) -> str:
        self.ids.append(int(token_id))
        before = self._decode(self.ids[self.prefix:self.read])
        text = self._decode(self.ids[self.prefix:])
        if len(text) <= len(before) or text.endswith("\ufffd") or not text.startswith(before):
            return ""
        self.prefix, self.read = self.read, len(self.ids)
        self.emitted.append(text[len(before):])
        return self.emitted[-1]

    def flush(self) -> str:
        """What is left once generation ends: the whole text minus what was already streamed."""
        full, done = self._decode(self.ids), "".join(self.emitted)
        rest = full[len(done):] if full.startswith(done) else ""
        self.emitted.append(rest)
        self.prefix = self.read = len(self.ids)
        return rest


# -- from GGUF metadata --------------------------------------------------------------------------

def _value(metadata: dict, key: str, default: Any = None) -> Any:
    kv = metadata.get(key)
    return default if kv is None else getattr(kv, "value", kv)


def _as_list(value, key: str) -> list:
    """A GGUF array (or a plain list) as a list; anything else is not a vocabulary."""
    if hasattr(value, "to_list"):
        return value.to_list()
    if isinstance(value, (list, tuple)):
        return list(value)
    raise UnsupportedModel(f"{key} should be an array, found a {type(value).__name__}.")


def from_gguf(metadata: dict) -> Tokenizer:
    """The tokenizer a GGUF file describes (`tokenizer.ggml.*` keys)."""
    from tokenizers import AddedToken

    kind = _value(metadata, Keys.TOKENIZER_MODEL)
    tokens = _value(metadata, Keys.TOKENS)
    if kind is None or tokens is None:
        raise UnsupportedModel("The GGUF metadata has no tokenizer (tokenizer.ggml.model and "
                               "tokenizer.ggml.tokens are needed).")
    tokens = _as_list(tokens, Keys.TOKENS)
    if not all(isinstance(t, str) for t in tokens):
        raise UnsupportedModel("tokenizer.ggml.tokens is not an array of strings.")
    types = _as_list(_value(metadata, Keys.TOKEN_TYPE, []), Keys.TOKEN_TYPE)
    merges = _value(metadata, Keys.MERGES)
    merges = _as_list(merges, Keys.MERGES) if merges is not None else None
    if kind not in ("gpt2", "llama"):
        raise UnsupportedModel(f"tokenizer.ggml.model {kind!r} is not supported (gpt2 or llama).")
    problem = None
    try:
        if kind == "gpt2":
            pre = _value(metadata, Keys.TOKENIZER_PRE)
            backend = _byte_level(tokens, merges, pre)
            problem = unknown_pre_problem(pre)
            alphabet, add_bos_default = set(byte_alphabet().values()), False
        else:
            scores = _value(metadata, Keys.SCORES)
            scores = _as_list(scores, Keys.SCORES) if scores is not None else None
            backend = _sentencepiece(tokens, merges, scores,
                                     bool(_value(metadata, Keys.ADD_SPACE_PREFIX, True)))
            alphabet, add_bos_default = None, True
    except UnsupportedModel:
        raise
    except Exception as e:  # the tokenizers library reports bad vocabularies as plain Exceptions
        raise UnsupportedModel(f"The GGUF {kind} vocabulary cannot be turned into a tokenizer: {e}") from None

    def token_id(key: str) -> int | None:
        i = _value(metadata, f"tokenizer.ggml.{key}")
        return i if isinstance(i, int) and 0 <= i < len(tokens) else None

    def token(key: str) -> str | None:
        i = token_id(key)
        return None if i is None else tokens[i]

    # Control tokens stay whole in text; in a byte-level vocabulary, only those spelled in the
    # byte alphabet are real (others are llama.cpp mislabels and would grow the vocabulary).
    special = [AddedToken(t, normalized=False, special=True)
               for t, ty in zip(tokens, types)
               if ty == CONTROL and (alphabet is None or set(t) <= alphabet)]
    named = {name: token(key) for name, key in (("bos_token", "bos_token_id"), ("eos_token", "eos_token_id"),
                                                ("unk_token", "unknown_token_id"),
                                                ("pad_token", "padding_token_id"))}
    listed = {t.content for t in special}
    special += [AddedToken(t, normalized=False, special=True) for t in dict.fromkeys(named.values())
                if t is not None and t not in listed]
    if special:
        backend.add_special_tokens(special)
    user = [AddedToken(t, normalized=False, special=False) for t, ty in zip(tokens, types)
            if ty == USER_DEFINED and backend.token_to_id(t) is not None]
    if user:
        backend.add_tokens(user)
    template = _value(metadata, Keys.CHAT_TEMPLATE)
    return Tokenizer(backend, bos_id=token_id("bos_token_id"),
                     eos_ids=tuple(i for i in map(token_id, ("eos_token_id", "eot_token_id", "eom_token_id"))
                                   if i is not None),
                     add_bos=bool(_value(metadata, Keys.ADD_BOS, add_bos_default)),
                     chat_template=template if isinstance(template, str) else None, special_tokens=named,
                     problem=problem)


def _byte_level(tokens: list[str], merges: list[str] | None, pre: str | None):
    """Byte-level BPE split as `pre` names (pretokenizers.py); an unknown or missing name gets
    GPT-2's rule, as transformers does (from_gguf reports an unknown one)."""
    from tokenizers import Tokenizer as HFTokenizer
    from tokenizers import decoders, pre_tokenizers
    from tokenizers.models import BPE

    table = byte_alphabet()
    alphabet = set(table.values())
    vocab = {}
    for i, t in enumerate(tokens):
        spelled = t if set(t) <= alphabet else "".join(table[b] for b in t.encode("utf-8"))
        vocab.setdefault(spelled, i)
    if merges is None:
        raise UnsupportedModel("A gpt2 GGUF tokenizer needs tokenizer.ggml.merges, which is missing.")
    pairs = [_merge_pair(m) for m in merges]
    tok = HFTokenizer(BPE(vocab=vocab, merges=pairs, dropout=None, continuing_subword_prefix="",
                          end_of_word_suffix="", fuse_unk=False, ignore_merges=isinstance(pre, str) and pre in IGNORE_MERGES))
    tok.pre_tokenizer = pre_tokenizer_for(pre) or pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    return tok


def _merge_pair(merge: str) -> tuple[str, str]:
    if not isinstance(merge, str):
        raise UnsupportedModel(f"tokenizer.ggml.merges holds {merge!r}, which is not a string.")
    left, sep, right = merge.partition(" ")
    if not sep:
        raise UnsupportedModel(f"tokenizer.ggml.merges holds {merge!r}, which is not 'left right'.")
    return left, right


def _sentencepiece(tokens: list[str], merges: list[str] | None, scores: list[float] | None,
                   add_prefix_space: bool):
    from tokenizers import Tokenizer as HFTokenizer
    from tokenizers import decoders, pre_tokenizers
    from tokenizers.models import BPE

    vocab = {}
    for i, t in enumerate(tokens):
        vocab.setdefault(t, i)
    if merges is not None:
        pairs = [_merge_pair(m) for m in merges]
    else:
        pairs = merges_from_scores(vocab, dict(zip(tokens, scores or [])) if scores else None)
    tok = HFTokenizer(BPE(vocab=vocab, merges=pairs, fuse_unk=True, byte_fallback=True, dropout=None))
    tok.normalizer = None
    tok.pre_tokenizer = pre_tokenizers.Metaspace(replacement="▁", prepend_scheme="first" if add_prefix_space
                                                 else "never", split=False)
    steps = [decoders.Replace("▁", " "), decoders.ByteFallback(), decoders.Fuse()]
    if add_prefix_space:
        steps.append(decoders.Strip(content=" ", left=1))
    tok.decoder = decoders.Sequence(steps)
    return tok


MAX_MERGED_PIECE = 128


def merges_from_scores(vocab: dict[str, int], scores: dict[str, float] | None) -> list[tuple[str, str]]:
    """Recover BPE merges from a sentencepiece vocabulary: every split of a token into two known
    tokens is a merge, best score first (or, without scores, lowest id first).

    Splitting costs the square of a piece's length, so pieces longer than MAX_MERGED_PIECE are
    not split: sentencepiece makes none that long by merges (its default cap is 16 characters),
    and a hostile file's megabyte-long token would otherwise stall loading."""
    found = []
    ranked = scores if scores is not None else vocab
    for piece, score in ranked.items():
        if len(piece) > MAX_MERGED_PIECE:
            continue
        local = [(piece[:k], piece[k:], score) for k in range(1, len(piece))
                 if piece[:k] in vocab and piece[k:] in vocab]
        local.sort(key=lambda m: (vocab[m[0]], vocab[m[1]]))
        found.extend(local)
    found.sort(key=lambda m: (m[2], len(m[0]), len(m[1])), reverse=scores is not None)
    return [(a, b) for a, b, _ in found]


# -- from a Hugging Face directory ---------------------------------------------------------------

def from_directory(directory: str, config: dict | None = None, generation_config: dict | None = None) -> Tokenizer:
    """`tokenizer.json` (+ `tokenizer_config.json`, `chat_template.jinja`) from a model folder."""
    from tokenizers import Tokenizer as HFTokenizer

    text, problem = side_text(directory, "tokenizer.json")
    if text is None:
        raise UnsupportedModel(f"The model folder has no usable tokenizer.json ({problem}); it is needed "
                               "to turn text into token ids.")
    try:
        backend = HFTokenizer.from_str(text)
    except Exception as e:  # the Rust parser's errors are plain Exceptions
        raise UnsupportedModel(f"tokenizer.json cannot be read by the tokenizers library: {e}") from None
    tk_config: dict = {}
    cfg_text, _ = side_text(directory, "tokenizer_config.json")
    if cfg_text is not None:
        try:
            tk_config = json.loads(cfg_text)
        except json.JSONDecodeError:
            tk_config = {}
    if not isinstance(tk_config, dict):
        tk_config = {}
    template = tk_config.get("chat_template")
    if isinstance(template, list):  # [{"name": "default", "template": ...}, ...]
        named = {t.get("name"): t.get("template") for t in template if isinstance(t, dict)}
        template = named.get("default") or next(iter(named.values()), None)
    jinja_text, _ = side_text(directory, "chat_template.jinja")
    template = jinja_text or template
    special = {name: _token_content(tk_config.get(name))
               for name in ("bos_token", "eos_token", "unk_token", "pad_token")}
    eos_ids = []
    for source in (generation_config or {}, config or {}):
        value = source.get("eos_token_id")
        eos_ids += value if isinstance(value, list) else [value]
    if special["eos_token"] is not None:
        eos_ids.append(backend.token_to_id(special["eos_token"]))
    bos = (config or {}).get("bos_token_id")
    if bos is None and special["bos_token"] is not None:
        bos = backend.token_to_id(special["bos_token"])
    return Tokenizer(backend, bos_id=bos if isinstance(bos, int) else None,
                     eos_ids=tuple(i for i in eos_ids if isinstance(i, int)), add_bos=False,
                     chat_template=template if isinstance(template, str) else None, special_tokens=special)


def _token_content(value) -> str | None:
    if isinstance(value, dict):
        value = value.get("content")
    return value if isinstance(value, str) else None


def side_text(directory: str, name: str) -> tuple[str | None, str | None]:
    """(text, None) of a small file beside the weights, or (None, why not): capped in size."""
    from .. import sources

    path = sources.join(directory, name)
    if not sources.exists(path):
        return None, f"{name} not found"
    return sources.read_text(path, MAX_TOKENIZER_FILE)
