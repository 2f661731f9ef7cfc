"""Byte sources: a local file through mmap, a remote one through fsspec range reads, or a file of
a Hugging Face Hub repo (hf://, hub.py: listed once, headers fetched in parallel).

Parsers see only `size`, `read(offset, length)` and `prefix(n)`; they never learn whether
the bytes come from a disk or a network, and they never read more than they ask for.
"""

from __future__ import annotations

import mmap
import os
import posixpath
import re
from typing import Protocol
from urllib.parse import quote, unquote

from .subsources import split_member

_URL = re.compile(r"^[a-zA-Z][a-zA-Z0-9+.-]*://")

# Remote header reads grow by doubling from this size, so a parser that walks a header
# field by field costs a handful of requests, not one per field.
REMOTE_FIRST_READ = 64 * 1024


class ByteSource(Protocol):
    name: str
    size: int
    bytes_read: int

    def read(self, offset: int, length: int) -> bytes: ...

    def prefix(self, n: int) -> bytes | memoryview: ...

    def close(self) -> None: ...


def is_remote(path: str) -> bool:
    return bool(_URL.match(str(path))) and not str(path).startswith("file://")


def _is_http(path: str) -> bool:
    return str(path).startswith(("http://", "https://"))


def _local_path(path: str) -> str:
    path = str(path)
    return path[len("file://"):] if path.startswith("file://") else path


class LocalSource:
    """A local file mapped read-only; `prefix` is the whole map and costs nothing.

    `bytes_read` counts what parsers asked for: `read` lengths plus the furthest `prefix(n)`.
    """

    def __init__(self, path: str) -> None:
        self.name = _local_path(path)
        self._file = open(self.name, "rb")  # noqa: SIM115 - closed by close()
        self.size = os.fstat(self._file.fileno()).st_size
        self._map = mmap.mmap(self._file.fileno(), 0, access=mmap.ACCESS_READ) if self.size else None
        self.bytes_read = 0
        self._prefix_asked = 0

    @property
    def buffer(self) -> memoryview | bytes:
        return memoryview(self._map) if self._map is not None else b""

    def read(self, offset: int, length: int) -> bytes:
        if self._map is None or offset >= self.size or length <= 0:
            return b""
        offset = max(0, offset)
        end = min(self.size, offset + length)
        self.bytes_read += end - offset
        return self._map[offset:end]

    def prefix(self, n: int) -> memoryview | bytes:
        n = min(n, self.size)
        if n > self._prefix_asked:
            self.bytes_read += n - self._prefix_asked
            self._prefix_asked = n
        return self.buffer

    def release_pages(self) -> None:
        """Drop this process's mapping of the pages read so far (they stay in the page cache).

        A streamed forward pass reads a whole model through the map once per pass; without this
        every page it touched would count in the process's resident set until the file closes."""
        if self._map is not None and hasattr(mmap, "MADV_DONTNEED"):
            self._map.madvise(mmap.MADV_DONTNEED)

    def close(self) -> None:
        # A map still viewed by numpy arrays cannot close; the OS releases it with them.
        if self._map is not None:
            try:
                self._map.close()
            except BufferError:
                pass
        self._file.close()

    def __repr__(self) -> str:
        return f"LocalSource({self.name!r}, size={self.size})"


