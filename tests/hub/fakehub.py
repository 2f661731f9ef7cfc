"""A local server that answers the Hugging Face Hub's HTTP API the way huggingface_hub calls it
(HF_ENDPOINT points at it): repo info, tree listing, paths-info, and `resolve` with Range
requests, where large (LFS) files redirect to a CDN path; 401/403/404/429 with the
X-Error-Code headers the Hub sends. Used by tests/hub and benchmarks/bench_hub.py.

Files are bytes, or `Virtual(head, size)`: a real header followed by zeros up to `size`, so a
163-shard, 690 GB repository costs only its headers in memory.
"""

from __future__ import annotations

import hashlib
import http.server
import json
import re
import threading
import time
from dataclasses import dataclass, field
from urllib.parse import parse_qs, unquote, urlsplit

LFS_MIN = 10 * 1024 * 1024  # files at least this large are "LFS" and redirect to the CDN
GOOD_TOKEN = "hf_fake_good_token"


@dataclass
class Virtual:
    head: bytes
    size: int

    def slice(self, start: int, end: int) -> bytes:  # [start, end)
        out = self.head[start:end]
        return out + bytes(max(0, end - max(start, len(self.head))))


@dataclass
class Repo:
    revisions: dict[str, dict[str, bytes | Virtual]]
    access: str = "public"  # public | private (needs GOOD_TOKEN) | gated (files need GOOD_TOKEN) | limited
    lfs: set[str] = field(default_factory=set)  # extra paths served as LFS whatever their size


def _size(f: bytes | Virtual) -> int:
    return f.size if isinstance(f, Virtual) else len(f)


def _oid(text: str) -> str:
    return hashlib.sha1(text.encode()).hexdigest()


