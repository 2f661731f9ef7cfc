"""Format detection from the first bytes, never from the file name.

`detect(head, size)` names the kind a reader takes; `identify(read, size)` says what any file is
(a weight format this version reads or does not read yet, a side file such as JSON, text or an
image, or something else), reading a few KiB: the head, and for a zip its central directory.
Every magic number of the project lives here.
"""

from __future__ import annotations

import re
import struct
import zlib
from collections.abc import Callable
from typing import NamedTuple

from .detect_pickle import pickle_prefix

# The legacy (pre-1.6) torch.save format starts with a pickle of this number: LONG1 with 10
# bytes after PROTO (and, from protocol 4, a FRAME), or a text LONG in protocols 0 and 1.
TORCH_LEGACY_MAGIC = 0x1950A86A20F9469CFC6C
_LEGACY_LONG1 = b"\x8a\x0a" + TORCH_LEGACY_MAGIC.to_bytes(10, "little")
_LEGACY_TEXT = b"L%dL\n" % TORCH_LEGACY_MAGIC
_FRAME = 0x95

EXTENSIONS = {
    "safetensors": (".safetensors",),
    "gguf": (".gguf",),
    "zip": (".bin", ".pt", ".pth", ".ckpt", ".zip", ".jit", ".ptl", ".torchscript", ".jpt", ".ts",
            ".pth.tar"),
    "torch_legacy": (".bin", ".pt", ".pth", ".ckpt", ".pth.tar"),
    "pickle": (".pkl", ".pickle", ".bin", ".pt", ".pth", ".ckpt", ".p"),
    "npy": (".npy",),
    "npz": (".npz",),
    "torch_tar": (".bin", ".pt", ".pth", ".ckpt", ".tar"),
    "hdf5": (".h5", ".hdf5"),
    "keras": (".keras",),
    "flax_msgpack": (".msgpack",),
    "onnx": (".onnx",),
    "ggml": (".bin", ".ggml", ".ggmf", ".ggjt"),
    "tflite": (".tflite", ".lite"),
    "openvino": (".xml",),
    "ctranslate2": (".bin",),
    "archive": (".whl", ".zip", ".nemo", ".mar", ".tar", ".riva", ".egg"),
}
NPY_MAGIC = b"\x93NUMPY"
TORCH_TAR_MEMBERS = ("sys_info", "storages", "tensors", "pickle")
TAR_HEADERS = 64  # member headers a tar's identification walks
HEAD_BYTES = 4096  # what `identify` reads from the start of a file
ZIP_TAIL = 22 + 65535  # the end-of-central-directory record and the longest comment
ZIP_DIRECTORY_BYTES = 64 * 1024  # of the central directory, enough for the names that matter
ZIP_MEMBERS_SNIFFED = 64  # entries of a plain zip whose first bytes are read to find pickles

# Legacy GGML-family files (before GGUF): a u32 magic, little-endian.
GGML_MAGICS = {b"lmgg": "ggml", b"fmgg": "ggmf", b"tjgg": "ggjt", b"algg": "ggla"}
TFLITE_IDENTIFIER = b"TFL3"  # the flatbuffer file identifier, after the u32 root offset
CT2_MAX_VERSION = 6  # CTranslate2's CURRENT_BINARY_VERSION
_CT2_SPEC = re.compile(rb"[A-Za-z_][A-Za-z0-9_]{0,127}")
HDF5_MAGIC = b"\x89HDF\r\n\x1a\n"
HDF5_OFFSETS = (0, 512, 1024, 2048)  # a user block moves the signature to a power of two
IMAGE_MAGICS = ((b"\x89PNG\r\n\x1a\n", "PNG"), (b"\xff\xd8\xff", "JPEG"), (b"GIF87a", "GIF"),
                (b"GIF89a", "GIF"))
COMPRESSED_MAGICS = ((b"\x1f\x8b", "gzip"), (b"\x28\xb5\x2f\xfd", "zstd"), (b"BZh", "bzip2"),
                     (b"\xfd7zXZ\x00", "xz"), (b"7z\xbc\xaf\x27\x1c", "7z"))


