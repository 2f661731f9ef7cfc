"""The Model tab's requests: the model card (with the chat template and what its audit flags),
and the tokenizer inspector (tokenize text, find tokens by id or text, page through the
vocabulary). Mixed into BaseView."""

from __future__ import annotations

import math
import threading
from typing import Any


def _plain(value: Any) -> Any:
    """JSON-safe for the browser: NaN/Inf (which its JSON lacks) and odd objects as text."""
    if isinstance(value, dict):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    if isinstance(value, float) and not math.isfinite(value):
        return str(value)
    if value is None or isinstance(value, (str, int, float, bool)):
        return value
    return str(value)


class ModelOps:
    """`_op_*` handlers answered by BaseView.answer; `self.checkpoint` is the open Checkpoint."""

    _card = None

    def model_card(self):
        if self._card is None:
            from ..model.card import card

            self._card = card(self.checkpoint)
        return self._card

    def _op_model_card(self):
        from ..model.card import SHOWN

        c = self.model_card()
        rows = []
        for name, s in c.hparams.items():
            if s.value is None:
                continue
            v = s.value
            rows.append({"name": name, "value": v if isinstance(v, (int, float, str, bool)) else str(v),
                         "where": s.where(), "file": s.file, "offset": s.offset, "length": s.length,
                         "tensor": s.tensor})
        labels = [name for name, _ in SHOWN]
        rows.sort(key=lambda r: labels.index(r["name"]) if r["name"] in labels else len(labels))
        out = _plain({k: v for k, v in c.to_dict().items() if k != "hparams"})
        out["rows"] = _plain(rows)
        out["text"] = c.text()
        out["template"] = _plain(self._template_view())
        from ..model.remote_code import auto_map

        out["auto_map"] = _plain(auto_map(self.checkpoint))  # the custom code loading would run
        self.start_cross_check()
        return out, None

    def _template_view(self):
        """The chat template with the audit's marks (None when the model has none); when the
        audit fails, the view says why and the card is still drawn."""
        from ..model.template_findings import template_view

        try:
            return template_view(self.checkpoint)
        except Exception as e:  # noqa: BLE001 - the card matters more than the view
            return {"error": f"The chat template could not be audited: {type(e).__name__}: {e}"}

    _cross_check = None

    def start_cross_check(self):
        """The Model tab opened: check the tensors against transformers' build of the architecture
        in a background thread (torch's first import takes seconds), then send what it adds as
        `model_findings`. Once per widget; widgets without that trait skip it. Returns the thread."""
        if self._cross_check is not None or not self.has_trait("model_findings"):
            return self._cross_check

        def work():
            from ..model.checks import cross_check
            from ..model.findings import model_finding

            try:
                found = cross_check(self.checkpoint)
            except Exception as e:  # noqa: BLE001 - a check must not break the tab
                found = [model_finding("model_check_failed", f"transformers' cross-check failed: "
                                       f"{type(e).__name__}: {e}")]
            self.model_findings = [_plain(f.to_dict()) for f in found]

        self._cross_check = threading.Thread(target=work, name="model-explorer-cross-check", daemon=True)
        self._cross_check.start()
        return self._cross_check

    def _op_tokenize(self, text: str = "", add_special_tokens: bool = False):
        from ..model import inspector

        return {"tokens": inspector.tokenize(self.checkpoint, str(text), bool(add_special_tokens))}, None

    def _op_find_token(self, query: str = "", limit: int = 50):
        from ..model import inspector

        return {"tokens": inspector.find(self.checkpoint, str(query), max(1, min(int(limit), 500)))}, None

    def _op_vocab(self, start: int = 0, count: int = 100):
        """A page of the vocabulary as the Model tab's virtualised list asks for it: rows
        `start` .. `start + count` (at most inspector.MAX_PAGE) and the vocabulary's size."""
        from ..model import inspector

        tok = inspector.build(self.checkpoint)
        start = max(0, int(start))
        return {"start": start, "total": tok.vocab_size,
                "rows": inspector.page(self.checkpoint, start, int(count))}, None
