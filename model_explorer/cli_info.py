"""What `model-explorer info` and `hexdump` print, beside gguf-dump: metadata values as JSON
(`jq '.metadata["llama.context_length"]'` works), as words in text (an array as its length and
its first TEXT_ARRAY_ITEMS items, as gguf-dump, but never as a Python list: units.plain_text), a
danger banner first on a hostile file, counted words ("1 error", "2 tensors"), and the
description of every command-line option.
"""

from __future__ import annotations

from typing import Any

from .units import format_bytes, plain_text

# Exit codes of every command: clean, errors found, unreadable (or a usage error).
EXIT_OK, EXIT_ERRORS, EXIT_UNREADABLE = 0, 1, 2

# JSON: arrays longer than this are given as their length and first elements.
JSON_ARRAY_ITEMS = 16
# Text: like gguf-dump, the first 6 items of an array; a value cut at 100 characters.
TEXT_ARRAY_ITEMS = 6
TEXT_VALUE_CHARS = 100

OPTION_HELP = {
    "source": "a checkpoint: a file, a folder of shards, an index JSON, or an http(s) URL",
    "json": "print JSON instead of text (for jq and scripts)",
    "max_tensors": "list at most this many tensors (default: 50)",
    "max_keys": "list at most this many metadata keys (default: 40)",
    "full_arrays": "with --json, give every element of long metadata arrays "
                   f"(default: the length and the first {JSON_ARRAY_ITEMS})",
    "offset": "first byte to show, decimal or 0x-hex (with --tensor: counted from the tensor's "
              "first byte; default: 0)",
    "length": "how many bytes to show, decimal or 0x-hex (default: 256)",
    "file": "which file of a multi-file checkpoint (default: the first)",
    "tensor": "start at this tensor's first byte, in the file that holds it",
    "deep": "also decode every tensor and check its values (slower)",
    "a": "the first checkpoint",
    "b": "the second checkpoint",
    "prompt": "the text to continue",
    "max_new_tokens": "how many tokens to generate (default: 32)",
    "device": "where to run: auto, cpu, cuda or mps (default: auto)",
    "chat": "wrap the prompt in the model's chat template",
    "temperature": "sampling temperature; 0 picks the most likely token (default: 0)",
    "seed": "random seed for sampling (default: 0)",
    "strict": "also exit 1 on warnings",
}


def plural(n: int, word: str) -> str:
    """'1 error', '2 errors', '1,024 tensors'."""
    return f"{n:,} {word}{'' if n == 1 else 's'}"


def _items(value: Any, n: int) -> list:
    return [value[i] for i in range(min(n, len(value)))]


def _is_array(value: Any) -> bool:
    return (hasattr(value, "__len__") and hasattr(value, "__getitem__")
            and not isinstance(value, (str, bytes, dict)))


def json_value(value: Any, full: bool = False) -> Any:
    """A metadata value as plain JSON: scalars as they are, long arrays as
    {"type", "length", "first"} unless `full`."""
    value = getattr(value, "value", value)  # a GGUF key/value
    if _is_array(value) and not isinstance(value, (list, tuple)):  # a GGUFArray or numpy array
        n = len(value)
        if full or n <= JSON_ARRAY_ITEMS:
            return [json_value(v, full) for v in (value.to_list() if hasattr(value, "to_list") else list(value))]
        return {"type": getattr(value, "type_name", type(value).__name__), "length": n,
                "first": [json_value(v) for v in _items(value, JSON_ARRAY_ITEMS)]}
    if isinstance(value, (list, tuple)):
        if full or len(value) <= JSON_ARRAY_ITEMS:
            return [json_value(v, full) for v in value]
        return {"type": "list", "length": len(value), "first": [json_value(v) for v in value[:JSON_ARRAY_ITEMS]]}
    if isinstance(value, bytes):
        return value.hex()
    if hasattr(value, "item") and callable(value.item):  # a numpy scalar
        return value.item()
    return value


def metadata_json(metadata: dict, full: bool = False) -> dict[str, Any]:
    return {str(k): json_value(v, full) for k, v in metadata.items()}


def value_text(value: Any) -> str:
    """One metadata value for the terminal: words, an array as its length and first items."""
    return plain_text(value, TEXT_VALUE_CHARS, TEXT_ARRAY_ITEMS)


def banner(ckpt) -> list[str]:
    """The lines printed before anything else: a danger banner for a file that would run code
    when loaded, an error line for a file with errors, nothing for a clean one."""
    errors = ckpt.errors
    hub = ckpt.details.get("hub")
    if hub:  # read from the Hub: what it took
        return _errors_banner(ckpt, errors) + [
            f"hub: {hub['requests']} requests, {format_bytes(hub['bytes'])} read of "
            f"{format_bytes(hub['repo_bytes'])} in {hub['seconds']:.2f} s ({hub['repo']}@{hub['revision']})"]
    return _errors_banner(ckpt, errors)


def _errors_banner(ckpt, errors) -> list[str]:
    if not errors:
        return []
    dangerous = [f for f in errors if f.code == "dangerous_import"]
    verdict = (ckpt.details.get("pickle") or {}).get("verdict")
    if dangerous or verdict == "dangerous":
        first = dangerous[0] if dangerous else errors[0]
        what = first.extra.get("callable") or first.code
        at = f" at byte {first.offset}" if first.offset is not None else ""
        return ["!" * 78,
                f"!! DANGER: loading this file runs code: {what}{at}.",
                "!! Never open it with pickle.load or torch.load(weights_only=False); this "
                "tool only reads it.",
                f"!! {plural(len(errors), 'error')}: model-explorer doctor lists them.",
                "!" * 78]
    first = errors[0]
    at = f" at byte {first.offset}" if first.offset is not None else ""
    return [f"ERRORS: {plural(len(errors), 'error')} (first: {first.code}{at}); "
            "model-explorer doctor lists them."]


def tensor_start(ckpt, name: str) -> tuple[str, int, int]:
    """(file, first byte, length) of a tensor; KeyError with the nearest names when absent."""
    t = ckpt.tensors.get(name)
    gone = next((m for m in ckpt.index_mismatches if m.name == name and m.kind == "missing"), None)
    if t is None and gone is not None:
        raise KeyError(f"{name!r} is listed in the index but has no bytes ({gone.note})")
    if t is None:
        import difflib

        near = difflib.get_close_matches(name, list(ckpt.tensors), n=3)
        hint = f"; did you mean {', '.join(map(repr, near))}?" if near else ""
        raise KeyError(f"no tensor named {name!r}{hint}")
    return t.file, t.offset, t.length