def detect(head: bytes, size: int) -> str:
    """One of "safetensors", "gguf", "zip", "npz", "npy", "torch_tar", "torch_legacy",
    "pickle", "onnx", "ggml", "tflite", "openvino", "ctranslate2", "hdf5", "flax_msgpack",
    "unknown": every kind a reader takes that its first bytes name. `head` is the first 64 bytes,
    or 512 to recognise a tar or an OpenVINO XML. A Keras archive is a zip ("zip": its central
    directory says so, `identify`), and an HDF5 file behind a user block of 512 bytes or more
    starts past `head` ("unknown": `identify` reads further)."""
    if head[:4] == b"GGUF":
        return "gguf"
    other = _detect_other(head)
    if other:
        return other
    if head[:4] in (b"PK\x03\x04", b"PK\x05\x06"):
        return "npz" if _first_zip_name(head).endswith(b".npy") else "zip"
    if head[:6] == NPY_MAGIC:
        return "npy"
    if len(head) >= 262 and head[257:262] == b"ustar":
        return "torch_tar"
    if _is_torch_legacy(head):
        return "torch_legacy"
    if len(head) >= 9 and head[8:].lstrip(b" \t\n\r")[:1] == b"{":
        # A u64 length, then a JSON object (JSON allows whitespace before it).
        (n,) = struct.unpack_from("<Q", head, 0)
        if n >= 2 or size <= 10:
            return "safetensors"
    if len(head) >= 2 and head[0] == 0x80 and 2 <= head[1] <= 5:
        return "pickle"
    if _is_onnx(head):
        return "onnx"
    if pickle_prefix(head, size).is_pickle:
        return "pickle"
    # last, as identify asked them before: an HDF5 signature behind a user block could sit
    # inside another container's bytes (a Keras zip stores its .weights.h5 uncompressed)
    if any(head[o:o + 8] == HDF5_MAGIC for o in HDF5_OFFSETS):
        return "hdf5"
    if _is_flax_msgpack(head):
        return "flax_msgpack"
    return "unknown"


def _detect_other(head: bytes) -> str:
    """Legacy GGML, TFLite, OpenVINO IR XML, CTranslate2 model.bin (formats/ggml_legacy.py,
    tflite/, openvino/, ctranslate2.py)."""
    if head[:4] in GGML_MAGICS and head[:4] != b"algg":  # 'ggla' is a LoRA adapter, not read
        return "ggml"
    if head[4:8] == TFLITE_IDENTIFIER:
        return "tflite"
    if head.lstrip(b"\xef\xbb\xbf \t\r\n")[:1] == b"<" and b"<net " in head:
        return "openvino"
    if _is_ctranslate2(head):
        return "ctranslate2"
    return ""


def _is_ctranslate2(head: bytes) -> bool:
    """A binary version from 2 (newer ones too, which the reader then calls unsupported), then a
    NUL-terminated spec name such as 'TransformerSpec' (version 1 files have no spec name and
    are too featureless to claim)."""
    if len(head) < 8 or not 2 <= int.from_bytes(head[:4], "little") <= CT2_MAX_VERSION + 16:
        return False
    n = int.from_bytes(head[4:6], "little")
    name = head[6:6 + n]
    return 2 <= n <= 128 and len(name) == n and name[-1:] == b"\0" and \
        _CT2_SPEC.fullmatch(name[:-1]) is not None


def _first_zip_name(head: bytes) -> bytes:
    """The first entry's name as far as `head` holds it (np.savez: 'arr_0.npy')."""
    if len(head) < 30 or head[:4] != b"PK\x03\x04":
        return b""
    (n,) = struct.unpack_from("<H", head, 26)
    return head[30:30 + n] if 30 + n <= len(head) else b""


def _is_torch_legacy(head: bytes) -> bool:
    if head.startswith(_LEGACY_TEXT):
        return True
    if len(head) < 2 or head[0] != 0x80:
        return False
    body = head[2:]
    if body[:1] == bytes([_FRAME]):
        body = body[9:]
    return body.startswith(_LEGACY_LONG1)


def extension_matches(kind: str, name: str) -> bool:
    lower = name.lower()
    return any(lower.endswith(ext) for ext in EXTENSIONS.get(kind, ()))


# -- what any file is: identify ------------------------------------------------------------------

WEIGHTS, SIDE, OTHER = "weights", "side", "other"


class Identified(NamedTuple):
    """What a file's bytes are. `role`: WEIGHTS (a weight format), SIDE (a file that goes with a
    model: JSON, text, an image, a tokenizer model) or OTHER. `reads_as`: the `detect` kind a
    reader takes, "" when no reader of this version takes it. `label`: words for people."""

    kind: str
    label: str
    role: str
    reads_as: str = ""


