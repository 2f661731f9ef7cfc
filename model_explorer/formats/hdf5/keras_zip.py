"""Keras 3 .keras archives: a zip holding config.json, metadata.json and model.weights.h5. Keras
stores the weights uncompressed, so the HDF5 file is read in place, at its offset inside the zip,
and every tensor's byte range is absolute in the .keras file."""

from __future__ import annotations

import json
import struct
import zipfile

from ...spans import Report
from ..catalog_note import note
from ..keras_graph import MAX_CONFIG, keras_structure
from ..result import FileResult
from .reader import read_window
from .window import SourceFile, Window

WEIGHTS = "model.weights.h5"
MAX_JSON = 1024 * 1024  # metadata.json is a few hundred bytes
LOCAL_HEADER = 30


def read_keras(source) -> FileResult:
    rep = Report(source.name)
    result = FileResult(source.name, source.size, rep)
    try:
        archive = zipfile.ZipFile(SourceFile(source))
        members = {i.filename: i for i in archive.infolist()}
    except (zipfile.BadZipFile, OSError, ValueError, EOFError, struct.error) as e:
        note(rep, "keras_bad_archive", f"The .keras archive's zip directory cannot be read: {e}.", 0, min(4, source.size))
        return result
    _metadata(archive, members, result)
    info = members.get(WEIGHTS) or next((i for n, i in members.items() if n.endswith(".weights.h5")), None)
    if info is None:
        note(rep, "keras_bad_archive", f"The archive holds no {WEIGHTS} (it has "
             f"{', '.join(list(members)[:8]) or 'no entries'}).", 0, min(4, source.size))
        return result
    head = bytes(source.read(info.header_offset, LOCAL_HEADER))
    if len(head) < LOCAL_HEADER or head[:4] != b"PK\x03\x04":
        note(rep, "keras_bad_archive", f"The local header of {info.filename} is not at byte "
             f"{info.header_offset}, where the zip directory says.", info.header_offset, len(head))
        return result
    name_len, extra_len = struct.unpack_from("<HH", head, 26)
    data_at = info.header_offset + LOCAL_HEADER + name_len + extra_len
    rep.span(info.header_offset, data_at - info.header_offset, "zip_header", f"zip > {info.filename} > local header",
             f"{info.filename}, {'stored' if info.compress_type == zipfile.ZIP_STORED else 'compressed'}")
    if info.compress_type != zipfile.ZIP_STORED:
        note(rep, "keras_compressed", f"{info.filename} is stored compressed in the archive (method "
             f"{info.compress_type}), so its bytes cannot be read in place; Keras itself stores it "
             "uncompressed.", info.header_offset, data_at - info.header_offset)
        return result
    if data_at + info.file_size > source.size:
        note(rep, "h5_truncated", f"{info.filename} is said to hold {info.file_size} bytes from byte "
             f"{data_at}, past the end of the archive ({source.size} bytes).", info.header_offset,
             data_at - info.header_offset)
    read_window(Window(source, data_at, min(info.file_size, max(0, source.size - data_at))), result)
    result.details["keras"] = {"weights_member": info.filename, "weights_at": data_at,
                               "members": list(members)[:100]}
    _graph(source, archive, members.get("config.json"), result)
    return result


def _graph(source, archive: zipfile.ZipFile, info, result: FileResult) -> None:
    """config.json as the model's graph (keras_graph.py); stored, its layers point at their names."""
    if info is None or info.file_size > MAX_CONFIG:
        return
    try:
        text = archive.read(info).decode("utf-8")
    except (ValueError, zipfile.BadZipFile, OSError, EOFError, UnicodeDecodeError):
        return
    head = bytes(source.read(info.header_offset, LOCAL_HEADER))
    where = (info.header_offset, LOCAL_HEADER + info.compress_size)
    raw = None
    if len(head) == LOCAL_HEADER and info.compress_type == zipfile.ZIP_STORED:
        name_len, extra_len = struct.unpack_from("<HH", head, 26)
        at = info.header_offset + LOCAL_HEADER + name_len + extra_len
        where = (at, min(info.file_size, max(0, source.size - at)))
        raw = bytes(source.read(*where))
    result.structure = keras_structure(text, result.file, where, raw, result.tensors)


def _metadata(archive: zipfile.ZipFile, members: dict, result: FileResult) -> None:
    """keras_version and date_saved from metadata.json, when it is small and plain JSON."""
    info = members.get("metadata.json")
    if info is None or info.file_size > MAX_JSON:
        return
    try:
        value = json.loads(archive.read(info))
    except (ValueError, zipfile.BadZipFile, OSError, RecursionError, EOFError):
        return
    if isinstance(value, dict):
        for key in ("keras_version", "date_saved"):
            if isinstance(value.get(key), str):
                result.metadata[key] = value[key]
