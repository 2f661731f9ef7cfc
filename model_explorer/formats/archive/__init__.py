"""Archives that hold model files (a wheel or zip, a NeMo .nemo tar, a TorchServe .mar, a zipped
model folder): the models inside listed and their pickles judged (reader.py), each member opened
in place by its path inside the archive, `ARCHIVE!/MEMBER` (members.py)."""

from .members import MemberError, archive_members, open_member
from .reader import model_paths, read_archive

__all__ = ["read_archive", "model_paths", "open_member", "archive_members", "MemberError"]
