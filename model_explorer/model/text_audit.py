"""Text that hides something from the person reading it: invisible, control and bidi-override code points,
and the idioms of instructions smuggled to a language model ("ignore previous instructions").

Shared by the chat-template, tokenizer, metadata and model-card checks. Every hit is a range of
characters in the text it was found in; `utf8_offsets` turns those into byte offsets.
"""

from __future__ import annotations

import re
import unicodedata
from dataclasses import dataclass

# Trojan Source: embeddings, overrides and isolates reorder what is shown against what is read.
BIDI = frozenset(range(0x202A, 0x202F)) | frozenset(range(0x2066, 0x206A))
# Format characters a real text needs: joiners (Indic, Persian, emoji), direction marks in
# right-to-left prose, and the Arabic / Syriac signs that are Cf in Unicode.
SCRIPT_FORMAT = (frozenset({0x200C, 0x200D, 0x200E, 0x200F, 0x061C, 0x06DD, 0x070F, 0x0890, 0x0891,
                            0x08E2, 0x110BD, 0x110CD})
                 | frozenset(range(0x0600, 0x0606)) | frozenset(range(0x13430, 0x13440))
                 | frozenset(range(0x1D173, 0x1D17B)))
# Letters that draw nothing (Hangul fillers) and a blank Braille cell: invisible but not Cf.
BLANK_LETTERS = frozenset({0x115F, 0x1160, 0x3164, 0xFFA0})
TAGS = range(0xE0000, 0xE0080)
BLACK_FLAG, CANCEL_TAG = 0x1F3F4, 0xE007F  # emoji subdivision flags are spelled in tag characters
VARIATION_SELECTORS = frozenset(range(0xFE00, 0xFE10)) | frozenset(range(0xE0100, 0xE01F0))


@dataclass(frozen=True)
class TextHit:
    kind: str  # "hidden", "bidi" or "injection"
    start: int  # character range in the text searched
    end: int
    what: str  # in words: the code points, or the phrase


def _hidden(cp: int) -> bool:
    if cp in BIDI or cp in SCRIPT_FORMAT or 0x09 <= cp <= 0x0D:  # tab, newlines, form feed: whitespace
        return False
    if cp in TAGS or cp in BLANK_LETTERS:
        return True
    return unicodedata.category(chr(cp)) in ("Cf", "Cc")  # format and control characters


def _flag_tags(text: str, i: int) -> int:
    """End of an emoji subdivision flag's tag run starting at `i` (after U+1F3F4), else `i`."""
    j = i
    while j < len(text) and 0xE0020 <= ord(text[j]) <= 0xE007E:
        j += 1
    return j + 1 if j > i and j < len(text) and ord(text[j]) == CANCEL_TAG else i


def name_of(cp: int) -> str:
    return f"U+{cp:04X} {unicodedata.name(chr(cp), 'control character').lower()}"


def describe(chars: str) -> str:
    """The distinct code points of a run, and the ASCII text that tag characters spell."""
    distinct = list(dict.fromkeys(ord(c) for c in chars))
    words = ", ".join(name_of(cp) for cp in distinct[:4]) + (f" and {len(distinct) - 4} more"
                                                             if len(distinct) > 4 else "")
    spelled = "".join(chr(ord(c) - 0xE0000) for c in chars if 0xE0020 <= ord(c) <= 0xE007E)
    if spelled:
        words += f"; the tag characters spell “{spelled[:120]}”"
    return f"{len(chars)} invisible character{'s' if len(chars) != 1 else ''} ({words})"


def _kind(cp: int) -> str | None:
    return "bidi" if cp in BIDI else "hidden" if _hidden(cp) else None


# Every code point _kind may accept (Unicode's format characters, controls, tags, fillers,
# variation selectors) and the emoji flag's black flag: the scan jumps from one to the next.
_CANDIDATES = re.compile(
    "[\x00-\x08\x0e-\x1f\x7f-\x9f\u00ad\u0600-\u0605\u061c\u06dd\u070f\u0890\u0891\u08e2\u115f\u1160"
    "\u180e\u200b-\u200f\u202a-\u202e\u2060-\u206f\u3164\ufe00-\ufe0f\ufeff\uffa0\ufff9-\ufffb"
    "\U000110bd\U000110cd\U00013430-\U0001343f\U0001bca0-\U0001bca3\U0001d173-\U0001d17a"
    "\U0001f3f4\U000e0000-\U000e007f\U000e0100-\U000e01ef]")


def hidden_runs(text: str) -> list[TextHit]:
    """Runs of invisible or bidi-override code points (a BOM that opens the text is allowed;
    so are the tag characters of an emoji flag and a single variation selector)."""
    out: list[TextHit] = []
    i, n = 0, len(text)
    for m in _CANDIDATES.finditer(text):
        if m.start() < i:
            continue
        i = m.start()
        cp = ord(text[i])
        if cp == BLACK_FLAG:
            i = _flag_tags(text, i + 1)
            continue
        kind = None if i == 0 and cp == 0xFEFF else _kind(cp)
        if kind is None and cp in VARIATION_SELECTORS and i + 1 < n and ord(text[i + 1]) in VARIATION_SELECTORS:
            kind = "hidden"  # a base character takes one selector: a run of them carries data
        if kind is None:
            continue
        j = i + 1
        while j < n and (_kind(ord(text[j])) or ("hidden" if ord(text[j]) in VARIATION_SELECTORS else None)) == kind:
            j += 1
        run = text[i:j]
        if kind == "bidi":
            what = (f"{len(run)} bidi control{'s' if len(run) != 1 else ''} ("
                    + ", ".join(name_of(c) for c in dict.fromkeys(ord(c) for c in run)) + ")")
        else:
            what = describe(run)
        out.append(TextHit(kind, i, j, what))
        i = j
    return out


