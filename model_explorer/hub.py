"""The Hugging Face Hub without downloading: `hf://org/repo`, `hf://org/repo@revision` and a
file inside a repo, read through huggingface_hub's `HfFileSystem`.

One open lists the repo once (HfFileSystem's tree listing, one request for up to 1,000 files),
then reads only headers: the shard headers of an index (or a split GGUF, or the weight files
of a folder) are fetched in parallel before the readers run, each with one range request
sized from the first shard's header, so the readers find their bytes already here. A range
request that the Hub redirects to its CDN remembers where it went, so a later read of the same
file is one request. What it took (requests, redirects, bytes) goes into
`ckpt.details["hub"]` and an info finding `hub_reads`.

Each open has its own listings (`HubRepos`, made current for the open by `reading`), and each
listing its own HfFileSystem whose API client counts the requests it makes: what one open reads
and counts never depends on another open, earlier or in another thread.

The token is huggingface_hub's own (HF_TOKEN, `hf auth login`'s token file, ...); the
endpoint is HF_ENDPOINT's. A repo that is not found, gated, private to others or rate-limited
becomes a finding that says so (`hub_not_found`, `hub_gated`, `hub_forbidden`,
`hub_rate_limited`, ...), never a traceback.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import threading
import time
from collections.abc import Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from contextvars import ContextVar
from typing import Any
from urllib.parse import urljoin, urlsplit

from .http_ranges import check_content_range
from .limits import MAX_INDEX_BYTES
from .spans import Finding

PREFIX = "hf://"
FIRST_READ = 64 * 1024  # the least a header read asks for
PROBE_READ = 256 * 1024  # the first header read of a set, when nothing is known yet
MAX_GUESS = 8 * 1024 * 1024  # a guessed header read never asks for more than this
SMALL_FILE = 2 * 1024 * 1024  # JSON side files up to this size are fetched whole with the headers
WORKERS = 64  # parallel header reads
_SPLIT = re.compile(r"^(?P<stem>.+)-(?P<i>\d{5})-of-(?P<n>\d{5})\.gguf$")
_WEIGHTS = (".safetensors", ".gguf", ".bin", ".pt", ".pth")


def is_hub(path: Any) -> bool:
    return str(path).startswith(PREFIX)


class HubError(OSError):
    """A Hub answer that stops the read; `code` and `message` make its finding."""

    def __init__(self, code: str, message: str, status: int | None = None) -> None:
        super().__init__(message)
        self.code, self.message, self.status = code, message, status

    def finding(self, path: str) -> Finding:
        f = Finding.of(self.code, self.message, file=path)
        if self.status is not None:
            f.extra["status"] = self.status
        return f


def _token_note() -> str:
    try:
        from huggingface_hub import get_token

        return "with a token" if get_token() else "without a token (none in HF_TOKEN or `hf auth login`)"
    except Exception:  # noqa: BLE001 - a note only
        return "without a token"


def _as_hub_error(e: BaseException, what: str) -> HubError:
    """huggingface_hub's exception for `what` (a repo or a file) as a HubError with a plain message."""
    if isinstance(e, HubError):
        return e
    try:
        from huggingface_hub.errors import (
            EntryNotFoundError,
            GatedRepoError,
            HfHubHTTPError,
            RepositoryNotFoundError,
            RevisionNotFoundError,
        )
    except ImportError:  # pragma: no cover - huggingface_hub < 0.24
        from huggingface_hub.utils import (
            EntryNotFoundError,
            GatedRepoError,
            HfHubHTTPError,
            RepositoryNotFoundError,
            RevisionNotFoundError,
        )
    cause = e.__cause__ if isinstance(e, FileNotFoundError) and e.__cause__ is not None else e
    response = getattr(cause, "response", None)
    status = getattr(response, "status_code", None)
    token = _token_note()
    if isinstance(cause, GatedRepoError):
        return HubError("hub_gated", f"{what} is gated: the Hub refused it {token} (HTTP {status}). "
                        "Accept its conditions on its Hub page with the account whose token is used "
                        "(HF_TOKEN or `hf auth login`).", status)
    if isinstance(cause, RevisionNotFoundError):
        return HubError("hub_revision_not_found", f"{what}: the repo exists but has no such revision "
                        "(branch, tag or commit).", status)
    if isinstance(cause, RepositoryNotFoundError):
        return HubError("hub_not_found", f"{what} was not found on the Hub {token} (HTTP {status}): "
                        "the name is wrong, or the repo is private and this token cannot see it.", status)
    if isinstance(cause, EntryNotFoundError) or isinstance(e, FileNotFoundError):
        return HubError("hub_file_not_found", f"{what}: no such file in the repo at this revision.", status)
    if isinstance(cause, HfHubHTTPError) or status is not None:
        headers = getattr(response, "headers", {}) or {}
        if status == 429:
            wait = headers.get("Retry-After") or _reset_seconds(headers.get("RateLimit", ""))
            return HubError("hub_rate_limited", f"{what}: the Hub is rate-limiting these requests "
                            f"(HTTP 429){f'; retry after {wait} s' if wait else ''}. Requests {token}"
                            " have a lower limit; HF_TOKEN or `hf auth login` raises it.", status)
        if status in (401, 403):
            return HubError("hub_forbidden", f"{what}: the Hub refused access {token} (HTTP {status}): "
                            "this token lacks the permission to read it.", status)
        return HubError("hub_http_error", f"{what}: the Hub answered HTTP {status}.", status)
    return HubError("hub_unreachable", f"{what}: the Hub could not be reached: {type(e).__name__}: "
                    f"{str(e)[:200]}.")


