"""What a model's tokenizer is, read from its files without building it, and the checks on it.

Hugging Face folders: tokenizer.json (model type, pre-tokenizer, vocabulary, added tokens),
tokenizer_config.json (special tokens, chat template, added_tokens_decoder),
special_tokens_map.json, chat_template.jinja. GGUF: the `tokenizer.ggml.*` keys and
`tokenizer.chat_template`. The chat template is rendered in jinja2's sandbox for a two-turn
conversation (the template comes from the file and is not trusted).

Checks: token count against the embedding rows and config vocab_size, special ids outside the
vocabulary, a BPE GGUF without `tokenizer.ggml.pre`, an instruct model without a template, a
template that does not parse.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np

from .. import sources
from ..ggml import Keys
from ..records import CheckpointRecord, plain_value
from ..spans import Finding
from .findings import model_finding
from .hparams import HParams, embedding, info_span
from .pretokenizers import unknown_pre_problem
from .sidefiles import line_col, model_dir, side_json, side_path, side_text
from .template_findings import audit_sources, refusal_finding, sandbox_refusal
from .template_known import known_template

EXAMPLE_CHAT = [{"role": "user", "content": "Hello! Who are you?"},
                {"role": "assistant", "content": "I am a helpful assistant."},
                {"role": "user", "content": "What is the capital of France?"}]
SPECIAL_NAMES = ("bos", "eos", "pad", "unk")
GGUF_MODELS = {"gpt2": "BPE (byte-level, GPT-2 style)", "llama": "BPE (SentencePiece style, byte fallback)",
               "bert": "WordPiece", "t5": "Unigram (SentencePiece)", "rwkv": "RWKV (greedy trie)",
               "plamo2": "Unigram (PLaMo-2)", "none": "none"}
GGUF_SPECIAL_KEYS = {"bos": "bos_token_id", "eos": "eos_token_id", "pad": "padding_token_id",
                     "unk": "unknown_token_id", "eot": "eot_token_id", "eom": "eom_token_id",
                     "sep": "seperator_token_id", "mask": "mask_token_id"}  # llama.cpp's spelling of "separator"
CONTROL, USER_DEFINED = 3, 4
MAX_LISTED = 64  # special / added tokens listed in the summary


@dataclass
class TokenizerInfo:
    """The tokenizer as its files describe it. `count`: ids 0..count-1 the tokenizer can emit."""

    source: str | None = None  # "tokenizer.json" | "gguf" | None
    file: str | None = None
    model: str | None = None  # BPE, Unigram, WordPiece...
    pre_tokenizer: str | None = None
    vocab_size: int | None = None  # the base vocabulary
    count: int | None = None  # base + added, as the largest id + 1
    added_tokens: list[dict[str, Any]] = field(default_factory=list)  # {"id", "content", "special"}
    added_total: int = 0
    special: dict[str, dict[str, Any]] = field(default_factory=dict)  # "bos" -> {"id", "token", "from"}
    chat_template: str | None = None
    template_from: str | None = None  # file (+ key)
    rendered: str | None = None
    template_error: str | None = None
    template_family: str | None = None  # a known family's published template (template_known)
    files: list[str] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    def summary(self) -> str:
        if self.source is None:
            return "no tokenizer files"
        # a token in JSON quotes: spaces and control characters stay visible, with no Python repr
        specials = ", ".join(f"{k} {json.dumps(v.get('token'), ensure_ascii=False)} (id {v.get('id')})"
                             for k, v in self.special.items())
        return (f"{self.model or '?'}, {self.count if self.count is not None else '?'} tokens"
                f" ({self.added_total} added), pre-tokenizer {self.pre_tokenizer or 'none'}"
                + (f"; {specials}" if specials else ""))


def read_tokenizer(ckpt: CheckpointRecord) -> tuple[TokenizerInfo, list[Finding]]:
    """The tokenizer summary and the problems met reading its files (cached per checkpoint)."""
    cached = ckpt.derived.tokenizer
    if cached is not None:
        return cached
    if ckpt.format == "gguf" and ckpt.meta(Keys.TOKENIZER_MODEL) is not None:
        result = _from_gguf(ckpt)
    else:
        result = _from_folder(ckpt)
    _render(result[0], result[1])
    if result[0].chat_template:
        result[0].template_family = known_template(result[0].chat_template)
    ckpt.derived.tokenizer = result
    return result


# -- GGUF ----------------------------------------------------------------------------------------

def kv_loc(ckpt: CheckpointRecord, key: str) -> dict:
    kv = ckpt.metadata.get(key)
    if kv is None or getattr(kv, "offset", None) is None:
        return {}
    return {"offset": kv.offset, "length": kv.length, "file": getattr(kv, "file", None) or ckpt.files[0]}


def token_types(value) -> np.ndarray | None:
    """llama.cpp token types as an integer array (None when absent or not numeric)."""
    if value is None:
        return None
    try:
        arr = value.to_numpy() if hasattr(value, "to_numpy") else np.asarray(value)
    except (TypeError, ValueError, OSError):
        return None
    return arr if arr.dtype.kind in "iu" else None


def _from_gguf(ckpt: CheckpointRecord) -> tuple[TokenizerInfo, list[Finding]]:
    t = TokenizerInfo(source="gguf", file=ckpt.files[0] if ckpt.files else None)
    kind = ckpt.meta(Keys.TOKENIZER_MODEL)
    t.model = GGUF_MODELS.get(kind, str(kind))
    pre = ckpt.meta(Keys.TOKENIZER_PRE)
    t.pre_tokenizer = pre if isinstance(pre, str) else None
    tokens_value = ckpt.meta(Keys.TOKENS)
    n = len(tokens_value) if hasattr(tokens_value, "__len__") else None
    t.vocab_size = t.count = n
    types = token_types(ckpt.meta(Keys.TOKEN_TYPE))

    def token(i: int) -> str | None:  # read one string from the file: opening a 128k vocabulary stays fast
        if n is None or not 0 <= i < n:
            return None
        try:
            value = tokens_value[i]
        except (IndexError, TypeError, ValueError, OSError):
            return None
        return value if isinstance(value, str) else None

    listed = np.flatnonzero((types == CONTROL) | (types == USER_DEFINED)) if types is not None else []
    t.added_total = len(listed)
    t.added_tokens = [{"id": int(i), "content": token(int(i)), "special": bool(types[i] == CONTROL)}
                      for i in listed[:MAX_LISTED]]
    for name, key in GGUF_SPECIAL_KEYS.items():
        i = ckpt.meta(f"tokenizer.ggml.{key}")
        if isinstance(i, int) and not isinstance(i, bool):
            t.special[name] = {"id": i, "token": token(i), "from": f"tokenizer.ggml.{key}"}
    template = ckpt.meta(Keys.CHAT_TEMPLATE)
    if isinstance(template, str):
        t.chat_template, t.template_from = template, Keys.CHAT_TEMPLATE
    t.files = list(ckpt.files[:1])
    return t, []


# -- Hugging Face folder -------------------------------------------------------------------------

def _content(value) -> str | None:
    if isinstance(value, dict):
        value = value.get("content")
    return value if isinstance(value, str) else None


def _describe_pre(pre) -> str | None:
    if not isinstance(pre, dict):
        return None
    kind = pre.get("type")
    if kind == "Sequence":
        inner = [_describe_pre(p) for p in pre.get("pretokenizers") or [] if isinstance(p, dict)]
        return " + ".join(x for x in inner if x) or "Sequence"
    if kind == "Split":
        pattern = pre.get("pattern")
        regex = pattern.get("Regex") or pattern.get("String") if isinstance(pattern, dict) else None
        return f"Split({str(regex)[:40]!r})" if regex else "Split"
    return str(kind) if kind else None


def _from_folder(ckpt: CheckpointRecord) -> tuple[TokenizerInfo, list[Finding]]:
    t = TokenizerInfo()
    problems: list[Finding] = []
    tj = side_json(ckpt, "tokenizer.json")
    tc = side_json(ckpt, "tokenizer_config.json")
    sm = side_json(ckpt, "special_tokens_map.json")
    for side in (tj, tc, sm):
        if side is not None:
            t.files.append(side.path)
            if side.problem is not None:
                problems.append(side.problem)
    vocab_ids: set[int] = set()
    if tj is not None:
        t.source, t.file = "tokenizer.json", tj.path
        value = tj.value or {}
        model = value.get("model") if isinstance(value.get("model"), dict) else {}
        t.model = model.get("type") or ("BPE" if "merges" in model else None)
        vocab = model.get("vocab")
        if isinstance(vocab, dict):
            vocab_ids = {i for i in vocab.values() if isinstance(i, int)}
            t.vocab_size = len(vocab)
        elif isinstance(vocab, list):  # Unigram: [[piece, score], ...]
            vocab_ids = set(range(len(vocab)))
            t.vocab_size = len(vocab)
        t.pre_tokenizer = _describe_pre(value.get("pre_tokenizer"))
        added = value.get("added_tokens") if isinstance(value.get("added_tokens"), list) else []
        for a in added:
            if isinstance(a, dict) and isinstance(a.get("id"), int):
                vocab_ids.add(a["id"])
                t.added_tokens.append({"id": a["id"], "content": a.get("content"),
                                       "special": bool(a.get("special"))})
    config = (tc.value if tc is not None else None) or {}
    decoder = config.get("added_tokens_decoder")
    if isinstance(decoder, dict):
        known = {a["id"] for a in t.added_tokens}
        for k, v in decoder.items():
            if isinstance(k, str) and k.isdigit() and isinstance(v, dict) and int(k) not in known:
                vocab_ids.add(int(k))
                t.added_tokens.append({"id": int(k), "content": v.get("content"), "special": bool(v.get("special"))})
                if t.source is None:
                    t.source, t.file = "tokenizer_config.json", tc.path
    t.added_tokens.sort(key=lambda a: a["id"])
    t.added_total = len(t.added_tokens)
    t.added_tokens = t.added_tokens[:MAX_LISTED]
    if vocab_ids:
        t.count = max(vocab_ids) + 1
    # special tokens: tokenizer_config.json, then special_tokens_map.json, then config.json ids
    by_content = {a["content"]: a["id"] for a in t.added_tokens if isinstance(a.get("content"), str)}
    tj_model = (tj.value or {}).get("model") if tj is not None else None
    tj_vocab = tj_model.get("vocab") if isinstance(tj_model, dict) else None
    for name in SPECIAL_NAMES:
        for side in (tc, sm):
            token = _content((side.value or {}).get(f"{name}_token")) if side is not None else None
            if token is not None:
                i = by_content.get(token)
                if i is None and isinstance(tj_vocab, dict):
                    i = tj_vocab.get(token)
                t.special[name] = {"id": i, "token": token, "from": f"{side.name} {name}_token"}
                break
    cfg = ckpt.metadata.get("config.json") if isinstance(ckpt.metadata.get("config.json"), dict) else {}
    gen = ckpt.metadata.get("generation_config.json")
    gen = gen if isinstance(gen, dict) else {}
    for name in ("bos", "eos", "pad"):
        for src_name, src in (("generation_config.json", gen), ("config.json", cfg)):
            value = src.get(f"{name}_token_id")
            ids = [x for x in (value if isinstance(value, list) else [value])  # a list: every id stops
                   if isinstance(x, int) and not isinstance(x, bool)]
            if ids:
                entry = t.special.setdefault(name, {"id": ids[0], "token": None, "from": ""})
                if entry.get("id") is None:
                    entry["id"] = ids[0]
                entry.setdefault("ids_from", []).append(f"{src_name} {name}_token_id = {', '.join(map(str, ids))}")
                entry.setdefault("config_ids", []).extend({"id": i, "from": f"{src_name} {name}_token_id"} for i in ids)
                break
    # chat template: chat_template.jinja wins over tokenizer_config.json, as transformers reads it
    jinja_text, jinja_path, problem = side_text(ckpt, "chat_template.jinja")
    if problem:
        problems.append(model_finding("bad_side_file", f"chat_template.jinja {problem}.", file=jinja_path))
    if jinja_text is not None:
        t.chat_template, t.template_from = jinja_text, "chat_template.jinja"
        t.files.append(jinja_path)
    else:
        template = config.get("chat_template")
        if isinstance(template, list):  # [{"name": "default", "template": ...}, ...]
            named = {x.get("name"): x.get("template") for x in template if isinstance(x, dict)}
            template = named.get("default") or next(iter(named.values()), None)
        if isinstance(template, str):
            t.chat_template, t.template_from = template, "tokenizer_config.json chat_template"
    return t, problems


# -- the chat template ---------------------------------------------------------------------------

def _render(t: TokenizerInfo, problems: list[Finding]) -> None:
    if not t.chat_template:
        return
    from jinja2.exceptions import TemplateError, TemplateSyntaxError

    from .tokenizer import render_chat_template

    specials = {f"{k}_token": v.get("token") for k, v in t.special.items() if v.get("token")}
    try:
        t.rendered = render_chat_template(t.chat_template, EXAMPLE_CHAT, True, **specials)
    except TemplateSyntaxError as e:
        t.template_error = f"line {e.lineno}: {e.message}"
    except TemplateError as e:  # raise_exception() in the template, or the sandbox's SecurityError
        t.template_error = f"{type(e).__name__}: {e}"
    except Exception as e:  # noqa: BLE001 - a template is code from the file: any failure is its fault
        t.template_error = f"{type(e).__name__}: {e}"


def _template_location(ckpt: CheckpointRecord, t: TokenizerInfo) -> dict:
    if t.template_from == Keys.CHAT_TEMPLATE:
        return kv_loc(ckpt, Keys.CHAT_TEMPLATE)
    if t.template_from == "chat_template.jinja":
        path = side_path(ckpt, "chat_template.jinja")
        line = t.template_error.split(":")[0] if t.template_error else ""
        off = 0
        if line.startswith("line ") and line[5:].isdigit():
            lines = t.chat_template.split("\n")[: int(line[5:]) - 1]
            off = len("\n".join(lines).encode("utf-8")) + (1 if lines else 0)
        return {"file": path, "offset": off, "length": 1}
    side = side_json(ckpt, "tokenizer_config.json")
    if side is not None:
        off, ln = side.where("chat_template")
        return {"file": side.path, "offset": off, "length": ln}
    return {}


# -- checks --------------------------------------------------------------------------------------

def check(ckpt: CheckpointRecord, hp: HParams) -> list[Finding]:
    if not ckpt.tensors or side_path(ckpt, "adapter_config.json") is not None:
        return []
    t, problems = read_tokenizer(ckpt)
    out = list(problems)
    audited, _ = audit_sources(ckpt)  # a template attack matters whatever else the folder holds
    out += audited
    if not hp.describes_model:
        return out
    embed = embedding(ckpt)
    rows = embed.shape[0] if embed is not None and len(embed.shape) == 2 and not embed.quant else None
    tok_loc = ({"file": t.file} if t.source != "gguf" else kv_loc(ckpt, Keys.TOKENS))
    if t.source is None and hp.origin == "config.json":
        out.append(model_finding("no_tokenizer", "The folder has no tokenizer.json or tokenizer_config.json: "
                                 "the model runs on token ids; turning text into ids needs tokenizer.json.",
                                 file=model_dir(ckpt)))
    if t.count is not None:
        if rows is not None:
            off, ln = info_span(embed)
            if t.count > rows:
                out.append(model_finding("tokens_beyond_embedding", f"The tokenizer ({t.source}) has "
                                         f"{t.count:,} tokens but {embed.name!r} has {rows:,} rows: ids "
                                         f"{rows:,} to {t.count - 1:,} index past the embedding and crash at "
                                         "run time.", offset=off, length=ln, tensor=embed.name, file=embed.file,
                                         tokens=t.count, rows=rows, tokenizer_file=t.file))
            elif t.count < rows:
                out.append(model_finding("unused_embedding_rows", f"{embed.name!r} has {rows:,} rows and the "
                                         f"tokenizer {t.count:,} tokens: {rows - t.count:,} rows are padding "
                                         "(never produced by the tokenizer).", offset=off, length=ln,
                                         tensor=embed.name, file=embed.file, tokens=t.count, rows=rows))
        vocab = hp.values.get("vocab")
        if (vocab is not None and vocab.source == "config.json" and isinstance(vocab.value, int)
                and t.count > vocab.value and (rows is None or rows == vocab.value)
                and not any(f.code == "tokens_beyond_embedding" for f in out)):
            out.append(model_finding("tokens_beyond_embedding", f"The tokenizer has {t.count:,} tokens but "
                                     f"{vocab.where()} = {vocab.value:,}: ids {vocab.value:,} and up have no "
                                     "embedding row.", offset=vocab.offset, length=vocab.length, file=vocab.file,
                                     tokens=t.count, vocab_size=vocab.value))
    limit = rows or (t.count if t.count else None)
    for name, s in t.special.items():
        candidates = [(s.get("id"), s.get("from"))] + [(c["id"], c["from"]) for c in s.get("config_ids", [])]
        for i, where in dict(candidates).items():
            if not (isinstance(i, int) and limit is not None and not 0 <= i < limit):
                continue
            if t.source == "gguf":
                loc = kv_loc(ckpt, f"tokenizer.ggml.{GGUF_SPECIAL_KEYS[name]}")
            else:
                loc = json_loc(ckpt, where)
            out.append(model_finding("special_token_out_of_vocab", f"The {name} token id {i} ({where}) is "
                                     f"outside the vocabulary of {limit:,} ids.", token=name, id=i,
                                     **(loc or tok_loc)))
    if t.source == "gguf" and ckpt.meta(Keys.TOKENIZER_MODEL) == "gpt2" and not t.pre_tokenizer:
        out.append(model_finding("missing_pre_tokenizer", "The GGUF has a BPE (gpt2) tokenizer but no "
                                 "tokenizer.ggml.pre: llama.cpp warns 'missing pre-tokenizer type, using: "
                                 "default' and splits text the GPT-2 way, which degrades generation for "
                                 "models trained with another split.",
                                 **kv_loc(ckpt, Keys.TOKENIZER_MODEL)))
    elif t.source == "gguf" and ckpt.meta(Keys.TOKENIZER_MODEL) == "gpt2" and \
            (unknown := unknown_pre_problem(t.pre_tokenizer)):
        out.append(model_finding("unknown_pre_tokenizer", unknown, **kv_loc(ckpt, Keys.TOKENIZER_PRE)))
    refused = sandbox_refusal(t.template_error)
    if any(f.code == "chat_template_escape" for f in audited):
        pass  # the sandbox's refusal of an escape is the attack already reported, not a bug
    elif refused:
        out.append(refusal_finding(_template_location(ckpt, t), t.template_error, refused))
    elif t.template_error:
        out.append(model_finding("bad_chat_template", f"The chat template ({t.template_from}) fails on a "
                                 f"two-turn conversation: {t.template_error}.", **_template_location(ckpt, t)))
    elif not t.chat_template and _instruct(ckpt, hp):
        out.append(model_finding("no_chat_template", "The model's name says it is tuned for chat or "
                                 "instructions, but no chat template was found (chat_template.jinja, "
                                 "tokenizer_config.json chat_template, tokenizer.chat_template).",
                                 **(tok_loc if t.source else {"file": model_dir(ckpt)})))
    return out


def json_loc(ckpt: CheckpointRecord, where: str | None) -> dict:
    """{"file", "offset", "length"} of "<side file> <key>" (as the special-token sources say)."""
    if not where or " " not in where:
        return {}
    name, key = where.split(" ", 1)
    side = side_json(ckpt, name)
    if side is None:
        return {}
    off, ln = side.where(key)
    return {"file": side.path, "offset": off, "length": ln}


def _instruct(ckpt: CheckpointRecord, hp: HParams) -> bool:
    names = [str(plain_value(ckpt.metadata.get(k)) or "") for k in (Keys.NAME, "general.finetune")]
    names.append(str(hp.get("name_or_path", "")))
    names.append(sources.basename(ckpt.source))
    if not sources.isdir(ckpt.source):
        names.append(sources.basename(sources.dirname(ckpt.source)))
    import re

    return any(re.search(r"(instruct|chat|\bit\b|-it$|_it$|assistant)", n, re.I) for n in names if n)


def line_of(text: str, pos: int) -> str:
    return line_col(text, pos)
