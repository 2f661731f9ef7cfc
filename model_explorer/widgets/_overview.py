"""The overview a file opens on: what the model is in a few rows, then its top metadata.

Until the model card lands this reads what the file itself says: GGUF `general.*` and
architecture keys, safetensors `__metadata__`, config.json beside the weights. Every row
names the key it came from, so a reader can find it in the header tree.
"""

from __future__ import annotations

from typing import Any

from ..formats.hubquant.summary import quantization_text
from ..formats.truncation import present_note, stored_bytes
from ..ggml import Keys
from ..model.graph_facts import GRAPH_FACTS, graph_facts
from ..records import CheckpointRecord, plain_value
from ..units import format_bytes, plain_text

MAX_METADATA_ROWS = 16
VALUE_CHARS = 160
# Side files kept in `metadata` that are shown through their keys, not as one blob.
_SIDE_FILES = ("config.json", "generation_config.json", "tokenizer_config.json", "tokenizer.json",
               "special_tokens_map.json")
# (label, GGUF key under the architecture, config.json keys) for the shape of the model.
_SHAPE = (
    ("layers", "block_count", ("num_hidden_layers", "n_layer", "num_layers")),
    ("hidden size", "embedding_length", ("hidden_size", "n_embd", "d_model")),
    ("context length", "context_length", ("max_position_embeddings", "n_positions", "max_seq_len")),
    ("attention heads", "attention.head_count", ("num_attention_heads", "n_head")),
    ("vocabulary", "vocab_size", ("vocab_size",)),
)


def overview(ckpt: CheckpointRecord) -> dict[str, Any]:
    """{"facts": [[label, value, key]], "metadata": [[key, value]], "metadata_total": n}."""
    rows = _metadata_rows(ckpt)
    return {"facts": _facts(ckpt), "metadata": rows[:MAX_METADATA_ROWS], "metadata_total": len(rows)}


def _facts(ckpt: CheckpointRecord) -> list[list[Any]]:
    config = ckpt.meta("config.json")
    config = config if isinstance(config, dict) else {}
    arch = ckpt.meta(Keys.ARCHITECTURE)
    facts: list[list[Any]] = []

    def add(label: str, value: Any, key: str | None = None) -> None:
        if value not in (None, "", []):
            facts.append([label, plain_text(value, VALUE_CHARS), key])

    add("format", _format_text(ckpt))
    add("name", ckpt.meta(Keys.NAME), Keys.NAME)
    if Keys.NAME not in ckpt.metadata:
        add("name", config.get("_name_or_path"), "config.json > _name_or_path")
    if arch is not None:
        add("architecture", arch, Keys.ARCHITECTURE)
    elif config:
        classes = config.get("architectures")
        value = ", ".join(map(str, classes)) if isinstance(classes, list) and classes else config.get("model_type")
        add("architecture", value, "config.json > architectures")
    elif (graph := graph_facts(ckpt)) is not None:  # a graph file describes itself
        add("architecture", graph.architecture)
        for key, label in GRAPH_FACTS:
            fact = graph.facts.get(key)
            if fact is not None:
                add(label, fact.value, f"{ckpt.format} {fact.key}")
    else:
        add("architecture", "not recorded (no config.json beside the weights)")
    n = ckpt.parameter_count  # from the columns: no tensor record is built
    add("parameters", f"{_count(n)} ({n:,})" if n else "no tensors")
    add("quantization", *_quantization(ckpt, config))
    for label, gguf_key, hf_keys in _SHAPE:
        if arch is not None and f"{arch}.{gguf_key}" in ckpt.metadata:
            add(label, ckpt.meta(f"{arch}.{gguf_key}"), f"{arch}.{gguf_key}")
            continue
        key = next((k for k in hf_keys if k in config), None)
        if key:
            add(label, config[key], f"config.json > {key}")
    return facts


def _format_text(ckpt: CheckpointRecord) -> str:
    # The version span's value reads "u32 = 3"; the reader wants the 3.
    # The first file's spans only (a lazily opened index builds no other file's for this).
    first = ckpt.spans_for(ckpt.files[0]) if ckpt.files else []
    version = next((str(s.value).rsplit("=", 1)[-1].strip() for s in first
                    if s.kind == "version" and s.value), None)
    files = len(ckpt.files)
    present, expected = stored_bytes(ckpt)  # a file cut short says what it should hold too
    note = present_note(present, expected)
    return (f"{ckpt.format.upper() if ckpt.format == 'gguf' else ckpt.format}"
            f"{f' v{version}' if version is not None else ''}, {files} file{'s' if files != 1 else ''}, "
            f"{format_bytes(expected)}{' as stored' + note if note else ''}")


def _quantization(ckpt: CheckpointRecord, config: dict) -> tuple[str, str | None]:
    """The reader's quantization summary (formats/hubquant/summary.py): scheme, bits per weight
    and the real mix, e.g. "MOSTLY_Q4_1: 5.74 bits per weight: Q4_1 79% of weights at 5, ..."."""
    q = ckpt.details.get("quantization")
    text = quantization_text(q)
    if text:
        source = (Keys.FILE_TYPE if q.get("scheme") == "gguf" else
                  "config.json > quantization_config" if isinstance(config.get("quantization_config"), dict)
                  else None)
        return text, source
    mix = ckpt.dtype_mix()
    parts = ", ".join(f"{kind} × {n}" for kind, n in list(mix.items())[:4])
    if len(mix) > 4:
        parts += f", {len(mix) - 4} more"
    return (f"none: {parts}" if parts else "none"), None


def _gguf_file_type(value: Any) -> str | None:
    """llama.cpp's name for `general.file_type` (3 -> MOSTLY_Q4_1), from gguf-py's own enum."""
    if value is None:
        return None
    try:
        import gguf

        return gguf.LlamaFileType(int(value)).name
    except (ImportError, ValueError, TypeError):
        return None


def _count(n: int) -> str:
    for size, unit in ((1e12, "T"), (1e9, "B"), (1e6, "M"), (1e3, "K")):
        if n >= size:
            return f"{n / size:.1f} {unit}"
    return str(n)


def _metadata_rows(ckpt: CheckpointRecord) -> list[list[str]]:
    """The file's own key/values first (GGUF general.* and architecture keys before the
    tokenizer's), then config.json's entries that are not objects; arrays as their length and
    first items."""
    own = [(str(k), v) for k, v in ckpt.metadata.items() if k not in _SIDE_FILES]
    own.sort(key=lambda kv: 2 if kv[0].startswith("tokenizer.") else 0 if kv[0].startswith("general.") else 1)
    rows = [[key, _value_text(plain_value(v))] for key, v in own]
    for row in rows:
        if row[0] == Keys.FILE_TYPE and _gguf_file_type(row[1]):
            row[1] = f"{row[1]} ({_gguf_file_type(row[1])})"
    config = ckpt.meta("config.json")
    if isinstance(config, dict):
        rows += [[f"config.json > {k}", _value_text(v)] for k, v in config.items()
                 if not isinstance(v, dict)]
    return rows


def _value_text(value: Any) -> str:
    """A metadata value for people: arrays as their length and first items (units.plain_text)."""
    return plain_text(value, VALUE_CHARS)