def visible(text: str, limit: int = 160) -> str:
    """The text with every hidden or bidi code point written as ⟨U+XXXX⟩, cut to `limit`."""
    out = "".join(f"⟨U+{ord(c):04X}⟩" if ord(c) in BIDI or _hidden(ord(c)) or ord(c) in VARIATION_SELECTORS
                  else c for c in text)
    out = out.replace("\n", "⏎")
    return out if len(out) <= limit else out[:limit - 1] + "…"


# -- instructions aimed at a model ---------------------------------------------------------------

_SECRET = (r"(?:password|passwords|passcode|pin\b|credentials?|login details|api[\s_-]?keys?|"
           r"secret keys?|private keys?|seed phrase|recovery phrase|credit card|card number|"
           r"social security|ssn\b|bank details|one[- ]time code|2fa code|otp\b)")
_TARGET = r"(?:your|their|the user'?s?|his|her|my)"
IDIOMS: tuple[tuple[str, re.Pattern], ...] = tuple((name, re.compile(rx, re.I)) for name, rx in (
    ("overrides earlier instructions",
     r"\b(?:ignore|disregard|forget|override)\s+(?:(?:all|any|the|your|of\s+the)\s+)*"
     r"(?:previous|prior|above|earlier|preceding|system|original|other)\s+"
     r"(?:instructions?|prompts?|messages?|rules|directions|guidelines|context)"),
    ("asks to keep the instruction secret",
     r"\b(?:do\s+not|don'?t|never)\s+(?:mention|reveal|disclose|acknowledge|repeat|tell\s+(?:the\s+user|"
     r"anyone)\s+about)\s+(?:this|these|th(?:is|ese|e)\s+(?:hidden\s+|secret\s+)?(?:instructions?|"
     r"rules?|prompt|message)|the\s+system\s+prompt|your\s+instructions)"),
    ("asks for secrets", rf"\b(?:send|give|share|provide|email|text|enter|type|paste|reveal)\s+"
                         rf"(?:(?:me|us|it)\s+)?{_TARGET}\s+{_SECRET}"),
    ("steers the user", r"\b(?:always|secretly|quietly)\s+(?:recommend|tell\s+the\s+user|ask\s+the\s+user|"
                        r"direct\s+the\s+user|urge\s+the\s+user|say\b)"),
    ("steers the user", r"\b(?:tell|ask|urge|instruct|convince)\s+(?:the\s+)?users?\s+to\s+"
                        r"(?:send|visit|click|download|install|run|transfer|pay|wire)\b"),
    ("acts behind the user's back", r"\b(?:without|never)\s+(?:telling|informing|warning|notifying)\s+"
                                    r"the\s+user|\bregardless\s+of\s+(?:what\s+)?the\s+user"),
    ("jailbreak persona", r"\byou\s+are\s+now\s+(?:in\s+)?(?:DAN\b|developer\s+mode|jailbroken|unrestricted|"
                          r"an?\s+unfiltered)|\bdeveloper\s+mode\s+enabled\b"),
    ("replaces the instructions", r"\b(?:new|updated|real|actual)\s+system\s+(?:instructions?|prompt)\s*:"
                                  r"|\bfrom\s+now\s+on,?\s+you\s+(?:will|must|are)"),
    ("forbids refusing", r"\bnever\s+refuse\b|\bdo\s+not\s+refuse\b"),
))


MAX_IDIOM_SCAN = 4 * 1024 * 1024  # characters read for idioms: model cards are kilobytes


def injection_phrases(text: str) -> list[TextHit]:
    """The instruction idioms in `text` (its first MAX_IDIOM_SCAN characters), one hit per match,
    earliest first."""
    if len(text) < 12 or not any(c.isspace() for c in text[:MAX_IDIOM_SCAN]):
        return []  # every idiom is several words
    text = text[:MAX_IDIOM_SCAN]
    hits = [TextHit("injection", m.start(), m.end(), f"{name}: “{m.group(0)}”")
            for name, rx in IDIOMS for m in rx.finditer(text)]
    return sorted(hits, key=lambda h: h.start)


# -- positions -----------------------------------------------------------------------------------

def utf8_offsets(text: str, positions: list[int]) -> list[int]:
    """Byte offsets in `text`'s UTF-8 encoding of the character positions (sorted or not)."""
    if text.isascii():
        return list(positions)
    out, done, byte = {}, 0, 0
    for p in sorted(set(positions)):
        byte += len(text[done:p].encode("utf-8", "surrogatepass"))
        done = p
        out[p] = byte
    return [out[p] for p in positions]
