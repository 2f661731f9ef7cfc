"""GGUF metadata set, changed or removed, and a token list longer than the embedding by trailing
padding trimmed, written by a byte-exact writer of our own.

Only the key/value section changes: every untouched key/value and every tensor info is copied
as its source bytes, tensor offsets are relative to the data section so they stay as they are,
the data section starts at the same alignment and is copied byte for byte. gguf-py reads the
output with the same tensors and the same values, except the ones asked for.
"""

from __future__ import annotations

import re
import struct
from dataclasses import dataclass, field
from typing import Any

from ..formats.gguf import GGUFArray, KeyValue
from ..ggml import SCALAR_FORMATS, Keys, ValueType
from ..records import CheckpointRecord
from .build import RepairError
from .fix import Fix, Unfixable
from .writer import Counter, read_chunks

# Tokens that pad a vocabulary to a round size: "[PAD12]", "<pad_3>", "<|reserved_special_token_4|>",
# "<unused7>", or nothing at all.
_PAD = re.compile(r"^(\[PAD\d*\]|<pad[_-]?\d*>|<\|?(reserved|unused|pad|extra)[\w-]*\|?>|<unused\d+>|)$", re.I)
_UNUSED = 5  # llama.cpp's token type for tokens no text maps to
_TOKEN_ARRAYS = (Keys.TOKENS, Keys.SCORES, Keys.TOKEN_TYPE)


@dataclass
class GGUFEdit:
    """The source GGUF and the edits to its key/values."""

    path: str
    byteorder: str
    version: int
    kvs: list[KeyValue]
    infos: list[tuple[int, int]]  # (offset, length) of each tensor info, in file order
    header_end: int
    data_start: int
    size: int
    alignment: int
    values: dict[str, tuple[int, Any, int | None]] = field(default_factory=dict)  # set: key -> (type, value, elem type)
    remove: set[str] = field(default_factory=set)
    trim: dict[str, int] = field(default_factory=dict)  # array key -> elements kept

    @property
    def verbatim(self) -> bool:
        return not (self.values or self.remove or self.trim)


