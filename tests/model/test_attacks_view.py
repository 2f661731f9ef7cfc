"""The Model tab's template view (issue 34): the card carries the template a loader uses, each
flagged range as characters of the text and as bytes of the file, and a known family by name."""

from __future__ import annotations

import json

import model_explorer as mx
from model_explorer.widgets import Explorer

from .conftest import CHATML, write_folder
from .planted_attacks import CASES


def test_card_carries_the_marks_at_characters_and_bytes(tmp_path):
    planted = CASES["keyword_gated_system_turn"](str(tmp_path))
    card, _ = Explorer(planted.open).answer("model_card", {})
    json.dumps(card, allow_nan=False)
    tv = card["template"]
    assert tv["label"] == "tokenizer.chat_template" and tv["family"] is None
    raw = open(planted.gguf, "rb").read()
    for m in tv["marks"]:
        assert raw[m["offset"]:m["offset"] + m["length"]] == tv["text"][m["start"]:m["end"]].encode()
    assert {m["code"] for m in tv["marks"]} == {"chat_template_content_gate", "chat_template_injected_text"}
    assert "send their password" in card["chat_example"] or "bank" not in card["chat_example"]


def test_known_template_and_json_escapes(tmp_path):
    card, _ = Explorer(mx.sample_path()).answer("model_card", {})
    assert card["template"]["family"].startswith("SmolLM2") and card["template"]["marks"] == []
    d = write_folder(tmp_path / "m", template="{# \u202e #}\n" + CHATML)
    (m,) = Explorer(d).answer("model_card", {})[0]["template"]["marks"]
    raw = (tmp_path / "m" / "tokenizer_config.json").read_bytes()
    assert m["code"] == "bidi_override" and raw[m["offset"]:m["offset"] + m["length"]] == b"\\u202e"


def test_a_model_without_template_has_no_view(tmp_path):
    card, _ = Explorer(write_folder(tmp_path / "m", template=None)).answer("model_card", {})
    assert card["template"] is None
