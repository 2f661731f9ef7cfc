"""Range reads over HTTP(S) with every answer checked before a byte of it is used.

A range request can come back three ways, and only one of them is the range:
- 206 Partial Content whose `Content-Range` says exactly the bytes asked for (the end clamped to
  the file's end) of a file of the size the HEAD said: its body is the range, and it must be
  that long;
- 200 OK: the server ignored `Range` and sends the whole file from byte 0 (Python's http.server,
  some mirrors and proxies). A small file is kept whole (one request serves every later read);
  a larger one is sliced while streaming (the bytes before the range are skipped, never held),
  up to `SKIP_LIMIT` bytes from its start; a read further in is refused, since each one would
  download the file from its start again;
- anything else (a `Content-Range` for other bytes or another size, a short body, an encoded
  body) is refused: the bytes are not the file's, so no value is ever read from them.

What was refused or what it cost is a finding (`RangeProblem.finding`): the byte source keeps it
and the open lists it. The request goes through fsspec's own aiohttp session (its connection pool
and options) and asks for `Accept-Encoding: identity`, since a range of compressed bytes is not a
range of the file.
"""

from __future__ import annotations

import re

from .spans import Finding

WHOLE_LIMIT = 64 * 1024 * 1024  # a file a server sends whole is kept when at most this large
SKIP_LIMIT = 64 * 1024 * 1024  # at most this many bytes of a whole-file answer are skipped to a range
CHUNK = 1 << 16
_CONTENT_RANGE = re.compile(r"^\s*bytes\s+(\d+)-(\d+)/(\d+|\*)\s*$", re.IGNORECASE)


class RangeProblem(OSError):
    """An answer whose bytes are not the range asked for: `code` and `message` make its finding."""

    def __init__(self, code: str, message: str, start: int, end: int, **fields) -> None:
        super().__init__(message)
        self.code, self.message, self.start, self.end, self.fields = code, message, start, end, fields

    def finding(self, file: str) -> Finding:
        return Finding.of(self.code, self.message, offset=self.start, length=self.end - self.start,
                          file=file, **self.fields)


class Answer:
    """A checked answer: `data` is bytes [start, end); `whole` the whole file when the server sent
    it (200) and it was kept; `sent` the body bytes that came over the network; `ignored_range`
    when the server answered 200."""

    def __init__(self, data: bytes, sent: int, whole: bytes | None = None, ignored_range: bool = False) -> None:
        self.data, self.sent, self.whole, self.ignored_range = data, sent, whole, ignored_range


def check_content_range(value: str | None, start: int, end: int, size: int) -> str | None:
    """Why a 206's `Content-Range` is not bytes [start, end) of a `size`-byte file, or None."""
    want = f"bytes {start}-{end - 1}/{size}"
    if value is None:
        return f"the answer (206) has no Content-Range header; expected {want!r}"
    m = _CONTENT_RANGE.match(value)
    if not m:
        return f"its Content-Range is {value!r}, not of the form {want!r}"
    first, last, total = int(m[1]), int(m[2]), m[3]
    if total != "*" and int(total) != size:
        return f"its Content-Range {value!r} gives a file of {total} bytes, but the server said {size} (HEAD)"
    if (first, last) != (start, end - 1):
        return f"its Content-Range is {value!r}: bytes {first} to {last}, but bytes {start} to {end - 1} were asked for"
    return None


def get_range(fs, url: str, start: int, end: int, size: int) -> Answer:
    """Bytes [start, end) of the `size`-byte file at `url`, checked (see the module's doc)."""
    from fsspec.asyn import sync

    return sync(fs.loop, _get, fs, url, start, end, size)


async def _get(fs, url: str, start: int, end: int, size: int) -> Answer:
    session = await fs.set_session()
    kw = dict(fs.kwargs)
    headers = dict(kw.pop("headers", None) or {})
    headers.update({"Range": f"bytes={start}-{end - 1}", "Accept-Encoding": "identity"})
    async with session.get(fs.encode_url(url), headers=headers, **kw) as r:
        try:
            return await _answer(r, url, start, end, size)
        finally:
            r.close()  # a body not read to its end is dropped with its connection, not drained


async def _answer(r, url: str, start: int, end: int, size: int) -> Answer:
    if r.status == 404:
        raise FileNotFoundError(url)
    if r.status >= 400:
        raise OSError(f"reading bytes {start} to {end} of {url!r}: HTTP {r.status} {r.reason}")
    encoding = r.headers.get("Content-Encoding", "identity").strip().lower()
    if encoding not in ("", "identity"):
        raise RangeProblem("http_bad_range", f"The server sent bytes {start} to {end} encoded "
                           f"({encoding}) though identity was asked for: a range of encoded bytes is "
                           "not a range of the file, so none of it was used.", start, end)
    length = r.headers.get("Content-Length")
    if r.status == 206:
        why = check_content_range(r.headers.get("Content-Range"), start, end, size)
        if why is not None:
            raise RangeProblem("http_bad_range", f"The server's answer to a request for bytes {start} "
                               f"to {end}: {why}. Those bytes are not the ones asked for, so none of "
                               "them was used.", start, end)
        if length is not None and length.strip().isdigit() and int(length) != end - start:
            raise RangeProblem("http_bad_range", f"The server's answer to a request for bytes {start} "
                               f"to {end} says Content-Length {length.strip()}, not {end - start}; none "
                               "of it was used.", start, end)
        data = await _take(r.content, end - start)
        _whole_body(data, end - start, start, end, url)
        return Answer(data, len(data))
    if r.status == 200:
        if length is not None and length.strip().isdigit() and int(length) != size:
            raise RangeProblem("http_bad_range", f"The server ignored the range and answered with a "
                               f"body of {length.strip()} bytes, but the file is {size} bytes (HEAD): "
                               "that body is not the file, so none of it was used.", start, end)
        if size <= WHOLE_LIMIT:
            whole = await _take(r.content, size)
            _whole_body(whole, size, 0, size, url)
            return Answer(whole[start:end], len(whole), whole=whole, ignored_range=True)
        if end > SKIP_LIMIT:
            raise RangeProblem("http_no_ranges_refused", f"The server ignores Range requests (it "
                               f"answered 200 with the whole file), and bytes {start} to {end} lie "
                               f"{start:,} bytes into a file of {size:,}: each such read would "
                               "download the file from its start, so it was refused.", start, end,
                               size=size)
        skipped = await _skip(r.content, start)
        data = await _take(r.content, end - start)
        _whole_body(data, end - start, start, end, url)
        return Answer(data, skipped + len(data), ignored_range=True)
    raise OSError(f"reading bytes {start} to {end} of {url!r}: unexpected HTTP {r.status} {r.reason}")


def _whole_body(data: bytes, want: int, start: int, end: int, url: str) -> None:
    if len(data) < want:
        raise OSError(f"reading bytes {start} to {end} of {url!r}: the server sent {len(data)} of "
                      f"the {want} bytes and stopped")


async def _take(content, n: int) -> bytes:
    """At most `n` bytes of a body, read in chunks (never more than asked for)."""
    out = bytearray()
    while len(out) < n:
        chunk = await content.read(min(CHUNK, n - len(out)))
        if not chunk:
            break
        out += chunk
    return bytes(out)


async def _skip(content, n: int) -> int:
    """Read and drop the first `n` bytes of a body; returns how many came."""
    done = 0
    while done < n:
        chunk = await content.read(min(CHUNK, n - done))
        if not chunk:
            break
        done += len(chunk)
    return done