def _edit(path: str, details: dict, kvs, tensors, size: int) -> GGUFEdit:
    if "header_end" not in details:
        raise RepairError(f"{path!r}: the GGUF header cannot be read to its end, so the tensor data "
                          "cannot be located; nothing to repair from.")
    kvs = sorted((v for v in kvs if isinstance(v, KeyValue)), key=lambda kv: kv.offset)
    infos = sorted(t.extra["info_span"] for t in tensors)
    return GGUFEdit(path, details.get("byteorder", "<"), details["version"], kvs, infos, details["header_end"],
                    -(-details["header_end"] // details["alignment"]) * details["alignment"], size,
                    details["alignment"])


def edit_for(ckpt: CheckpointRecord) -> GGUFEdit:
    """The edit of a one-file GGUF, or of the first split of a split model (its metadata)."""
    path = ckpt.files[0]
    if len(ckpt.files) == 1:
        return _edit(path, ckpt.details.get("files", {}).get(path, {}), ckpt.metadata.values(),
                     ckpt.tensors.values(), ckpt.sizes[path])
    return split_edits(ckpt)[0]


def split_edits(ckpt: CheckpointRecord) -> list[GGUFEdit]:
    """One edit per split, each from its own header: the checkpoint keeps one value per key
    for the model, but every split carries its own split.no and tensor infos."""
    from ..formats.gguf import read_gguf
    from ..sources import open_source

    out = []
    for path in ckpt.files:
        src = open_source(path)
        try:
            r = read_gguf(src)
        finally:
            src.close()
        out.append(_edit(path, r.details, r.metadata.values(), r.tensors.values(), r.size))
    return out


# -- encoding ---------------------------------------------------------------------------------

def _type_of(value: Any) -> int:
    """The type gguf-py's writer gives a Python value."""
    if isinstance(value, bool):
        return ValueType.BOOL
    if isinstance(value, int):
        return ValueType.INT32 if -2**31 <= value < 2**31 else ValueType.INT64
    if isinstance(value, float):
        return ValueType.FLOAT32
    if isinstance(value, str):
        return ValueType.STRING
    if isinstance(value, (list, tuple)):
        return ValueType.ARRAY
    raise RepairError(f"A GGUF value cannot be {type(value).__name__}: {value!r}.")


def typed(kv: KeyValue | None, value: Any) -> tuple[int, Any, int | None]:
    """(value type, value, element type): an existing key keeps its type where the value fits it."""
    if kv is not None and kv.type in ValueType.__members__:
        t = ValueType[kv.type]
        fits = (t == ValueType.STRING and isinstance(value, str)) or \
            (t == ValueType.BOOL and isinstance(value, bool)) or \
            (t in SCALAR_FORMATS and t != ValueType.BOOL and isinstance(value, (int, float))
             and not isinstance(value, bool) and (isinstance(value, int) or t in (ValueType.FLOAT32, ValueType.FLOAT64)))
        if fits:
            return t, value, None
    t = _type_of(value)
    if t == ValueType.ARRAY:
        elems = [_type_of(v) for v in value] or [ValueType.STRING]
        if len(set(elems)) != 1:
            raise RepairError(f"A GGUF array holds one type; {value!r} mixes them.")
        return t, list(value), elems[0]
    return t, value, None


def _string(bo: str, s: str) -> bytes:
    raw = s.encode("utf-8")
    return struct.pack(bo + "Q", len(raw)) + raw


def _scalar(bo: str, t: int, v: Any) -> bytes:
    if t == ValueType.STRING:
        return _string(bo, v)
    return struct.pack(bo + SCALAR_FORMATS[ValueType(t)], v)


def encode_kv(bo: str, key: str, t: int, value: Any, elem: int | None) -> bytes:
    out = _string(bo, key) + struct.pack(bo + "I", t)
    if t != ValueType.ARRAY:
        return out + _scalar(bo, t, value)
    out += struct.pack(bo + "IQ", elem, len(value))
    return out + b"".join(_scalar(bo, elem, v) for v in value)


def _trimmed_kv(e: GGUFEdit, kv: KeyValue, keep: int, read) -> bytes:
    """An array key/value cut to its first `keep` elements: the elements' bytes as stored."""
    arr: GGUFArray = kv.value
    if arr._string_offsets is not None:
        end = arr._string_offsets[keep] if keep < arr.count else arr.offset + arr.length
    else:
        end = arr.offset + keep * struct.calcsize(SCALAR_FORMATS[ValueType(arr.elem_type)])
    head = _string(e.byteorder, kv.key) + struct.pack(e.byteorder + "IIQ", ValueType.ARRAY, arr.elem_type, keep)
    return head + read(arr.offset, end - arr.offset)


def header_bytes(e: GGUFEdit) -> bytes:
    """Magic, version, counts, key/values (edited), tensor infos (as stored), zero padding."""
    with open(e.path, "rb") as f:
        def read(offset: int, length: int) -> bytes:
            f.seek(offset)
            return f.read(length)

        kv_parts = []
        for kv in e.kvs:
            if kv.key in e.remove:
                continue
            if kv.key in e.values:
                kv_parts.append(encode_kv(e.byteorder, kv.key, *e.values[kv.key]))
            elif kv.key in e.trim:
                kv_parts.append(_trimmed_kv(e, kv, e.trim[kv.key], read))
            else:
                kv_parts.append(read(kv.offset, kv.length))
        present = {kv.key for kv in e.kvs}
        for key, (t, value, elem) in e.values.items():
            if key not in present:
                kv_parts.append(encode_kv(e.byteorder, key, t, value, elem))
        infos = b"".join(read(o, n) for o, n in e.infos)
    head = b"GGUF" + struct.pack(e.byteorder + "IQQ", e.version, len(e.infos), len(kv_parts))
    raw = head + b"".join(kv_parts) + infos
    return raw + b"\0" * (-len(raw) % e.alignment)


def write(e: GGUFEdit, path: str, counter: Counter) -> None:
    with open(path, "wb") as out:
        if e.verbatim:
            for data in read_chunks(e.path, 0, e.size):
                out.write(data)
                counter.add(len(data), "GGUF copied as is")
            return
        out.write(header_bytes(e))
        for data in read_chunks(e.path, e.data_start, max(0, e.size - e.data_start)):
            out.write(data)
            counter.add(len(data), "tensor data")


# -- fixes ------------------------------------------------------------------------------------

def propose(ckpt: CheckpointRecord, e: GGUFEdit, gguf_set: dict | None, gguf_remove: list | None,
            trim_tokens: bool) -> tuple[list[Fix], list[Unfixable], list[str]]:
    fixes, unfixable, notes = [], [], []
    by_key = {kv.key: kv for kv in e.kvs}
    changes = {}
    for key, value in (gguf_set or {}).items():
        if key == Keys.ALIGNMENT:
            raise RepairError("general.alignment cannot be changed by a metadata repair: every tensor "
                              "offset depends on it. Re-convert the model instead.")
        kv = by_key.get(key)
        t, v, elem = typed(kv, value)
        if kv is not None and kv.type == (ValueType(t).name if t != ValueType.ARRAY else kv.type) \
                and not isinstance(kv.value, GGUFArray) and kv.value == v:
            notes.append(f"gguf_set: {key!r} is already {value!r}; skipped.")
            continue
        changes[key] = (t, v, elem)
    if changes:
        def apply_set(b, changes=changes) -> None:
            b.gguf.values.update(changes)
        fixes.append(Fix("gguf_set", "GGUF metadata set: " + ", ".join(
            f"{k} = {v[1]!r}" for k, v in changes.items()) + ".",
            changes={"keys": sorted(changes), "bytes": 0}, apply=apply_set))
    gone = []
    for key in gguf_remove or []:
        if key == Keys.ALIGNMENT:
            raise RepairError("general.alignment cannot be removed: every tensor offset depends on it.")
        if key in by_key:
            gone.append(key)
        else:
            notes.append(f"gguf_remove: the file has no key {key!r}; skipped.")
    if gone:
        def apply_remove(b, gone=gone) -> None:
            b.gguf.remove.update(gone)
        fixes.append(Fix("gguf_remove", f"GGUF metadata removed: {gone}.",
                         changes={"keys": gone, "bytes": 0}, apply=apply_remove))
    trim = token_trim(ckpt, by_key) if trim_tokens else None
    if isinstance(trim, Unfixable):
        unfixable.append(trim)
    elif trim:
        fixes.append(trim)
    return fixes, unfixable, notes


def token_trim(ckpt: CheckpointRecord, by_key: dict[str, KeyValue]) -> Fix | Unfixable | None:
    """tokenizer.ggml.tokens longer than token_embd's rows, when the extra tokens are padding."""
    tokens, embed = by_key.get(Keys.TOKENS), ckpt.tensors.get("token_embd.weight")
    if tokens is None or embed is None or not isinstance(tokens.value, GGUFArray) or len(embed.shape) != 2:
        return None
    rows, count = embed.shape[0], tokens.value.count
    if count <= rows:
        return None
    tail = tokens.value[rows:count] if count - rows <= 65536 else None
    types = by_key.get(Keys.TOKEN_TYPE)
    kinds = types.value[rows:count] if tail is not None and isinstance(getattr(types, "value", None), GGUFArray) else []
    message = f"tokenizer.ggml.tokens has {count} entries, but token_embd.weight has {rows} rows."
    padding = tail is not None and all(_PAD.match(s) or (i < len(kinds) and kinds[i] == _UNUSED)
                                       for i, s in enumerate(tail))
    if not padding:
        return Unfixable("tokens_beyond_embedding", message, "The extra tokens are not padding, so the "
                         "embedding lacks rows for real tokens: re-convert the model.")
    ids = {k: kv.value for k, kv in by_key.items()
           if k.startswith("tokenizer.ggml.") and k.endswith("_token_id") and isinstance(kv.value, int)}
    past = {k: v for k, v in ids.items() if v >= rows}
    if past:
        return Unfixable("tokens_beyond_embedding", message, f"Special token ids point into the padding "
                         f"({past}); set them with gguf_set first, then trim.")
    arrays = [k for k in _TOKEN_ARRAYS if k in by_key and isinstance(by_key[k].value, GGUFArray)
              and by_key[k].value.count == count]
    finding = next((f for f in ckpt.findings if f.code == "tokens_beyond_embedding"
                    or (f.code == "config_mismatch" and "tokens" in f.message)), None)

    def apply(b) -> None:
        for k in arrays:
            b.gguf.trim[k] = rows

    return Fix("trim_tokens", f"{message} The last {count - rows} are padding "
               f"({tail[:3]}...): {', '.join(arrays)} cut to {rows}.", [finding] if finding else [],
               {"keys": arrays, "bytes": 0}, apply,
               codes=("tokens_beyond_embedding", "config_mismatch"))


def propose_splits(ckpt: CheckpointRecord, edits: list[GGUFEdit]) -> tuple[list[Fix], list[Unfixable]]:
    """The `split.*` keys of a split model set right; what no key can fix said so."""
    fixes: list[Fix] = []
    lost: list[Unfixable] = []
    at = {e.path: i for i, e in enumerate(edits)}
    for f in ckpt.findings:
        if f.code == "missing_split":
            lost.append(Unfixable("missing_split", f.message, "A split that is not there cannot be "
                                  "rebuilt from the others: download it again."))
        elif f.code == "duplicate_tensor" and f.file in at:
            lost.append(Unfixable("duplicate_tensor", f.message, "Two splits hold one tensor: re-split "
                                  "the model with llama-gguf-split (llama.cpp refuses the copy)."))
        elif f.code == "split_number" and f.file in at:
            e = edits[at[f.file]]
            kv = next((kv for kv in e.kvs if kv.key == Keys.SPLIT_NO), None)
            want = at[f.file]
            value = typed(kv, want)

            def apply_no(b, path=e.path, value=value) -> None:
                next(x for x in [b.gguf, *b.gguf_more] if x.path == path).values[Keys.SPLIT_NO] = value

            fixes.append(Fix("split_number", f"{f.file.rsplit('/', 1)[-1]}: split.no set to {want}.", [f],
                             {"files": [f.file], "keys": [Keys.SPLIT_NO], "bytes": 0}, apply_no))
        elif f.code == "split_tensor_count":
            if any(g.code in ("duplicate_tensor", "missing_split") for g in ckpt.findings):
                continue  # the count is right about the model; the splits are what is wrong
            kv = next((kv for kv in edits[0].kvs if kv.key == Keys.SPLIT_TENSORS_COUNT), None)
            count = len(ckpt.tensors)
            value = typed(kv, count)

            def apply_count(b, value=value) -> None:
                b.gguf.values[Keys.SPLIT_TENSORS_COUNT] = value

            fixes.append(Fix("split_tensor_count", f"split.tensors.count set to {count}, the tensors the "
                             "splits hold.", [f], {"keys": [Keys.SPLIT_TENSORS_COUNT], "bytes": 0}, apply_count))
    return fixes, lost