class Handler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server: FakeHub

    def log_message(self, *args) -> None:
        pass

    def do_GET(self) -> None:
        self._dispatch("GET")

    def do_HEAD(self) -> None:
        self._dispatch("HEAD")

    def do_POST(self) -> None:
        self._dispatch("POST")

    # -- plumbing ----------------------------------------------------------------------------

    def _send(self, status: int, body: bytes = b"", headers: dict | None = None, head: bool = False) -> None:
        self.send_response(status)
        for k, v in (headers or {}).items():
            self.send_header(k, str(v))
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        if not head and body:
            try:
                self.wfile.write(body)
            except (BrokenPipeError, ConnectionResetError):
                pass
        self.server.bytes_sent += 0 if head else len(body)

    def _json(self, status: int, data, head: bool = False, headers: dict | None = None) -> None:
        self._send(status, json.dumps(data).encode(), {"Content-Type": "application/json", **(headers or {})}, head)

    def _error(self, status: int, code: str | None, message: str, head: bool = False) -> None:
        headers = {"X-Error-Message": message}
        if code:
            headers["X-Error-Code"] = code
        if status == 429:
            headers["Retry-After"] = "30"
            headers["RateLimit"] = '"api";r=0;t=30'
            headers["RateLimit-Policy"] = '"fixed window";"api";q=500;w=300'
        self._json(status, {"error": message}, head, headers)

    def _authorized(self) -> bool:
        return self.headers.get("Authorization", "") == f"Bearer {GOOD_TOKEN}"

    def _repo(self, repo_id: str, files: bool, head: bool) -> Repo | None:
        """The repo if this request may see it; else the Hub's error answer is sent."""
        repo = self.server.repos.get(repo_id)
        if repo is not None and repo.access == "limited":
            self._error(429, None, "You have been rate-limited.", head)
            return None
        if repo is None or (repo.access == "private" and not self._authorized()):
            self._error(401 if not self._authorized() else 404, "RepoNotFound", "Repository not found", head)
            return None
        if repo.access == "gated" and files and not self._authorized():
            status = 403 if self.headers.get("Authorization") else 401
            self._error(status, "GatedRepo", "Access to model is restricted and you are not in the "
                        "authorized list.", head)
            return None
        return repo

    def _revision(self, repo: Repo, rev: str, head: bool):
        rev = unquote(rev)
        if rev not in repo.revisions:
            self._error(404, "RevisionNotFound", f"Invalid rev id: {rev}", head)
            return None
        return rev, repo.revisions[rev]

    def _dispatch(self, method: str) -> None:
        parts = urlsplit(self.path)
        path, query = parts.path, parse_qs(parts.query)
        rng = self.headers.get("Range")
        with self.server.lock:
            self.server.log.append((method, path, rng))
            self.server.inflight += 1
            self.server.max_inflight = max(self.server.max_inflight, self.server.inflight)
        try:
            if self.server.delay:
                time.sleep(self.server.delay)
            self._route(method, path, query)
        finally:
            with self.server.lock:
                self.server.inflight -= 1

    def _route(self, method: str, path: str, query: dict) -> None:
        head = method == "HEAD"
        m = re.match(r"^/api/models/([^/]+/[^/]+)(?:/revision/([^/]+))?$", path)
        if m and method in ("GET", "HEAD"):
            return self._info(m[1], m[2] or "main", head)
        m = re.match(r"^/api/models/([^/]+/[^/]+)/tree/([^/]+)(/.*)?$", path)
        if m:
            return self._tree(m[1], m[2], unquote((m[3] or "").lstrip("/")), query, head)
        m = re.match(r"^/api/models/([^/]+/[^/]+)/paths-info/([^/]+)$", path)
        if m and method == "POST":
            return self._paths_info(m[1], m[2])
        m = re.match(r"^/([^/]+/[^/]+)/resolve/([^/]+)/(.+)$", path)
        if m:
            return self._resolve(m[1], m[2], unquote(m[3]), head, cdn=False)
        m = re.match(r"^/__cdn__/([^/]+/[^/]+)/([^/]+)/(.+)$", path)
        if m:
            return self._resolve(m[1], m[2], unquote(m[3]), head, cdn=True)
        self._error(404, None, f"no route for {path}", head)

    # -- endpoints -----------------------------------------------------------------------------

    def _info(self, repo_id: str, rev: str, head: bool) -> None:
        repo = self._repo(repo_id, files=False, head=head)
        if repo is None:
            return
        got = self._revision(repo, rev, head)
        if got is None:
            return
        rev, files = got
        self._json(200, {"id": repo_id, "modelId": repo_id, "sha": _oid(repo_id + rev),
                         "private": repo.access == "private", "gated": "manual" if repo.access == "gated" else False,
                         "disabled": False, "downloads": 0, "likes": 0, "tags": [],
                         "siblings": [{"rfilename": p} for p in sorted(files)]}, head)

    def _entry(self, repo: Repo, p: str, f) -> dict:
        e = {"type": "file", "oid": _oid(p), "size": _size(f), "path": p}
        if self._is_lfs(repo, p, f):
            e["lfs"] = {"oid": hashlib.sha256(p.encode()).hexdigest(), "size": _size(f), "pointerSize": 134}
        return e

    def _is_lfs(self, repo: Repo, p: str, f) -> bool:
        return _size(f) >= LFS_MIN or p in repo.lfs or p.endswith((".safetensors", ".gguf", ".bin"))

    def _tree(self, repo_id: str, rev: str, inner: str, query: dict, head: bool) -> None:
        repo = self._repo(repo_id, files=False, head=head)
        if repo is None:
            return
        got = self._revision(repo, rev, head)
        if got is None:
            return
        _, files = got
        recursive = query.get("recursive", ["false"])[0].lower() == "true"
        prefix = inner + "/" if inner else ""
        out, dirs = [], set()
        for p in sorted(files):
            if not p.startswith(prefix):
                continue
            rest = p[len(prefix):]
            if "/" in rest and not recursive:
                dirs.add(prefix + rest.split("/", 1)[0])
                continue
            if recursive:
                segs = rest.split("/")[:-1]
                for i in range(1, len(segs) + 1):
                    dirs.add(prefix + "/".join(segs[:i]))
            out.append(self._entry(repo, p, files[p]))
        if inner and not out and not dirs:
            return self._error(404, "EntryNotFound", f"{inner} does not exist on {rev}", head)
        out = [{"type": "directory", "oid": _oid(d), "size": 0, "path": d} for d in sorted(dirs)] + out
        self._json(200, out, head)

    def _paths_info(self, repo_id: str, rev: str) -> None:
        repo = self._repo(repo_id, files=False, head=False)
        if repo is None:
            return
        got = self._revision(repo, rev, False)
        if got is None:
            return
        _, files = got
        body = self.rfile.read(int(self.headers.get("Content-Length") or 0)).decode()
        try:
            paths = json.loads(body).get("paths", [])
        except ValueError:
            paths = parse_qs(body).get("paths", [])
        out = []
        for p in paths:
            if p in files:
                out.append(self._entry(repo, p, files[p]))
            elif any(f.startswith(p + "/") for f in files):
                out.append({"type": "directory", "oid": _oid(p), "size": 0, "path": p})
        self._json(200, out)

    def _resolve(self, repo_id: str, rev: str, inner: str, head: bool, cdn: bool) -> None:
        repo = self.server.repos.get(repo_id) if cdn else self._repo(repo_id, files=True, head=head)
        if repo is None:
            if cdn:
                self._error(404, None, "no such object", head)
            return
        got = self._revision(repo, rev, head)
        if got is None:
            return
        rev, files = got
        if inner not in files:
            return self._error(404, "EntryNotFound", f"{inner} does not exist on {rev}", head)
        f = files[inner]
        size = _size(f)
        common = {"ETag": f'"{_oid(inner)}"', "X-Repo-Commit": _oid(repo_id + rev), "Accept-Ranges": "bytes"}
        if not cdn and self._is_lfs(repo, inner, f):
            with self.server.lock:
                self.server.redirects += 1
            return self._send(302, b"", {**common, "Location": f"/__cdn__/{repo_id}/{rev}/{inner}",
                                         "X-Linked-Size": size, "X-Linked-Etag": common["ETag"]}, head)
        start, end, status = 0, size, 200
        m = re.match(r"bytes=(\d+)-(\d*)$", self.headers.get("Range", ""))
        if m:
            start, status = int(m[1]), 206
            end = min(int(m[2]) + 1 if m[2] else size, size)
            if start >= size:
                return self._send(416, b"", {"Content-Range": f"bytes */{size}"}, head)
        body = f.slice(start, end) if isinstance(f, Virtual) else f[start:end]
        headers = {**common, "Content-Type": "application/octet-stream"}
        if status == 206:
            headers["Content-Range"] = f"bytes {start}-{end - 1}/{size}"
        with self.server.lock:
            self.server.ranges += 1
        self._send(status, body, headers, head)


class FakeHub(http.server.ThreadingHTTPServer):
    daemon_threads = True
    request_queue_size = 256

    def __init__(self, repos: dict[str, Repo], delay: float = 0.0) -> None:
        super().__init__(("127.0.0.1", 0), Handler)
        self.repos = repos
        self.delay = delay
        self.lock = threading.Lock()
        self.log: list[tuple[str, str, str | None]] = []
        self.bytes_sent = 0
        self.redirects = 0
        self.ranges = 0
        self.inflight = self.max_inflight = 0
        self.thread = threading.Thread(target=self.serve_forever, daemon=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}"

    def reset(self) -> None:
        with self.lock:
            self.log.clear()
            self.bytes_sent = self.redirects = self.ranges = self.max_inflight = 0

    def __enter__(self) -> FakeHub:
        self.thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self.shutdown()
        self.server_close()
