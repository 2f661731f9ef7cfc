"""Run one model's audit in a forked child with a time limit and a memory cap.

A file built to hang a parser, or to make it allocate without bound, must cost the batch one
row, not a worker. The child gets RLIMIT_DATA (heap and anonymous maps; the read-only maps of
the checkpoint files do not count, so a 50 GB shard can still be mapped), counted on top of what
it inherits from the parent, and is killed at the
deadline; its result comes back pickled through a pipe (our own plain dict, never file data).
Where `os.fork` does not exist the function simply runs in the caller.
"""

from __future__ import annotations

import faulthandler
import os
import pickle
import select
import signal
import time
import traceback
from collections.abc import Callable
from typing import Any


class Failed(Exception):
    """The child did not return: `kind` is "timeout", "memory" or "crashed"."""

    def __init__(self, kind: str, message: str) -> None:
        super().__init__(message)
        self.kind = kind


def _inherited_data() -> int:
    """Bytes of data mappings the child starts with (Linux's VmData, which RLIMIT_DATA counts);
    0 where /proc is not there."""
    try:
        with open("/proc/self/status", encoding="ascii", errors="replace") as f:
            for line in f:
                if line.startswith("VmData:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    return 0


def _set_memory_cap(limit: int | None) -> None:
    """The cap is what the model's work may add: a worker that already holds gigabytes of
    reserved arenas (torch, a long test session, a notebook) must not fail every model it forks."""
    if not limit:
        return
    import resource

    cap = _inherited_data() + limit
    for which in ("RLIMIT_DATA", "RLIMIT_AS") if os.uname().sysname != "Linux" else ("RLIMIT_DATA",):
        res = getattr(resource, which, None)
        if res is not None:
            hard = resource.getrlimit(res)[1]
            resource.setrlimit(res, (cap if hard == resource.RLIM_INFINITY else min(cap, hard), hard))


def run_isolated(fn: Callable[..., Any], args: tuple, timeout: float | None, memory_limit: int | None) -> Any:
    """`fn(*args)` in a forked child; raises Failed when it times out, runs out of memory or dies."""
    if not hasattr(os, "fork"):
        return fn(*args)
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: never returns into the caller's code
        code = 0
        try:
            os.close(r)
            signal.signal(signal.SIGINT, signal.SIG_DFL)
            faulthandler.disable()  # a crash is reported as this model's row, not a stack dump
            _set_memory_cap(memory_limit)
            try:
                payload = ("ok", fn(*args))
            except MemoryError:
                payload = ("memory", "MemoryError: the model needed more memory than the cap")
            except BaseException as e:  # noqa: BLE001 - everything goes back as text
                payload = ("crashed", f"{type(e).__name__}: {e}\n{traceback.format_exc(limit=-6)}")
            try:
                data = pickle.dumps(payload, protocol=pickle.HIGHEST_PROTOCOL)
            except MemoryError:
                data = pickle.dumps(("memory", "MemoryError while sending the result"))
            with os.fdopen(w, "wb") as out:
                out.write(data)
        except BaseException:  # noqa: BLE001
            code = 70
        finally:
            os._exit(code)
    os.close(w)
    chunks: list[bytes] = []
    deadline = None if not timeout else time.monotonic() + timeout
    try:
        while True:
            left = None if deadline is None else max(0.0, deadline - time.monotonic())
            ready, _, _ = select.select([r], [], [], left)
            if not ready:
                os.kill(pid, signal.SIGKILL)
                os.waitpid(pid, 0)
                raise Failed("timeout", f"stopped after {timeout:g} s")
            block = os.read(r, 1 << 20)
            if not block:
                break
            chunks.append(block)
    finally:
        os.close(r)
    _, status = os.waitpid(pid, 0)
    if chunks:
        kind, value = pickle.loads(b"".join(chunks))  # our child's own dict
        if kind == "ok":
            return value
        raise Failed(kind, value)
    if os.WIFSIGNALED(status):
        sig = os.WTERMSIG(status)
        kind = "memory" if sig == signal.SIGKILL else "crashed"  # the OOM killer sends SIGKILL
        raise Failed(kind, f"the auditing process died with signal {signal.Signals(sig).name}")
    raise Failed("crashed", f"the auditing process exited with status {os.WEXITSTATUS(status)} and no result")


def _send(out, item) -> None:
    data = pickle.dumps(item, protocol=pickle.HIGHEST_PROTOCOL)
    out.write(len(data).to_bytes(8, "little") + data)
    out.flush()


def _child_batch(fn: Callable[..., Any], items: list, start: int, w: int, memory_limit: int | None) -> None:
    code = 0
    try:
        signal.signal(signal.SIGINT, signal.SIG_DFL)
        faulthandler.disable()
        _set_memory_cap(memory_limit)
        with os.fdopen(w, "wb") as out:
            for i in range(start, len(items)):
                try:
                    item = (i, "ok", fn(items[i]))
                except MemoryError:
                    item = (i, "memory", "MemoryError: the model needed more memory than the cap")
                except BaseException as e:  # noqa: BLE001
                    item = (i, "crashed", f"{type(e).__name__}: {e}\n{traceback.format_exc(limit=-6)}")
                try:
                    _send(out, item)
                except MemoryError:
                    _send(out, (i, "memory", "MemoryError while sending the result"))
    except BaseException:  # noqa: BLE001
        code = 70
    finally:
        os._exit(code)


def run_isolated_batch(fn: Callable[[Any], Any], items: list, timeout: float | None,
                       memory_limit: int | None):
    """`fn(item)` for each item in forked children, one fork for as many items as go well: yields
    (index, result or Failed). A child that hangs (per-item `timeout`), runs out of memory or
    dies costs its current item only; a new child takes the rest."""
    if not hasattr(os, "fork"):
        for i, item in enumerate(items):
            yield i, fn(item)
        return
    start = 0
    while start < len(items):
        r, w = os.pipe()
        pid = os.fork()
        if pid == 0:
            os.close(r)
            _child_batch(fn, items, start, w, memory_limit)
        os.close(w)
        buf = b""
        failed: Failed | None = None
        deadline = None if not timeout else time.monotonic() + timeout
        try:
            while True:
                left = None if deadline is None else max(0.0, deadline - time.monotonic())
                ready, _, _ = select.select([r], [], [], left)
                if not ready:
                    os.kill(pid, signal.SIGKILL)
                    failed = Failed("timeout", f"stopped after {timeout:g} s")
                    break
                block = os.read(r, 1 << 20)
                if not block:
                    break
                buf += block
                while len(buf) >= 8 and len(buf) >= 8 + int.from_bytes(buf[:8], "little"):
                    n = int.from_bytes(buf[:8], "little")
                    i, kind, value = pickle.loads(buf[8:8 + n])  # our child's own tuple
                    buf = buf[8 + n:]
                    yield i, (value if kind == "ok" else Failed(kind, value))
                    start = i + 1
                    deadline = None if not timeout else time.monotonic() + timeout
        finally:
            os.close(r)
        _, status = os.waitpid(pid, 0)
        if start >= len(items):
            break
        if failed is None:
            if os.WIFSIGNALED(status):
                sig = os.WTERMSIG(status)
                kind = "memory" if sig == signal.SIGKILL else "crashed"
                failed = Failed(kind, f"the auditing process died with signal {signal.Signals(sig).name}")
            else:
                failed = Failed("crashed", f"the auditing process exited with status "
                                           f"{os.WEXITSTATUS(status)} and no result")
        yield start, failed
        start += 1
