"""Fixtures shared by several test areas."""

from __future__ import annotations

import functools
import http.server
import os
import re
import threading

import pytest


class _RangeHandler(http.server.SimpleHTTPRequestHandler):
    """Serves files with Range support (206), HEAD with Content-Length, and counts body bytes."""

    def log_message(self, *args) -> None:
        pass

    def do_HEAD(self) -> None:
        self._serve(head=True)

    def do_GET(self) -> None:
        self._serve(head=False)

    def _serve(self, head: bool) -> None:
        path = self.translate_path(self.path)
        if os.path.isdir(path):  # HTML listing, as a plain web server gives
            return super().do_HEAD() if head else super().do_GET()
        if not os.path.isfile(path):
            self.send_error(404)
            return
        size = os.path.getsize(path)
        start, end, status = 0, size - 1, 200
        m = re.match(r"bytes=(\d+)-(\d*)$", self.headers.get("Range", ""))
        if m:
            start, status = int(m[1]), 206
            end = min(int(m[2]) if m[2] else size - 1, size - 1)
        self.send_response(status)
        self.send_header("Content-Type", "application/octet-stream")
        self.send_header("Accept-Ranges", "bytes")
        self.send_header("Content-Length", str(max(0, end - start + 1)))
        if status == 206:
            self.send_header("Content-Range", f"bytes {start}-{end}/{size}")
        self.end_headers()
        if head:
            return
        self.server.requests.append((self.path, start, end))
        if "broken" in self.path:  # a server that announces a file, then fails to send it
            self.wfile.write(b"")
            self.close_connection = True
            return
        with open(path, "rb") as f:
            f.seek(start)
            left = end - start + 1
            try:
                while left > 0:
                    chunk = f.read(min(1 << 16, left))
                    self.wfile.write(chunk)
                    self.server.bytes_sent += len(chunk)
                    left -= len(chunk)
            except (BrokenPipeError, ConnectionResetError):
                pass


class _Server(http.server.ThreadingHTTPServer):
    daemon_threads = True
    bytes_sent = 0

    def __init__(self, *args) -> None:
        super().__init__(*args)
        self.requests: list = []


@pytest.fixture(scope="module")
def http_server(tmp_path_factory):
    root = tmp_path_factory.mktemp("www")
    server = _Server(("127.0.0.1", 0), functools.partial(_RangeHandler, directory=str(root)))
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield root, f"http://127.0.0.1:{server.server_address[1]}", server
    server.shutdown()
    server.server_close()


@pytest.fixture
def served(http_server, request):
    """(a fresh folder on the server, its URL, the server); counters start at zero."""
    root, base, server = http_server
    folder = root / request.node.name
    folder.mkdir()
    server.bytes_sent = 0
    server.requests.clear()
    return folder, f"{base}/{request.node.name}", server


# -- every finding the suite produces agrees with the catalog (codes.py) ---------------------------
# spans.Finding.of keeps each finding made while the suite runs; after each test, the ones made
# since the last check are held against the catalog (code, severity, fix), and a disagreement
# fails that test. Each pytest-xdist worker checks its own tests, so `-n 2 --dist loadfile` works.
# tests/house/test_finding_catalog.py tests the check itself.

def _watch_findings() -> None:
    from model_explorer import spans

    spans.watch_findings(True)


_watch_findings()


@pytest.fixture(autouse=True)
def _findings_agree_with_the_catalog():
    from model_explorer import spans

    yield
    problems = spans.watched_problems()
    if problems:
        shown = "\n".join(sorted(set(problems))[:20])
        pytest.fail(f"findings that disagree with model_explorer/codes.py:\n{shown}", pytrace=False)


def pytest_sessionfinish(session, exitstatus) -> None:
    from model_explorer import spans

    problems = spans.watched_problems()  # made outside any test (collection, session fixtures' teardown)
    if problems and exitstatus == 0:
        print("\nFindings that disagree with model_explorer/codes.py:\n" + "\n".join(sorted(set(problems))[:20]))
        session.exitstatus = 1
