"""What each file under an audit's roots is, and why a file is not audited.

Every file is identified by its first bytes (formats/detect.py `identify`: a few KiB, range reads
for remote files), never by its name. A file is then one of: a weight file a reader of this
version takes (audited, alone or with the rest of its model), a side file that goes with a model
(config, tokenizer, text, image), or a file not audited, listed with one of REASONS.
"""

from __future__ import annotations

import os
from dataclasses import asdict, dataclass

from ..assemble import READERS
from ..formats.detect import SIDE, WEIGHTS, Identified, identify

# reason -> (how a count of them reads, plural form); the closed set of reasons a file is not
# audited as a model. "side_file" and "alias" files are part of a model: not counted as skipped.
REASONS = {
    "side_file": ("side file of a model", "side files of models"),
    "alias": ("link to a file audited through its link", "links to files audited through their links"),
    "format_not_read": ("{label} (format not read yet)", "{label} (format not read yet)"),
    "not_model": ("not a model format", "not a model format"),
    "unreadable": ("unreadable", "unreadable"),
    "too_large": ("too large for the set limit", "too large for the set limit"),
    "link_outside": ("link leaving the audited folder", "links leaving the audited folder"),
    "not_searched": ("folder not searched", "folders not searched"),
}
NOT_SKIPPED = ("side_file", "alias")
# Names that claim a weight format: such a file is audited even when its bytes match none (the
# reader of the format the name claims says what is wrong: a download cut short, a bad magic).
COMPANION_DATA = ("openvino", "onnx")  # formats whose reader opens their data file beside them
CLAIMED_WEIGHTS = (".safetensors", ".gguf", ".bin", ".pt", ".pth", ".ckpt", ".pkl", ".pickle", ".npz")


@dataclass
class FileEntry:
    """A file (or folder) not audited as a model, and why. `model`: the model it goes with (a
    side file's model, or the nearest model, for context), or None."""

    path: str
    reason: str
    kind: str
    label: str
    detail: str
    bytes: int | None = None
    model: str | None = None

    def to_dict(self) -> dict:
        return asdict(self)


def auditable(ident: Identified, name: str) -> bool:
    """A reader of this version takes the file, or its name claims a format one reads and its
    bytes are not a weight format no reader takes (so a pickle that the first-bytes test does not
    recognise, named pytorch_model.bin, is still read, and its reader says what it holds)."""
    if ident.role == WEIGHTS:
        return ident.reads_as in READERS
    return name.lower().endswith(CLAIMED_WEIGHTS)


def skip_entry(path: str, ident: Identified, size: int | None, model: str | None) -> FileEntry:
    """The entry of a file that is not auditable, from what it is."""
    if ident.role == WEIGHTS:
        return FileEntry(path, "format_not_read", ident.kind, ident.label,
                         f"{ident.label}: this version of model_explorer cannot read this format yet, "
                         "so nothing in it was checked.", size, model)
    if ident.role == SIDE:
        if model is not None:
            return FileEntry(path, "side_file", ident.kind, ident.label,
                             f"{ident.label} beside the model; the model's checks read it where they use it.",
                             size, model)
        return FileEntry(path, "not_model", ident.kind, ident.label,
                         f"{ident.label}, with no model beside it.", size, None)
    detail = "An empty file." if ident.kind == "empty" else f"{ident.label}: the first bytes match no model format."
    return FileEntry(path, "not_model", ident.kind, ident.label, detail, size, model)


def data_files(found: dict[str, Identified]) -> dict[str, str]:
    """Among one folder's files (name -> what it is), those that hold the data of a weight file
    no reader takes yet (model.onnx_data beside model.onnx, openvino_model.bin beside
    openvino_model.xml, which its reader opens with it): name -> that weight file's name. Their
    bytes have no magic of their own."""
    owners = [n for n, i in found.items() if i.role == WEIGHTS
              and (i.reads_as not in READERS or i.kind in COMPANION_DATA)]
    out = {}
    for name, ident in found.items():
        if ident.kind not in ("unknown", "empty"):
            continue
        for owner in owners:
            stem = owner.rsplit(".", 1)[0]
            if name != owner and name.startswith((stem + ".", stem + "_")):
                out[name] = owner
                break
    return out


def data_entry(path: str, owner_path: str, owner: Identified, size: int | None, model: str | None) -> FileEntry:
    if owner.reads_as in READERS:  # ONNX external data, an OpenVINO .bin: read with their model file
        return FileEntry(path, "side_file", owner.kind, f"{owner.label} data",
                         f"The data of {os.path.basename(owner_path)} ({owner.label}), read with it.",
                         size, owner_path)
    return FileEntry(path, "format_not_read", owner.kind, f"{owner.label} data",
                     f"The data of {os.path.basename(owner_path)} ({owner.label}), a format this "
                     "version cannot read yet.", size, model)


# -- reading a file's first bytes ---------------------------------------------------------------

def identify_local(path: str, size: int) -> Identified:
    """Raises OSError when the file cannot be read."""
    with open(path, "rb") as f:
        def read(offset: int, length: int) -> bytes:
            f.seek(offset)
            return f.read(length)

        return identify(read, size, os.path.basename(path))


def error_text(error: BaseException) -> str:
    """An OSError as words ("Permission denied"), without the quoted path its str() adds."""
    if isinstance(error, OSError) and error.strerror:
        return error.strerror
    return str(error) or type(error).__name__


def unreadable(path: str, error: BaseException, size: int | None = None) -> FileEntry:
    return FileEntry(path, "unreadable", "unreadable", "unreadable file",
                     f"It could not be read: {error_text(error)}.", size)


def too_large(path: str, size: int, limit: int) -> FileEntry:
    from ..units import format_bytes

    return FileEntry(path, "too_large", "too_large", "file over the size limit",
                     f"{format_bytes(size)} is over the limit of {format_bytes(limit)} set for this "
                     "audit; it was not read.", size)