class RemoteSource:
    """A file read through fsspec with HTTP range requests (or the backend's equivalent).

    Over HTTP(S) every answer is checked before its bytes are used (http_ranges.py): a server
    that ignores Range, or answers with other bytes, never gives a value. `notes` holds the
    findings about how the bytes came (the open lists them); `requests` and `bytes_read` count
    what went over the network."""

    def __init__(self, url: str) -> None:
        import fsspec

        self.name = url
        self._fs, self._path = fsspec.core.url_to_fs(url)
        try:
            size = self._fs.size(self._path)
        except OSError:
            raise
        except Exception as e:  # backends raise their own errors (aiohttp, botocore...)
            raise OSError(f"cannot reach {url!r}: {e}") from e
        if size is None:
            raise OSError(f"the server does not say how large {url!r} is, so it cannot be read in ranges")
        self.size = int(size)
        self._prefix = b""
        self._whole: bytes | None = None  # the whole file, when a server that ignores Range sent it
        self._http = _is_http(url)
        self.bytes_read = 0
        self.requests = 0
        self.notes: list = []

    def read(self, offset: int, length: int) -> bytes:
        if offset >= self.size or length <= 0:
            return b""
        offset = max(0, offset)
        end = min(self.size, offset + length)
        if self._whole is not None:
            return self._whole[offset:end]
        if end <= REMOTE_FIRST_READ:  # small reads near the start share one request
            self.prefix(end)
        if end <= len(self._prefix):
            return self._prefix[offset:end]
        return self._fetch(offset, end)

    def _fetch(self, start: int, end: int) -> bytes:
        if self._whole is not None:
            return self._whole[start:end]
        if self._http:
            return self._fetch_http(start, end)
        try:
            data = self._fs.cat_file(self._path, start=start, end=end)
        except OSError:
            raise
        except Exception as e:
            raise OSError(f"reading bytes {start} to {end} of {self.name!r} failed: {e}") from e
        self.requests += 1
        self.bytes_read += len(data)
        return data[:end - start]

    def _fetch_http(self, start: int, end: int) -> bytes:
        from . import http_ranges

        try:
            answer = http_ranges.get_range(self._fs, self._path, start, end, self.size)
        except http_ranges.RangeProblem as e:
            self.requests += 1
            self._note(e.finding(self.name))
            raise
        except OSError:
            raise
        except Exception as e:  # aiohttp's own errors
            raise OSError(f"reading bytes {start} to {end} of {self.name!r} failed: {e}") from e
        self.requests += 1
        self.bytes_read += answer.sent
        if answer.ignored_range:
            self._ignored_range(answer, start, end)
        return answer.data

    def _ignored_range(self, answer, start: int, end: int) -> None:
        from .spans import Finding

        if answer.whole is not None:
            self._whole = answer.whole
            self._note(Finding.of("http_no_ranges", f"The server ignores Range requests: asked for "
                                  f"bytes {start} to {end}, it answered 200 with the whole file. The "
                                  f"file is {self.size:,} bytes, so it was downloaded once and every "
                                  "read is served from that copy.", file=self.name, offset=start,
                                  length=end - start, size=self.size))
        else:
            self._note(Finding.of("http_no_ranges", f"The server ignores Range requests: asked for "
                                  f"bytes {start} to {end}, it answered 200 with the whole file; the "
                                  f"range was cut from the stream, {answer.sent:,} bytes sent for "
                                  f"{end - start:,}. Reads further than a few MB into this "
                                  f"{self.size:,}-byte file are refused.", file=self.name, offset=start,
                                  length=end - start, size=self.size))

    def _note(self, finding) -> None:
        if all(f.code != finding.code for f in self.notes):
            self.notes.append(finding)

    def prefix(self, n: int) -> bytes:
        """The first `n` bytes (fewer at the end of the file), fetched by doubling."""
        n = min(n, self.size)
        if self._whole is not None:
            return self._whole
        if n > len(self._prefix):
            want = min(self.size, max(n, 2 * len(self._prefix), REMOTE_FIRST_READ))
            more = self._fetch(len(self._prefix), want)
            self._prefix = self._whole if self._whole is not None else self._prefix + more
        return self._prefix

    def close(self) -> None:
        pass

    def __repr__(self) -> str:
        return f"RemoteSource({self.name!r}, size={self.size})"


class HubSource(RemoteSource):
    """A file of a Hugging Face Hub repo (hf://), read by range requests through hub.py; the
    bytes fetched in parallel before the readers ran (its header) are its first prefix.
    `repos`: the listings of the open it belongs to (hub.HubRepos), else the current open's."""

    def __init__(self, url: str, repos=None) -> None:
        from . import hub

        self.name = url
        self._repo = repos.repo_of(url) if repos is not None else hub.repo_of(url)
        self.size = self._repo.size(url)
        self._prefix = self._repo.head(url)
        self.bytes_read = len(self._prefix)
        self.requests = 0
        self._whole = None
        self.notes = []

    def _fetch(self, start: int, end: int) -> bytes:
        data = self._repo.read(self.name, start, end)
        self.requests += 1
        self.bytes_read += len(data)
        return data

    def __repr__(self) -> str:
        return f"HubSource({self.name!r}, size={self.size})"


def _is_hub(path: str) -> bool:
    return str(path).startswith("hf://")


def open_source(path: str, hub_repos=None) -> LocalSource | RemoteSource:
    """The byte source of a path or URL; an hf:// file is looked up in `hub_repos` when given."""
    if _is_hub(path):
        return HubSource(path, hub_repos)
    return RemoteSource(path) if is_remote(path) else LocalSource(path)


class SourceSet:
    """The open byte sources of one checkpoint's files, opened on first use and closed together."""

    def __init__(self) -> None:
        self._open: dict[str, ByteSource] = {}
        self.hub_repos = None  # hub.HubRepos: the listings of the open these files came from

    def get(self, file: str) -> ByteSource:
        """The open source of `file`, opening it the first time."""
        src = self._open.get(file)
        if src is None:
            src = self._open[file] = open_source(file, self.hub_repos)
        return src

    def add(self, source: ByteSource) -> None:
        """Keep an already open source (a reader opened it to detect the format)."""
        self._open[source.name] = source

    def __contains__(self, file: str) -> bool:
        return file in self._open

    def notes(self) -> list:
        """What the sources found about how their bytes came (a server that ignores Range...)."""
        return [f for src in self._open.values() for f in getattr(src, "notes", ())]

    def release_pages(self) -> None:
        """Drop the mapped pages of every local file (see LocalSource.release_pages)."""
        for src in self._open.values():
            release = getattr(src, "release_pages", None)
            if release is not None:
                release()

    def close(self) -> None:
        for src in self._open.values():
            src.close()
        self._open.clear()