LABELS = {
    "safetensors": "safetensors", "gguf": "GGUF", "zip": "PyTorch zip checkpoint",
    "torchscript": "TorchScript archive", "npz": "NumPy .npz", "npy": "NumPy .npy",
    "torch_tar": "PyTorch legacy tar", "torch_legacy": "PyTorch legacy checkpoint",
    "pickle": "pickle", "onnx": "ONNX", "hdf5": "HDF5 (Keras/TensorFlow)", "keras": "Keras archive",
    "tflite": "TFLite", "ctranslate2": "CTranslate2 model", "executorch": "ExecuTorch program", "ggml": "legacy GGML",
    "flax_msgpack": "Flax msgpack", "openvino": "OpenVINO IR", "pt2": "PyTorch export archive",
    "json": "JSON", "text": "text", "image": "image", "sentencepiece": "SentencePiece model",
    "zip_archive": "zip archive", "tar_archive": "tar archive", "compressed": "compressed file",
    "model_archive": "archive holding models",
    "empty": "empty file", "unknown": "unrecognised bytes",
}
_JSON_START = re.compile(r'\ufeff?\s*(\{\s*["}]|\[\s*["{\[\]\d\-tfn])')
TEXT_LABELS = {".py": "Python code", ".md": "Markdown", ".txt": "text", ".yaml": "YAML",
               ".yml": "YAML", ".xml": "XML", ".html": "HTML", ".csv": "CSV", ".svg": "SVG image"}


def _it(kind: str, role: str, reads_as: str = "", label: str | None = None) -> Identified:
    return Identified(kind, label or LABELS[kind], role, reads_as)


def identify(read: Callable[[int, int], bytes], size: int, name: str = "") -> Identified:
    """What the file of `size` bytes is, from `read(offset, length)`: at most HEAD_BYTES from its
    start and, for a zip, its end record and up to 64 KiB of its central directory. `name` only
    chooses words for a text file's label; the kind comes from the bytes."""
    if size <= 0:
        return _it("empty", OTHER)
    head = bytes(read(0, min(size, HEAD_BYTES)))
    kind = detect(head, size)
    if kind == "zip":
        return _zip_kind(read, size)
    if kind == "torch_tar":
        return _tar_kind(read, size)
    if kind == "safetensors" and not _plausible_safetensors(head, size):
        kind = "unknown"
    if kind != "unknown":
        return _it(kind, WEIGHTS, kind)
    return _other_kind(head, name)


def _plausible_safetensors(head: bytes, size: int) -> bool:
    """A JSON text can pass detect's test (a '{' at byte 8); its first 8 bytes, read as the
    header length, then make a number no file reaches."""
    (n,) = struct.unpack_from("<Q", head, 0)
    return n < max(size, 1) * 16 and n < 2**40


