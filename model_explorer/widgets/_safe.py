"""Widget state that any file's strings can pass through (issue 45).

The kernel sends state and messages as UTF-8 JSON: a lone surrogate in a tensor name (a
safetensors key "\\ud800") makes that fail, and control or bidi characters would mislead in the
page. Every string of the synced state and of custom messages is escaped as safe_text does
everywhere else; what the browser sends back (a selection, a request's arguments) is unescaped
into the file's own names.
"""

from __future__ import annotations

from typing import Any

from ..safe_text import escape_deep, unescape_deep


class SafeState:
    """Mixed into every widget of this package, before anywidget.AnyWidget."""

    @staticmethod
    def _trait_to_json(x: Any, self: Any) -> Any:
        return escape_deep(x)

    @staticmethod
    def _trait_from_json(x: Any, self: Any) -> Any:
        return unescape_deep(x)

    def send(self, content: Any, buffers=None) -> None:
        super().send(escape_deep(content), buffers)  # type: ignore[misc]
