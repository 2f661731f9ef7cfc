"""Writing the repaired copy: staged under a temporary name inside the destination, bytes
streamed in bounded chunks, renamed into place only when every file is complete.

A failure at any point (disk full, read-only folder, an exception in a fix) removes what was
staged, and the destination folder too when this repair created it: nothing is left under a
final name that is not whole.
"""

from __future__ import annotations

import errno
import hashlib
import json
import os
import shutil
import tempfile
from collections.abc import Callable, Iterable

from .build import OutFile, RepairError

CHUNK = 8 * 2**20  # bytes read and written at a time: memory stays at a few chunks
Progress = Callable[[int, int, str], None]  # (bytes done, bytes in all, what is being written)


class Staging:
    """Files written under `dest/.mx-repair-*/` and moved to `dest/` on commit."""

    def __init__(self, dest: str, overwrite: bool = False) -> None:
        self.dest = os.path.abspath(dest)
        self.created = False
        if os.path.exists(self.dest):
            if not os.path.isdir(self.dest):
                raise RepairError(f"The destination {dest!r} exists and is not a folder.")
        else:
            try:
                os.makedirs(self.dest)
            except OSError as e:
                raise RepairError(_os_message(dest, e)) from None
            self.created = True
        try:
            self.dir = tempfile.mkdtemp(prefix=".mx-repair-", dir=self.dest)
        except OSError as e:
            self.abort()
            raise RepairError(_os_message(dest, e)) from None
        self.names: list[str] = []
        self.overwrite = overwrite

    def path(self, name: str) -> str:
        """Where to write `name` (a path relative to dest) until the commit."""
        if name not in self.names:
            self.names.append(name)
        p = os.path.join(self.dir, name)
        os.makedirs(os.path.dirname(p), exist_ok=True)
        return p

    def commit(self) -> list[str]:
        """Move every staged file to its final name; returns the final paths."""
        final = []
        for name in self.names:
            target = os.path.join(self.dest, name)
            if os.path.exists(target) and not self.overwrite:
                raise RepairError(f"{target!r} appeared while the repair ran; not replaced.")
            os.makedirs(os.path.dirname(target), exist_ok=True)
            os.replace(os.path.join(self.dir, name), target)
            final.append(target)
        shutil.rmtree(self.dir, ignore_errors=True)
        return final

    def abort(self) -> None:
        if getattr(self, "dir", None):
            shutil.rmtree(self.dir, ignore_errors=True)
        if self.created:
            shutil.rmtree(self.dest, ignore_errors=True)


def _os_message(dest: str, e: OSError) -> str:
    why = {errno.ENOSPC: "the disk is full", errno.EROFS: "the file system is read-only",
           errno.EACCES: "permission denied", errno.EPERM: "permission denied",
           errno.EDQUOT: "the disk quota is exceeded"}.get(e.errno, e.strerror or str(e))
    return f"Cannot write the repaired copy to {dest!r}: {why}. Nothing was left behind."


def os_error(dest: str, e: OSError) -> RepairError:
    return RepairError(_os_message(dest, e))


class Counter:
    """Bytes written so far, reported to a progress callback."""

    def __init__(self, total: int, progress: Progress | None) -> None:
        self.total, self.done, self.progress = total, 0, progress

    def add(self, n: int, label: str) -> None:
        self.done += n
        if self.progress is not None:
            self.progress(self.done, self.total, label)


def read_chunks(path: str, offset: int, length: int, chunk: int = CHUNK) -> Iterable[bytes]:
    """The bytes [offset, offset + length) of a file, `chunk` at a time (never mapped whole)."""
    with open(path, "rb", buffering=0) as f:
        size = os.fstat(f.fileno()).st_size
        if offset + length > size:
            raise RepairError(f"{path!r} ends at byte {size}, before the {length} bytes at {offset} "
                              "a tensor needs: it is truncated.")
        done = 0
        while done < length:
            n = min(chunk, length - done)
            data = os.pread(f.fileno(), n, offset + done)
            if len(data) != n:
                raise RepairError(f"{path!r} ended while reading byte {offset + done}.")
            yield data
            done += n


def sha256_range(path: str, offset: int, length: int) -> str:
    h = hashlib.sha256()
    for data in read_chunks(path, offset, length):
        h.update(data)
    return h.hexdigest()


def copy_file(src: str, dst: str, counter: Counter, label: str) -> None:
    size = os.path.getsize(src)
    with open(dst, "wb") as out:
        for data in read_chunks(src, 0, size):
            out.write(data)
            counter.add(len(data), label)


def safetensors_header(f: OutFile) -> bytes:
    """The JSON header for the tensors in order, contiguous, padded with spaces to 8 bytes."""
    header: dict = {}
    if f.metadata:
        header["__metadata__"] = f.metadata
    pos = 0
    for t in f.tensors:
        header[t.name] = {"dtype": t.dtype, "shape": list(t.shape), "data_offsets": [pos, pos + t.length]}
        pos += t.length
    raw = json.dumps(header, separators=(",", ":"), ensure_ascii=False).encode("utf-8")
    raw += b" " * (-len(raw) % 8)
    return len(raw).to_bytes(8, "little") + raw


def write_safetensors(f: OutFile, path: str, counter: Counter) -> None:
    """Stream one output file: header, then each tensor copied or produced in chunks."""
    with open(path, "wb") as out:
        out.write(safetensors_header(f))
        for t in f.tensors:
            chunks = t.produce(CHUNK) if t.produce is not None else \
                read_chunks(t.src_file, t.src_offset, t.length)
            written = 0
            for data in chunks:
                out.write(data)
                written += len(data)
                counter.add(len(data), t.name)
            if written != t.length:
                raise RepairError(f"{t.name!r} came out as {written} bytes; its header says {t.length}.")
