"""`card(ckpt)`: what the model is, on one page, every value saying where it was read.

Architecture and family, the hyperparameters (hparams.py), parameters, bytes, quantization
(when `ckpt.summary()` reports it), the tokenizer and chat template (tokenizer_info.py), the
adapter (adapters.py), the library that wrote it and how it is meant to be loaded (layouts.py)
and the memory it needs at a few context lengths (memory.py).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from ..formats.hubquant.summary import quantization_text
from ..formats.truncation import present_note, stored_bytes
from ..records import CheckpointRecord
from ..safe_text import escape
from ..units import plain_text
from .graph_facts import GRAPH_FACTS, graph_facts
from .hparams import HParams, Sourced, parameters_text, read_hparams

# (name, label) in the order a person reads them
SHOWN = (("architecture", "architecture"), ("model_type", "model type"), ("layers", "layers"),
         ("hidden", "hidden size"), ("heads", "attention heads"), ("kv_heads", "key/value heads"),
         ("head_dim", "head dim"), ("intermediate", "intermediate size"), ("vocab", "vocabulary"),
         ("context", "context length"), ("rope_theta", "RoPE base"), ("rope_scaling", "RoPE scaling"),
         ("sliding_window", "sliding window"), ("sliding_layers", "sliding-window layers"),
         ("experts", "experts"), ("experts_per_token", "experts per token"),
         ("moe_intermediate", "expert intermediate size"), ("kv_lora_rank", "MLA kv_lora_rank"),
         ("qk_rope_head_dim", "MLA qk_rope_head_dim"), ("tied_embeddings", "tied embeddings"),
         *GRAPH_FACTS)


@dataclass
class ModelCard:
    """One model's card. `hparams` maps a name to a Sourced (value + file/key/bytes)."""

    source: str
    format: str
    architecture: str | None
    family: str | None
    hparams: dict[str, Sourced]
    parameters: int
    bytes: int
    dtypes: dict[str, int]
    quantization: Any = None
    tokenizer: dict[str, Any] | None = None
    chat_template: str | None = None
    chat_example: str | None = None
    adapter: dict[str, Any] | None = None
    library: dict[str, Any] | None = None
    memory: list[dict[str, Any]] = field(default_factory=list)
    present_bytes: int | None = None  # set when a file is cut short: `bytes` is what it should be

    def value(self, name: str, default: Any = None) -> Any:
        s = self.hparams.get(name)
        return default if s is None or s.value is None else s.value

    def to_dict(self) -> dict[str, Any]:
        return {"source": self.source, "format": self.format, "architecture": self.architecture,
                "family": self.family, "hparams": {k: v.to_dict() for k, v in self.hparams.items()},
                "parameters": self.parameters, "bytes": self.bytes, "dtypes": dict(self.dtypes),
                "quantization": self.quantization, "tokenizer": self.tokenizer,
                "chat_template": self.chat_template, "chat_example": self.chat_example,
                "adapter": self.adapter, "library": self.library, "memory": list(self.memory),
                "present_bytes": self.present_bytes}

    def rows(self) -> list[tuple[str, str, str]]:
        """(label, value, where it came from) for every known value, in reading order."""
        out = []
        for name, label in SHOWN:
            s = self.hparams.get(name)
            if s is not None and s.value is not None:
                out.append((label, _text(s.value), s.where()))
        return out

    def text(self) -> str:
        """The card as plain text (the CLI prints it)."""
        lines = [f"model: {self.architecture or 'unknown architecture'}"
                 + (f" ({self.family})" if self.family else ""),
                 f"parameters: {parameters_text(self.parameters)} ({self.parameters:,}); "
                 f"{_size(self.bytes)} as stored" + self._present_text()]
        if self.library:
            lines.append(f"written by {self.library['summary']}")
        if self.quantization:
            lines.append(f"quantization: {quantization_text(self.quantization) or _text(self.quantization)}")
        rows = self.rows()
        width = max((len(label) for label, _, _ in rows), default=0)
        for label, value, where in rows:
            lines.append(f"  {label:<{width}}  {value[:60]:<24} [{where}]")
        if self.tokenizer is not None:
            lines.append(f"tokenizer: {self.tokenizer.get('summary')}")
        if self.chat_template:
            lines.append(f"chat template: {len(self.chat_template):,} characters "
                         f"({self.tokenizer.get('template_from') if self.tokenizer else '?'})")
        if self.adapter:
            lines.append(f"adapter: {self.adapter.get('summary')}")
        for m in self.memory:
            lines.append(f"memory at {m['context']:>7,} tokens: {_size(m['total_bytes'])} "
                         f"(weights {_size(m['weights_bytes'])}, KV cache {_size(m['kv_bytes'])})")
        return "\n".join(lines)

    def _present_text(self) -> str:
        return present_note(self.present_bytes, self.bytes, _size)

    def _repr_html_(self) -> str:
        import html

        rows = "".join(f"<tr><td>{html.escape(a)}</td><td>{html.escape(b)}</td><td><small>"
                       f"{html.escape(c)}</small></td></tr>" for a, b, c in self.rows())
        head = html.escape(f"{self.architecture or 'unknown'} · {parameters_text(self.parameters)} "
                           f"parameters · {_size(self.bytes)}{self._present_text()}")
        return escape(f"<b>{head}</b><table>{rows}</table>")  # (the kernel sends UTF-8)


def _text(v: Any) -> str:
    """A value for people (units.plain_text): yes/no, "not set", no Python reprs."""
    if isinstance(v, dict):
        return ", ".join(f"{k}={plain_text(x, 60)}" for k, x in v.items())
    return plain_text(v)


def _size(n: int | float) -> str:
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if abs(n) < 1024 or unit == "TiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return str(n)


def card(ckpt: CheckpointRecord, memory_contexts: tuple[int, ...] | None = None) -> ModelCard:
    """The card of an open checkpoint (headers and side files only)."""
    hp: HParams = read_hparams(ckpt)
    summary = ckpt.summary()
    quant = summary.get("quantization")
    params = summary.get("parameters", ckpt.parameter_count)
    if not isinstance(params, int):
        params = ckpt.parameter_count
    present, expected = stored_bytes(ckpt)  # a file cut short: what it should hold, and what is there
    c = ModelCard(ckpt.source, ckpt.format, hp.architecture, hp.family, dict(hp.values), params,
                  expected, ckpt.dtype_mix(), quant,
                  present_bytes=present if present < expected else None)
    graph = graph_facts(ckpt) if hp.architecture is None else None
    if graph is not None:  # a graph file describes itself: no config.json needed
        c.architecture = graph.architecture
        for key, fact in graph.facts.items():
            c.hparams.setdefault(key, fact)
    from .tokenizer_info import read_tokenizer

    t, _ = read_tokenizer(ckpt)
    if t.source is not None:
        c.tokenizer = dict(t.to_dict(), summary=t.summary())
        c.chat_template, c.chat_example = t.chat_template, t.rendered
    from .adapters import read_adapter

    adapter = read_adapter(ckpt)
    if adapter is not None:
        c.adapter = adapter.to_dict()
    from .layouts import read_layout

    layout = read_layout(ckpt)
    if layout is not None:
        c.library = layout.to_dict()
    from .memory import table

    try:
        c.memory = table(ckpt, contexts=memory_contexts)
    except ValueError:
        c.memory = []
    return c
