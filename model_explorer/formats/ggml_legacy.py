"""The files llama.cpp wrote before GGUF (August 2023): GGML ('lmgg', unversioned), GGMF v1
('fmgg') and GGJT v1-3 ('tjgg'), as llama.cpp's convert_llama_ggml_to_gguf.py reads them.

    u32 magic, u32 version (not in 'lmgg')
    7 x u32 hyperparameters: n_vocab n_embd n_mult n_head n_layer n_rot ftype
    n_vocab x (u32 length, bytes, f32 score (not in 'lmgg'))
    tensors to the end of the file: u32 n_dims, u32 name length, u32 ggml type,
        u32 ne[n_dims] (innermost first), name, GGJT only: zero padding to a multiple of 32
        from the start of the file, then the data

Q4_0, Q4_1 and Q8_0 blocks held a float32 scale before GGJT v3 (and their nibbles in another
order before v2): those tensors are listed with their legacy sizes and not decoded; every other
ggml type is decoded by the GGUF codecs (tensors/dequant.py).
"""

from __future__ import annotations

import math

from ..codes import CATALOG
from ..ggml import QUANT_SIZES, GGMLType, type_name
from ..records import TensorInfo
from ..spans import Report, short_repr
from .cursor import Cursor, PastEnd, past_end_message
from .result import FileResult

VARIANTS = {b"lmgg": "GGML", b"fmgg": "GGMF", b"tjgg": "GGJT"}
VERSIONS = {"GGML": (1,), "GGMF": (1,), "GGJT": (1, 2, 3)}
ALIGNMENT = 32  # GGJT tensor data, from the start of the file
HPARAMS = ("n_vocab", "n_embd", "n_mult", "n_head", "n_layer", "n_rot", "ftype")
FTYPES = {0: "ALL_F32", 1: "MOSTLY_F16", 2: "MOSTLY_Q4_0", 3: "MOSTLY_Q4_1", 4: "MOSTLY_Q4_1_SOME_F16",
          5: "MOSTLY_Q4_2", 6: "MOSTLY_Q4_3", 7: "MOSTLY_Q8_0", 8: "MOSTLY_Q5_0", 9: "MOSTLY_Q5_1",
          10: "MOSTLY_Q2_K", 11: "MOSTLY_Q3_K_S", 12: "MOSTLY_Q3_K_M", 13: "MOSTLY_Q3_K_L",
          14: "MOSTLY_Q4_K_S", 15: "MOSTLY_Q4_K_M", 16: "MOSTLY_Q5_K_S", 17: "MOSTLY_Q5_K_M",
          18: "MOSTLY_Q6_K"}
# Block layouts before GGJT v3 (float32 scales), and the two 16-element types of April 2023.
OLD_SIZES = {GGMLType.Q4_0: (32, 4 + 16), GGMLType.Q4_1: (32, 4 + 4 + 16), GGMLType.Q8_0: (32, 4 + 32),
             4: (16, 2 + 8), 5: (16, 2 + 2 + 8)}
OLD_NAMES = {4: "Q4_2", 5: "Q4_3"}
MAX_DIMS = 4
MAX_TOKEN = 4096  # the converter's own limits: longer is not a vocabulary or a name
MAX_NAME = 4096
LABELLED_TOKENS = 4096  # tokens with a span of their own; the vocabulary has one span in all
CONVERTER = "convert_llama_ggml_to_gguf.py"


def read_ggml_legacy(source) -> FileResult:
    rep = Report(source.name)
    result = FileResult(source.name, source.size, rep)
    cur = Cursor(source)
    try:
        _read(cur, rep, result)
    except PastEnd as e:
        code, message, at, length = past_end_message(e, source.size)
        rep.error(code, message, at, length)
    rep.spans.sort(key=lambda s: (s.offset, -s.length))
    return result