def _reset_seconds(ratelimit: str) -> str | None:
    m = re.search(r"\bt=(\d+)", ratelimit)
    return m.group(1) if m else None


class HubStats:
    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.api_requests = 0  # model info and tree listing (HfFileSystem)
        self.range_requests = 0  # reads of file bytes (a redirect's second leg counted apart)
        self.redirects = 0
        self.bytes = 0  # file bytes received

    def add(self, **counts: float) -> None:
        with self.lock:
            for k, v in counts.items():
                setattr(self, k, getattr(self, k) + v)

    @property
    def requests(self) -> int:
        return self.api_requests + self.range_requests + self.redirects

    def to_dict(self) -> dict[str, Any]:
        return {"requests": self.requests, "api_requests": self.api_requests,
                "range_requests": self.range_requests, "redirects": self.redirects,
                "bytes": self.bytes}


class HubRepo:
    """One repo at one revision: its files listed once, their bytes read by range requests."""

    def __init__(self, path: str) -> None:
        try:
            from huggingface_hub import HfFileSystem
        except ImportError as e:
            raise HubError("hub_not_installed", "hf:// paths need huggingface_hub: pip install "
                           "'checkpoint-model-explorer[hub]'.") from e
        self.stats = HubStats()
        self.endpoint = (os.environ.get("HF_ENDPOINT") or "https://huggingface.co").rstrip("/")
        # A fresh instance per listing: its cache and its counts are this listing's.
        self.fs: HfFileSystem = _counted_filesystem(HfFileSystem, self.endpoint, self.stats)
        self.started = time.perf_counter()
        try:
            resolved = self.fs.resolve_path(path)  # the repo's info: it exists, this token sees it
        except Exception as e:  # noqa: BLE001 - every Hub answer becomes a finding
            raise _as_hub_error(e, f"hf://{_repo_part(path)}") from e
        if not hasattr(resolved, "repo_id"):  # huggingface_hub 1.x+: a bucket path has no repo
            raise HubError("hub_bucket", f"{path}: a storage bucket, not a repo; its files are not "
                           "read through the Hub here.")
        self.repo_id, self.revision = resolved.repo_id, resolved.revision
        self.repo_type = resolved.repo_type
        inner = resolved.path_in_repo
        self.root = (path[:len(path) - len(inner)] if inner and path.endswith(inner) else path).rstrip("/")
        self.target = inner
        self.files: dict[str, int] = {}
        self.dirs: set[str] = {""}
        self._list()
        if self.target not in self.files and self.target not in self.dirs:
            raise HubError("hub_file_not_found", f"{path}: no such file or folder in {self.repo_id} at "
                           f"revision {self.revision!r}.", 404)
        self._heads: dict[str, bytes] = {}
        self._location: dict[str, str] = {}
        self._lock = threading.Lock()

    # -- the listing -----------------------------------------------------------------------------

    def _list(self) -> None:
        root = self.fs.resolve_path(self.root).unresolve()
        try:
            entries: dict[str, dict[str, Any]] = \
                self.fs.find(root, detail=True, withdirs=True)  # type: ignore[assignment]  # detail=True: a dict
        except Exception as e:  # noqa: BLE001
            raise _as_hub_error(e, self.root) from e
        for name, info in entries.items():
            rel = name[len(root):].lstrip("/")
            if info.get("type") == "directory":
                self.dirs.add(rel)
            else:
                self.files[rel] = int(info.get("size") or 0)
                parts = rel.split("/")
                for i in range(1, len(parts)):
                    self.dirs.add("/".join(parts[:i]))

    def rel(self, path: str) -> str:
        """The path inside the repo of an hf:// path under this repo's root."""
        return path[len(self.root):].strip("/")

    def exists(self, path: str) -> bool:
        rel = self.rel(path)
        return rel in self.files or rel in self.dirs

    def isdir(self, path: str) -> bool:
        return self.rel(path) in self.dirs

    def listdir(self, path: str) -> list[str]:
        rel = self.rel(path)
        prefix = rel + "/" if rel else ""
        names = {p[len(prefix):].split("/", 1)[0] for p in [*self.files, *self.dirs]
                 if p.startswith(prefix) and p != rel}
        return sorted(n for n in names if n)

    def size(self, path: str) -> int:
        rel = self.rel(path)
        if rel not in self.files:
            raise HubError("hub_file_not_found", f"{path}: no such file in the repo at this revision.")
        return self.files[rel]

    # -- bytes ---------------------------------------------------------------------------------

    def _url(self, rel: str) -> str:
        from huggingface_hub import hf_hub_url

        return hf_hub_url(self.repo_id, rel, repo_type=self.repo_type, revision=self.revision,
                          endpoint=self.endpoint)

    def read(self, path: str, start: int, end: int) -> bytes:
        """Bytes [start, end) of a file of this repo: one range request (two the first time the
        Hub redirects it to its CDN; the redirect's target is kept for the next read)."""
        rel = self.rel(path)
        try:
            return self._read(rel, start, end)
        except Exception as e:  # noqa: BLE001 - HubError (an OSError) carries the finding
            raise _as_hub_error(e, f"{self.root}/{rel}") from e

    def _read(self, rel: str, start: int, end: int) -> bytes:
        from huggingface_hub.utils import build_hf_headers, get_session, hf_raise_for_status

        if end <= start:
            return b""
        own = urlsplit(self.endpoint).netloc
        url = self._location.get(rel) or self._url(rel)
        for _hop in range(5):
            headers = {"Range": f"bytes={start}-{end - 1}"}
            if urlsplit(url).netloc == own:  # the token goes to the Hub, never to a CDN
                headers.update(build_hf_headers(token=self.fs.token))
            with _stream(get_session(), url, headers) as r:
                if r.status_code in (301, 302, 303, 307, 308) and "location" in r.headers:
                    self.stats.add(redirects=1)
                    url = urljoin(url, r.headers["location"])
                    with self._lock:
                        self._location[rel] = url
                    continue
                self.stats.add(range_requests=1)
                if r.status_code >= 400:
                    r.read()
                    hf_raise_for_status(r)
                data = bytearray()
                for chunk in r.iter_bytes():  # a server that ignores Range sends it all: stop
                    data += chunk
                    if len(data) >= end - start:
                        break
                if r.status_code == 200 and start > 0:  # the whole file from byte 0
                    raise HubError("hub_http_error", f"{self.root}/{rel}: the Hub ignored a range request.")
                size = self.files.get(rel)
                why = check_content_range(r.headers.get("content-range"), start, min(end, size), size) \
                    if r.status_code == 206 and size is not None and start < size else None
                if why is not None or (r.status_code == 206 and len(data) < min(end, size or end) - start):
                    raise HubError("http_bad_range", f"{self.root}/{rel}: the answer to a request for "
                                   f"bytes {start} to {end}: {why or f'a body of {len(data)} bytes'}. "
                                   "Those bytes are not the ones asked for, so none of them was used.")
                self.stats.add(bytes=len(data))
                return bytes(data[:end - start])
        raise HubError("hub_http_error", f"{self.root}/{rel}: too many redirects.")

    def head(self, path: str) -> bytes:
        """What was fetched from byte 0 of a file before the readers ran (b"" if nothing)."""
        return self._heads.get(self.rel(path), b"")

    # -- what an open reads, fetched in parallel ---------------------------------------------------

    def prefetch(self) -> None:
        """Fetch, in parallel, the headers of the weight files this open will read and the
        small JSON files beside them (index, config, tokenizer and adapter configs)."""
        weights, folder = self._weights_to_read()
        smalls = [p for p, n in self.files.items() if p.endswith(".json") and n <= SMALL_FILE
                  and _parent(p) == folder and p not in self._heads]
        with ThreadPoolExecutor(max_workers=WORKERS, thread_name_prefix="mx-hub") as pool:
            jobs: list[Future[Any]] = [pool.submit(self._fetch_whole, p) for p in smalls]
            if weights:
                # A middle shard's header tells how large the others probably are (the first
                # and last shards of a model often hold the embeddings: fewer, larger tensors),
                # so each of them is one range request.
                probe = weights[len(weights) // 2]
                guess = self._fetch_head(probe, PROBE_READ)
                jobs += [pool.submit(self._fetch_head, p, guess) for p in weights if p != probe]
            for j in jobs:
                j.result()  # the first HubError stops the open with its finding

    def _fetch_whole(self, rel: str) -> None:
        data = self.read(f"{self.root}/{rel}", 0, self.files[rel])
        with self._lock:
            self._heads[rel] = data

    def _fetch_head(self, rel: str, guess: int) -> int:
        """Read a weight file's first `guess` bytes, and the rest of a safetensors header if it
        is longer; returns the read size the next file of the set should try."""
        size = self.files[rel]
        path = f"{self.root}/{rel}"
        data = self.read(path, 0, min(size, guess))
        need = len(data)
        if rel.endswith(".safetensors") and len(data) >= 8:
            need = 8 + int.from_bytes(data[:8], "little")
            if len(data) < need <= min(size, MAX_GUESS * 4):
                data += self.read(path, len(data), need)
        with self._lock:
            self._heads[rel] = data
        return min(MAX_GUESS, max(FIRST_READ, -(-int(need * 2) // 4096) * 4096))

    def _weights_to_read(self) -> tuple[list[str], str]:
        """The weight files the readers will open for this target, and the folder whose side files
        they read."""
        target = self.target
        if target in self.files and not target.endswith(".index.json"):
            m = _SPLIT.match(target.rsplit("/", 1)[-1])
            folder = _parent(target)
            if m:
                siblings = [p for p in self.files if _parent(p) == folder
                            and (s := _SPLIT.match(p.rsplit("/", 1)[-1])) and s["stem"] == m["stem"]]
                return sorted(siblings), folder
            return [target], folder
        if target.endswith(".index.json"):
            return self._index_shards(target), _parent(target)
        folder = target
        names = [p for p in self.files if _parent(p) == folder]
        indexes = sorted(p for p in names if p.endswith(".index.json"))
        preferred = [p for p in indexes if p.endswith(".safetensors.index.json")] or indexes
        if preferred:
            return self._index_shards(preferred[0]), folder
        weights = sorted(p for p in names if p.endswith(".safetensors")) or \
            sorted(p for p in names if p.endswith(".gguf"))
        if weights and weights[0].endswith(".gguf"):
            m = _SPLIT.match(weights[0].rsplit("/", 1)[-1])
            weights = [p for p in weights if m and (s := _SPLIT.match(p.rsplit("/", 1)[-1]))
                       and s["stem"] == m["stem"]] or weights[:1]
        return weights, folder

    def _index_shards(self, index: str) -> list[str]:
        if self.files.get(index, MAX_INDEX_BYTES + 1) > MAX_INDEX_BYTES:
            return []  # the reader says it is too large
        if index not in self._heads:
            self._fetch_whole(index)
        try:
            weight_map = json.loads(self._heads[index]).get("weight_map", {})
            shards = dict.fromkeys(v for v in weight_map.values() if isinstance(v, str))
        except (ValueError, AttributeError):
            return []  # the reader says what is wrong with it
        folder = _parent(index)
        out = [f"{folder}/{s}" if folder else s for s in shards]
        return [p for p in out if p in self.files]

    def summary(self) -> dict[str, Any]:
        d = self.stats.to_dict()
        d.update(seconds=round(time.perf_counter() - self.started, 3), repo=self.repo_id, revision=self.revision, files=len(self.files),
                 repo_bytes=sum(self.files.values()), headers_prefetched=len(self._heads))
        return d


def _stream(session, url: str, headers: dict):
    """A streamed GET that does not follow redirects (httpx or requests)."""
    try:
        return session.stream("GET", url, headers=headers, follow_redirects=False)
    except AttributeError:  # requests.Session (huggingface_hub < 1.0)
        import contextlib

        r = session.get(url, headers=headers, allow_redirects=False, stream=True)
        r.iter_bytes = lambda: r.iter_content(1 << 16)
        r.read = lambda: r.content
        return contextlib.closing(r) if not hasattr(r, "__enter__") else r


def _parent(rel: str) -> str:
    return rel.rsplit("/", 1)[0] if "/" in rel else ""


def _repo_part(path: str) -> str:
    return "/".join(path[len(PREFIX):].split("/")[:2])


def _counted_filesystem(filesystem: type, endpoint: str, stats: HubStats):
    """A fresh HfFileSystem whose Hub API client is its own and counts into `stats` the requests
    it makes: the repo's info, each page of its tree listing (HfFileSystem lists sub-trees in
    threads of its own), paths-info. Nothing is hooked on huggingface_hub's shared session, so
    another open, or a background cross-check, never lands in this count."""
    from huggingface_hub import HfApi

    class CountedApi(HfApi):
        def repo_info(self, *args, **kwargs):
            stats.add(api_requests=1)
            return super().repo_info(*args, **kwargs)

        def get_paths_info(self, *args, **kwargs):
            stats.add(api_requests=1)
            return super().get_paths_info(*args, **kwargs)

        def _iter_repo_tree_pages(self, *args, **kwargs):
            stats.add(api_requests=1)  # the first page's request, made when iterating starts
            for page, finished in super()._iter_repo_tree_pages(*args, **kwargs):
                yield page, finished
                if not finished:  # the next page is asked for only if the caller reads on
                    stats.add(api_requests=1)

    if not hasattr(HfApi, "_iter_repo_tree_pages"):  # huggingface_hub before pages were exposed
        def list_repo_tree(self, *args, **kwargs):  # one request counted per listing
            stats.add(api_requests=1)
            return HfApi.list_repo_tree(self, *args, **kwargs)

        CountedApi.list_repo_tree = list_repo_tree  # type: ignore[method-assign]  # older versions only

    fs = filesystem(endpoint=endpoint, skip_instance_cache=True)
    fs._api = CountedApi(endpoint=endpoint, token=fs.token)  # in place of the plain HfApi it made
    return fs


# -- the repos one open reads ------------------------------------------------------------------

class HubRepos:
    """The repos one open has listed, by root. Every hf:// path the open reads (the readers', the
    side files') is looked up here, so a read never depends on what an earlier open listed."""

    def __init__(self) -> None:
        self._by_root: dict[str, HubRepo] = {}
        self._lock = threading.Lock()

    def add(self, repo: HubRepo) -> HubRepo:
        with self._lock:
            self._by_root[repo.root] = repo
        return repo

    def repo_of(self, path: str) -> HubRepo:
        """The repo of this open whose root holds `path` (the deepest), else a new listing."""
        with self._lock:
            best = max((r for root, r in self._by_root.items()
                        if path == root or path.startswith(root + "/")),
                       key=lambda r: len(r.root), default=None)
        return best if best is not None else self.add(HubRepo(path))


# The listings of the open running in this thread (contextvars: per thread, per task); None
# outside an open, where every read lists its repo afresh.
_CURRENT: ContextVar[HubRepos | None] = ContextVar("model_explorer_hub_repos", default=None)


@contextlib.contextmanager
def reading(repos: HubRepos | None) -> Iterator[HubRepos | None]:
    """Make `repos` the listings that hf:// reads use for the block (None: leave them be)."""
    if repos is None:
        yield None
        return
    token = _CURRENT.set(repos)
    try:
        yield repos
    finally:
        _CURRENT.reset(token)


def begin(path: str) -> HubRepo:
    """A fresh view of the repo `path` is in (listing, then its headers fetched in parallel);
    raises HubError with the finding to report."""
    repo = HubRepo(path)
    repo.prefetch()
    return repo


def repo_of(path: str) -> HubRepo:
    """The repo an hf:// path is in: from the current open's listings (`reading`), else a new one."""
    repos = _CURRENT.get()
    return repos.repo_of(path) if repos is not None else HubRepo(path)


def report(ckpt, repo: HubRepo) -> None:
    """The summary's line: how many requests and bytes the open took."""
    from .units import format_bytes

    s = repo.summary()
    ckpt.details["hub"] = s
    ckpt.findings.append(Finding.of(
        "hub_reads", f"Read from the Hub without downloading: {s['requests']} requests "
        f"({s['api_requests']} API, {s['range_requests']} ranges, {s['redirects']} redirects), "
        f"{format_bytes(s['bytes'])} of the repo's {format_bytes(s['repo_bytes'])} in "
        f"{s['seconds']:.2f} s; {s['headers_prefetched']} files' headers fetched in parallel.",
        file=repo.root))