# Locations: joining, listing and small reads work the same for paths and URLs.

def join(base: str, name: str) -> str:
    """`name` (a file name or a relative path with '/') under `base`; quoted for HTTP URLs, so
    names with spaces, '#' or '?' stay names."""
    if _is_http(base):
        return posixpath.join(base, quote(name))
    if is_remote(base):
        return posixpath.join(base, name)
    return os.path.join(_local_path(base), *name.split("/"))


def dirname(path: str) -> str:
    if is_remote(path):
        return posixpath.dirname(path.rstrip("/"))
    return os.path.dirname(os.path.abspath(_local_path(path)))


def parent_in_repo(path: str) -> str | None:
    """The folder above `path`, or None where there is none to look in: above an hf:// repo's
    root is no repository (asking the Hub for "org/modules.json" costs a request and means nothing)."""
    parent = dirname(path)
    if _is_hub(path):
        parts = parent[len("hf://"):].strip("/").split("/")
        need = 3 if parts[0] in ("datasets", "spaces") else 2
        return parent if len(parts) >= need and parts[0] else None
    return parent if parent.rstrip("/") != str(path).rstrip("/") else None


def basename(path: str) -> str:
    """The file name, unquoted for HTTP URLs (so `join(dirname(p), basename(p)) == p`)."""
    if _is_http(path):
        return unquote(posixpath.basename(str(path).rstrip("/")))
    if is_remote(path):
        return posixpath.basename(str(path).rstrip("/"))
    return os.path.basename(_local_path(path).rstrip(os.sep))


def _fs(path: str):
    import fsspec

    return fsspec.core.url_to_fs(path)


def _http_info(path: str) -> dict | None:
    """HEAD of an HTTP URL. fsspec's own `exists`/`isdir` for HTTP issue a GET, which starts
    downloading the whole file: a 5 GB shard must cost a HEAD, not a download."""
    fs, p = _fs(path)
    try:
        return fs.info(p)
    except Exception:
        return None


def _hub_repo(path: str):
    from . import hub

    return hub.repo_of(path)


def exists(path: str) -> bool:
    """Whether the path names a file or folder (a member of an archive, `pkg.whl!/pkg/model.pt`,
    is no file here: `container` names its archive)."""
    if not is_remote(path):
        return os.path.exists(_local_path(path))
    if _is_hub(path):
        try:
            return _hub_repo(path).exists(path)
        except OSError:
            return False
    if _is_http(path):
        return _http_info(path) is not None
    fs, p = _fs(path)
    try:
        return bool(fs.exists(p))
    except Exception:
        return False


def container(path: str) -> str:
    """The file that holds `path`: the archive of an archive member (subsources.py), else itself."""
    member = split_member(path)
    return path if member is None else member[0]


def isdir(path: str) -> bool:
    if not is_remote(path):
        return os.path.isdir(_local_path(path))
    if _is_hub(path):
        try:
            return _hub_repo(path).isdir(path)
        except OSError:
            return False
    fs, p = _fs(path)
    try:
        if _is_http(path):
            # Only an HTML page can be a directory listing; anything else is a file.
            info = _http_info(path)
            if info is None or info.get("mimetype") != "text/html":
                return False
        return bool(fs.isdir(p))
    except Exception:
        return False


def listdir(path: str) -> list[str]:
    """File names (not paths) in a directory, sorted."""
    if not is_remote(path):
        return sorted(os.listdir(_local_path(path)))
    if _is_hub(path):
        return _hub_repo(path).listdir(path)
    fs, p = _fs(path)
    return sorted(posixpath.basename(e.rstrip("/")) for e in fs.ls(p, detail=False))


def read_text(path: str, limit: int) -> tuple[str | None, str | None]:
    """Read a small text file whole; returns (text, problem) and never more than `limit` bytes."""
    try:
        src = open_source(path)
    except OSError as e:
        return None, f"cannot read: {e}"
    try:
        if src.size > limit:
            return None, f"is {src.size} bytes, more than the {limit} bytes allowed for it"
        data = src.read(0, src.size)
    finally:
        src.close()
    try:
        return data.decode("utf-8"), None
    except UnicodeDecodeError as e:
        return None, f"is not valid UTF-8 (byte {e.start})"
