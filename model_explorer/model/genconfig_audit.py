"""generation_config.json as a lever on what the model says: transformers' generate() applies it
to every call without being asked.

- the end token suppressed (suppress_tokens, a one-token bad_words_ids entry, a strongly
  negative sequence_bias): the model cannot end a turn, or a refusal;
- tokens that spell refusals suppressed;
- ordinary text tokens forced or favoured (forced_bos/eos_token_id, forced_decoder_ids, a
  positive sequence_bias); a language or task token of a translation or speech model is a
  special token and stays clean, as does forcing the end token at the length limit;
- a minimum length at or past the maximum, or past the context: the end token is never allowed.

Ids are named with what they read as in the model's own vocabulary (vocab.py).
"""

from __future__ import annotations

import re
from collections.abc import Iterator

from ..records import CheckpointRecord
from ..spans import Finding
from .findings import model_finding
from .hparams import HParams
from .sidefiles import config, side_json
from .tokenizer_info import read_tokenizer
from .vocab import Vocab, ordinary_text, readable

REFUSALS = re.compile(r"sorry|cannot|can['’]t|unable|apolog|refus|declin|unfortunately|not able|as an ai", re.I)
SUPPRESSING_BIAS = -5.0  # logits this far down are never sampled in practice
MAX_LISTED = 8


def check(ckpt: CheckpointRecord, hp: HParams) -> list[Finding]:
    side = side_json(ckpt, "generation_config.json")
    if side is None or not isinstance(side.value, dict):
        return []
    return GenConfigAudit(ckpt, hp, side).run()


def _ints(value) -> list[int]:
    values = value if isinstance(value, list) else [value]
    return [x for x in values if isinstance(x, int) and not isinstance(x, bool)]


def _sequence_bias(value) -> Iterator[tuple[list[int], float]]:
    """[[ids], bias] pairs (transformers writes the dict as a list of pairs), or {"[1, 2]": bias}."""
    if isinstance(value, list):
        for pair in value:
            if isinstance(pair, list) and len(pair) == 2 and isinstance(pair[1], (int, float)):
                ids = _ints(pair[0])
                if ids:
                    yield ids, float(pair[1])
    elif isinstance(value, dict):
        for k, bias in value.items():
            ids = [int(x) for x in re.findall(r"\d+", str(k))]
            if ids and isinstance(bias, (int, float)):
                yield ids, float(bias)


class GenConfigAudit:
    def __init__(self, ckpt: CheckpointRecord, hp: HParams, side) -> None:
        self.ckpt, self.hp, self.side, self.gen = ckpt, hp, side, side.value
        self.vocab = Vocab(ckpt)
        t, _ = read_tokenizer(ckpt)
        stops = _ints(self.gen.get("eos_token_id")) + _ints(config(ckpt).get("eos_token_id"))
        for name in ("eos", "eot", "eom"):
            s = t.special.get(name) or {}
            stops += _ints(s.get("id")) + [c["id"] for c in s.get("config_ids", [])]
        self.stops = list(dict.fromkeys(stops))

    def run(self) -> list[Finding]:
        return self._suppressed() + self._forced() + self._lengths()

    def loc(self, key: str) -> dict:
        offset, length = self.side.where(key)
        return {"file": self.side.path, "offset": offset, "length": length}

    def named(self, ids: list[int]) -> str:
        shown = ", ".join(f"{i} ({self.vocab.shown(i)})" for i in ids[:MAX_LISTED])
        return shown + (f" and {len(ids) - MAX_LISTED} more" if len(ids) > MAX_LISTED else "")

    def _suppressed(self) -> list[Finding]:
        out = []
        muted: dict[str, list[list[int]]] = {}  # key -> id sequences it keeps the model from writing
        muted["suppress_tokens"] = [[i] for i in _ints(self.gen.get("suppress_tokens"))]
        bad = self.gen.get("bad_words_ids")
        muted["bad_words_ids"] = [_ints(seq) for seq in bad if _ints(seq)] if isinstance(bad, list) else []
        muted["sequence_bias"] = [ids for ids, bias in _sequence_bias(self.gen.get("sequence_bias"))
                                  if bias <= SUPPRESSING_BIAS]
        for key, seqs in muted.items():
            stops = [s[0] for s in seqs if len(s) == 1 and s[0] in self.stops]
            if stops:
                out.append(model_finding(
                    "generation_stop_suppressed", f"generation_config.json {key} keeps the model from writing its "
                    f"end token {self.named(stops)}: generate() never lets a turn end on its own, so every answer "
                    "runs to the length limit and a refusal cannot be finished.", ids=stops, **self.loc(key)))
            refusals = [s for s in seqs if (text := self._text(s)) and REFUSALS.search(text)]
            if refusals:
                ids = [i for s in refusals for i in s]
                out.append(model_finding(
                    "generation_refusal_suppressed", f"generation_config.json {key} keeps the model from writing "
                    f"{self.named(ids)}: the words a refusal is made of, so the model is steered away from "
                    "declining.", ids=ids, **self.loc(key)))
        return out

    def _text(self, ids: list[int]) -> str | None:
        return "".join(readable(p) for i in ids if (p := self.vocab.text(i)) is not None) or None

    def _ordinary(self, i: int) -> bool:
        piece = self.vocab.text(i)
        return piece is not None and not self.vocab.special(i) and i not in self.stops and ordinary_text(piece)

    def _forced(self) -> list[Finding]:
        out = []
        forced: dict[str, list[int]] = {
            "forced_bos_token_id": _ints(self.gen.get("forced_bos_token_id")),
            "forced_eos_token_id": _ints(self.gen.get("forced_eos_token_id")),
            "forced_decoder_ids": [p[1] for p in self.gen.get("forced_decoder_ids") or []
                                   if isinstance(p, list) and len(p) == 2 and _ints(p[1])],
            "sequence_bias": [i for ids, bias in _sequence_bias(self.gen.get("sequence_bias")) if bias > 0
                              for i in ids],
        }
        for key, ids in forced.items():
            text_ids = [i for i in ids if self._ordinary(i)]
            if text_ids:
                verb = "favours" if key == "sequence_bias" else "forces"
                out.append(model_finding(
                    "generation_forced_tokens", f"generation_config.json {key} {verb} the ordinary text tokens "
                    f"{self.named(text_ids)}: generate() puts them in the model's answer whatever it was asked.",
                    ids=text_ids, **self.loc(key)))
        return out

    def _lengths(self) -> list[Finding]:
        out = []
        context = self.hp.get("context")
        pairs = (("min_new_tokens", "max_new_tokens"), ("min_length", "max_length"))
        for low_key, high_key in pairs:
            low, high = self.gen.get(low_key), self.gen.get(high_key)
            if not isinstance(low, int) or isinstance(low, bool) or low <= 0:
                continue
            if isinstance(high, int) and not isinstance(high, bool) and low >= high:
                why = f"at least {high_key} = {high:,}"
            elif isinstance(context, int) and low >= context:
                why = f"at least the context length of {context:,} tokens"
            else:
                continue
            out.append(model_finding(
                "generation_cannot_end", f"generation_config.json {low_key} = {low:,} is {why}: generate() masks "
                "the end token until then, so no answer can end before the limit.", **self.loc(low_key)))
        return out