def _read(cur: Cursor, rep: Report, result: FileResult) -> None:
    magic = cur.bytes(4, "magic")
    variant = VARIANTS.get(magic)
    if variant is None:
        rep.error("bad_magic", f"A legacy GGML file starts with 'lmgg', 'fmgg' or 'tjgg'; found {magic!r}.", 0, 4)
        return
    rep.span(0, 4, "magic", "magic", f"{magic.decode()} ({variant})")
    version = 1
    if variant != "GGML":
        version = cur.unpack("I", "version")
        rep.span(4, 4, "version", "version", f"u32 = {version}")
    result.details.update(variant=variant, version=version)
    result.metadata["ggml.format"] = f"{variant}v{version}"
    if version not in VERSIONS[variant]:
        rep.error("ggml_legacy_version", f"{variant} version {version} was never written by llama.cpp "
                  f"(it wrote {', '.join(map(str, VERSIONS[variant]))}); the rest is not read.", 4, 4)
        return
    hp_at = cur.pos
    hp = dict(zip(HPARAMS, cur.unpack("7I", "hyperparameters"), strict=True))
    for k, name in enumerate(HPARAMS):
        shown = f"u32 = {hp[name]}" + (f" ({FTYPES.get(hp[name], 'unknown')})" if name == "ftype" else "")
        rep.span(hp_at + 4 * k, 4, "value", f"hparams > {name}", shown)
        result.metadata[f"ggml.{name}"] = hp[name]
    rep.span(hp_at, 28, "kv", "hparams")
    _legacy_finding(rep, variant, version, hp["ftype"], hp_at + 24, cur.size)
    _read_vocab(cur, rep, result, hp["n_vocab"], scores=variant != "GGML")
    n = 0
    while cur.pos < cur.size:
        if not _read_tensor(cur, rep, result, n, variant, version):
            break
        n += 1
    result.details["tensor_count"] = n


def _legacy_finding(rep: Report, variant: str, version: int, ftype: int, at: int, size: int) -> None:
    """The file works only with llama.cpp from before August 2023: name the converter, or say
    why it refuses this file (quantizations whose layout changed); the catalog's fix goes with it."""
    f = _legacy_message(rep, variant, version, ftype, at, size)
    f.fix = CATALOG[f.code].fix


def _legacy_message(rep: Report, variant: str, version: int, ftype: int, at: int, size: int):
    fname = FTYPES.get(ftype, f"ftype {ftype}")
    if (variant != "GGJT" or version < 2) and ftype not in (0, 1):
        return rep.warning("ggml_legacy_requantize", f"This is a {variant}v{version} file of type "
                           f"{fname}. Quantizations changed in GGJT v2, so llama.cpp's {CONVERTER} "
                           "refuses it: only its unquantized tensors can be read.", at, 4)
    if variant == "GGJT" and version == 2 and ftype in (2, 3, 4, 7):
        return rep.warning("ggml_legacy_requantize", f"This is a GGJTv2 file of type {fname}. Q4 and "
                           f"Q8 blocks changed in GGJT v3, so llama.cpp's {CONVERTER} refuses it.", at, 4)
    return rep.warning("ggml_legacy", f"This is a {variant}v{version} file, the format llama.cpp used "
                       "before GGUF: current llama.cpp and other GGUF readers do not load it.", 0,
                       min(8, size))


def _read_vocab(cur: Cursor, rep: Report, result: FileResult, n_vocab: int, scores: bool) -> None:
    start = cur.pos
    least = 4 + 4 * scores
    if n_vocab * least > cur.left:
        rep.error("ggml_legacy_vocab_past_end", f"n_vocab says {n_vocab} tokens, which need at least "
                  f"{n_vocab * least} bytes, but only {cur.left} remain.", start - 28, 4)
        raise PastEnd(start, n_vocab * least, "vocabulary")
    for i in range(n_vocab):
        at = cur.pos
        n = cur.unpack("I", f"length of token {i}")
        if n >= MAX_TOKEN:
            rep.error("ggml_legacy_bad_token", f"Token {i} says it is {n} bytes long; llama.cpp's "
                      f"converter refuses tokens of {MAX_TOKEN} bytes or more.", at, 4)
        text = cur.bytes(n, f"token {i}", length_at=at)
        score = cur.unpack("f", f"score of token {i}") if scores else None
        if i < LABELLED_TOKENS:
            rep.span(at, cur.pos - at, "key", f"vocab > token {i}", short_repr(text.decode("utf-8", "replace"))
                     + ("" if score is None else f", score {score:g}"))
    rep.span(start, cur.pos - start, "array", "vocab", f"{n_vocab} tokens")
    result.details["vocab"] = {"offset": start, "length": cur.pos - start, "count": n_vocab}
    result.metadata["ggml.vocab_tokens"] = n_vocab