def _tar_kind(read: Callable[[int, int], bytes], size: int) -> Identified:
    """torch's oldest format is a tar holding these members (pytorch/tar.py's MEMBERS); torch.load
    finds them by name wherever they are, so the member headers are walked (up to TAR_HEADERS of
    them, 512 bytes each): a tar without any is an archive of something else; one with more
    members than that goes to the reader, which lists them all. A tar whose regular members
    include a pickle (the first bytes of each read) goes to the reader too, which judges it."""
    offset = 0
    pickles = False
    for _ in range(TAR_HEADERS):
        header = bytes(read(offset, 512)) if offset + 512 <= size else b""
        if len(header) < 512 or not header.strip(b"\0"):
            break  # the end of the archive
        name = header[:100].split(b"\0", 1)[0].decode("latin-1").removeprefix("./")
        if name in TORCH_TAR_MEMBERS:
            return _it("torch_tar", WEIGHTS, "torch_tar")
        try:
            length = int(header[124:136].split(b"\0", 1)[0].strip() or b"0", 8)
        except ValueError:
            return _it("torch_tar", WEIGHTS, "torch_tar")  # a malformed header: the reader says what
        if header[156:157] in (b"0", b"\0", b"7") and length > 0:
            head = bytes(read(offset + 512, min(length, 512, max(0, size - offset - 512))))
            if member_model_kind(head, name, length):  # a .nemo: model_weights.ckpt beside its config
                return _it("model_archive", WEIGHTS, "archive")
            pickles = pickles or pickle_prefix(head, length).is_pickle  # pickle.load runs it whatever its name
        offset += 512 + -(-length // 512) * 512
    else:
        return _it("torch_tar", WEIGHTS, "torch_tar")  # more members than walked: the reader lists them
    if pickles:
        return _it("torch_tar", WEIGHTS, "torch_tar", label="tar archive holding pickles")
    return _it("tar_archive", OTHER)


# Names an archive member holding a model may have when its bytes are a zip or a tar (a zip or
# tar of anything else is no model: a wheel may hold jars and zips of data).
ARCHIVE_MODEL_NAMES = (".pt", ".pth", ".bin", ".ckpt", ".pth.tar", ".jit", ".ptl", ".torchscript",
                       ".keras", ".nemo", ".mar", ".riva")
# What a member's bytes may be for the member to count as a model (npy/npz are data, and a plain
# pickle is judged wherever it is, but it is no model of its own).
MEMBER_MODEL_KINDS = ("safetensors", "gguf", "zip", "torch_legacy", "torch_tar", "onnx", "ggml",
                      "tflite", "openvino", "ctranslate2", "hdf5")


def member_model_kind(head: bytes, name: str, size: int) -> str:
    """The `detect` kind of an archive member that holds a model, from its first bytes (512 at
    least) and, for a zip or tar inside the archive, its name; "" for any other member."""
    if not head or name.endswith("/"):
        return ""
    kind = detect(head, size)
    if kind == "unknown" and any(head[o:o + 8] == HDF5_MAGIC for o in HDF5_OFFSETS):
        kind = "hdf5"
    if kind == "openvino" and not name.lower().endswith(".xml"):
        return ""
    if kind in ("zip", "torch_tar") and not name.lower().endswith(ARCHIVE_MODEL_NAMES):
        return ""
    return kind if kind in MEMBER_MODEL_KINDS else ""


def zip_names(read: Callable[[int, int], bytes], size: int) -> list[str] | None:
    """Entry names from the zip's central directory (its first 64 KiB), or None when the end
    record cannot be found (a zip cut short): two bounded reads (three with a long comment)."""
    members = zip_members(read, size)
    return None if members is None else [m[0] for m in members]


def zip_members(read: Callable[[int, int], bytes], size: int) -> list[tuple[str, int, int, int]] | None:
    """(name, method, compressed size, local header offset) of each entry in the central
    directory's first 64 KiB, or None when the end record cannot be found."""
    for want in (1024, ZIP_TAIL):  # the end record is 22 bytes from the end, unless a comment follows
        start = max(0, size - want)
        tail = bytes(read(start, size - start))
        at = tail.rfind(b"PK\x05\x06")
        if at >= 0 and at + 22 <= len(tail):
            break
    else:
        return None
    _, _, _, _, cd_size, cd_offset, _ = struct.unpack_from("<HHHHIIH", tail, at + 4)
    if (cd_size == 0xFFFFFFFF or cd_offset == 0xFFFFFFFF) and at >= 20 and tail[at - 20:at - 16] == b"PK\x06\x07":
        (eocd64,) = struct.unpack_from("<Q", tail, at - 20 + 8)
        rec = bytes(read(eocd64, 56)) if eocd64 + 56 <= size else b""
        if rec[:4] != b"PK\x06\x06":
            return None
        cd_size, cd_offset = struct.unpack_from("<QQ", rec, 40)
    if cd_offset >= size:
        return None
    directory = bytes(read(cd_offset, min(cd_size, ZIP_DIRECTORY_BYTES, size - cd_offset)))
    out, pos = [], 0
    while pos + 46 <= len(directory) and directory[pos:pos + 4] == b"PK\x01\x02":
        (method,) = struct.unpack_from("<H", directory, pos + 10)
        (compressed,) = struct.unpack_from("<I", directory, pos + 20)
        n, extra, comment = struct.unpack_from("<HHH", directory, pos + 28)
        (local,) = struct.unpack_from("<I", directory, pos + 42)
        if pos + 46 + n > len(directory):
            break
        out.append((directory[pos + 46:pos + 46 + n].decode("utf-8", "replace"), method,
                    compressed, local))
        pos += 46 + n + extra + comment
    return out


def zip_member_head(read: Callable[[int, int], bytes], size: int, method: int, compressed: int,
                    local: int, n: int = 512) -> bytes:
    """The first `n` bytes of a stored or deflated zip entry (b"" for other methods or a
    header that does not hold)."""
    header = bytes(read(local, 30)) if local + 30 <= size else b""
    if header[:4] != b"PK\x03\x04":
        return b""
    name_len, extra_len = struct.unpack_from("<HH", header, 26)
    start = local + 30 + name_len + extra_len
    if method == 0:
        return bytes(read(start, max(0, min(n, compressed, size - start))))
    if method != 8:
        return b""
    raw = bytes(read(start, max(0, min(8 * n, compressed, size - start))))
    try:
        return zlib.decompressobj(-15).decompress(raw, n)
    except zlib.error:
        return b""


def zip_pickle_members(read: Callable[[int, int], bytes], size: int,
                       members: list[tuple[str, int, int, int]]) -> list[str]:
    """The names of the first ZIP_MEMBERS_SNIFFED entries whose bytes are a pickle."""
    out = []
    for name, method, compressed, local in members[:ZIP_MEMBERS_SNIFFED]:
        if name.endswith("/"):
            continue
        head = zip_member_head(read, size, method, compressed, local)
        if head and pickle_prefix(head, max(len(head) + 1, compressed)).is_pickle:
            out.append(name)
    return out


def zip_model_members(read: Callable[[int, int], bytes], size: int,
                      members: list[tuple[str, int, int, int]]) -> list[str]:
    """The names of the members that hold a model (`member_model_kind`), among the first
    ZIP_MEMBERS_SNIFFED whose names a model file has, then the first others."""
    named = [m for m in members if m[0].lower().endswith(ARCHIVE_MODEL_NAMES + _MODEL_NAMES)]
    rest = [m for m in members if m not in named]
    out = []
    for name, method, compressed, local in (named + rest)[:ZIP_MEMBERS_SNIFFED]:
        head = zip_member_head(read, size, method, compressed, local)
        if member_model_kind(head, name, max(len(head) + 1, compressed)):
            out.append(name)
    return out


_MODEL_NAMES = (".safetensors", ".gguf", ".onnx", ".tflite", ".h5", ".hdf5", ".xml", ".ggml")


def _torch_data_pkl(names: list[str]) -> bool:
    """Where torch looks for data.pkl: beside the first entry's folder, or at the top."""
    first = names[0].split("/", 1)[0] if names else ""
    return any(n in (f"{first}/data.pkl", "data.pkl") or n.endswith("/data.pkl") and n.count("/") == 1
               for n in names)


def _zip_kind(read: Callable[[int, int], bytes], size: int) -> Identified:
    """torch.save (data.pkl), TorchScript (code/ beside data.pkl), torch.export, Keras 3, an
    archive of model files (a wheel, a TorchServe .mar, a zipped folder), or a zip that is none
    of them. A zip whose directory cannot be read goes to the torch reader, which says what is
    wrong with it."""
    members = zip_members(read, size)
    if members is None:
        return _it("zip", WEIGHTS, "zip")
    names = [m[0] for m in members]
    pickles = any(n.endswith(".pkl") for n in names)
    if pickles and _torch_data_pkl(names):
        if any("/code/" in f"/{n}" for n in names):
            return _it("torchscript", WEIGHTS, "zip")
        return _it("zip", WEIGHTS, "zip")
    if names and all(n.endswith(".npy") for n in names):
        return _it("npz", WEIGHTS, "npz")
    if any(n.endswith(("archive_format", "serialized_exported_program.json")) for n in names):
        return _it("pt2", WEIGHTS)
    if any(n.endswith(".weights.h5") for n in names):
        return _it("keras", WEIGHTS, "keras")
    if zip_model_members(read, size, members):
        return _it("model_archive", WEIGHTS, "archive")
    if pickles:
        return _it("zip", WEIGHTS, "zip")
    if any("/models/" in n and n.endswith(".json") for n in names):
        return _it("pt2", WEIGHTS)
    if zip_pickle_members(read, size, members):  # pickle.load runs a member whatever its name
        return _it("zip", WEIGHTS, "zip", label="zip archive holding pickles")
    return _it("zip_archive", OTHER)


def _other_kind(head: bytes, name: str) -> Identified:
    """What no reader takes: the weight formats this version cannot read yet, side files, and
    the rest."""
    if head[:4] in GGML_MAGICS:  # 'ggla', a LoRA adapter of the GGML era (the others are read)
        return _it("ggml", WEIGHTS, label=f"legacy GGML ({GGML_MAGICS[head[:4]]})")
    if head[4:6] == b"ET" and head[6:8].isdigit():
        return _it("executorch", WEIGHTS)
    if _is_sentencepiece(head):
        return _it("sentencepiece", SIDE)
    for magic, what in IMAGE_MAGICS:
        if head.startswith(magic):
            return _it("image", SIDE, label=f"{what} image")
    if head[:4] == b"RIFF" and head[8:12] == b"WEBP":
        return _it("image", SIDE, label="WebP image")
    for magic, what in COMPRESSED_MAGICS:
        if head.startswith(magic):
            return _it("compressed", OTHER, label=f"compressed file ({what})")
    text = _text(head)
    if text is not None:
        if _JSON_START.match(text):
            return _it("json", SIDE)
        ext = "." + name.rsplit(".", 1)[-1].lower() if "." in name else ""
        return _it("text", SIDE, label=TEXT_LABELS.get(ext, "text"))
    return _it("unknown", OTHER)


def _text(head: bytes) -> str | None:
    """`head` as UTF-8 text, or None when it holds NULs or bytes UTF-8 does not allow (a
    character cut at the end of `head` is allowed)."""
    if b"\0" in head:
        return None
    for cut in range(4):
        try:
            return head[:len(head) - cut].decode("utf-8")
        except UnicodeDecodeError as e:
            if e.start < len(head) - 4:
                return None
    return None


def _varint(data: bytes, pos: int) -> tuple[int, int] | None:
    value = shift = 0
    while pos < len(data) and shift < 64:
        b = data[pos]
        value |= (b & 0x7F) << shift
        pos += 1
        if not b & 0x80:
            return value, pos
        shift += 7
    return None


# ONNX ModelProto: ir_version (field 1, a varint; IR 3 dates from 2017) first, as every writer
# emits it, then producer_name (2), producer_version (3), domain (4), model_version (5),
# doc_string (6), graph (7) or opset_import (8). TensorFlow's saved_model.pb also starts with
# field 1, but its value is 1.
_ONNX_STRINGS = {0x12, 0x1A, 0x22, 0x32}
_ONNX_NEXT = _ONNX_STRINGS | {0x28, 0x3A, 0x42}


def _is_onnx(head: bytes) -> bool:
    if head[:1] != b"\x08":
        return False
    v = _varint(head, 1)
    if v is None or not 3 <= v[0] <= 64 or v[1] >= len(head) or head[v[1]] not in _ONNX_NEXT:
        return False
    if head[v[1]] not in _ONNX_STRINGS:
        return True
    n = _varint(head, v[1] + 1)  # a producer name or domain: short and printable
    return n is not None and n[0] <= 256 and head[n[1]:n[1] + n[0]].isascii()


def _is_sentencepiece(head: bytes) -> bool:
    """A SentencePiece ModelProto: field 1 (pieces), each a message whose field 1 is the piece
    text and field 2 its float score."""
    if head[:1] != b"\x0a":
        return False
    outer = _varint(head, 1)
    if outer is None or outer[1] >= len(head) or head[outer[1]] != 0x0A:
        return False
    inner = _varint(head, outer[1] + 1)
    if inner is None:
        return False
    at = inner[1] + inner[0]
    return at < len(head) and head[at] == 0x15


def _is_flax_msgpack(head: bytes) -> bool:
    """A msgpack map (what flax.serialization writes) whose first key is a printable string
    ("params", "opt_state", a layer name)."""
    if not head or not (0x81 <= head[0] <= 0x8F or head[0] in (0xDE, 0xDF)):
        return False
    at = 1 if head[0] <= 0x8F else (3 if head[0] == 0xDE else 5)
    if at >= len(head):
        return False
    if 0xA1 <= head[at] <= 0xBF:
        n, at = head[at] & 0x1F, at + 1
    elif head[at] == 0xD9 and at + 1 < len(head):
        n, at = head[at + 1], at + 2
    else:
        return False
    key = head[at:at + n]
    return 0 < len(key) == n and key.isascii() and key.decode().isprintable()