def _sizes(gtype: int, variant: str, version: int) -> tuple[str, tuple[int, int] | None]:
    """(dtype name, (block elements, block bytes)); a legacy block layout gets a name of its own
    (Q4_0_GGJTv2), which no codec takes: listed, never decoded as today's blocks."""
    old = variant != "GGJT" or version < 3
    if old and gtype in OLD_SIZES:
        name = OLD_NAMES.get(gtype) or GGMLType(gtype).name
        return f"{name}_{variant}v{version}", OLD_SIZES[gtype]
    return type_name(gtype), QUANT_SIZES.get(gtype)


def _read_tensor(cur: Cursor, rep: Report, result: FileResult, i: int, variant: str, version: int) -> bool:
    """One tensor entry and its data; False when the walk cannot go on."""
    start = cur.pos
    n_dims, name_len, gtype = cur.unpack("3I", f"header of tensor {i}")
    rep.span(start, 4, "count", f"tensor {i} > n_dims", f"u32 = {n_dims}")
    rep.span(start + 4, 4, "size", f"tensor {i} > name length", f"u32 = {name_len}")
    dtype, sizes = _sizes(gtype, variant, version)
    rep.span(start + 8, 4, "type", f"tensor {i} > type", f"u32 = {gtype} ({dtype})")
    if n_dims > MAX_DIMS:
        rep.error("too_many_dims", f"Tensor {i} has {n_dims} dimensions; ggml allows at most "
                  f"{MAX_DIMS}. The tensors after it cannot be located.", start, 4)
        return False
    if name_len >= MAX_NAME:
        rep.error("string_past_end" if name_len > cur.left else "ggml_legacy_bad_name",
                  f"Tensor {i} says its name is {name_len} bytes long; llama.cpp's converter "
                  f"refuses names of {MAX_NAME} bytes or more. The rest is not read.", start + 4, 4)
        return False
    dims_at = cur.pos
    ne = cur.unpack(f"{n_dims}I", f"dimensions of tensor {i}") if n_dims else ()
    ne = (ne,) if isinstance(ne, int) else tuple(ne)
    name_at = cur.pos
    name = cur.bytes(name_len, f"name of tensor {i}", length_at=start + 4).decode("utf-8", "replace")
    rep.span(dims_at, 4 * n_dims, "shape", f"tensor {i} > {name} > ne", f"{n_dims} dims: {list(ne)}", tensor=name)
    rep.span(name_at, name_len, "key", f"tensor {i} > {name} > name", short_repr(name), tensor=name)
    if sizes is None:
        rep.error("unknown_tensor_type", f"Tensor {name!r} has ggml type {gtype}, which this reader "
                  "does not know: its size, and so where the next tensor starts, cannot be "
                  "computed. The rest is not read.", start + 8, 4, name)
        return False
    if variant == "GGJT":
        pad = -cur.pos % ALIGNMENT
        if pad:
            pad_at = cur.pos
            cur.skip(pad, f"padding of {name!r}")
            rep.span(pad_at, pad, "padding", f"tensor {i} > {name} > padding", f"{pad} bytes to a multiple of 32")
    block, block_bytes = sizes
    numel = math.prod(ne) if ne else 1
    if ne and ne[0] % block:
        rep.error("bad_block_shape", f"Tensor {name!r} is {dtype} with rows of {ne[0]} elements, not "
                  f"a multiple of its {block}-element block.", start, cur.pos - start, name)
    length = numel * block_bytes // block
    data_at = cur.pos
    rep.span(start, data_at - start, "tensor_info", f"tensor {i} > {name}", tensor=name)
    info = TensorInfo(name, dtype, tuple(reversed(ne)), result.file, data_at, length)
    info.extra.update(ggml_dims=ne, info_span=(start, data_at - start))
    if name in result.tensors:
        rep.error("duplicate_tensor", f"Two tensors are named {name!r}; the second one hides the first.",
                  start, data_at - start, name)
    result.tensors[name] = info
    if length > cur.left:
        rep.error("data_past_end", f"Tensor {name!r} needs bytes {data_at} to {data_at + length}, past "
                  f"the end of the file ({cur.size} bytes): the file is truncated.", data_at,
                  cur.left, name)
        if cur.left:
            rep.span(data_at, cur.left, "tensor_data", f"data > {name}", f"{dtype} {list(info.shape)}", tensor=name)
        return False
    cur.skip(length, f"data of {name!r}")
    rep.span(data_at, length, "tensor_data", f"data > {name}", f"{dtype} {list(info.shape)}", tensor=name)
    return True
